"""The text the model reads for each attachment payload, and the transcript entry around one.

Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from compactd.core.normalize import system_reminder

__all__ = [
    "DELTAS",
    "attachment_entry",
    "render",
]

# Delta announcements Claude Code writes as attachments: kind -> (key of the added names, key of
# their rendered lines, key of the removed names). A client may supply them as extras.
DELTAS: Final[dict[str, tuple[str, str, str]]] = {
    "deferred_tools_delta": ("addedNames", "addedLines", "removedNames"),
    "agent_listing_delta": ("addedTypes", "addedLines", "removedTypes"),
    "mcp_instructions_delta": ("addedNames", "addedBlocks", "removedNames"),
}


def _render_todos(todos: Sequence[Any]) -> str:
    lines = []
    for i, item in enumerate(todos, 1):
        if isinstance(item, dict):
            status = item.get("status", "pending")
            lines.append(f"{i}. [{status}] {item.get('content', '')}")
        else:
            lines.append(f"{i}. {item}")
    return "\n".join(lines)


def render(payload: dict[str, Any]) -> str | None:
    """The text the model reads for a payload this module produces; None for kinds it does not
    know (the API view then renders the payload itself)."""
    kind = payload.get("type")
    if kind == "file":
        f = payload["content"]["file"]
        first = f["startLine"]
        last = first + max(f["numLines"], 1) - 1
        return system_reminder(
            f"Restored after the conversation was compacted: the current content of "
            f"{payload['displayPath']} (lines {first}-{last} of {f['totalLines']}), which you "
            f"read earlier.\n\n{f['content']}"
        )
    if kind == "compact_file_reference":
        why = {
            "binary": "it is not a text file",
            "tooLarge": "it is too large to restore",
            "budget": "the restore budget is spent",
        }.get(payload.get("reason", ""), "it could not be restored")
        return system_reminder(
            f"You read {payload['displayPath']} before the conversation was compacted; its "
            f"content is not repeated here because {why}. Read it again if you need it."
        )
    if kind == "todo":
        return system_reminder(
            "Your todo list as it stood before the conversation was compacted; keep using it:\n"
            + _render_todos(payload["content"])
        )
    if kind == "plan_file_reference":
        return system_reminder(
            f"The plan you wrote in {payload['planFilePath']} (kept across the compaction):\n\n"
            f"{payload['planContent']}"
        )
    if kind == "plan_mode":
        where = payload.get("planFilePath")
        tail = f" Your plan file is {where}." if where else ""
        return system_reminder(
            "Plan mode is still on: research and plan, but do not edit files or run commands "
            "that change anything until the user approves the plan." + tail
        )
    if kind == "invoked_skills":
        parts = [
            f"## {s['name']}" + (f" ({s['path']})" if s.get("path") else "") + f"\n{s['content']}"
            for s in payload["skills"]
        ]
        return system_reminder(
            "Skills you invoked earlier in this session; their instructions still apply:\n\n"
            + "\n\n".join(parts)
        )
    if kind == "task_status":
        return system_reminder(
            f"A background agent started earlier is still running: {payload['description']} "
            f"(id {payload['taskId']}). Its result will arrive when it finishes."
        )
    if kind == "nested_memory":
        inner = payload.get("content") or {}
        return system_reminder(
            f"Instructions from {payload.get('displayPath') or payload.get('path')}, which "
            f"applies to files in its directory and below:\n\n{inner.get('content', '')}"
        )
    if kind == "edited_text_file":
        return system_reminder(
            f"{payload['filename']} changed on disk after you read it (by the user or another "
            f"process). Its current content begins:\n\n{payload['snippet']}"
        )
    if kind in DELTAS:
        added_key, lines_key, _ = DELTAS[kind]
        lines = payload.get(lines_key)
        if not isinstance(lines, list):
            return None
        body = "\n".join(str(x) for x in lines)
        heading = {
            "deferred_tools_delta": "Deferred tools still available (load a tool's schema "
            "with the tool search tool before calling it):",
            "agent_listing_delta": "Agent types you can start with the Agent tool:",
            "mcp_instructions_delta": "Instructions from the connected MCP servers:",
        }[kind]
        return system_reminder(f"{heading}\n{body}")
    if kind == "skill_listing" and isinstance(payload.get("content"), str):
        return system_reminder(f"Skills you can invoke with the Skill tool:\n{payload['content']}")
    return None


def attachment_entry(
    payload: dict[str, Any], uuid: str, timestamp: str, session_id: str | None = None
) -> dict[str, Any]:
    """A transcript attachment entry around ``payload`` (Claude Code's line shape).

    ``parentUuid`` is left null: whoever writes the entries links them into the chain.
    """
    entry: dict[str, Any] = {
        "type": "attachment",
        "uuid": uuid,
        "parentUuid": None,
        "isSidechain": False,
        "timestamp": timestamp,
        "attachment": payload,
    }
    text = render(payload)
    if text is not None:
        entry["rendered"] = [{"content": text}]
    if session_id:
        entry["sessionId"] = session_id
    return entry
