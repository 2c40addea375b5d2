"""A Claude Code ``session.compact`` event built from transcript lines, as Claude Code 2.1.332
builds it for a plugin's hook module (docs/claude-code.md#the-event-and-the-answer): one row per
message line of the span being compacted (an assistant turn is a row per content block), the
line's uuid as the row's handle, attachments and meta lines left out. Shared by the tests and
the session-compact benchmark."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from compactd.core.view import main_thread
from compactd.transcript.model import Record


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return json.dumps(content)


def rows_of(records: Iterable[Record]) -> list[dict[str, Any]]:
    """The event's rows for ``records`` (the main thread of the span, in order)."""
    rows: list[dict[str, Any]] = []
    for record in main_thread(list(records)):
        line = record.to_builtins()
        kind = line.get("type")
        if kind not in ("user", "assistant") or line.get("isMeta"):
            continue
        message = line.get("message") or {}
        content = message.get("content")
        row: dict[str, Any] = {"role": kind, "text": _text(content), "toolUses": []}
        if kind == "assistant" and isinstance(content, list):
            row["toolUses"] = [
                {
                    "tool_use_id": b.get("id", ""),
                    "tool": b.get("name", ""),
                    "input": b.get("input") or {},
                }
                for b in content
                if isinstance(b, dict) and b.get("type") == "tool_use"
            ]
        if kind == "user" and isinstance(content, list):
            results = [
                {
                    "tool_use_id": b.get("tool_use_id", ""),
                    "text": _result_text(b.get("content")),
                    "isError": bool(b.get("is_error")),
                }
                for b in content
                if isinstance(b, dict) and b.get("type") == "tool_result"
            ]
            if results:
                row["toolResults"] = results
        if not row["text"] and not row["toolUses"] and "toolResults" not in row:
            continue
        if record.uuid:
            row["handle"] = record.uuid
        rows.append(row)
    return rows


def request(
    records: Sequence[Record],
    *,
    session_id: str = "sess-1",
    transcript: str = "",
    trigger: str = "manual",
    instructions: str | None = None,
    claude_code: dict[str, Any] | None = None,
) -> bytes:
    """The JSON the plugin's module sends to ``compactd claude-code session-compact``."""
    event: dict[str, Any] = {"trigger": trigger, "messages": rows_of(records)}
    if instructions is not None:
        event["instructions"] = instructions
    body: dict[str, Any] = {"event": event, "sessionId": session_id, "transcriptPath": transcript}
    if claude_code is not None:
        body["claudeCode"] = claude_code
    return json.dumps(body).encode()
