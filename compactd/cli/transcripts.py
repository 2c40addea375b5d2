"""Which session file a report reads: the file a person names, the newest session of a folder
they name, or, when they name nothing, the newest session of the folder they are in, whichever
agent wrote it (docs/agents.md#sessions, docs/claude-code.md#where-the-sessions-are,
docs/codex.md#where-the-sessions-are).

Each agent keeps the sessions of a working folder its own way (Claude Code in a project folder
of its own, Codex in dated folders with the working folder inside each file); the port asks
each one (``port.sessions_in``, ``port.sessions_of_folder``). The choice is said with the report
(``Chosen.how``), and when there is nothing to read, :class:`NoTranscript` says where each agent
keeps its sessions and how to name one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from compactd import port
from compactd.services.places import ago, shown

__all__ = ["Chosen", "NoTranscript", "choose", "shown"]


class NoTranscript(Exception):
    """Nothing to read where the person pointed (or where they are): the message says where
    the agents keep their sessions and how to name one."""


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
    sessions = port.sessions_in(path)
    if sessions:
        return _newest(sessions, f"in {shown(path)}", path)
    return _of_working_folder(path.absolute(), shown(path.absolute()), command, named=True)


def _of_working_folder(folder: Path, called: str, command: str, *, named: bool = False) -> Chosen:
    """The newest session any agent keeps for the working folder ``folder``."""
    sessions = port.sessions_of_folder(_spellings(folder))
    if sessions:
        home = sessions[0].folder
        return _newest([s for s in sessions if s.folder == home], f"of {called}, in {shown(home)}",
                       home)  # fmt: skip
    opening = ""
    if named:
        endings = ", ".join(f"*{s}" for s in port.session_suffixes().split(" or "))
        opening = f"{shown(folder)} holds no transcript ({endings}), and "
    raise NoTranscript("\n".join(port.no_sessions_of_folder(folder, command, named=opening)))


def _spellings(folder: Path) -> list[str]:
    """``folder`` as it is spelled, as the shell spells it, and as the file system resolves
    it (an agent may record the resolved path of a folder reached through a symlink)."""
    spellings = [str(folder)]
    if folder == Path.cwd():
        pwd = os.environ.get("PWD")  # the shell's spelling of the same folder
        if pwd and os.path.isabs(pwd) and _same(pwd, folder):
            spellings.append(pwd)
    spellings.append(os.path.realpath(folder))
    return list(dict.fromkeys(spellings))


def _same(a: str, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _newest(sessions: list[port.Session], where: str, folder: Path) -> Chosen:
    count = len(sessions)
    which = "the only session" if count == 1 else f"the newest of {count} sessions"
    first = sessions[0]
    return Chosen(first.path, f"{which} {where}, written {ago(first.mtime)}", folder, count)
