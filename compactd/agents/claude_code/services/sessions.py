"""Claude Code's sessions as a person looks for them: the ones in a folder they name, the ones
of a working folder, and, when there are none, where Claude Code keeps them
(docs/claude-code.md#where-the-sessions-are)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from compactd.agents.claude_code.services.state import project_dir, project_sessions
from compactd.port import Session
from compactd.services.places import shown

__all__ = ["hint", "sessions_in", "sessions_of_folder"]

NAME = "Claude Code"


def sessions_in(folder: Path) -> list[Session]:
    """The sessions directly in ``folder`` (a Claude Code project folder), newest first."""
    return [Session(mtime, path, folder, NAME) for mtime, path in project_sessions([folder])]


def sessions_of_folder(spellings: Sequence[str]) -> list[Session]:
    """The sessions of the working folder spelled ``spellings`` (Claude Code records the
    resolved path of a folder reached through a symlink), newest first."""
    homes = list(dict.fromkeys(project_dir(s) for s in spellings))
    found: dict[Path, Session] = {}
    for home in homes:
        for mtime, path in project_sessions([home]):
            found.setdefault(path, Session(mtime, path, home, NAME))
    return sorted(found.values(), key=lambda s: s.mtime, reverse=True)


def hint(folder: Path, command: str, *, named: str) -> list[str]:
    """No session for ``folder``: where Claude Code would keep them, and how to name one."""
    home = project_dir(str(folder))
    projects = home.parent
    state = "has no session" if home.is_dir() else "does not exist"
    lines = [
        f"{named}Claude Code has no session for {shown(folder)}: it keeps a folder's sessions in "
        f"{shown(projects)}/<project>/, for this one {shown(home)}/, which {state}.",
        f"Name one: compactd {command} {shown(projects)}/<project>/ (its newest session) or "
        f"compactd {command} FILE.jsonl.",
    ]
    recent = _recent_projects(projects)
    if recent:
        lines.append(f"The latest projects in {shown(projects)}: {', '.join(recent)}.")
    elif not projects.is_dir():
        lines.append(
            f"{shown(projects)} does not exist: Claude Code has saved no session as this user "
            "(it keeps them under $CLAUDE_CONFIG_DIR when that is set)."
        )
    return lines


def _recent_projects(projects: Path, most: int = 3) -> list[str]:
    """The project folders with the most recent sessions, each with its count: a person sees
    what they could name."""
    found: list[tuple[float, str]] = []
    try:
        folders = [f for f in projects.iterdir() if f.is_dir()]
    except OSError:
        return []
    for folder in folders:
        sessions = project_sessions([folder])
        if sessions:
            count = len(sessions)
            noun = "session" if count == 1 else "sessions"
            found.append((sessions[0][0], f"{folder.name} ({count} {noun})"))
    found.sort(reverse=True)
    return [name for _, name in found[:most]]
