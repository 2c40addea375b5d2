"""A summary compactd prepared in the background for a running Claude Code session.

The process that lives as long as the Claude Code session (``compactd mcp``, started by the
plugin) follows its transcript and, when a summarizer is configured, has compactd's engine
prepare a summary before Claude Code's threshold arrives (docs/claude-code.md#prepared-in-the-background).
What it prepared is kept here, one small JSON file per Claude Code session under compactd's
data dir (``claude-code/prepared/<key>.json``, replaced whole), for ``compactd claude-code
session-compact`` to answer ``session.compact`` with, in another process, at once.

The file says what the summary covers: the compaction whose span it summarizes (the boundary
that opens the span, ``after``; empty for the session's first) and the last line it covers
(``snapshotUuid``, E). Everything after E is kept verbatim or brought into the summary by the
survival ledger when the compaction comes. Imports only msgspec: it runs in a short process.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import msgspec

from compactd.agents.claude_code.services.state import write_whole

__all__ = ["Prepared", "forget_prepared", "prepared_path", "read_prepared", "write_prepared"]


class Prepared(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """A summary prepared for one Claude Code session (see the module docstring)."""

    session_id: str
    #: the boundary that opens the span the summary covers ("" for the session's first span)
    after: str
    #: the uuid of the last transcript line the summary covers (E)
    snapshot_uuid: str
    #: the model's summary, formatted ("Summary: ..."), not yet completed against the ledger
    summary: str
    #: who wrote it ("anthropic claude-sonnet-4-5", ...)
    summarizer: str = ""
    #: the count the summary covers, and the model's time writing it
    covered_tokens: int = 0
    duration_ms: int = 0
    usage: dict[str, Any] | None = None
    #: when it was ready (POSIX time)
    prepared_at: float = 0.0
    #: the session's effective window the engine prepared it against (0: not recorded); the
    #: answer's room for the summary comes from it without working out the model's levels again
    window: int = 0


def prepared_path(data_dir: Path, session_id: str) -> Path:
    key = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
    return data_dir / "claude-code" / "prepared" / f"{key[:24]}.json"


def write_prepared(data_dir: Path, prepared: Prepared) -> None:
    """Keep ``prepared`` for its session (replaced whole, never torn)."""
    write_whole(prepared_path(data_dir, prepared.session_id), msgspec.json.encode(prepared))


def read_prepared(data_dir: Path, session_id: str) -> Prepared | None:
    """The summary prepared for ``session_id``; None when there is none or it is unreadable."""
    try:
        raw = prepared_path(data_dir, session_id).read_bytes()
        prepared = msgspec.json.decode(raw, type=Prepared)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    return prepared if prepared.session_id == session_id else None


def forget_prepared(data_dir: Path, session_id: str) -> None:
    prepared_path(data_dir, session_id).unlink(missing_ok=True)
