"""A structured summary built without a model, from what the transcript records for certain.

When no API key is configured (or ``summarizer.offline`` is set), and as the fallback when the
API keeps failing, compaction still has to produce a summary. ``collect_ledger`` walks the
entries being summarized and gathers the facts that must survive: every user message verbatim
(tool results excluded), the files read and edited (from tool call inputs), the commands run
with their outcome, the errors, the latest todo list and the last thing the assistant said.
``offline_summary`` lays them out in the same nine sections a model summary has, inside
``<summary>`` tags, so that ``prompts.format_summary`` treats both the same way.

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from compactd.core import constants as c
from compactd.core.normalize import DOCUMENT_MARKER, IMAGE_MARKER
from compactd.core.prompts import strip_continuation
from compactd.core.view import main_thread
from compactd.transcript.model import (
    Block,
    DocumentBlock,
    ImageBlock,
    Record,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

__all__ = [
    "Command",
    "Ledger",
    "ToolError",
    "collect_ledger",
    "offline_summary",
    "render_ledger",
]

# Size caps of the offline summary. They are compactd's own choices (no reference figure): the
# summary must stay far below the window it is meant to free, while the full originals remain in
# the transcript that the continuation message points to.
# A user message longer than this is cut, with a marker saying so.
OFFLINE_USER_MESSAGE_MAX_CHARS: Final = 5_000
# How much of a command's output is quoted (its tail, where results and errors usually are).
OFFLINE_OUTPUT_TAIL_CHARS: Final = 300
# Only the most recent commands and errors are listed; older ones are counted.
OFFLINE_MAX_COMMANDS: Final = 40
OFFLINE_MAX_ERRORS: Final = 20
# How much of the assistant's last text is quoted under "Current Work".
OFFLINE_LAST_TEXT_MAX_CHARS: Final = 2_000
# Section 1 quotes the first and latest requests this far; section 6 has them in full.
OFFLINE_REQUEST_PREVIEW_CHARS: Final = 500
# How much of an error's text is quoted.
OFFLINE_ERROR_MAX_CHARS: Final = 300

# Claude Code's tools whose input names a file that was read (the shared list plus the older
# NotebookRead; changes are ``constants.FILE_WRITE_TOOLS``), and its shell tools.
_READ_TOOLS: Final = c.FILE_READ_TOOLS | {"NotebookRead"}
_SHELL_TOOLS: Final = frozenset({"Bash", "BashOutput", "PowerShell"})
_PATH_KEYS: Final = ("file_path", "notebook_path", "path")


@dataclass(slots=True)
class Command:
    command: str
    ok: bool | None  # None while the result is missing (or was cleared)
    output_tail: str


@dataclass(slots=True)
class ToolError:
    tool: str
    message: str


@dataclass(slots=True)
class Ledger:
    """The facts gathered from a stretch of conversation, in order of appearance."""

    user_messages: list[str] = field(default_factory=list)
    previous_summaries: list[str] = field(default_factory=list)
    files_read: Counter[str] = field(default_factory=Counter)
    files_edited: Counter[str] = field(default_factory=Counter)
    commands: list[Command] = field(default_factory=list)
    errors: list[ToolError] = field(default_factory=list)
    tool_counts: Counter[str] = field(default_factory=Counter)
    todos: list[dict[str, Any]] | None = None
    last_assistant_text: str | None = None


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f" [... {len(text) - limit} more characters in the transcript]"


def _tail(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return "..." + text[-limit:].lstrip()


def _block_text(blocks: Iterable[Block]) -> str:
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            if block.text.strip():
                parts.append(block.text)
        elif isinstance(block, ImageBlock):
            parts.append(IMAGE_MARKER)
        elif isinstance(block, DocumentBlock):
            parts.append(DOCUMENT_MARKER)
    return "\n".join(parts)


def _result_text(block: ToolResultBlock) -> str:
    content = block.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return _block_text(content)


def _path_of(tool_input: Any) -> str | None:
    if not isinstance(tool_input, dict):
        return None
    for key in _PATH_KEYS:
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def collect_ledger(
    records: Sequence[Record], *, cleared_tool_ids: frozenset[str] = frozenset()
) -> Ledger:
    """Gather the ledger of ``records`` (sub-agent sidechains and bookkeeping are skipped)."""
    ledger = Ledger()
    uses: dict[str, ToolUseBlock] = {}
    commands: dict[str, Command] = {}
    for record in main_thread(records):
        entry = record.entry
        if entry.type == "user":
            if entry.is_compact_summary:
                text = _block_text(entry.blocks)
                if text.strip():
                    ledger.previous_summaries.append(strip_continuation(text))
                continue
            results = [b for b in entry.blocks if isinstance(b, ToolResultBlock)]
            for result in results:
                _note_result(ledger, result, uses, commands, cleared_tool_ids)
            if entry.is_meta or results:
                continue
            text = _block_text(entry.blocks)
            if text.strip():
                ledger.user_messages.append(_clip(text, OFFLINE_USER_MESSAGE_MAX_CHARS))
        elif entry.type == "assistant":
            if entry.is_api_error_message:
                continue
            text = _block_text(b for b in entry.blocks if isinstance(b, TextBlock))
            if text.strip():
                ledger.last_assistant_text = text
            for block in entry.blocks:
                if isinstance(block, ToolUseBlock):
                    _note_use(ledger, block, uses, commands)
    return ledger


def _note_use(
    ledger: Ledger, block: ToolUseBlock, uses: dict[str, ToolUseBlock], commands: dict[str, Command]
) -> None:
    uses[block.id] = block
    ledger.tool_counts[block.name] += 1
    tool_input = block.input
    path = _path_of(tool_input)
    if block.name in _READ_TOOLS and path:
        ledger.files_read[path] += 1
    elif block.name in c.FILE_WRITE_TOOLS and path:
        ledger.files_edited[path] += 1
    elif block.name in _SHELL_TOOLS and isinstance(tool_input, dict):
        command = tool_input.get("command")
        if isinstance(command, str) and command.strip():
            cmd = Command(command=command.strip(), ok=None, output_tail="")
            commands[block.id] = cmd
            ledger.commands.append(cmd)
    elif block.name == c.TODO_TOOL and isinstance(tool_input, dict):
        todos = tool_input.get("todos")
        if isinstance(todos, list):
            ledger.todos = [t for t in todos if isinstance(t, dict)]


def _note_result(
    ledger: Ledger,
    block: ToolResultBlock,
    uses: dict[str, ToolUseBlock],
    commands: dict[str, Command],
    cleared: frozenset[str],
) -> None:
    use = uses.get(block.tool_use_id)
    name = use.name if use is not None else "tool"
    text = "" if block.tool_use_id in cleared else _result_text(block)
    failed = block.is_error is True
    command = commands.get(block.tool_use_id)
    if command is not None:
        command.ok = not failed
        command.output_tail = _tail(text, OFFLINE_OUTPUT_TAIL_CHARS)
    if failed:
        first = text.strip() or "(no error text)"
        ledger.errors.append(ToolError(tool=name, message=_clip(first, OFFLINE_ERROR_MAX_CHARS)))


def _indent(text: str, prefix: str = "   ") -> str:
    return "\n".join(prefix + line if line.strip() else "" for line in text.splitlines())


def _quote(text: str) -> str:
    return _indent(text, "   > ")


def _files_section(ledger: Ledger) -> list[str]:
    lines: list[str] = []
    for path, n in ledger.files_edited.most_common():
        lines.append(f"   - changed: {path}" + (f" ({n} edits)" if n > 1 else ""))
    for path, n in ledger.files_read.most_common():
        lines.append(f"   - read: {path}" + (f" ({n} reads)" if n > 1 else ""))
    return lines or ["   - (no file was read or changed)"]


def _commands_section(ledger: Ledger) -> list[str]:
    shown = ledger.commands[-OFFLINE_MAX_COMMANDS:]
    lines: list[str] = []
    if len(ledger.commands) > len(shown):
        lines.append(f"   - ({len(ledger.commands) - len(shown)} earlier commands not listed)")
    for cmd in shown:
        outcome = {True: "succeeded", False: "FAILED", None: "outcome not recorded"}[cmd.ok]
        one_line = " ".join(cmd.command.split())
        lines.append(f"   - `{one_line}`: {outcome}")
        if cmd.output_tail:
            lines.append(_indent(cmd.output_tail, "       | "))
    return lines or ["   - (no shell command was run)"]


def _errors_section(ledger: Ledger) -> list[str]:
    shown = ledger.errors[-OFFLINE_MAX_ERRORS:]
    lines: list[str] = []
    if len(ledger.errors) > len(shown):
        lines.append(f"   - ({len(ledger.errors) - len(shown)} earlier errors not listed)")
    for err in shown:
        lines.append(f"   - {err.tool}: " + " ".join(err.message.split()))
    return lines or ["   - (no tool reported an error)"]


def _todo_lines(todos: Sequence[dict[str, Any]], *, open_only: bool) -> list[str]:
    lines = []
    for todo in todos:
        status = str(todo.get("status", "pending"))
        if open_only and status == "completed":
            continue
        content = todo.get("content")
        text = content if isinstance(content, str) else json.dumps(todo, ensure_ascii=False)
        lines.append(f"   - [{status}] {text}")
    return lines


def render_ledger(ledger: Ledger) -> str:
    """The nine-section summary of a ledger, wrapped in ``<summary>`` tags."""
    first = ledger.user_messages[0] if ledger.user_messages else None
    latest = ledger.user_messages[-1] if ledger.user_messages else None
    out: list[str] = ["<summary>"]

    out.append("1. Primary Request and Intent:")
    out.append("   (Built without a model from the transcript: the facts below are exact.)")
    if first is not None:
        out.append("   First request:")
        out.append(_quote(_clip(first, OFFLINE_REQUEST_PREVIEW_CHARS)))
    if latest is not None and latest is not first:
        out.append("   Most recent request:")
        out.append(_quote(_clip(latest, OFFLINE_REQUEST_PREVIEW_CHARS)))
    for previous in ledger.previous_summaries:
        out.append("   Carried over from the previous compaction:")
        out.append(_indent(previous, "   | "))
    out.append("")

    out.append("2. Key Technical Concepts:")
    if ledger.tool_counts:
        used = ", ".join(f"{name} x{n}" for name, n in ledger.tool_counts.most_common())
        out.append(f"   - tools used: {used}")
    else:
        out.append("   - (no tool was used)")
    out.append("")

    out.append("3. Files and Code Sections:")
    out.extend(_files_section(ledger))
    out.append("")

    out.append("4. Errors and Fixes:")
    out.extend(_errors_section(ledger))
    out.append("")

    out.append("5. Problem Solving (commands run and their outcome):")
    out.extend(_commands_section(ledger))
    out.append("")

    out.append("6. All User Messages:")
    if ledger.user_messages:
        for i, message in enumerate(ledger.user_messages, 1):
            out.append(f"   {i}.")
            out.append(_quote(message))
    else:
        out.append("   - (none)")
    out.append("")

    out.append("7. Pending Tasks:")
    pending = _todo_lines(ledger.todos or [], open_only=True)
    out.extend(pending or ["   - (no open item in the todo list)"])
    out.append("")

    out.append("8. Current Work:")
    if ledger.todos:
        out.append("   Todo list at the time of compaction:")
        out.extend(_todo_lines(ledger.todos, open_only=False))
    if ledger.last_assistant_text:
        out.append("   The assistant's last message:")
        out.append(_quote(_clip(ledger.last_assistant_text, OFFLINE_LAST_TEXT_MAX_CHARS)))
    if not ledger.todos and not ledger.last_assistant_text:
        out.append("   - (nothing recorded)")
    out.append("")

    out.append("9. Optional Next Step:")
    in_progress = [
        t for t in (ledger.todos or []) if t.get("status") == "in_progress" and t.get("content")
    ]
    if in_progress:
        out.append(f"   Continue the task in progress: {in_progress[0]['content']}")
    elif latest is not None:
        out.append("   Continue with the most recent request (quoted in section 1).")
    else:
        out.append("   - (no request recorded)")
    out.append("</summary>")
    return "\n".join(out)


OFFLINE_INSTRUCTIONS_WARNING = (
    "custom instructions could not be followed: the offline summarizer builds the summary "
    "from the transcript without a model; they are quoted at the end of the summary"
)


def offline_summary(
    records: Sequence[Record],
    *,
    cleared_tool_ids: frozenset[str] = frozenset(),
    instructions: Sequence[str] = (),
) -> str:
    """The offline summary of ``records`` (raw, with ``<summary>`` tags; see ``render_ledger``).

    The offline summary has no model to follow ``instructions``; they are quoted at its end,
    so that the model reading it sees what the user asked the summary to keep.
    """
    text = render_ledger(collect_ledger(records, cleared_tool_ids=cleared_tool_ids))
    if not instructions:
        return text
    note = ["", "Instructions given for this summary, which an offline summary cannot follow:"]
    note.extend(_quote(x.strip()) for x in instructions)
    body, tag, rest = text.rpartition("</summary>")
    return body + "\n".join(note) + "\n" + tag + rest if tag else text + "\n".join(note)
