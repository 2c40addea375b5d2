"""Transcript model: Claude Code JSONL entries and their content blocks.

A session is a list of entries in the shape Claude Code writes to its ``.jsonl`` transcripts.
The typed view (``Entry``) names the fields compactd reads; everything else in a line -- unknown
fields, unknown entry types, unknown block kinds -- is kept byte for byte in ``Record.raw`` and
written back unchanged. Parsing never raises on a bad line: ``parse_lines`` skips it and counts
it, because a transcript truncated by a crash must still open.

The content blocks live in ``transcript.blocks`` and the boundary metadata in
``transcript.metadata``; their names are re-exported here, where callers import them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from compactd.transcript.blocks import (
    KNOWN_BLOCK_TYPES,
    Block,
    DocumentBlock,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    Usage,
    block_to_builtins,
    wrap_unknown_blocks,
)
from compactd.transcript.lines import BufferLines, forget_file, read_line
from compactd.transcript.metadata import (
    BOUNDARY_SUBTYPES,
    COMPACT_BOUNDARY,
    GROUP_SIZE_FIELD,
    LEDGER_FIELD,
    MICROCOMPACT_BOUNDARY,
    CompactMetadata,
    MicrocompactMetadata,
    PreservedSegment,
    is_boundary_line,
    is_compact_boundary_line,
    without_bookkeeping,
)

__all__ = [
    "BOUNDARY_SUBTYPES",
    "Block",
    "BufferLines",
    "COMPACT_BOUNDARY",
    "CompactMetadata",
    "DocumentBlock",
    "Entry",
    "GROUP_SIZE_FIELD",
    "ImageBlock",
    "KNOWN_BLOCK_TYPES",
    "LEDGER_FIELD",
    "LineReader",
    "MICROCOMPACT_BOUNDARY",
    "Message",
    "MicrocompactMetadata",
    "ParseReport",
    "PreservedSegment",
    "Record",
    "RedactedThinkingBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "UnknownBlock",
    "Usage",
    "block_to_builtins",
    "encode_entry",
    "forget_file",
    "is_boundary_line",
    "is_compact_boundary_line",
    "line_uuid",
    "locate_all",
    "newest_first",
    "parse_lines",
    "read_line",
    "record_from_dict",
    "record_from_line",
    "transcript_timestamp",
    "without_bookkeeping",
    "wrap_unknown_blocks",
]


# Not tracked by the cycle collector, as the blocks are not (see ``transcript.blocks``).
class Entry(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True, gc=False):
    """The fields of a transcript line that compactd reads. Unknown ones live in the raw line.

    Only what compactd reads is decoded: every field here costs decoding time and memory on
    every line of every context kept in memory (a long session's is tens of thousands of lines),
    so the fields Claude Code repeats on each line for its own use (``sessionId``, ``cwd``,
    ``version``, ``requestId``...) stay in the raw line.
    """

    type: str = ""
    uuid: str | None = None
    parent_uuid: str | None = None
    timestamp: str | None = None
    is_sidechain: bool | None = None
    is_meta: bool | None = None
    is_compact_summary: bool | None = None
    is_visible_in_transcript_only: bool | None = None
    is_api_error_message: bool | None = None
    # Who wrote the line (Claude Code 2.1.332: ``local``, ``harness``, ``hook``, ...).
    row_source: str | None = None
    subtype: str | None = None
    content: Any = None
    message: Message | None = None
    attachment: dict[str, Any] | None = None
    compact_metadata: CompactMetadata | None = None
    microcompact_metadata: MicrocompactMetadata | None = None
    # What Claude Code recorded of a tool's run, beside the tool result the model saw (a file's
    # content, a command's output): often the largest part of a line, and read only for the
    # results of file reads (``core.file_state``, which decodes the part it needs). Kept as its
    # JSON text, a slice of the line that costs neither decoding nor memory (empty: none).
    tool_use_result: msgspec.Raw = msgspec.Raw()
    # What Claude Code sent for an attachment (2.1.2xx and later write it beside the payload):
    # read only to estimate the attachment (``core.tokens.estimate``), so kept as its JSON text.
    rendered: msgspec.Raw = msgspec.Raw()
    summary: str | None = None

    # -- small typed accessors used across the core ------------------------------------------

    @property
    def blocks(self) -> list[Block]:
        """The message content as blocks (a plain string becomes one text block)."""
        m = self.message
        if m is None:
            return []
        if isinstance(m.content, str):
            return [TextBlock(text=m.content)] if m.content else []
        return m.content

    @property
    def message_id(self) -> str | None:
        return self.message.id if self.message is not None else None

    @property
    def is_compact_boundary(self) -> bool:
        return self.type == "system" and self.subtype == COMPACT_BOUNDARY

    @property
    def is_microcompact_boundary(self) -> bool:
        return self.type == "system" and self.subtype == MICROCOMPACT_BOUNDARY


# Reads the ``length`` bytes at ``offset`` of one transcript: how released lines come back.
LineReader = Callable[[int, int], bytes]


class Record:
    """One transcript line: the typed view plus the exact bytes to write back.

    A record that knows where its line sits in the transcript file can be *released*: it then
    keeps only that location (and its kind), and reads and decodes the line again when asked.
    Sessions release the records a compaction took out of the context, and their ``History``
    keeps released lines as a few bytes in arrays instead of objects, so a long session's
    memory follows its context, not its whole history (the soak benchmark measures this).
    """

    __slots__ = (
        "_entry",
        "_raw",
        "_uuid",
        "kind",
        "subtype",
        "_path",
        "_offset",
        "_length",
        "_reader",
        "_api",
        "raw_tokens",
        "line",
        "__weakref__",
    )

    def __init__(self, entry: Entry, raw: bytes) -> None:
        self._entry: Entry | None = entry
        self._raw: bytes | None = raw
        self._uuid: str | None | _Unread = entry.uuid
        # Kept when released, so scans over history can skip lines without decoding them.
        self.kind: str = entry.type
        self.subtype: str | None = entry.subtype
        self._path: str | None = None
        self._offset = -1
        self._length = len(raw)
        self._reader: LineReader | None = None
        self._api: list[dict[str, Any]] | None = None
        # The unpadded token estimate of the entry, -1 until ``tokens.estimate_record_raw``
        # computes it. Like ``api_blocks``, computed once while the record is live.
        self.raw_tokens = -1
        # Position in the ``History`` that holds the record, -1 while it is in none.
        self.line = -1

    @classmethod
    def stored(
        cls,
        path: str,
        offset: int,
        length: int,
        kind: str,
        subtype: str | None,
        reader: LineReader | None = None,
    ) -> Record:
        """A released record for the line at ``offset`` in ``path``; nothing is read yet.

        ``reader`` reads the line back; without one, the file at ``path`` is read.
        """
        return cls._bare(None, _UNREAD, kind, subtype, path, offset, length, reader)

    @classmethod
    def of_buffer(cls, entry: Entry, lines: BufferLines, offset: int, length: int) -> Record:
        """A live record whose line is the ``length`` bytes at ``offset`` of ``lines``."""
        return cls._bare(entry, entry.uuid, entry.type, entry.subtype, None, offset, length, lines)

    @classmethod
    def _bare(
        cls,
        entry: Entry | None,
        uuid: str | None | _Unread,
        kind: str,
        subtype: str | None,
        path: str | None,
        offset: int,
        length: int,
        reader: LineReader | None,
    ) -> Record:
        """A record without bytes of its own: they are read at ``offset`` through ``reader``
        (or from ``path``)."""
        record = cls.__new__(cls)
        record._entry = entry
        record._raw = None
        record._uuid = uuid
        record.kind = kind
        record.subtype = subtype
        record._path = path
        record._offset = offset
        record._length = length
        record._reader = reader
        record._api = None
        record.raw_tokens = -1
        record.line = -1
        return record

    def detach(self) -> None:
        """Keep a copy of the line of its own, so that the buffer it was read from (``of_buffer``)
        can go; any other record is left as it is."""
        entry = self._entry
        if self._raw is None and entry is not None and isinstance(self._reader, BufferLines):
            self._raw = self._reader(self._offset, self._length)
            self._reader = None
            # Only the parts kept as JSON text point into the buffer (strings are decoded
            # copies): the line's ``toolUseResult`` and ``rendered``, and its calls' arguments.
            if entry.tool_use_result:
                entry.tool_use_result = entry.tool_use_result.copy()
            if entry.rendered:
                entry.rendered = entry.rendered.copy()
            content = entry.message.content if entry.message is not None else None
            if isinstance(content, list):
                for block in content:
                    if isinstance(block, ToolUseBlock):
                        block.input_json = block.input_json.copy()

    @property
    def uuid(self) -> str | None:
        value = self._uuid
        if isinstance(value, _Unread):
            found = _uuid_decoder.decode(self.raw).uuid
            value = found if isinstance(found, str) else None
            self._uuid = value
        return value

    # ``raw`` and ``entry`` read each field once: another thread may release the record between
    # a test and a second read.

    @property
    def raw(self) -> bytes:
        raw = self._raw
        if raw is not None:
            return raw
        reader = self._reader
        if reader is not None:
            return reader(self._offset, self._length)
        raw = self._raw  # ``detach`` may have run since the first look
        if raw is not None:
            return raw
        assert self._path is not None
        return read_line(self._path, self._offset, self._length)

    @property
    def entry(self) -> Entry:
        entry = self._entry
        if entry is not None:
            return entry
        # Decoded on each access and not kept: released records are history, read rarely.
        return record_from_line(self.raw)[0].entry

    def location(self) -> tuple[str, int, int] | None:
        """Where the line is: (path, offset, length), or None before it was written."""
        if self._path is None:
            return None
        return self._path, self._offset, self._length

    @property
    def released(self) -> bool:
        return self._entry is None

    def locate(self, path: str, offset: int) -> None:
        """Remember where this record's line starts in ``path`` (what ``release`` needs)."""
        if offset != self._offset:
            self.detach()  # a line read from a buffer is found there by its offset
        self._path = path
        self._offset = offset

    def release(self, reader: LineReader | None = None) -> None:
        """Drop the in-memory copy if the line can be read back from the file.

        ``reader`` is how to read it back (else the file the record was located in).
        """
        if self._path is not None:
            if reader is not None:
                self._reader = reader
            self._entry = None
            self._raw = None
            self._api = None
            self.raw_tokens = -1

    def materialize(self) -> None:
        """Keep the decoded line in memory again (the record is back in the context)."""
        if self._entry is None:
            raw = self.raw
            self._entry = record_from_line(raw)[0].entry
            self._raw = raw

    def api_blocks(self) -> list[dict[str, Any]]:
        """The message content as Messages API blocks (``block_to_builtins`` of each block).

        A live record computes them once: every request built from the context reuses them.
        The list and its dicts are shared, so callers copy before changing anything.
        """
        if self._api is not None:
            return self._api
        blocks = [block_to_builtins(b) for b in self.entry.blocks]
        if self._entry is not None:
            self._api = blocks
        return blocks

    def to_builtins(self) -> dict[str, Any]:
        value = _generic_decoder.decode(self.raw)
        assert isinstance(value, dict)
        return value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return self.raw == other.raw and self.entry == other.entry

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        state = "released" if self._entry is None else "live"
        return f"Record(uuid={self.uuid!r}, type={self.entry.type!r}, {state})"


@dataclass(slots=True)
class ParseReport:
    """What ``parse_lines`` made of a file: how many lines it read, skipped and degraded."""

    lines: int = 0
    skipped: int = 0
    degraded: int = 0
    first_error: str | None = None
    # Lines that are transcript entries: JSON objects with a ``type``.
    entries: int = 0
    # Keys of the first JSON object read that has no ``type``, to say what the file holds.
    untyped_keys: list[str] | None = None

    def describe(self) -> str:
        """What the lines were, for a person, when none of them was a transcript entry."""
        if self.lines == 0:
            return "the file has no lines"
        parts = [
            f"none of its {self.lines} lines is a transcript entry (a JSON object with a 'type')"
        ]
        if self.skipped:
            parts.append(f"{self.skipped} are not JSON objects ({self.first_error})")
        untyped = self.lines - self.skipped - self.entries
        if untyped:
            keys = ", ".join(self.untyped_keys or []) or "none"
            parts.append(f"{untyped} are objects without 'type' (the first has keys: {keys})")
        return "; ".join(parts)


class _Unread:
    """Marks a released record's uuid as not read from its line yet."""


_UNREAD: Final = _Unread()


class _UuidOnly(msgspec.Struct):
    uuid: Any = None


_uuid_decoder = msgspec.json.Decoder(_UuidOnly)
ENTRY_DECODER: Final = msgspec.json.Decoder(Entry)  # one line into its typed view
_generic_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def _entry_from_builtins(obj: dict[str, Any]) -> tuple[Entry, bool]:
    """Convert a decoded line; returns the entry and whether it had to be degraded."""
    message = obj.get("message")
    if isinstance(message, dict) and isinstance(message.get("content"), list):
        obj = {**obj, "message": {**message, "content": wrap_unknown_blocks(message["content"])}}
    if "toolUseResult" in obj:  # kept as JSON text (``Entry.tool_use_result``)
        obj = {**obj, "toolUseResult": msgspec.Raw(_encoder.encode(obj["toolUseResult"]))}
    try:
        return msgspec.convert(obj, Entry), False
    except msgspec.ValidationError:
        # Keep what can be kept: the entry's type and ids. The raw line keeps the rest.
        keep = {
            k: obj[k]
            for k in ("type", "uuid", "parentUuid", "timestamp", "sessionId")
            if isinstance(obj.get(k), str)
        }
        return msgspec.convert(keep, Entry), True


def record_from_line(line: bytes) -> tuple[Record, bool]:
    """Parse one JSONL line. Raises ``ValueError`` when it is not a JSON object."""
    try:
        return Record(ENTRY_DECODER.decode(line), line), False
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as exc:
        raise ValueError(f"invalid JSON: {exc}") from exc
    obj = _generic_decoder.decode(line)
    if not isinstance(obj, dict):
        raise ValueError("a transcript line must be a JSON object")
    entry, degraded = _entry_from_builtins(obj)
    return Record(entry, line), degraded


def line_uuid(line: bytes) -> str | None:
    """The uuid of a JSONL line, decoding nothing else (None: it has none, or is not JSON)."""
    try:
        found = _uuid_decoder.decode(line).uuid
    except msgspec.DecodeError:
        return None
    return found if isinstance(found, str) else None


def locate_all(records: Iterable[Record], path: str, offsets: Iterable[int]) -> None:
    """``Record.locate`` each record in ``path``, at its offset (one each)."""
    for record, offset in zip(records, offsets, strict=True):
        if record._offset != offset:
            record.detach()  # as in ``locate``
        record._path = path
        record._offset = offset


def record_from_dict(obj: dict[str, Any]) -> Record:
    """Build a record from an entry given as JSON (e.g. in ``session/append`` params)."""
    raw = _encoder.encode(obj)
    record, _ = record_from_line(raw)
    return record


def transcript_timestamp(at: float | None = None) -> str:
    """A transcript ``timestamp``: UTC with milliseconds, as Claude Code writes them.

    ``at`` is a POSIX time; now when omitted.
    """
    stamp = datetime.now(UTC) if at is None else datetime.fromtimestamp(at, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def encode_entry(entry: Entry) -> bytes:
    return _encoder.encode(entry)


def parse_lines(lines: Iterable[bytes], report: ParseReport | None = None) -> Iterator[Record]:
    """Yield records from JSONL lines; blank lines are ignored, corrupt ones skipped and counted."""
    rep = report if report is not None else ParseReport()
    for line in lines:
        record = parse_one(line.strip(), rep)
        if record is not None:
            yield record


def newest_first(data: bytes, containing: bytes = b"") -> Iterator[Entry]:
    """The entries of a whole file's bytes from the last line back, lazily.

    Only lines holding ``containing`` are parsed (a cheap filter for a search that usually
    ends near the end of the file); corrupt lines are passed over.
    """
    end = len(data)
    while end > 0:
        start = data.rfind(b"\n", 0, end) + 1
        line = data[start:end].strip()
        end = start - 1
        if not line or containing not in line:
            continue
        try:
            record, _ = record_from_line(line)
        except ValueError:
            continue
        yield record.entry


def parse_one(stripped: bytes, rep: ParseReport) -> Record | None:
    if not stripped:
        return None
    rep.lines += 1
    try:
        record, degraded = record_from_line(stripped)
    except ValueError as exc:
        rep.skipped += 1
        if rep.first_error is None:
            rep.first_error = f"line {rep.lines}: {exc}"
        return None
    if degraded:
        rep.degraded += 1
    if record.entry.type:
        rep.entries += 1
    else:
        note_untyped(stripped, rep)
    return record


def note_untyped(line: bytes, rep: ParseReport) -> None:
    """Keep the keys of the first object without a ``type``, to say what the file holds."""
    if rep.untyped_keys is None:
        obj = _generic_decoder.decode(line)
        rep.untyped_keys = [str(k)[:40] for k in list(obj)[:8]] if isinstance(obj, dict) else []
