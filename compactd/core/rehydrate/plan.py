"""The attachment payloads to re-inject, in order, within the reference's caps, in Claude Code's
attachment shape (``{"type": "file", ...}``).

Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compactd.core.rehydrate.budget import Budgets, truncate_to_tokens
from compactd.core.rehydrate.scan import RunningAgent
from compactd.core.tokens import estimate_entries_raw, estimate_text_tokens
from compactd.transcript.model import record_from_dict

__all__ = [
    "FileNotice",
    "FileSnapshot",
    "PlanSnapshot",
    "RehydrationInputs",
    "SkillSnapshot",
    "payload_tokens",
    "plan_attachments",
]


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
