"""Which Claude Code transcript a report reads: the file a person names, the newest session of a
folder they name, or, when they name nothing, the newest session of the folder they are in
(docs/claude-code.md#where-the-sessions-are).

Claude Code keeps the sessions started in a working folder in one folder of its own,
``~/.claude/projects/<project>/<session id>.jsonl`` (``agents/claude_code/services/state.project_dir``). A
person may name that folder, the working folder itself, or nothing; the choice is said with the
report (``Chosen.how``), and when there is nothing to read, :class:`NoTranscript` says where
Claude Code keeps transcripts and how to name one. ``resume_notes`` says when the command that
resumes a session cannot work on this machine.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from compactd.agents.claude_code.services.state import project_dir, project_sessions


class NoTranscript(Exception):
    """Nothing to read where the person pointed (or where they are): the message says where
    Claude Code keeps its transcripts and how to name one."""


@dataclass(frozen=True)
class Chosen:
    """The transcript to read, and, when compactd picked it, how (a phrase for the report)."""

    path: Path
    #: None when the person named the file; else e.g. "the newest of 3 sessions in ~/..."
    how: str | None = None
    #: the folder it was picked in, and how many sessions that folder holds
    folder: Path | None = None
    sessions: int = 0


def choose(target: str | None, *, command: str, cwd: Path | None = None) -> Chosen:
    """The transcript ``target`` names (a file, a folder of sessions, a working folder), or the
    current folder's newest session when it is None. Raises :class:`NoTranscript`."""
    if target is None:
        here = Path.cwd() if cwd is None else cwd
        return _of_working_folder(here, "this folder", command)
    path = Path(target).expanduser()
    if not path.is_dir():
        return Chosen(path)  # a file, or nothing: the report says which (cli/inputs.unreadable)
    sessions = project_sessions([path])
    if sessions:
        return _newest(sessions, f"in {shown(path)}", path)
    return _of_working_folder(path.absolute(), shown(path.absolute()), command, named=True)


def resume_notes(cwd: str | None, transcript: Path) -> list[str]:
    """Why the resume command would not work on this machine, said for a person: Claude Code
    resumes a session from the folder it ran in, looking in that folder's project folder
    (docs/claude-code.md#where-the-sessions-are)."""
    if not cwd:
        return []
    notes = []
    if not Path(cwd).is_dir():
        notes.append(
            f"{shown(Path(cwd))}, the folder the session ran in, does not exist on this machine, "
            "so the `cd` above fails: Claude Code resumes a session only from its own folder."
        )
    home = project_dir(cwd)
    if transcript.parent.name != home.name:
        notes.append(
            f"Claude Code looks for the sessions of {shown(Path(cwd))} in {shown(home)}/, and this "
            f"one was written to {shown(transcript.parent)}/: copy it there for `claude --resume` "
            "to find it."
        )
    return notes


def _of_working_folder(folder: Path, called: str, command: str, *, named: bool = False) -> Chosen:
    """The newest session Claude Code keeps for the working folder ``folder``."""
    homes = _project_dirs(folder)
    sessions = project_sessions(homes)
    if sessions:
        home = next(h for h in homes if h == sessions[0][1].parent)
        return _newest(sessions, f"of {called}, in {shown(home)}", home)
    raise NoTranscript(_hint(folder, homes[0], command, named=named))


def _project_dirs(folder: Path) -> list[Path]:
    """Claude Code's folders for ``folder``: as it is spelled, and as the file system resolves
    it (Claude Code records the resolved path of a folder reached through a symlink)."""
    spellings = [str(folder)]
    if folder == Path.cwd():
        pwd = os.environ.get("PWD")  # the shell's spelling of the same folder
        if pwd and os.path.isabs(pwd) and _same(pwd, folder):
            spellings.append(pwd)
    spellings.append(os.path.realpath(folder))
    homes: list[Path] = []
    for spelling in spellings:
        home = project_dir(spelling)
        if home not in homes:
            homes.append(home)
    return homes


def _same(a: str, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _newest(sessions: list[tuple[float, Path]], where: str, folder: Path) -> Chosen:
    mtime, path = sessions[0]
    count = len(sessions)
    which = "the only session" if count == 1 else f"the newest of {count} sessions"
    return Chosen(path, f"{which} {where}, written {_ago(mtime)}", folder, count)


def _hint(folder: Path, home: Path, command: str, *, named: bool) -> str:
    """No session for ``folder``: where Claude Code would keep them, and how to name one."""
    projects = home.parent
    what = f"{shown(folder)} holds no transcript (*.jsonl), and" if named else ""
    state = "has no session" if home.is_dir() else "does not exist"
    lines = [
        f"{what} Claude Code has no session for {shown(folder)}: it keeps a folder's sessions in "
        f"{shown(projects)}/<project>/, for this one {shown(home)}/, which {state}.".strip(),
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
    return "\n".join(lines)


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


def shown(path: Path) -> str:
    """``path`` with the home folder as ``~`` (the way people write it)."""
    home = str(Path.home())
    text = str(path)
    if home not in ("", "/") and (text == home or text.startswith(home + os.sep)):
        return "~" + text[len(home) :]
    return text


def _ago(mtime: float) -> str:
    seconds = max(0.0, time.time() - mtime)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'' if count == 1 else 's'} ago"
    return "just now"
