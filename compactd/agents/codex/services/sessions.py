"""Where Codex keeps its sessions, and which one a front end serves (docs/codex.md#where-the-sessions-are).

Codex writes each session to ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl``
(``CODEX_HOME`` defaults to ``~/.codex``); a rollout idle for a week may be rewritten as
``.jsonl.zst``, and when both exist the plain file is the one Codex goes on with. The working
folder is not in the path: it is in the rollout's first line (``session_meta``), so the
sessions of a folder are found by reading the first line of the newest rollouts.

``compactd mcp`` serves the session the Codex hook last recorded for its folder
(``services/hook_state``), else the newest rollout of the folder.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec
import zstandard

from compactd.port import FoundSession, Session
from compactd.services import hook_state
from compactd.services.places import shown

__all__ = [
    "AGENT_DIR",
    "codex_home",
    "current",
    "hint",
    "named",
    "no_current",
    "rollouts",
    "session_meta",
    "sessions_in",
    "sessions_of_folder",
]

NAME: Final = "Codex"
# The folder of compactd's data dir that holds Codex's shared state (services/hook_state).
AGENT_DIR: Final = "codex"
_ROLLOUT: Final = re.compile(r"^rollout-.*\.jsonl(\.zst)?$")
_THREAD_ID: Final = re.compile(
    r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl(?:\.zst)?$"
)
# The most rollouts whose first line is read to find a folder's sessions (the newest first);
# compactd's bound: a year of daily use, read in well under a second.
MAX_SCANNED: Final = 2_000
# The most of a rollout's start read for its first line (its base instructions are long).
_HEAD_BYTES: Final = 1024 * 1024


def codex_home() -> Path:
    """Codex's own folder: ``CODEX_HOME``, else ``~/.codex``."""
    configured = os.environ.get("CODEX_HOME")
    return Path(configured) if configured else Path.home() / ".codex"


def sessions_root() -> Path:
    return codex_home() / "sessions"


def thread_id(path: Path) -> str:
    """The thread (session) id a rollout's name ends with, else its name."""
    match = _THREAD_ID.search(path.name)
    return match.group(1) if match else path.name.split(".", 1)[0]


def _files(folder: Path, *, deep: bool) -> Iterator[Path]:
    try:
        found = folder.rglob("rollout-*") if deep else folder.glob("rollout-*")
        for path in found:
            if _ROLLOUT.match(path.name):
                yield path
    except OSError:
        return


def rollouts(folder: Path, *, deep: bool = True) -> list[tuple[float, Path]]:
    """The rollouts in ``folder`` (and below it when ``deep``), newest first, each with the
    time it was last written. Of a rollout kept both plain and compressed, the plain file."""
    found: dict[str, tuple[float, Path]] = {}
    for path in _files(folder, deep=deep):
        try:
            info = path.stat()
        except OSError:
            continue  # removed while we looked
        if info.st_size == 0 or not path.is_file():
            continue
        key = str(path.parent / path.name.removesuffix(".zst"))
        if path.name.endswith(".zst") and key in found:
            continue
        found[key] = (info.st_mtime, path)
    return sorted(found.values(), key=lambda f: f[0], reverse=True)


def _head(path: Path) -> bytes:
    with open(path, "rb") as fh:
        data = fh.read(_HEAD_BYTES)
    if data.startswith(b"\x28\xb5\x2f\xfd"):
        reader = zstandard.ZstdDecompressor().stream_reader(data)
        data = reader.read(_HEAD_BYTES)
    return data


def session_meta(path: Path) -> dict[str, Any]:
    """The payload of a rollout's first line (``session_meta``: ``id``, ``cwd``...), or {}."""
    try:
        head = _head(path)
    except (OSError, zstandard.ZstdError):
        return {}
    first = head.split(b"\n", 1)[0]
    try:
        line = msgspec.json.decode(first)
    except msgspec.DecodeError:
        return {}
    if not isinstance(line, dict) or line.get("type") != "session_meta":
        return {}
    payload = line.get("payload")
    if isinstance(payload, dict) and isinstance(payload.get("meta"), dict):
        payload = payload["meta"]  # some versions nest it
    return payload if isinstance(payload, dict) else {}


def _within(folder: Path, root: Path) -> bool:
    try:
        Path(os.path.realpath(folder)).relative_to(os.path.realpath(root))
    except ValueError:
        return False
    return True


def sessions_in(folder: Path) -> list[Session]:
    """The rollouts in ``folder``: below it when it is Codex's sessions folder or one of its
    dated folders, else directly in it."""
    deep = _within(folder, sessions_root())
    return [Session(m, p, folder, NAME) for m, p in rollouts(folder, deep=deep)]


def _of_folder(spellings: Sequence[str]) -> Iterator[tuple[float, Path]]:
    wanted = set(spellings)
    for mtime, path in rollouts(sessions_root())[:MAX_SCANNED]:
        if session_meta(path).get("cwd") in wanted:
            yield mtime, path


def sessions_of_folder(spellings: Sequence[str]) -> list[Session]:
    """The rollouts whose session ran in the working folder spelled ``spellings``."""
    root = sessions_root()
    return [Session(m, p, root, NAME) for m, p in _of_folder(spellings)]


def hint(folder: Path, command: str, *, named: str) -> list[str]:
    """No Codex session for ``folder``: where Codex keeps them, and how to name one."""
    root = sessions_root()
    state = "has none of this folder" if root.is_dir() else "does not exist"
    return [
        f"{named}Codex has no session for {shown(folder)}: it keeps every session in "
        f"{shown(root)}/YYYY/MM/DD/ (the working folder is inside each), which {state}.",
        f"Name one: compactd {command} {shown(root)}/ (the newest rollout) or compactd {command} "
        "rollout-....jsonl.",
    ]


def named(name: str) -> FoundSession | None:
    """The rollout of the thread ``name``, when Codex keeps one."""
    for _, path in rollouts(sessions_root()):
        if thread_id(path) == name:
            return FoundSession(path, name, f"Codex session in {path.parent}")
    return None


def current(data_dir: Path, cwd: str) -> FoundSession | None:
    """The session Codex runs in ``cwd``: the one compactd's hook recorded, else the newest
    rollout of the folder."""
    recorded = hook_state.read_current(data_dir, AGENT_DIR, cwd)
    if recorded is not None:
        return FoundSession(
            Path(recorded.transcript_path),
            recorded.session_id,
            "the current Codex session, as compactd's hook recorded it",
        )
    for _, path in _of_folder([cwd, os.path.realpath(cwd)]):
        return FoundSession(
            path, thread_id(path), "the newest Codex rollout of this folder (no hook has run yet)"
        )
    return None


def no_current(cwd: str) -> str:
    return f"no compactd hook has recorded one and {sessions_root()} has no rollout of {cwd}"
