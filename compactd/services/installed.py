"""What an agent's ``install`` wrote into the agent's own files, kept so that ``uninstall``
leaves them exactly as they were (docs/agents.md#install).

For each file an install changes, compactd keeps under its data dir
(``<agent>/installed/<key>.json``) the file's bytes from before its first install (or that there
was no file, and whether its folder existed) and a digest of what it wrote last. Uninstall puts
the old bytes back while the file is still as install left it; otherwise the agent takes out
only its own entries. Files are written whole in one rename, through a symlink to the file it
names (a dotfiles checkout stays linked).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path

import msgspec

__all__ = [
    "InstallError",
    "Installed",
    "add_install_commands",
    "read_existing",
    "left_as_written",
    "only",
    "record_path",
    "remember",
    "undo",
    "write_file",
]


class InstallError(Exception):
    """An agent's install or uninstall changed nothing; the message says why."""


def read_existing(path: Path) -> bytes | None:
    """The bytes of an agent's file an install edits; None when there is none yet. A folder in
    its place, or a file that cannot be read, is refused by name (``InstallError``)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise InstallError(f"{path} is a directory; nothing was changed") from None
    except OSError as exc:
        raise InstallError(f"{path} cannot be read ({exc.strerror}); nothing was changed") from None


class Installed(msgspec.Struct, kw_only=True):
    path: str
    original: bytes | None
    written: str  # sha256 of the bytes compactd wrote
    # Whether the file's folder did not exist before compactd's first install.
    made_folder: bool = False


def record_path(data_dir: Path, agent: str, path: Path) -> Path:
    key = hashlib.sha256(str(path.absolute()).encode()).hexdigest()[:24]
    return data_dir / agent / "installed" / f"{key}.json"


def _read(path: Path) -> Installed | None:
    try:
        return msgspec.json.decode(path.read_bytes(), type=Installed)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def write_file(path: Path, data: bytes | None) -> None:
    """Write ``path`` whole in one rename (through a symlink to the file it names), keeping its
    mode; None removes it (the file a symlink names: the link stays)."""
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    if data is None:
        target.unlink(missing_ok=True)  # a link stays as it was
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_bytes(data)
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remember(data_dir: Path, agent: str, path: Path, before: bytes | None, new: bytes) -> None:
    """Write ``new`` to ``path``, keeping what it held before compactd's first install."""
    record = record_path(data_dir, agent, path)
    saved = _read(record)
    if saved is None:  # the bytes from before compactd's first install are kept
        saved = Installed(
            path=str(path), original=before, written="", made_folder=not path.parent.exists()
        )
    saved.written = hashlib.sha256(new).hexdigest()
    write_file(record, msgspec.json.encode(saved))
    write_file(path, new)


def left_as_written(data_dir: Path, agent: str, path: Path, raw: bytes | None) -> Installed | None:
    """What install kept for ``path`` when the file (``raw``) is still as it wrote it."""
    record = _read(record_path(data_dir, agent, path))
    digest = hashlib.sha256(raw).hexdigest() if raw is not None else None
    return record if record is not None and digest == record.written else None


def only(folder: Path, files: set[Path]) -> bool:
    """Whether ``folder`` holds nothing but ``files``."""
    try:
        return all(entry in files for entry in folder.iterdir())
    except OSError:
        return False


def undo(
    data_dir: Path,
    agent: str,
    raws: Mapping[Path, bytes | None],
    strip: Callable[[Path, bytes], bytes | None],
    *,
    dry_run: bool,
) -> tuple[dict[Path, bytes | None], list[str]]:
    """Take an install out of the files ``raws`` (each file's bytes now, None: none): a file
    still as install left it gets its bytes from before (a file it created is removed, and a
    folder it created too once nothing else is in it); another gets ``strip(path, raw)``, its
    bytes without compactd's entries (None: nothing of compactd's in it). The new bytes of each
    file changed (None: removed) and the changes in words; nothing is written on ``dry_run``."""
    writes: dict[Path, bytes | None] = {}
    changes: list[str] = []
    folders: list[Path] = []
    for path, raw in raws.items():
        record = left_as_written(data_dir, agent, path, raw)
        if record is not None:
            writes[path] = record.original
            changes.append(f"{path}: " + ("removed" if record.original is None else "restored"))
            if record.original is None and record.made_folder:
                folders.append(path.parent)
        elif raw is not None:
            new = strip(path, raw)
            if new is not None:
                writes[path] = new
                changes.append(f"{path}: compactd's entries taken out")
    removed = {p for p, content in writes.items() if content is None}
    # A folder install created goes only when the files it removes are all that is in it.
    folders = [f for f in dict.fromkeys(folders) if only(f, removed)]
    changes += [f"{f}: removed (empty)" for f in folders]
    if not dry_run:
        for path, content in writes.items():
            write_file(path, content)
        for path in raws:
            record_path(data_dir, agent, path).unlink(missing_ok=True)
        for folder in folders:
            try:
                folder.rmdir()
            except OSError:  # something appeared in it meanwhile: it stays
                pass
    return writes, changes


def add_install_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    *,
    files: str,
    scope_help: str,
    warning_help: str,
) -> None:
    """``install`` and ``uninstall`` with the flags every agent's have: ``--scope`` (user or
    project, ``scope_help`` saying where each goes), ``--dry-run``, ``--project``,
    ``--data-dir``, and for install ``--no-threshold-warning``. ``files``: what they edit."""
    for name, what in (("install", "put compactd into"), ("uninstall", "take compactd out of")):
        cmd = sub.add_parser(name, help=f"{what} {files}")
        cmd.add_argument("--scope", choices=("user", "project"), default="user", help=scope_help)
        cmd.add_argument(
            "--dry-run", action="store_true", help="say what would change, change nothing"
        )
        cmd.add_argument("--project", default=".", help="the project folder (default: here)")
        cmd.add_argument("--data-dir", help="compactd's data dir (default: the user data dir)")
        if name == "install":
            cmd.add_argument("--no-threshold-warning", action="store_true", help=warning_help)
