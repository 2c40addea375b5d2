"""Reading the end of a running agent's session file, cheaply and without ever writing it.

A hook or a status line runs in a short process while the agent goes on appending to its file.
It reads from the end backwards, in chunks, only as far as it needs: back to the compaction
before the latest one (the span the latest summary replaced) or to the latest response's usage,
and never more than ``MAX_TAIL_BYTES``. Only complete lines are parsed: the first line of a read
that did not reach the start of the file is cut, and a last line without its newline is still
being written (docs/claude-code.md#reading-the-transcript). The file is opened read-only and
without blocking, and only when it is a regular file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from compactd.port import AgentFormat, format_of, formats
from compactd.services.safe_io import NotRegularFile, open_regular
from compactd.transcript.model import Record

__all__ = ["MAX_TAIL_BYTES", "Tail", "TailError", "read_tail"]

# The most a short process reads of a session file: the span one compaction replaced is about
# one context window of text, far below this; a larger span is read from its end only (and the
# text handed back says so). compactd's own choice.
MAX_TAIL_BYTES: Final = 32 * 1024 * 1024
_CHUNK: Final = 1024 * 1024
# For the latest usage: a response is rarely further back than this from the end.
USAGE_TAIL_BYTES: Final = 4 * 1024 * 1024


class TailError(Exception):
    """The file cannot be read as an agent's session (the message says why, in one line)."""


@dataclass(frozen=True, slots=True)
class Tail:
    """The complete lines read from the end of a session file, parsed."""

    format: AgentFormat
    records: list[Record]
    #: whether the read reached the start of the file
    whole: bool


def _open(path: Path) -> int:
    # Without blocking: a FIFO named as a transcript must not hold a hook until its timeout
    # (services/safe_io.py).
    try:
        return open_regular(path)
    except FileNotFoundError:
        raise TailError(f"{path} does not exist") from None
    except NotRegularFile as exc:
        raise TailError(f"{path} is {exc.what}, not a transcript") from None
    except OSError as exc:
        raise TailError(f"{path} cannot be read: {exc.strerror}") from None


def _enough_for_compaction(fmt: AgentFormat | None, data: bytes) -> bool:
    """Whether ``data`` reaches back past the latest compaction to the one before it."""
    if fmt is None:
        return False
    marks = [m.start() for m in fmt.compaction_marks.finditer(data)]
    if not marks:
        return False
    boundaries = [m.start() for m in fmt.boundary_mark.finditer(data)]
    last = marks[-1]
    # The latest compaction starts at its boundary (the last one before its summary), or at
    # the summary itself when it has none.
    start = max((b for b in boundaries if b <= last), default=last)
    if start != last and data.rfind(b"\n", start, last) < 0:
        start = last
    return marks[0] < start


def read_tail(path: Path, *, need: str = "compaction", limit: int = MAX_TAIL_BYTES) -> Tail:
    """The end of the session file at ``path``, parsed.

    ``need``: ``compaction`` reads back to the compaction before the latest one (or the start);
    ``usage`` reads at most ``USAGE_TAIL_BYTES``. Raises ``TailError`` when the file is missing,
    not a file, or in no format compactd reads.
    """
    fd = _open(path)
    try:
        size = os.fstat(fd).st_size
        cap = min(limit, USAGE_TAIL_BYTES) if need == "usage" else limit
        data = b""
        pos = size
        while pos > 0 and len(data) < cap:
            step = min(_CHUNK, pos, cap - len(data))
            pos -= step
            data = os.pread(fd, step, pos) + data
            if need == "compaction" and _enough_for_compaction(_guess(data), data):
                break
    finally:
        os.close(fd)
    if b"\x00" in data[:4096]:
        raise TailError(f"{path} is binary, not a transcript")
    lines = data.split(b"\n")
    lines.pop()  # the text after the last newline: empty, or a line still being written
    if pos > 0 and lines:
        lines.pop(0)  # cut by where the read started
    found = format_of(lines)
    if found is None:
        if not any(line.strip() for line in lines):
            if pos > 0:
                raise TailError(f"{path} ends in a line longer than the {cap:,} bytes a hook reads")
            raise TailError(f"{path} holds no complete line yet")
        raise TailError(
            f"{path} is not a session file compactd reads "
            f"({' or '.join(f.name for f in formats())} JSONL)"
        )
    fmt, records = found
    return Tail(fmt, records, pos == 0)


def _guess(data: bytes) -> AgentFormat | None:
    """The format whose compaction marks appear in ``data`` (checked again on the records)."""
    for fmt in formats():
        if fmt.compaction_marks.search(data):
            return fmt
    return None
