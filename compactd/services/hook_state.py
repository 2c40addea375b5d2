"""What an agent's short processes (its hooks, its status line, ``compactd mcp``) share through
compactd's data dir, the same for every agent (docs/agents.md#hooks).

None of these processes is told which session the others saw. A hook records the session it
last ran for, per working folder (``<agent>/current/<key>.json``), and what it handed back per
session (``<agent>/sessions/<key>.json``): which compactions it gave back (none twice), the
latest hand-back's figures, the ledger carried to the next compaction, the threshold level it
last warned about. ``<agent>`` is the agent's folder (``claude-code``, ``codex``). Files are
replaced whole in one rename: a reader sees the old one or the new one.

Imports only the standard library, msgspec and platformdirs: the processes that use it start
often and must start fast.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import msgspec

from compactd.services.data_dir import default_data_dir
from compactd.services.safe_io import is_regular_file, read_regular

__all__ = [
    "HANDED_BACK_KEPT",
    "Compacted",
    "CurrentSession",
    "Restored",
    "SessionState",
    "default_data_dir",
    "load_session",
    "read_current",
    "record_current",
    "save_session",
    "write_whole",
]

#: The most a state file may hold: they are a few KB (a session's keeps a bounded carry);
#: anything larger is not compactd's and is read as no state (docs/safe-io.md).
STATE_MAX_BYTES = 4 * 1024 * 1024


class CurrentSession(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """The session a hook last ran for in one working folder."""

    session_id: str
    transcript_path: str
    cwd: str
    updated_at: float = 0.0
    #: how it was found: ``hook`` (recorded by a hook) or ``newest`` (the newest session file)
    found_by: str = "hook"


def write_whole(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one rename: a reader sees the old file or the new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _current_file(data_dir: Path, agent: str, cwd: str) -> Path:
    key = hashlib.sha256(os.path.realpath(cwd).encode("utf-8", "surrogatepass")).hexdigest()
    return data_dir / agent / "current" / f"{key[:24]}.json"


def record_current(data_dir: Path, agent: str, session: CurrentSession) -> None:
    """Remember ``session`` as the one running in its folder (replaced whole, never torn)."""
    stamped = msgspec.structs.replace(session, updated_at=time.time(), found_by="hook")
    write_whole(_current_file(data_dir, agent, session.cwd), msgspec.json.encode(stamped))


def read_current(data_dir: Path, agent: str, cwd: str) -> CurrentSession | None:
    """The session a hook recorded for ``cwd``, when its file is still there."""
    try:
        raw = read_regular(_current_file(data_dir, agent, cwd), STATE_MAX_BYTES)
        recorded = msgspec.json.decode(raw, type=CurrentSession)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    return recorded if is_regular_file(recorded.transcript_path) else None


# -- per session: what the hooks handed back -------------------------------------------------

#: How many compactions a session remembers as handed back (older ones are long out of the
#: context); compactd's own bound, so the file stays small.
HANDED_BACK_KEPT = 64


class Restored(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """What a hook gave the model after one compaction (Claude Code's and Codex's SessionStart,
    Gemini CLI's BeforeModel)."""

    boundary_id: str = ""
    after: str = ""
    at: float = 0.0
    #: what the summary kept, in words ("1 of 2 user messages, ...")
    kept: str = ""
    #: how many user messages, commands and files it handed back
    messages: int = 0
    commands: int = 0
    files: int = 0
    chars: int = 0
    #: the agent's count right after the compaction, when it records one, or, until it is
    #: filed, compactd's estimate of it when compactd answered the compaction
    post_tokens: int | None = None
    #: the text handed back, kept for an agent whose hooks must give it again with every
    #: request until the next compaction (Gemini CLI's BeforeModel); empty for the others
    text: str = ""
    #: who wrote the compaction: "" (the agent; compactd handed back after it), "claude-code"
    #: (Claude Code's summary with compactd's rows added by its plugin), or the summary compactd
    #: answered with ("prepared", "offline") (docs/claude-code.md#the-plugin)
    source: str = ""
    #: how long compactd took to answer the agent's compaction event, in ms
    answer_ms: int | None = None
    #: the process that answered it, when not the command the agent ran ("compactd mcp": the
    #: warm process beside the session, docs/claude-code.md#the-seam)
    answered_by: str = ""


class Compacted(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """A compaction whose items were handed back: its boundary's id when it was filed then,
    else the id of the compaction it followed (``after``; empty: the session's first)."""

    boundary_id: str = ""
    after: str = ""


class SessionState(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """One session's state kept by the hooks, read by the status line."""

    session_id: str
    #: compactions whose dropped items were handed back, oldest first
    handed_back: list[Compacted] = msgspec.field(default_factory=list)
    #: the latest hand-back
    last: Restored | None = None
    #: the ledger folded at the latest hand-back, checked again at the next compaction, and
    #: the compaction it belongs to (a boundary id, or ``after:<id>`` before it was filed)
    carry: dict[str, Any] | None = None
    carry_after: str = ""
    #: the threshold level last warned about, with the compaction it was in ("<id>:<level>")
    warned: str = ""
    #: an agent's plugin went on to the agent's own compaction and asks again with its summary:
    #: the compaction it is for (the one after ``pending_after``) and when; the hook that hands
    #: back after a compaction leaves that one to it (docs/claude-code.md#the-plugin)
    pending_after: str | None = None
    pending_at: float = 0.0


def _session_file(data_dir: Path, agent: str, session_id: str) -> Path:
    key = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
    return data_dir / agent / "sessions" / f"{key[:24]}.json"


def load_session(data_dir: Path, agent: str, session_id: str) -> SessionState:
    """The state kept for ``session_id`` (empty when none, or when the file is unreadable)."""
    try:
        raw = read_regular(_session_file(data_dir, agent, session_id), STATE_MAX_BYTES)
        state = msgspec.json.decode(raw, type=SessionState)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return SessionState(session_id=session_id)
    return state if state.session_id == session_id else SessionState(session_id=session_id)


def save_session(data_dir: Path, agent: str, state: SessionState) -> None:
    """Write ``state`` whole (one rename)."""
    del state.handed_back[:-HANDED_BACK_KEPT]
    write_whole(_session_file(data_dir, agent, state.session_id), msgspec.json.encode(state))
