"""Where compactd's Claude Code front ends find the session they serve.

A hook (``compactd claude-code hook``), the status line and the MCP server are short processes
that Claude Code starts; none of them is told which session the others saw. The hook records
the session it last ran for, per project folder, in a small JSON file under compactd's data dir
(``claude-code/current/<key>.json``); the MCP server and the status line read it. When no hook
has run yet for a folder, the newest transcript in Claude Code's project folder for it stands in
(docs/claude-code.md#current-session).

This module imports only the standard library, msgspec and platformdirs: the processes that use it start
often and must start fast.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import time
from pathlib import Path
from typing import Any

import msgspec
import platformdirs

from compactd.services.safe_io import is_regular_file, read_regular

#: Claude Code names a project's folder under ``~/.claude/projects/`` after its working
#: directory with every character outside ``[A-Za-z0-9]`` replaced by ``-``.
_PROJECT_DIR_CHARS = re.compile(r"[^A-Za-z0-9]")
#: The most a state file may hold: they are a few KB (a session's keeps a bounded carry);
#: anything larger is not compactd's and is read as no state.
STATE_MAX_BYTES = 4 * 1024 * 1024


class CurrentSession(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """The Claude Code session a hook last ran for in one project folder."""

    session_id: str
    transcript_path: str
    cwd: str
    updated_at: float = 0.0
    #: how it was found: ``hook`` (recorded by a hook) or ``newest`` (the newest transcript)
    found_by: str = "hook"


def claude_config_dir() -> Path:
    """Claude Code's own folder (``CLAUDE_CONFIG_DIR`` or ``~/.claude``)."""
    configured = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(configured) if configured else Path.home() / ".claude"


def project_dir(cwd: str) -> Path:
    """The folder Claude Code keeps a working directory's transcripts in."""
    return claude_config_dir() / "projects" / _PROJECT_DIR_CHARS.sub("-", cwd)


def _state_file(data_dir: Path, cwd: str) -> Path:
    key = hashlib.sha256(os.path.realpath(cwd).encode("utf-8", "surrogatepass")).hexdigest()
    return data_dir / "claude-code" / "current" / f"{key[:24]}.json"


def write_whole(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one rename: a reader sees the old file or the new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def record_current(data_dir: Path, session: CurrentSession) -> None:
    """Remember ``session`` as the one running in its folder (replaced whole, never torn)."""
    stamped = msgspec.structs.replace(session, updated_at=time.time(), found_by="hook")
    write_whole(_state_file(data_dir, session.cwd), msgspec.json.encode(stamped))


def find_current(data_dir: Path, cwd: str) -> CurrentSession | None:
    """The session serving ``cwd``: the one a hook recorded, else the newest transcript there.

    A recorded session whose transcript is gone is passed over. ``found_by`` says which way it
    was found, so that an answer can say so.
    """
    try:
        raw = read_regular(_state_file(data_dir, cwd), STATE_MAX_BYTES)
        recorded = msgspec.json.decode(raw, type=CurrentSession)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        recorded = None
    if recorded is not None and is_regular_file(recorded.transcript_path):
        return recorded
    sessions = project_sessions([project_dir(cwd)])
    if not sessions:
        return None
    mtime, newest = sessions[0]
    return CurrentSession(
        session_id=newest.stem,
        transcript_path=str(newest),
        cwd=cwd,
        updated_at=mtime,
        found_by="newest",
    )


def project_sessions(folders: list[Path]) -> list[tuple[float, Path]]:
    """The session transcripts directly in ``folders`` (Claude Code's project folders), each
    with the time it was last written, newest first; a file reached twice counts once.

    Empty files are passed over (nothing to read yet), and so are ``agent-*.jsonl``: sub-agent
    transcripts, which older Claude Code releases wrote beside the sessions (newer ones put them
    in ``<session id>/subagents/``; docs/claude-code.md#where-the-sessions-are).
    """
    found: dict[str, tuple[float, Path]] = {}
    for folder in folders:
        try:
            files = list(folder.glob("*.jsonl"))
        except OSError:
            continue
        for file in files:
            if file.name.startswith("agent-"):
                continue
            try:
                info = file.stat()
            except OSError:
                continue  # removed while we looked
            if info.st_size > 0 and file.is_file():
                found.setdefault(os.path.realpath(file), (info.st_mtime, file))
    return sorted(found.values(), key=lambda found: found[0], reverse=True)


def default_data_dir() -> Path:
    """compactd's data dir when none is given: the platform's user data dir (the daemon's
    default too), found without importing the daemon."""
    return Path(platformdirs.user_data_dir("compactd", appauthor=False))


# -- per session: what the hooks handed back -------------------------------------------------

#: How long the SessionStart and PostCompact hooks take a compaction the plugin's module handed
#: on to Claude Code's own (``pending_after``) as still coming back to compactd, and how recent an
#: answer of the module counts as the compaction in progress, in seconds (compactd's choice: far
#: longer than a compaction takes, far shorter than the time between two).
MODULE_PENDING_S = 15 * 60.0
MODULE_RECENT_S = 120.0

#: How many compactions a session remembers as handed back (older ones are long out of the
#: context); compactd's own bound, so the file stays small.
HANDED_BACK_KEPT = 64


class Restored(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """What the SessionStart hook gave the model after one compaction."""

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
    #: Claude Code's count right after the compaction (its boundary's ``postTokens``), or, until
    #: the boundary is filed, compactd's estimate of it when compactd answered the compaction
    post_tokens: int | None = None
    #: who wrote the compaction: "" (Claude Code; compactd handed back after it at
    #: SessionStart), "claude-code" (Claude Code's summary with compactd's rows added by the
    #: plugin), or the summary compactd answered with ("prepared", "offline")
    source: str = ""
    #: how long compactd took to answer the plugin's ``session.compact``, in ms
    answer_ms: int | None = None


class Compacted(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """A compaction whose items were handed back: its boundary's id when it was filed then,
    else the id of the compaction it followed (``after``; empty: the session's first)."""

    boundary_id: str = ""
    after: str = ""


class SessionState(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """One Claude Code session's state kept by the hooks, read by the status line."""

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
    #: the plugin's ``session.compact`` went on to Claude Code's own compaction and asks again
    #: with its summary: the compaction it is for (the one after ``pending_after``) and when;
    #: the SessionStart hook leaves that hand-back to it (docs/claude-code.md#the-plugin)
    pending_after: str | None = None
    pending_at: float = 0.0


def _session_file(data_dir: Path, session_id: str) -> Path:
    key = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
    return data_dir / "claude-code" / "sessions" / f"{key[:24]}.json"


def load_session(data_dir: Path, session_id: str) -> SessionState:
    """The state kept for ``session_id`` (empty when none, or when the file is unreadable)."""
    try:
        raw = read_regular(_session_file(data_dir, session_id), STATE_MAX_BYTES)
        state = msgspec.json.decode(raw, type=SessionState)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return SessionState(session_id=session_id)
    return state if state.session_id == session_id else SessionState(session_id=session_id)


def save_session(data_dir: Path, state: SessionState) -> None:
    """Write ``state`` whole (one rename)."""
    del state.handed_back[:-HANDED_BACK_KEPT]
    write_whole(_session_file(data_dir, state.session_id), msgspec.json.encode(state))
