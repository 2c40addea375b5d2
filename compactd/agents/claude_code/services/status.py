"""The Claude Code status line: one line from the ``statusLine`` JSON and the hooks' state.

Claude Code runs ``compactd claude-code statusline`` at each render with the session, the model
and ``context_window`` (the latest response's usage) on stdin (docs/claude-code.md#status-line).
The line gives the count and its share of the auto-compact threshold (``core.agent_gauge``), what
compactd restored at the session's latest compaction (``state``), and a warning when a
compaction left the context crowded. It reads no transcript: a render must be quick.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from compactd.agents.claude_code.services import state
from compactd.core.agent_gauge import Gauge, gauge, status_line

__all__ = ["StatusInputError", "status_line_for"]


class StatusInputError(ValueError):
    """The status line input is not Claude Code's JSON."""


class StatusInput(msgspec.Struct, kw_only=True):
    session_id: str = ""
    transcript_path: str = ""
    cwd: str = ""
    model: dict[str, Any] | None = None
    context_window: dict[str, Any] | None = None


def _usage_total(usage: Any) -> int | None:
    if not isinstance(usage, dict):
        return None
    keys = (
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "output_tokens",
    )
    return sum(v for k in keys if isinstance(v := usage.get(k), int))


def status_line_for(raw: bytes, data_dir: Path, env: Mapping[str, str]) -> str:
    """The status line for Claude Code's ``statusLine`` JSON ``raw``."""
    try:
        status = msgspec.json.decode(raw, type=StatusInput) if raw.strip() else StatusInput()
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise StatusInputError("the status line input on stdin is not Claude Code's JSON") from None
    window = status.context_window or {}
    tokens = _usage_total(window.get("current_usage"))
    size = window.get("context_window_size")
    model = (status.model or {}).get("id")
    restored: str | None = None
    post: int | None = None
    ours = False  # the latest compaction was answered by compactd (the plugin's module)
    if status.session_id:
        last = state.load_session(data_dir, status.session_id).last
        if last is not None:
            ours = bool(last.source)
            post = last.post_tokens
            restored = (
                f"last compaction: restored {last.messages} msgs, {last.commands} cmds, "
                f"{last.files} files"
                if last.chars
                else "last compaction: nothing to restore"
            )
    if not tokens:
        # Claude Code sends a count of 0 from a compaction until the next response
        # (docs/claude-code.md#status-line): the count right after the compaction stands in.
        # compactd's own estimate when it answered the compaction (Claude Code's postTokens of
        # a compaction a hook answered counts the messages only), else Claude Code's figure.
        filed = None if ours and post is not None else _post_tokens(status.transcript_path)
        after = filed if filed is not None else post
        tokens = after if after is not None else tokens
    g: Gauge | None = None
    if tokens is not None:
        g = gauge(tokens, model if isinstance(model, str) else None, env,
                  size if isinstance(size, int) and size > 0 else None)  # fmt: skip
    return status_line(g, restored, post)


# The most the status line reads of a transcript, from its end, for the count after a
# compaction: a boundary is the last line or nearly (compactd's choice).
_BOUNDARY_TAIL_BYTES = 256 * 1024


def _post_tokens(transcript: str) -> int | None:
    """The count Claude Code filed with its latest compaction, when no response came after it
    (``compactMetadata.postTokens`` of a boundary near the end of the transcript)."""
    if not transcript:
        return None
    try:
        with open(transcript, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - _BOUNDARY_TAIL_BYTES))
            data = fh.read()
    except OSError:
        return None
    for line in reversed(data.split(b"\n")[1:] if size > len(data) else data.split(b"\n")):
        if b'"usage"' in line and b'"assistant"' in line:
            return None  # a response came after: its count is Claude Code's to send
        if b"compact_boundary" in line:
            try:
                meta = msgspec.json.decode(line).get("compactMetadata") or {}
            except (msgspec.DecodeError, AttributeError):
                return None
            post = meta.get("postTokens") if isinstance(meta, dict) else None
            return post if isinstance(post, int) else None
    return None
