"""Rehydration planning: what to re-inject after a compaction, under the reference's budgets.

After a compaction the model has only the summary, so the agent's working set is attached again
(docs/rehydration.md): the most recently read files re-read from disk, the todo list, the plan
file and plan mode, the skills it invoked, background agents still running and the announcements
the client supplies. The listings of tools, agents, skills and MCP instructions found in the
transcript are not repeated: the main loop announces them again after a compaction
(docs/rehydration.md#background-agents-and-announcements). This module decides which and how
much, from facts gathered by scanning the transcript (``scan_context``) and file contents already
read by the I/O layer (``compactd/engine/rehydration.py``), within the reference's caps and the
room the view budget leaves (``fit_attachments``). It returns attachment payloads in Claude
Code's attachment shape (``{"type": "file", ...}``) and renders the text the model reads.

Pure: no I/O, deterministic, paths are only joined and normalized as strings.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from compactd.core import constants as c
from compactd.core.normalize import system_reminder
from compactd.core.tokens import estimate_entries_raw, estimate_text_tokens
from compactd.core.tools import file_path
from compactd.transcript.model import (
    Entry,
    Record,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    record_from_dict,
)

__all__ = [
    "MIN_PARTIAL_TOKENS",
    "Budgets",
    "ContextFacts",
    "FileCandidate",
    "FileNotice",
    "FileSnapshot",
    "PlanInfo",
    "RehydrationInputs",
    "RunningAgent",
    "SkillRef",
    "SkillSnapshot",
    "attachment_entry",
    "display_path",
    "estimate_text_tokens",
    "fit_attachments",
    "normalize_path",
    "payload_tokens",
    "plan_attachments",
    "read_paths",
    "render",
    "scan_context",
    "select_files",
    "truncate_to_tokens",
]

# When what is left of a budget is smaller than this, a truncated copy would be too short to
# be useful: the file is announced by reference instead (compactd's choice; the reference only
# fixes the caps).
MIN_PARTIAL_TOKENS: Final = 500

# Room kept for the truncation marker so that content plus marker stays within the cap.
_MARKER_RESERVE_CHARS: Final = 240


# -- budgets ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Budgets:
    """The caps of docs/rehydration.md; tests and callers may shrink them."""

    max_files: int = c.REHYDRATE_MAX_FILES
    file_tokens: int = c.REHYDRATE_FILE_TOKENS
    files_total_tokens: int = c.REHYDRATE_FILES_TOTAL_TOKENS
    skill_tokens: int = c.REHYDRATE_SKILL_TOKENS
    skills_total_tokens: int = c.REHYDRATE_SKILLS_TOTAL_TOKENS
    min_partial_tokens: int = MIN_PARTIAL_TOKENS


def truncate_to_tokens(
    text: str, max_tokens: int, marker: Callable[[int], str]
) -> tuple[str, bool]:
    """Cut ``text`` so that it and its marker fit in ``max_tokens``.

    The cut falls on a line end when one exists in the second half of the kept part, so the
    model never sees half a line. ``marker(lines_kept)`` returns the note appended after the
    cut. Returns the text and whether it was cut.
    """
    if estimate_text_tokens(text) <= max_tokens:
        return text, False
    budget = max(0, max_tokens * c.CHARS_PER_TOKEN - _MARKER_RESERVE_CHARS)
    head = text[:budget]
    newline = head.rfind("\n")
    if newline >= budget // 2:
        head = head[: newline + 1]
    kept_lines = head.count("\n") + (0 if head.endswith("\n") or not head else 1)
    note = marker(kept_lines)
    # The reserve covers any marker we write; trim further if a caller's marker is longer.
    overflow = len(head) + len(note) - max_tokens * c.CHARS_PER_TOKEN
    if overflow > 0:
        head = head[: max(0, len(head) - overflow)]
    return head + note, True


# -- paths --------------------------------------------------------------------------------------


def normalize_path(path: str, cwd: str) -> str:
    """An absolute, normalized form of ``path`` (relative paths are taken from ``cwd``).

    Symlinks are not resolved here (that needs the disk); the I/O layer resolves them before
    reading and checks confinement on the resolved path.
    """
    joined = path if os.path.isabs(path) else os.path.join(cwd or os.sep, path)
    return os.path.normpath(joined)


def display_path(path: str, cwd: str) -> str:
    """``path`` relative to ``cwd`` when it lies below it, else unchanged."""
    base = os.path.normpath(cwd) if cwd else ""
    if base and (path == base or path.startswith(base.rstrip(os.sep) + os.sep)):
        return os.path.relpath(path, base)
    return path


# -- file selection -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileCandidate:
    """One file of the read-file state, as rehydration sees it."""

    path: str
    timestamp: float
    seq: int = 0
    offset: int | None = None
    limit: int | None = None
    # The latest read returned the "file unchanged" stub instead of content.
    stub: bool = False
    # Registered as a nested memory file (CLAUDE.md and the like).
    memory: bool = False


def select_files(
    candidates: Iterable[FileCandidate],
    *,
    exclude_paths: Collection[str] = (),
    plan_paths: Collection[str] = (),
    plan_dirs: Collection[str] = (),
    memory_names: Collection[str] = c.DEFAULT_MEMORY_FILE_NAMES,
) -> list[FileCandidate]:
    """Files eligible for re-reading, most recent first (docs/rehydration.md#recent-files).

    Skipped: plan files (attached on their own), memory files (re-attached when the agent
    reads near them), files whose read is in the entries kept verbatim (the model still has
    them) and reads that returned the "file unchanged" stub. The caller reads them in this
    order and keeps the first ``Budgets.max_files`` that can be read.
    """
    excluded = set(exclude_paths)
    plans = set(plan_paths)
    dirs = tuple(d.rstrip(os.sep) + os.sep for d in plan_dirs)
    names = set(memory_names)
    latest: dict[str, FileCandidate] = {}
    for cand in candidates:
        prev = latest.get(cand.path)
        if prev is None or (cand.timestamp, cand.seq) >= (prev.timestamp, prev.seq):
            latest[cand.path] = cand
    eligible = [
        cand
        for cand in latest.values()
        if not cand.stub
        and not cand.memory
        and os.path.basename(cand.path) not in names
        and cand.path not in excluded
        and cand.path not in plans
        and not cand.path.startswith(dirs)
    ]
    eligible.sort(key=lambda cand: (cand.timestamp, cand.seq), reverse=True)
    return eligible


# -- facts from the transcript ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunningAgent:
    tool_use_id: str
    description: str
    subagent_type: str | None = None


@dataclass(frozen=True, slots=True)
class SkillRef:
    """A skill the agent invoked; ``content`` when the transcript carries its text."""

    name: str
    content: str | None = None
    path: str | None = None


@dataclass(frozen=True, slots=True)
class PlanInfo:
    path: str | None = None
    mode: bool = False


@dataclass(slots=True)
class ContextFacts:
    """What ``scan_context`` learned: the latest todo list, skills (most recent first),
    agents without a result and the plan."""

    todos: list[Any] | None = None
    skills: list[SkillRef] = field(default_factory=list)
    agents: list[RunningAgent] = field(default_factory=list)
    plan: PlanInfo = field(default_factory=PlanInfo)


# Delta announcements Claude Code writes as attachments: kind -> (key of the added names, key of
# their rendered lines, key of the removed names). A client may supply them as extras.
_DELTAS: Final[dict[str, tuple[str, str, str]]] = {
    "deferred_tools_delta": ("addedNames", "addedLines", "removedNames"),
    "agent_listing_delta": ("addedTypes", "addedLines", "removedTypes"),
    "mcp_instructions_delta": ("addedNames", "addedBlocks", "removedNames"),
}


def _tool_uses(entry: Entry) -> Iterable[ToolUseBlock]:
    if entry.type != "assistant":
        return ()
    return (b for b in entry.blocks if isinstance(b, ToolUseBlock))


def _tool_results(entry: Entry) -> Iterable[ToolResultBlock]:
    if entry.type != "user":
        return ()
    return (b for b in entry.blocks if isinstance(b, ToolResultBlock))


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _under(path: str, dirs: Sequence[str]) -> bool:
    return any(path.startswith(d.rstrip(os.sep) + os.sep) for d in dirs)


def _meta_text(entry: Entry) -> str:
    return "\n".join(b.text for b in entry.blocks if isinstance(b, TextBlock))


def scan_context(
    records: Sequence[Record], cwd: str, plan_dirs: Sequence[str] = ()
) -> ContextFacts:
    """Gather the non-file parts of the working set from the current context, in one pass.

    Sources, later ones overriding earlier ones: TodoWrite calls and ``todo`` attachments;
    Skill calls, the meta message that carries a skill's text (``sourceToolUseID``) and
    ``invoked_skills`` attachments; Task / Agent calls without a result and ``task_status``
    attachments; plan-mode tools, ``mode`` entries and ``plan_mode`` / ``plan_mode_exit`` /
    ``plan_file_reference`` attachments and writes into a plans directory. Compactd's own
    rehydration attachments use the same kinds, so a second compaction carries over what the
    first one restored.
    """
    facts = ContextFacts()
    skills: dict[str, SkillRef] = {}
    skill_calls: dict[str, str] = {}  # tool_use id -> skill name
    agents: dict[str, RunningAgent] = {}
    exit_plan_calls: set[str] = set()
    plan_path: str | None = None
    plan_mode = False

    for record in records:
        entry = record.entry
        for use in _tool_uses(entry):
            args = use.input if isinstance(use.input, dict) else {}
            if use.name == c.TODO_TOOL and isinstance(args.get("todos"), list):
                facts.todos = list(args["todos"])
            elif use.name == c.SKILL_TOOL:
                name = _str(args.get("skill")) or _str(args.get("name"))
                if name:
                    skill_calls[use.id] = name
                    prev = skills.pop(name, None)
                    skills[name] = prev or SkillRef(name=name)
            elif use.name in c.AGENT_TOOLS:
                agents[use.id] = RunningAgent(
                    tool_use_id=use.id,
                    description=_str(args.get("description")) or use.name,
                    subagent_type=_str(args.get("subagent_type")),
                )
            elif use.name == c.ENTER_PLAN_MODE_TOOL:
                plan_mode = True
            elif use.name == c.EXIT_PLAN_MODE_TOOL:
                exit_plan_calls.add(use.id)
            elif use.name in c.FILE_WRITE_TOOLS and plan_dirs:
                target = file_path(use.name, args)
                if target and _under(normalize_path(target, cwd), plan_dirs):
                    plan_path = normalize_path(target, cwd)
        for res in _tool_results(entry):
            agents.pop(res.tool_use_id, None)
            if res.tool_use_id in exit_plan_calls and not res.is_error:
                plan_mode = False
        if entry.type == "user" and entry.is_meta:
            raw = record.to_builtins()
            source = raw.get("sourceToolUseID")
            if isinstance(source, str) and source in skill_calls:
                name = skill_calls[source]
                text = _meta_text(entry)
                if text and name in skills:
                    skills[name] = replace(skills[name], content=text)
        if entry.type == "mode":
            mode = record.to_builtins().get("mode")
            if isinstance(mode, str) and not mode.startswith("[redacted"):
                plan_mode = mode == "plan"
        payload = entry.attachment if entry.type == "attachment" else None
        if not payload:
            continue
        kind = payload.get("type")
        if kind == "todo" and isinstance(payload.get("content"), list):
            facts.todos = list(payload["content"])
        elif kind == "invoked_skills" and isinstance(payload.get("skills"), list):
            # Listed most recent first: insert oldest first so the newest ends up last.
            for item in reversed(payload["skills"]):
                if isinstance(item, dict) and _str(item.get("name")):
                    name = item["name"]
                    skills.pop(name, None)
                    skills[name] = SkillRef(
                        name=name, content=_str(item.get("content")), path=_str(item.get("path"))
                    )
        elif kind == "task_status":
            task_id = _str(payload.get("taskId"))
            if task_id and payload.get("status") == "running":
                agents[task_id] = RunningAgent(
                    tool_use_id=task_id,
                    description=_str(payload.get("description")) or "agent",
                    subagent_type=_str(payload.get("subagentType")),
                )
            elif task_id:
                agents.pop(task_id, None)
        elif kind == "plan_mode":
            plan_mode = True
            plan_path = _str(payload.get("planFilePath")) or plan_path
        elif kind == "plan_mode_exit":
            plan_mode = False
        elif kind == "plan_file_reference":
            plan_path = _str(payload.get("planFilePath")) or plan_path

    if facts.todos is not None and not facts.todos:
        facts.todos = None
    facts.skills = list(reversed(skills.values()))
    facts.agents = list(agents.values())
    facts.plan = PlanInfo(path=plan_path, mode=plan_mode)
    return facts


def read_paths(records: Iterable[Record], cwd: str) -> set[str]:
    """Normalized paths whose content the given entries show the model (Read calls and
    ``file`` attachments): such files need no re-reading after a partial compaction."""
    out: set[str] = set()
    for record in records:
        entry = record.entry
        for use in _tool_uses(entry):
            if use.name in c.FILE_READ_TOOLS:
                target = file_path(use.name, use.input)
                if target:
                    out.add(normalize_path(target, cwd))
        payload = entry.attachment if entry.type == "attachment" else None
        if payload and payload.get("type") == "file":
            target = _str(payload.get("filename"))
            if target:
                out.add(normalize_path(target, cwd))
    return out


# -- planning -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileSnapshot:
    """A file's current content as read from disk (the slice the agent had read)."""

    path: str
    display_path: str
    content: str
    start_line: int = 1
    total_lines: int = 0


@dataclass(frozen=True, slots=True)
class FileNotice:
    """A file that takes a slot but cannot be shown: ``binary`` or ``tooLarge``."""

    path: str
    display_path: str
    reason: str


@dataclass(frozen=True, slots=True)
class SkillSnapshot:
    name: str
    content: str
    path: str | None = None


@dataclass(frozen=True, slots=True)
class PlanSnapshot:
    path: str
    content: str | None
    mode: bool


@dataclass(slots=True)
class RehydrationInputs:
    files: Sequence[FileSnapshot | FileNotice] = ()
    todos: list[Any] | None = None
    plan: PlanSnapshot | None = None
    skills: Sequence[SkillSnapshot] = ()
    agents: Sequence[RunningAgent] = ()
    announcements: Sequence[dict[str, Any]] = ()
    is_subagent: bool = False


def _line_count(text: str) -> int:
    return len(text.splitlines())


def _file_payload(snap: FileSnapshot, cap: int) -> tuple[dict[str, Any], int]:
    def marker(kept: int) -> str:
        last = snap.start_line + kept - 1
        return (
            f"\n[compactd: content cut after line {last} of {snap.total_lines} to fit the "
            f"restore budget of {cap:,} tokens; read the file for the rest]"
        )

    text, cut = truncate_to_tokens(snap.content, cap, marker)
    payload: dict[str, Any] = {
        "type": "file",
        "filename": snap.path,
        "content": {
            "type": "text",
            "file": {
                "filePath": snap.path,
                "content": text,
                "numLines": _line_count(text),
                "startLine": snap.start_line,
                "totalLines": snap.total_lines,
            },
        },
        "displayPath": snap.display_path,
    }
    if cut:
        payload["truncated"] = True
    return payload, estimate_text_tokens(text)


def _file_reference(path: str, shown: str, reason: str) -> dict[str, Any]:
    return {
        "type": "compact_file_reference",
        "filename": path,
        "displayPath": shown,
        "reason": reason,
    }


def _file_attachments(
    files: Sequence[FileSnapshot | FileNotice], budgets: Budgets
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    remaining = budgets.files_total_tokens
    for item in files[: budgets.max_files]:
        if isinstance(item, FileNotice):
            out.append(_file_reference(item.path, item.display_path, item.reason))
            continue
        cap = min(budgets.file_tokens, remaining)
        if estimate_text_tokens(item.content) > cap and cap < budgets.min_partial_tokens:
            out.append(_file_reference(item.path, item.display_path, "budget"))
            continue
        payload, used = _file_payload(item, cap)
        remaining -= used
        out.append(payload)
    return out


def _skills_attachment(skills: Sequence[SkillSnapshot], budgets: Budgets) -> dict[str, Any] | None:
    remaining = budgets.skills_total_tokens
    kept: list[dict[str, Any]] = []
    for skill in skills:
        if not skill.content:
            continue
        cap = min(budgets.skill_tokens, remaining)
        if estimate_text_tokens(skill.content) > cap and cap < budgets.min_partial_tokens:
            continue  # the budget is spent: older skills are left out

        def marker(kept_lines: int, skill: SkillSnapshot = skill, cap: int = cap) -> str:
            where = f" (full text: {skill.path})" if skill.path else ""
            return (
                f"\n[compactd: skill instructions cut after {kept_lines} lines to fit the "
                f"restore budget of {cap:,} tokens{where}]"
            )

        text, cut = truncate_to_tokens(skill.content, cap, marker)
        remaining -= estimate_text_tokens(text)
        item: dict[str, Any] = {"name": skill.name, "path": skill.path or "", "content": text}
        if cut:
            item["truncated"] = True
        kept.append(item)
    if not kept:
        return None
    return {"type": "invoked_skills", "skills": kept}


def plan_attachments(
    inputs: RehydrationInputs, budgets: Budgets | None = None
) -> list[dict[str, Any]]:
    """The attachment payloads to re-inject, in order.

    Order: files (most recent first, each within ``file_tokens`` and all within
    ``files_total_tokens``; a file that cannot be shown or no longer fits becomes a
    ``compact_file_reference``), the todo list, the plan file and plan mode, invoked skills
    (most recent first within ``skill_tokens`` each and ``skills_total_tokens`` together),
    running background agents, then the announcements.
    """
    b = budgets or Budgets()
    out = _file_attachments(inputs.files, b)
    if inputs.todos:
        out.append(
            {
                "type": "todo",
                "content": list(inputs.todos),
                "itemCount": len(inputs.todos),
                "context": "post-compact",
            }
        )
    plan = inputs.plan
    if plan is not None and plan.content is not None:
        out.append(
            {"type": "plan_file_reference", "planFilePath": plan.path, "planContent": plan.content}
        )
    if plan is not None and plan.mode:
        out.append(
            {
                "type": "plan_mode",
                "reminderType": "full",
                "isSubAgent": inputs.is_subagent,
                "planFilePath": plan.path,
                "planExists": plan.content is not None,
            }
        )
    skills = _skills_attachment(inputs.skills, b)
    if skills is not None:
        out.append(skills)
    for agent in inputs.agents:
        status: dict[str, Any] = {
            "type": "task_status",
            "taskId": agent.tool_use_id,
            "taskType": "local_agent",
            "description": agent.description,
            "status": "running",
        }
        if agent.subagent_type:
            status["subagentType"] = agent.subagent_type
        out.append(status)
    out.extend(dict(a) for a in inputs.announcements)
    return out


def payload_tokens(payload: dict[str, Any]) -> int:
    """Raw tokens an attachment payload adds to the context, as ``tokens/status`` counts it."""
    return estimate_entries_raw(
        [record_from_dict({"type": "attachment", "attachment": payload}).entry]
    )


# Kinds that shrink when the attachments do not fit the room the view budget leaves, each with
# the budget that bounds it; then the kinds that give way, least needed first. The todo list
# and the plan-mode reminder always stay (the summary points to the former).
_SHRINKING: Final = (("file", "files_total_tokens"), ("invoked_skills", "skills_total_tokens"))
_GIVING_WAY: Final = (
    "compact_file_reference",
    "invoked_skills",
    *_DELTAS,
    "skill_listing",
    "task_status",
    "plan_file_reference",
)
_FIT_ROUNDS: Final = 3


def _text_tokens(payload: dict[str, Any]) -> int:
    """Tokens of the text a payload's own budget counts (file content, skill instructions)."""
    if payload.get("type") == "file":
        return estimate_text_tokens(payload["content"]["file"]["content"])
    if payload.get("type") == "invoked_skills":
        return sum(estimate_text_tokens(s.get("content", "")) for s in payload["skills"])
    return 0


def fit_attachments(
    inputs: RehydrationInputs, limit: int | None, budgets: Budgets | None = None
) -> list[dict[str, Any]]:
    """``plan_attachments`` within ``limit`` raw tokens (None: the caps alone).

    When the plan does not fit, the files' total budget, then the skills', shrink to what is
    left for them (a file that no longer fits becomes a reference); what still does not fit
    gives way by kind (``_GIVING_WAY``), the last of a kind first.
    """
    b = budgets or Budgets()
    out = plan_attachments(inputs, b)
    if limit is None:
        return out
    for kind, budget_field in _SHRINKING:
        for _ in range(_FIT_ROUNDS):
            sizes = [payload_tokens(x) for x in out]
            over = sum(sizes) - limit
            if over <= 0:
                return out
            json_tokens = sum(n for x, n in zip(out, sizes, strict=True) if x["type"] == kind)
            text_tokens = sum(_text_tokens(x) for x in out if x["type"] == kind)
            if not json_tokens or not text_tokens:
                break
            keep = max(0, json_tokens - over) * text_tokens // json_tokens
            b = replace(b, **{budget_field: min(getattr(b, budget_field), keep)})
            out = plan_attachments(inputs, b)
    sizes = [payload_tokens(x) for x in out]
    over = sum(sizes) - limit
    for kind in _GIVING_WAY:
        for i in range(len(out) - 1, -1, -1):
            if over <= 0:
                return out
            if out[i].get("type") == kind:
                over -= sizes.pop(i)
                out.pop(i)
    return out


# -- rendering ----------------------------------------------------------------------------------


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
    if kind in _DELTAS:
        added_key, lines_key, _ = _DELTAS[kind]
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
