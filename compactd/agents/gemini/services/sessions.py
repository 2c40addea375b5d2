"""Where Gemini CLI keeps its chats, and which one a front end serves (docs/gemini.md#where-the-chats-are).

Gemini CLI keeps its files in ``~/.gemini`` (``$GEMINI_CLI_HOME/.gemini`` when that is set). A
project's chats are ``tmp/<slug>/chats/session-<minute>-<id8>.jsonl``, where ``projects.json``
maps each project folder to its slug (the folder's name by default); versions before the
registry used the sha256 of the folder's path as the slug, and versions before 0.39 wrote
``session-*.json``. A ``--resume`` in a later minute leaves a two-line stub beside the chat it
resumes (a metadata line and the session context, no record): stubs are no session to read.
When a ``.json`` chat was continued by a later version, the ``.jsonl`` of the same name is the one
that goes on.

``compactd mcp`` serves the chat the Gemini hook last recorded for its folder
(``services/hook_state``), else the folder's newest chat.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from compactd.port import FoundSession, Session
from compactd.services import hook_state
from compactd.services.places import shown
from compactd.services.safe_io import read_regular

__all__ = [
    "AGENT_DIR",
    "chats",
    "chats_of",
    "current",
    "gemini_dir",
    "hint",
    "named",
    "no_current",
    "sessions_in",
    "sessions_of_folder",
]

NAME: Final = "Gemini CLI"
# The folder of compactd's data dir that holds Gemini CLI's shared state (services/hook_state).
AGENT_DIR: Final = "gemini"
# How much of a chat's start is read to tell a stub from a chat (a stub is about 2 KB).
_HEAD_BYTES: Final = 256 * 1024
_REGISTRY_MAX: Final = 4 * 1024 * 1024


def gemini_dir() -> Path:
    """Gemini CLI's own folder: ``$GEMINI_CLI_HOME/.gemini``, else ``~/.gemini``."""
    home = os.environ.get("GEMINI_CLI_HOME")
    return (Path(home) if home else Path.home()) / ".gemini"


def _tmp() -> Path:
    return gemini_dir() / "tmp"


def _registry() -> dict[str, str]:
    """``projects.json``: each project folder's slug."""
    try:
        data = msgspec.json.decode(read_regular(gemini_dir() / "projects.json", _REGISTRY_MAX))
    except (OSError, msgspec.DecodeError):
        return {}
    projects = data.get("projects") if isinstance(data, dict) else None
    if not isinstance(projects, dict):
        return {}
    return {k: v for k, v in projects.items() if isinstance(k, str) and isinstance(v, str)}


def _homes(spellings: Sequence[str]) -> list[Path]:
    """The chats folders of the project folder spelled ``spellings``: by the registry's slug,
    and by the older layout's hash of the path."""
    registry = _registry()
    homes: list[Path] = []
    for spelling in spellings:
        slug = registry.get(spelling)
        if slug and "/" not in slug and slug not in (".", ".."):
            homes.append(_tmp() / slug / "chats")
        homes.append(_tmp() / hashlib.sha256(spelling.encode()).hexdigest() / "chats")
    return list(dict.fromkeys(homes))


def chats_of(cwd: str) -> Path | None:
    """The folder Gemini CLI keeps ``cwd``'s chats in, when it has one."""
    for home in _homes([cwd, os.path.realpath(cwd)]):
        if home.is_dir():
            return home
    return None


def _has_records(path: Path) -> bool:
    """Whether a chat holds a record (a stub a resume left holds none)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD_BYTES)
            longer = bool(fh.read(1))
    except OSError:
        return False
    if longer or path.suffix == ".json":
        return True
    for raw in head.split(b"\n"):
        try:
            obj: Any = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("id"), str):
            return True
    return False


def chats(folder: Path) -> list[tuple[float, Path]]:
    """The chats directly in ``folder``, newest first, each with the time it was last written;
    stubs left out, and of a ``.json`` continued as ``.jsonl``, the ``.jsonl``."""
    found: dict[str, tuple[float, Path]] = {}
    try:
        entries = [p for p in folder.glob("session-*.json*") if p.suffix in (".json", ".jsonl")]
    except OSError:
        return []
    for path in sorted(entries, key=lambda p: p.suffix, reverse=True):  # .jsonl first
        try:
            info = path.stat()
        except OSError:
            continue
        if not path.is_file() or info.st_size == 0 or path.stem in found:
            continue
        if _has_records(path):
            found[path.stem] = (info.st_mtime, path)
    return sorted(found.values(), key=lambda f: f[0], reverse=True)


def _chat_folders(folder: Path) -> Iterator[Path]:
    """``folder`` as a person names it: a chats folder, a project's folder under tmp, or tmp."""
    yield folder
    yield folder / "chats"
    try:
        if os.path.realpath(folder) == os.path.realpath(_tmp()):
            for project in folder.iterdir():
                yield project / "chats"
    except OSError:
        return


def sessions_in(folder: Path) -> list[Session]:
    """The chats in ``folder`` (see ``_chat_folders``), newest first."""
    found = [
        Session(mtime, path, where, NAME)
        for where in dict.fromkeys(_chat_folders(folder))
        for mtime, path in chats(where)
    ]
    return sorted(found, key=lambda s: s.mtime, reverse=True)


def sessions_of_folder(spellings: Sequence[str]) -> list[Session]:
    """The chats of the project folder spelled ``spellings``, newest first."""
    found = [Session(m, p, home, NAME) for home in _homes(spellings) for m, p in chats(home)]
    return sorted(found, key=lambda s: s.mtime, reverse=True)


def hint(folder: Path, command: str, *, named: str) -> list[str]:
    """No chat for ``folder``: where Gemini CLI keeps them, and how to name one."""
    tmp = _tmp()
    state = "has none of this folder" if tmp.is_dir() else "does not exist"
    return [
        f"{named}Gemini CLI has no chat for {shown(folder)}: it keeps a project's chats in "
        f"{shown(tmp)}/<project>/chats/ (the project's name in {shown(gemini_dir())}/projects.json), "
        f"which {state}.",
        f"Name one: compactd {command} {shown(tmp)}/<project>/chats/ (the newest chat) or "
        f"compactd {command} session-....jsonl.",
    ]


def _session_id(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            first = fh.read(_HEAD_BYTES).split(b"\n", 1)[0]
        obj = msgspec.json.decode(first)
    except (OSError, msgspec.DecodeError):
        return None
    found = obj.get("sessionId") if isinstance(obj, dict) else None
    return found if isinstance(found, str) else None


def named(cwd: str, name: str) -> FoundSession | None:
    """The chat of the session ``name`` in ``cwd``'s chats folder."""
    home = chats_of(cwd)
    if home is None:
        return None
    for _, path in chats(home):
        if path.stem.endswith(f"-{name[:8]}") and _session_id(path) in (name, None):
            return FoundSession(path, name, f"Gemini CLI chat in {path.parent}")
    return None


def current(data_dir: Path, cwd: str) -> FoundSession | None:
    """The chat Gemini CLI runs in ``cwd``: the one compactd's hook recorded, else the newest
    chat of the folder."""
    recorded = hook_state.read_current(data_dir, AGENT_DIR, cwd)
    if recorded is not None:
        return FoundSession(
            Path(recorded.transcript_path),
            recorded.session_id,
            "the current Gemini CLI chat, as compactd's hook recorded it",
        )
    home = chats_of(cwd)
    for _, path in chats(home) if home is not None else []:
        return FoundSession(
            path,
            _session_id(path) or path.stem,
            "the newest Gemini CLI chat of this folder (no hook has run yet)",
        )
    return None


def no_current(cwd: str) -> str:
    return f"no compactd hook has recorded one and {_tmp()}/<project>/chats has no chat of {cwd}"
