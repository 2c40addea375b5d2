"""Reading a file that another process appends to: the complete lines added since last time.

A ``Position`` says how far a file has been consumed (to the end of a line, or the whole of a
file an agent writes at once: the caller's ``complete`` says which) and keeps
the first and the last bytes consumed. ``read_new`` checks those bytes are still where they
were before it reads on from there: when they are not, or the file got shorter, the file was
replaced, truncated or rewritten, and it is read again from its start (``TailRead.reread``).
A last line without its newline is being written: it is left for the next read. Nothing here
writes the file. Blocking: callers run it in a worker thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

# How many bytes of the start and of the end of what was consumed are compared with the file
# before reading on (compactd's choice: a line or two of a transcript; two small reads).
HEAD_BYTES: Final = 1024
TAIL_BYTES: Final = 1024


@dataclass(frozen=True, slots=True)
class Position:
    """How much of a file has been consumed, and what its first and last bytes were."""

    offset: int
    head: bytes = b""
    tail: bytes = b""


def lines_end(data: bytes) -> int:
    """How much of ``data`` is complete lines: up to its last newline."""
    return data.rfind(b"\n") + 1


# How much of a file's bytes can be read now (``lines_end``, or an agent format's own rule for
# a file written whole at once: compactd.port.complete).
Complete = Callable[[bytes], int]


def position_of(data: bytes, complete: Complete = lines_end) -> Position:
    """The position after what can be read of ``data`` (a file's bytes from its start)."""
    end = complete(data)
    return Position(end, data[: min(end, HEAD_BYTES)], data[max(0, end - TAIL_BYTES) : end])


@dataclass(frozen=True, slots=True)
class TailRead:
    """What ``read_new`` found: complete lines, and the position after them."""

    data: bytes
    position: Position
    # ``data`` is the whole file from its start, not what follows the previous position.
    reread: bool


class FileTooLarge(OSError):
    """The file (or what was added to it) is larger than the caller accepts."""


def read_new(
    path: Path, since: Position | None, max_bytes: int, complete: Complete = lines_end
) -> TailRead:
    """The complete lines added to ``path`` since ``since``; the whole file when ``since`` is
    None or no longer describes the file. ``complete`` says how much of the bytes read can be
    read now (a file written whole at once is read whole, once it is)."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if since is not None and _continues(fh, size, since):
            if size - since.offset > max_bytes:
                raise FileTooLarge(f"{path}: {size - since.offset} new bytes")
            chunk = os.pread(fh.fileno(), size - since.offset, since.offset)
            chunk = chunk[: complete(chunk)]
            return TailRead(chunk, _advance(since, chunk), reread=False)
        if size > max_bytes:
            raise FileTooLarge(f"{path}: {size} bytes")
        data = fh.read(max_bytes)
        position = position_of(data, complete)
        return TailRead(data[: position.offset], position, reread=True)


def _continues(fh: BinaryIO, size: int, since: Position) -> bool:
    """Whether the file still holds what was consumed: not shorter, same first and last bytes."""
    if size < since.offset:
        return False
    fd = fh.fileno()
    if since.head and os.pread(fd, len(since.head), 0) != since.head:
        return False
    return not since.tail or (
        os.pread(fd, len(since.tail), since.offset - len(since.tail)) == since.tail
    )


def _advance(since: Position, chunk: bytes) -> Position:
    if not chunk:
        return since
    # While less than HEAD_BYTES were consumed, the head is everything consumed so far.
    head = since.head if len(since.head) >= HEAD_BYTES else (since.head + chunk)[:HEAD_BYTES]
    return Position(since.offset + len(chunk), head, (since.tail + chunk)[-TAIL_BYTES:])
