"""What can go wrong with a recall index (docs/recall.md#damage): the errors it reports, what
counts as damage rather than a lock, and the removal of a damaged index once no process has it
open (an exclusive ``flock`` of its lock file, which every process holds shared while it has
the index open)."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from pathlib import Path
from typing import Final

from compactd.services.safe_io import Deadline

__all__ = [
    "Damaged",
    "GARBLED_TEXT",
    "IndexBusy",
    "IndexUnusable",
    "RecallIndexError",
    "SQLITE_BUSY",
    "SQLITE_CORRUPT",
    "SQLITE_ERROR",
    "SQLITE_LOCKED",
    "SQLITE_NOTADB",
    "TranscriptUnreadable",
    "flock",
    "inode_of",
    "is_busy",
    "is_damage",
    "lock_path",
    "remove_damaged",
    "result_code",
    "unusable",
]

# SQLite's primary result codes (the low byte of an extended code).
SQLITE_BUSY: Final = 5
SQLITE_LOCKED: Final = 6
SQLITE_CORRUPT: Final = 11
SQLITE_NOTADB: Final = 26
SQLITE_ERROR: Final = 1
# What Python's sqlite3 says when a stored text is not UTF-8 any more: on its way to the
# ``casefold`` function (which never raises on text compactd wrote) or to a row.
GARBLED_TEXT: Final = ("user-defined function raised exception", "Could not decode to UTF-8")


class RecallIndexError(Exception):
    """The index could not answer; the message says why in one line."""


class TranscriptUnreadable(RecallIndexError):
    """The transcript cannot be read (missing, not a regular file, no permission)."""


class IndexBusy(RecallIndexError):
    """Another process holds the index (its write lock, or damaged files it still has open)
    past the caller's deadline, and there is nothing indexed to answer from meanwhile."""


class IndexUnusable(RecallIndexError):
    """The index cannot be opened or written for a reason a rebuild does not fix (its path is a
    folder, the disk is full or read-only)."""


class Damaged(Exception):
    """The index is damaged: SQLite says so, or it holds values compactd never writes."""


def result_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def is_busy(exc: sqlite3.Error) -> bool:
    return result_code(exc) in (SQLITE_BUSY, SQLITE_LOCKED)


def is_damage(exc: sqlite3.Error) -> bool:
    return result_code(exc) in (SQLITE_CORRUPT, SQLITE_NOTADB)


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def flock(fd: int, mode: int, deadline: Deadline | None) -> bool:
    """Take ``mode`` on ``fd``, trying until ``deadline`` (once without one); whether it was."""
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if deadline is None or deadline.expired:
                return False
            time.sleep(0.02)


def inode_of(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def unusable(path: Path, exc: BaseException) -> str:
    """Why the index at ``path`` cannot be used, in words a person can act on."""
    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc)
        where = exc.filename or path
        return f"the recall index {path} cannot be used: {where}: {reason}"
    return f"the recall index {path} cannot be used: {exc}"


def remove_damaged(path: Path, inode: int | None, deadline: Deadline) -> None:
    """Remove the damaged index at ``path`` (and its WAL files) once no process has it open.

    Waits for the exclusive lock until ``deadline`` (``IndexBusy`` past it). A file that is no
    longer the one found damaged (``inode``: another process rebuilt it meanwhile) stays.
    """
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        if not flock(fd, fcntl.LOCK_EX, deadline):
            raise IndexBusy(
                f"the recall index {path} is damaged and another process still has it open; "
                "it is built again once that process lets go: ask again in a moment"
            )
        if inode_of(path) != inode:
            return
        for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            stale.unlink(missing_ok=True)
    finally:
        os.close(fd)  # releases the lock
