"""Reading what another program hands compactd without ever hanging on it.

compactd's short processes run inside the user's agent (Claude Code's hooks and status line
today, Codex's and Gemini CLI's next), and its servers read files the agent names. A path may
name a FIFO, a device or a directory; standard input may never be closed. Opening a FIFO for
reading blocks until a writer comes, and a read of a pipe nobody closes blocks forever; the
agent would wait for its own timeout. So (docs/safe-io.md):

- ``open_regular`` opens without blocking (``O_NONBLOCK``) and refuses anything but a regular
  file, saying what it is; ``read_regular`` reads one whole, up to a bound.
- ``read_input`` reads standard input up to a bound and a ``Deadline``; it stops early when what
  came so far is complete (an event whose sender keeps the pipe open), and refuses a directory.
- ``Watchdog`` ends the process (exit 0, one line on stderr) when the deadline passes anyway: the
  last guard, for a wait nothing else bounds.

Standard library only: the short processes that use it must start fast. Agent-neutral: the
messages name the input, never an agent.
"""

from __future__ import annotations

import os
import select
import stat
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Final

__all__ = [
    "line_from",
    "Deadline",
    "InputError",
    "NotRegularFile",
    "Watchdog",
    "is_regular_file",
    "open_regular",
    "read_input",
    "read_regular",
]

_CHUNK: Final = 64 * 1024


class Deadline:
    """A point in time (monotonic clock) a piece of work must be done by."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._at = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(0.0, self._at - time.monotonic())

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self._at


class NotRegularFile(OSError):
    """The path names something that is not a regular file: ``what`` it is ("a directory",
    "a FIFO (named pipe)", "a device", "a socket"), and ``strerror`` says so."""

    def __init__(self, what: str, path: str) -> None:
        super().__init__(22, f"it is {what}, not a regular file", path)
        self.what = what


class InputError(ValueError):
    """Standard input could not be read as one input (the message says why)."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: Path | str) -> int:
    """A read-only descriptor of the regular file at ``path``, opened without blocking.

    Raises ``NotRegularFile`` (an ``OSError`` whose ``strerror`` says what the path is) for a
    directory, FIFO, device or socket, and ``OSError`` when it cannot be opened. The
    descriptor is blocking again when returned (regular files never wait anyway).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except ValueError as exc:  # an embedded NUL
        raise OSError(22, "the path holds a NUL character", str(path)) from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(_kind(mode), str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def is_regular_file(path: Path | str) -> bool:
    """Whether ``path`` is a regular file now (``stat``, which never blocks on a FIFO)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def read_regular(path: Path | str, limit: int) -> bytes:
    """The bytes of the regular file at ``path``; ``OSError`` (``EFBIG``) past ``limit``."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise OSError(27, f"it holds more than {limit:,} bytes", str(path))
    return data


def fdopen_regular(path: Path | str) -> BinaryIO:
    """``open_regular`` as a binary file object (closed by ``with``)."""
    return os.fdopen(open_regular(path), "rb")


def read_input(
    deadline: Deadline,
    limit: int,
    complete: Callable[[bytes], bool] = lambda _data: False,
    *,
    fd: int | None = None,
    what: str = "standard input",
    text: bool = True,
) -> bytes:
    """Standard input (or ``fd``) up to its end, ``limit`` bytes and ``deadline``.

    Returns early when no more bytes are waiting and ``complete(data)`` says what came is whole
    (a sender that keeps the pipe open after its message). Raises ``InputError`` for a
    directory, more than ``limit`` bytes, a NUL byte when the input is ``text`` (JSON never
    holds one: ``/dev/zero`` is refused at its first read), or a deadline passed before the
    input was complete.
    """
    fd = sys.stdin.fileno() if fd is None else fd
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        raise InputError(f"{what} cannot be read: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{what} is a directory, not an input")
    chunks: list[bytes] = []
    size = 0
    waits = not stat.S_ISREG(mode)
    poller = select.poll() if waits else None
    if poller is not None:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while True:
        if poller is not None:
            ready = poller.poll(0)
            if not ready and complete(b"".join(chunks)):
                break
            if not ready:
                ready = poller.poll(int(deadline.remaining() * 1000) + 1)
            if not ready:
                data = b"".join(chunks)
                if complete(data):
                    return data
                raise InputError(
                    f"{what} was not closed within {deadline.seconds:.1f} s "
                    f"({size:,} bytes came, not a whole input)"
                )
        try:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
        except BlockingIOError:
            continue
        except OSError as exc:
            raise InputError(f"{what} cannot be read: {exc.strerror}") from None
        if not chunk:
            break
        if text and b"\x00" in chunk:
            raise InputError(f"{what} holds binary data (a NUL byte), not a text input")
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise InputError(f"more than {limit:,} bytes on {what}: not an input")
    return b"".join(chunks)


class Watchdog:
    """Ends the process with exit status 0 when ``seconds`` pass before ``stop``.

    ``say`` gives the one line written to stderr first. For short processes whose caller
    must never wait on them: a thread sleeps beside the work, and ``os._exit`` leaves
    without waiting for the main thread, wherever it is blocked.
    """

    def __init__(self, seconds: float, say: Callable[[], str]) -> None:
        self._stop = threading.Event()
        self._say = say
        self._thread = threading.Thread(
            target=self._run, args=(seconds,), name="compactd-watchdog", daemon=True
        )
        self._thread.start()

    def _run(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            return
        try:
            sys.stderr.write(self._say() + "\n")
            sys.stderr.flush()
        finally:
            os._exit(0)

    def stop(self) -> None:
        self._stop.set()


def line_from(fd: int, offset: int, size: int, chunk: int) -> bytes:
    """The bytes of file ``fd`` from ``offset`` to the end of the line there, or of the file at
    ``size``, read ``chunk`` bytes at a time (with ``os.pread``: no file position moves)."""
    parts: list[bytes] = []
    pos = offset
    while pos < size:
        part = os.pread(fd, chunk, pos)
        if not part:
            break
        parts.append(part)
        pos += len(part)
        if b"\n" in part:
            break
    return b"".join(parts)
