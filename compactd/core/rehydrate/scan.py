"""The non-file parts of the working set, gathered from the current context in one pass: the
todo list, invoked skills, running background agents, the plan file and plan mode; and the
paths whose content the context still shows.

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from compactd.core.rehydrate.paths import is_under, normalize_path
from compactd.core.tools import call_file, file_path
from compactd.core.vocabulary import vocabulary
from compactd.transcript.model import Entry, Record, TextBlock, ToolResultBlock, ToolUseBlock

__all__ = [
    "ContextFacts",
    "PlanInfo",
    "RunningAgent",
    "SkillRef",
    "read_paths",
    "scan_context",
]


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
    tools = vocabulary()
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
            args = use.arguments()
            if use.name in tools.todos and isinstance(args.get("todos"), list):
                facts.todos = list(args["todos"])
            elif use.name in tools.skills:
                name = _str(args.get("skill")) or _str(args.get("name"))
                if name:
                    skill_calls[use.id] = name
                    prev = skills.pop(name, None)
                    skills[name] = prev or SkillRef(name=name)
            elif use.name in tools.agents:
                agents[use.id] = RunningAgent(
                    tool_use_id=use.id,
                    description=_str(args.get("description")) or use.name,
                    subagent_type=_str(args.get("subagent_type")),
                )
            elif use.name in tools.plan_enter:
                plan_mode = True
            elif use.name in tools.plan_exit:
                exit_plan_calls.add(use.id)
            elif use.name in tools.writes and plan_dirs:
                target = file_path(use.name, args)
                if target and is_under(normalize_path(target, cwd), plan_dirs):
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
    tools = vocabulary()
    out: set[str] = set()
    for record in records:
        entry = record.entry
        for use in _tool_uses(entry):
            if use.name in tools.reads:
                target = call_file(use)
                if target:
                    out.add(normalize_path(target, cwd))
        payload = entry.attachment if entry.type == "attachment" else None
        if payload and payload.get("type") == "file":
            target = _str(payload.get("filename"))
            if target:
                out.add(normalize_path(target, cwd))
    return out
