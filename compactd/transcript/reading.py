"""A whole file's bytes read into records in one pass (an import, a load, a parse of a buffer).

``read_buffer`` is the loop every whole read goes through; ``parse_buffer`` is its plain form.
The line format itself (``Entry``, ``Record``, one line's decoding) is ``transcript.model``'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import msgspec

from compactd.transcript.lines import BufferLines
from compactd.transcript.model import (
    ENTRY_DECODER,
    ParseReport,
    Record,
    is_boundary_line,
    note_untyped,
    parse_one,
)

__all__ = ["ReadBuffer", "parse_buffer", "read_buffer"]


def parse_buffer(data: bytes, report: ParseReport | None = None) -> Iterator[tuple[int, Record]]:
    """Like ``parse_lines`` over a whole file's bytes, also yielding where each line starts."""
    parsed = read_buffer(data, report)
    return zip(parsed.starts, parsed.records, strict=True)


@dataclass(slots=True)
class ReadBuffer:
    """A whole file's bytes read as records (``read_buffer``), with what a ``History`` of them
    needs beside each, gathered while each line was at hand."""

    records: list[Record]
    # Where each record's line starts: in the bytes read (past any leading blanks), or, read
    # ``packed``, in the lines written back to back, each with its newline.
    starts: list[int]
    # The length of each record's line, and its uuid.
    lengths: list[int]
    uuids: list[str | None]
    # Which records are compact or microcompact boundaries (indices into ``records``).
    boundaries: list[int]
    # The records' lines written back to back, each with its newline, are the bytes read
    # exactly: no line was blank, skipped or stripped, and the last one ended with a newline.
    verbatim: bool


def read_buffer(
    data: bytes,
    report: ParseReport | None = None,
    *,
    packed: bool = False,
    shared: bool = False,
) -> ReadBuffer:
    """Every line of a whole file's bytes as a record, in one pass (what an import and a load
    read). Blank lines are ignored, corrupt ones skipped and counted, as by ``parse_lines``.

    One loop with the common case inline: a line that decodes into an ``Entry`` at once (almost
    all of them) costs the decoding, one ``Record`` and a few appends; any other line takes
    ``_parse_one``'s way. The lines are cut with ``find`` rather than ``split``, so the file's
    bytes are never held twice as a list of all its lines.

    ``shared``: a line that is one JSON object as it stands (``{`` to ``}``, nothing around it)
    is decoded where it lies and its record reads it from ``data`` (``Record.of_buffer``), which
    the records then keep alive in place of a copy of each line. For records that are located
    where they were read (``Record.locate``): a record located elsewhere takes a copy.
    """
    rep = report if report is not None else ParseReport()
    out = ReadBuffer([], [], [], [], [], not data or data.endswith(b"\n"))
    keep, start, length, name = (
        out.records.append,
        out.starts.append,
        out.lengths.append,
        out.uuids.append,
    )
    decode = ENTRY_DECODER.decode
    find = data.find
    view = memoryview(data) if shared else None
    lines = BufferLines(data) if shared else None
    of_buffer = Record.of_buffer
    written = 0  # where the next line starts, written back to back
    pos = 0
    size = len(data)
    while pos < size:
        end = find(b"\n", pos)
        if end < 0:
            end = size
        at = pos
        pos = end + 1
        text: bytes | memoryview
        if view is not None and end > at and data[at] == _OPEN and data[end - 1] == _CLOSE:
            text = view[at:end]  # decoded where it lies
        else:
            line = data[at:end]
            text = line.strip()
            if text is not line or not line:  # ``strip`` gives the same object when it can
                out.verbatim = False
                if not text:
                    continue
                at += len(line) - len(line.lstrip())
        size_of = len(text)
        try:
            entry = decode(text)
        except (msgspec.ValidationError, msgspec.DecodeError):
            record = parse_one(bytes(text), rep)
            if record is None:
                out.verbatim = False
                continue
            entry = record.entry
        else:
            rep.lines += 1
            if isinstance(text, bytes):
                record = Record(entry, text)
            else:
                assert lines is not None
                record = of_buffer(entry, lines, at, size_of)
            if entry.type:
                rep.entries += 1
            else:
                note_untyped(bytes(text), rep)
        if entry.subtype is not None and is_boundary_line(entry.type, entry.subtype):
            out.boundaries.append(len(out.records))
        keep(record)
        name(entry.uuid)
        length(size_of)
        if packed:
            start(written)
            written += size_of + 1
        else:
            start(at)
    return out


_OPEN: Final = ord("{")
_CLOSE: Final = ord("}")
