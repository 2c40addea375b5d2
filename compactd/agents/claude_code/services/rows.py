"""The messages of Claude Code's ``session.compact`` event and answer, as compactd reads them.

A plugin's hook module gets the conversation being compacted as rows, one per transcript line
(an assistant turn is a row per content block): ``{role, text, toolUses, toolResults?,
handle}``, the handle being the line's uuid; ``next(e)`` answers Claude Code's own compaction
in the same rows. The answer is rows too, without handles: a row given back by its handle keeps
the old parent chain in the transcript, and Claude Code resumes the whole history from it
(docs/claude-code.md#the-event-and-the-answer). This module decodes the rows, turns them into
compactd's records where the transcript does not have them, measures them, and writes the new
rows of an answer. Imports only msgspec and the transcript model: it runs in a short process.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

from compactd.transcript.model import Record, record_from_dict

__all__ = [
    "ClaudeCodeAnswer",
    "CompactEvent",
    "Row",
    "RowToolResult",
    "RowToolUse",
    "row_tokens",
    "rows_tokens",
    "new_row",
    "record_of",
    "safe_start",
    "text_row",
    "turn_start",
]

# Characters per token of compactd's rough measure of rows (the estimator's ratio).
_CHARS_PER_TOKEN: Final = 4


class RowToolUse(msgspec.Struct, kw_only=True):
    """A tool call in a row: its id, tool and input (and, in the event, its result)."""

    tool_use_id: str
    tool: str
    input: dict[str, Any] = msgspec.field(default_factory=dict)
    text: str | None = None


class RowToolResult(msgspec.Struct, kw_only=True, rename="camel"):
    """A tool result in a user row."""

    tool_use_id: str = msgspec.field(name="tool_use_id")
    text: str = ""
    is_error: bool = False


class Row(msgspec.Struct, kw_only=True, rename="camel"):
    """One message row of the event or of ``next(e)``'s answer; unknown fields are ignored."""

    role: str
    text: str = ""
    tool_uses: list[RowToolUse] = msgspec.field(default_factory=list)
    tool_results: list[RowToolResult] | None = None
    handle: str | None = None

    @property
    def is_tool_results(self) -> bool:
        """A user row that carries tool results (and no text of the person's)."""
        return self.role == "user" and bool(self.tool_results) and not self.text.strip()


class CompactEvent(msgspec.Struct, kw_only=True):
    """The ``session.compact`` event: what triggered it, the instructions given, the rows."""

    messages: list[Row]
    trigger: str = "auto"
    instructions: str | None = None


class ClaudeCodeAnswer(msgspec.Struct, kw_only=True):
    """What ``next(e)`` returned: Claude Code's own compaction, as rows."""

    messages: list[Row]


def new_row(row: Row) -> dict[str, Any]:
    """``row`` as a new row of an answer: no handle, and the tool calls and results in the
    shape an answer takes (``{tool_use_id, tool, input}``, ``{tool_use_id, text, isError}``)."""
    out: dict[str, Any] = {
        "role": row.role,
        "text": row.text,
        "toolUses": [
            {"tool_use_id": u.tool_use_id, "tool": u.tool, "input": u.input} for u in row.tool_uses
        ],
    }
    if row.tool_results:
        out["toolResults"] = [
            {"tool_use_id": r.tool_use_id, "text": r.text, "isError": r.is_error}
            for r in row.tool_results
        ]
    return out


def text_row(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "text": text, "toolUses": []}


def row_tokens(row: Row | Mapping[str, Any]) -> int:
    """A rough count of a row's tokens: its text, tool inputs and tool results, at four
    characters a token (the same measure for the event's rows and the answer's)."""
    if isinstance(row, Row):
        text, uses, results = row.text, row.tool_uses, row.tool_results or []
        chars = len(text)
        chars += sum(len(u.tool) + len(msgspec.json.encode(u.input)) for u in uses)
        chars += sum(len(r.text) for r in results)
    else:
        chars = len(str(row.get("text") or ""))
        chars += sum(len(msgspec.json.encode(u)) for u in row.get("toolUses") or [])
        chars += sum(len(str(r.get("text") or "")) for r in row.get("toolResults") or [])
    return chars // _CHARS_PER_TOKEN + 4


def rows_tokens(rows: Iterable[Row | Mapping[str, Any]]) -> int:
    return sum(row_tokens(r) for r in rows)


def safe_start(rows: Sequence[Row], at: int) -> int:
    """The first index at or after ``at`` where a kept tail may start: not on a row of tool
    results, whose calls would then be missing from what is kept (the API refuses a result
    without its call)."""
    while at < len(rows) and rows[at].is_tool_results:
        at += 1
    return at


def turn_start(rows: Sequence[Row]) -> int:
    """Where the latest turn starts: the last row the person typed (a user row with text and no
    tool results), or the end when there is none."""
    for i in range(len(rows) - 1, -1, -1):
        row = rows[i]
        if row.role == "user" and row.text.strip() and not row.tool_results:
            return i
    return len(rows)


def record_of(row: Row, *, parent: str | None, cwd: str | None) -> Record:
    """A transcript record standing for ``row`` when the transcript does not hold its line (not
    flushed yet, or no transcript given): the Claude Code line the row came from, as far as the
    row tells it."""
    content: list[dict[str, Any]] = []
    if row.role == "assistant":
        if row.text:
            content.append({"type": "text", "text": row.text})
        content.extend(
            {"type": "tool_use", "id": u.tool_use_id, "name": u.tool, "input": u.input}
            for u in row.tool_uses
        )
    else:
        content.extend(
            {
                "type": "tool_result",
                "tool_use_id": r.tool_use_id,
                "content": r.text,
                **({"is_error": True} if r.is_error else {}),
            }
            for r in row.tool_results or []
        )
        if row.text:
            content.append({"type": "text", "text": row.text})
    line: dict[str, Any] = {
        "type": "assistant" if row.role == "assistant" else "user",
        "parentUuid": parent,
        "message": {"role": row.role, "content": content},
    }
    if row.handle:
        line["uuid"] = row.handle
    if cwd:
        line["cwd"] = cwd
    return record_from_dict(line)
