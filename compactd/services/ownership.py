"""OS locks that make one process the owner of a session directory, and a probe that names it.

Two files in the session directory take part (docs/durability.md#ownership). The owner holds an
exclusive lock on ``owner.lock`` for as long as it has the session open and writes who it is
into that file (pid, host, since when); a second process that tries the same lock is refused at
once and reads the record to name the holder. The owner also holds an exclusive lock on
``owner.probe``, which is what a probe (``session/list``) tests with a shared, non-blocking lock
and drops at once: a probe never touches ``owner.lock``, so it can never make an opener believe
the session is held. The locks are the operating system's (``flock`` on POSIX, ``msvcrt.locking``
on Windows), so a killed process's locks go with it and a stale record is simply overwritten by
the next owner. The lock files stay for the life of the session: only a creation that failed
removes its directory, while holding the lock, and a process that locked the removed file
notices (``acquire`` checks the file it locked is still the one at the path) and tries again.
Blocking I/O only; the policy lives in ``compactd.app``.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import msgspec

OWNER_FILE = "owner.lock"
PROBE_FILE = "owner.probe"

# How long a refused opener waits for the holder's record to appear (a holder writes it right
# after taking the lock, so only an opener racing that moment waits). compactd's own bound.
RECORD_WAIT_SECONDS = 0.5
RECORD_POLL_SECONDS = 0.005
# Largest holder record read back; a real one is under 200 bytes.
MAX_RECORD_BYTES = 4096


class Holder(msgspec.Struct, frozen=True, kw_only=True):
    """Who holds a session: what a refused opener and ``session/list`` report."""

    pid: int | None = None
    host: str | None = None
    since: float | None = None  # seconds since the epoch when it took the session


def this_process() -> Holder:
    return Holder(pid=os.getpid(), host=socket.gethostname(), since=time.time())


class SessionHeld(Exception):
    """Another process holds the session's lock."""

    def __init__(self, holder: Holder) -> None:
        super().__init__(f"held by pid {holder.pid}")
        self.holder = holder


if sys.platform == "win32":
    import msvcrt

    # Windows locks byte ranges and forbids reading a locked range: lock one byte far past the
    # record so the record stays readable. Locking past the end of a file is allowed.
    _LOCK_OFFSET = 1 << 30

    def _try_lock(fd: int, *, shared: bool) -> bool:
        # msvcrt has no shared lock: a probe takes the exclusive one for an instant, and the
        # owner's own wait for ``owner.probe`` retries (``_lock_wait``).
        os.lseek(fd, _LOCK_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _lock_wait(fd: int) -> None:
        while not _try_lock(fd, shared=False):
            time.sleep(RECORD_POLL_SECONDS)

    def _unlock(fd: int) -> None:
        os.lseek(fd, _LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _try_lock(fd: int, *, shared: bool) -> bool:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _lock_wait(fd: int) -> None:
        # Only probes ever hold ``owner.probe`` besides its owner, each for an instant.
        fcntl.flock(fd, fcntl.LOCK_EX)

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


class OwnerLock:
    """A session directory owned by this process until ``release``."""

    def __init__(self, directory: Path, owner_fd: int, probe_fd: int, holder: Holder) -> None:
        self.directory = directory
        self.holder = holder
        self._owner_fd: int | None = owner_fd
        self._probe_fd: int | None = probe_fd

    @property
    def held(self) -> bool:
        return self._owner_fd is not None

    def release(self) -> None:
        """Let the session go: clear the record, then drop both locks. Idempotent."""
        owner_fd, probe_fd = self._owner_fd, self._probe_fd
        self._owner_fd = self._probe_fd = None
        if owner_fd is None:
            return
        try:
            os.ftruncate(owner_fd, 0)  # no record left that names a process gone from it
        except OSError:
            pass
        for fd in (probe_fd, owner_fd):
            if fd is None:
                continue
            try:
                _unlock(fd)
            except OSError:
                pass
            os.close(fd)  # closing drops the lock anyway


def acquire(directory: Path, holder: Holder | None = None) -> OwnerLock:
    """Take the session in ``directory``; ``SessionHeld`` if another process has it.

    ``FileNotFoundError`` if the directory is missing, or was removed while this call locked
    a file in it (a creation that failed removes its directory while holding the lock): the
    caller creates the directory again and retries, and so locks the file that is there now.
    """
    me = holder or this_process()
    path = directory / OWNER_FILE
    owner_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not _try_lock(owner_fd, shared=False):
            raise SessionHeld(_wait_for_record(owner_fd))
        if not _same_file(owner_fd, path):
            raise FileNotFoundError(f"{path} was removed while it was being locked")
        probe_fd = os.open(directory / PROBE_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _lock_wait(probe_fd)
            _write_record(owner_fd, me)
        except BaseException:
            os.close(probe_fd)
            raise
    except BaseException:
        os.close(owner_fd)  # also drops the owner lock if it was taken
        raise
    return OwnerLock(directory, owner_fd, probe_fd, me)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (st.st_dev, st.st_ino)


def probe(directory: Path) -> Holder | None:
    """Who holds the session in ``directory``, or None; never blocks and never creates a file.

    Tests ``owner.probe`` only (a shared lock dropped at once), so it never stands in the way of
    a process taking the session. A session this process holds reads as held too.
    """
    try:
        fd = os.open(directory / PROBE_FILE, os.O_RDONLY)
    except OSError:
        return None  # never owned since locks were introduced
    try:
        if _try_lock(fd, shared=True):
            _unlock(fd)
            return None
    finally:
        os.close(fd)
    return read_record(directory)


def read_record(directory: Path) -> Holder:
    """The holder record in ``directory`` (fields None if absent or unreadable)."""
    try:
        fd = os.open(directory / OWNER_FILE, os.O_RDONLY)
    except OSError:
        return Holder()
    try:
        return _decode(_read_all(fd))
    finally:
        os.close(fd)


def _wait_for_record(fd: int) -> Holder:
    """The record of the process that holds ``fd``'s lock, waiting briefly for it to be written."""
    deadline = time.monotonic() + RECORD_WAIT_SECONDS
    while True:
        record = _decode(_read_all(fd))
        if record.pid is not None or time.monotonic() >= deadline:
            return record
        time.sleep(RECORD_POLL_SECONDS)


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, MAX_RECORD_BYTES)


def _decode(data: bytes) -> Holder:
    try:
        return msgspec.json.decode(data, type=Holder)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return Holder()


def _write_record(fd: int, holder: Holder) -> None:
    data = msgspec.json.encode(holder)
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, data)
