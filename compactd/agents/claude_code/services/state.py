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

import os
import re
from pathlib import Path

from compactd.services import hook_state
from compactd.services.hook_state import (
    HANDED_BACK_KEPT,
    Compacted,
    CurrentSession,
    Restored,
    SessionState,
    default_data_dir,
)

__all__ = [
    "HANDED_BACK_KEPT",
    "Compacted",
    "CurrentSession",
    "Restored",
    "SessionState",
    "claude_config_dir",
    "default_data_dir",
    "find_current",
    "load_session",
    "project_dir",
    "project_sessions",
    "record_current",
    "save_session",
]

# The folder of compactd's data dir that holds Claude Code's shared state (services/hook_state).
AGENT_DIR = "claude-code"

#: Claude Code names a project's folder under ``~/.claude/projects/`` after its working
#: directory with every character outside ``[A-Za-z0-9]`` replaced by ``-``.
_PROJECT_DIR_CHARS = re.compile(r"[^A-Za-z0-9]")


def claude_config_dir() -> Path:
    """Claude Code's own folder (``CLAUDE_CONFIG_DIR`` or ``~/.claude``)."""
    configured = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(configured) if configured else Path.home() / ".claude"


def project_dir(cwd: str) -> Path:
    """The folder Claude Code keeps a working directory's transcripts in."""
    return claude_config_dir() / "projects" / _PROJECT_DIR_CHARS.sub("-", cwd)


def record_current(data_dir: Path, session: CurrentSession) -> None:
    """Remember ``session`` as the one running in its folder (replaced whole, never torn)."""
    hook_state.record_current(data_dir, AGENT_DIR, session)


def find_current(data_dir: Path, cwd: str) -> CurrentSession | None:
    """The session serving ``cwd``: the one a hook recorded, else the newest transcript there.

    A recorded session whose transcript is gone is passed over. ``found_by`` says which way it
    was found, so that an answer can say so.
    """
    recorded = hook_state.read_current(data_dir, AGENT_DIR, cwd)
    if recorded is not None:
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


def load_session(data_dir: Path, session_id: str) -> SessionState:
    """The state kept for ``session_id`` (empty when none, or when the file is unreadable)."""
    return hook_state.load_session(data_dir, AGENT_DIR, session_id)


def save_session(data_dir: Path, state: SessionState) -> None:
    """Write ``state`` whole (one rename)."""
    hook_state.save_session(data_dir, AGENT_DIR, state)
