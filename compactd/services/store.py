"""Durable storage of sessions: one append-only JSONL transcript and a small meta file each.

Layout under the data dir (the store is the one place that names these files)::

    sessions/<sessionId>/transcript.jsonl   append-only, Claude Code's line shape
    sessions/<sessionId>/meta.json          how the session was opened (atomic replace)
    sessions/<sessionId>/microcompact.json  cached-microcompact state (atomic replace)
    sessions/<sessionId>/notes.md           session-memory notes (atomic replace)
    sessions/<sessionId>/notes.state.json   what the notes were extracted from
    sessions/<sessionId>/prepared.json      a summary prepared in the background, with its
                                            snapshot and fingerprint (atomic replace)
    sessions/<sessionId>/owner.lock         locked by the daemon that owns the session, names it
    sessions/<sessionId>/owner.probe        locked by the owner too; what ``session/list`` tests

Durability rules: an append returns only after its bytes are written and fsynced. A group of
lines that must appear together (a compaction: boundary, summary, kept copies, attachments) is
written with one ``write`` call and its boundary carries the group size in
``compactdGroupSize``; on load, a group cut short by a crash is removed, so a half-written
compaction is never visible. A torn last line (no trailing newline) was never acknowledged and
is truncated on load. Only the session's owner (the process holding its lock, see
``services/ownership.py``) repairs a transcript or writes any file of it; a read-only load makes
the same repairs in memory and leaves every byte as it found it.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any, Final

import msgspec

from compactd.services import ownership
from compactd.transcript.history import History, boundary_indices
from compactd.transcript.model import (
    COMPACT_BOUNDARY,
    GROUP_SIZE_FIELD,
    ParseReport,
    Record,
    forget_file,
    line_uuid,
    locate_all,
    read_line,
    record_from_dict,
)
from compactd.transcript.reading import read_buffer
from compactd.transcript.summaries import hook_summaries, marked_summary

# Times ``Store.lock`` creates a session's directory again when a failed creation removed it
# while this process was locking it; more in a row would mean a loop of failing creations.
_LOCK_ATTEMPTS = 5

# A line's length plus its newline.
_PLUS_NEWLINE: Final = (1).__add__

# Largest transcript ``session/open`` imports or a followed transcript is read as (compactd's
# choice). Real sessions reach tens of MB; this guards the daemon's memory against a wrong path
# (a disk image, a log file).
MAX_IMPORT_BYTES = 1 << 30


# Session ids become directory names: keep them to a conservative alphabet.
_SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def valid_session_id(session_id: str) -> bool:
    return bool(_SESSION_ID_RE.match(session_id)) and ".." not in session_id


class SessionMeta(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    session_id: str
    cwd: str
    model: str
    context_window: int | None = None
    max_output_tokens: int | None = None
    # The session's absolute auto-compact level (docs/thresholds.md#absolute-level).
    auto_compact_tokens: int | None = None
    agent_kind: str = "main"
    cache_safe_params: dict[str, Any] | None = None
    api_context_management: bool | None = None
    imported_from: str | None = None
    created_at: float = 0.0
    # ``imported_from`` is followed as it grows (docs/follow.md): a reopen resumes following.
    follow: bool = False
    # No model was given: a followed session takes the model its transcript's latest response
    # names, as an import of the file would.
    follow_model: bool = False


@dataclass(slots=True)
class LoadedTranscript:
    records: History
    report: ParseReport = field(default_factory=ParseReport)
    truncated_bytes: int = 0


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _drop_cached(fd: int) -> None:
    """Let the kernel drop its cached pages of a file just fsynced (they are clean), where it
    takes the hint."""
    advise = getattr(os, "posix_fadvise", None)  # not on macOS or Windows
    if advise is not None:
        try:
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass


def atomic_write(path: Path, data: bytes, *, keep_cached: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file.

    ``keep_cached=False`` for bytes the daemon holds in memory already: once they are on disk,
    the kernel's cached copy of the file is let go (docs/durability.md#how-fast).
    """
    forget_file(str(path))  # records read history through a descriptor of the old file
    # Unique per writer: two processes replacing the same file must not share a temporary
    # file, or one's rename finds it gone (docs/durability.md#ownership).
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            if not keep_cached:
                _drop_cached(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


class Store:
    """Files of all sessions under one data dir. Blocking I/O: call from a worker thread."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.sessions_dir = data_dir / "sessions"
        self.sessions_dir.mkdir(parents=True, exist_ok=True)
        # The folder of each session id asked for: an open asks some ten times.
        self._dirs: dict[str, Path] = {}

    def session_dir(self, session_id: str) -> Path:
        found = self._dirs.get(session_id)
        if found is not None:
            return found
        if not valid_session_id(session_id):
            raise ValueError(f"invalid session id {session_id!r}")
        found = self._dirs[session_id] = self.sessions_dir / session_id
        return found

    def transcript_path(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "transcript.jsonl"

    def micro_state_path(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "microcompact.json"

    def notes_path(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "notes.md"

    def notes_state_path(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "notes.state.json"

    def prepared_path(self, session_id: str) -> Path:
        """A summary prepared in the background (docs/background.md#durable)."""
        return self.session_dir(session_id) / "prepared.json"

    def exists(self, session_id: str) -> bool:
        return (self.session_dir(session_id) / "meta.json").is_file()

    def list_ids(self) -> list[str]:
        ids = []
        for child in sorted(self.sessions_dir.iterdir()):
            if valid_session_id(child.name) and (child / "meta.json").is_file():
                ids.append(child.name)
        return ids

    # -- meta ---------------------------------------------------------------------------------

    def write_meta(self, meta: SessionMeta) -> None:
        self._make_dir(meta.session_id)
        atomic_write(self.session_dir(meta.session_id) / "meta.json", msgspec.json.encode(meta))

    def discard(self, session_id: str) -> None:
        """Remove the directory of a session that never got its meta file (a failed creation).

        Call it holding the session's lock: a process that locks the removed lock file next
        finds it gone and locks the new one (``ownership.acquire``).
        """
        d = self.session_dir(session_id)
        if not (d / "meta.json").exists():
            shutil.rmtree(d, ignore_errors=True)

    # -- ownership ----------------------------------------------------------------------------

    def lock(self, session_id: str) -> ownership.OwnerLock:
        """Own the session (its directory is created): ``ownership.SessionHeld`` if held."""
        for _ in range(_LOCK_ATTEMPTS - 1):
            self._make_dir(session_id)
            try:
                return ownership.acquire(self.session_dir(session_id))
            except FileNotFoundError:
                continue  # a failed creation removed the directory meanwhile: again
        self._make_dir(session_id)
        return ownership.acquire(self.session_dir(session_id))

    def holder(self, session_id: str) -> ownership.Holder | None:
        """Which process holds the session, if any (a probe: takes nothing, creates nothing)."""
        return ownership.probe(self.session_dir(session_id))

    def _make_dir(self, session_id: str) -> None:
        d = self.session_dir(session_id)
        if d.is_dir():
            return
        d.mkdir(parents=True, exist_ok=True)
        _fsync_dir(self.sessions_dir)

    def read_meta(self, session_id: str) -> SessionMeta:
        data = (self.session_dir(session_id) / "meta.json").read_bytes()
        return msgspec.json.decode(data, type=SessionMeta)

    # -- transcript ---------------------------------------------------------------------------

    def create_transcript(self, session_id: str, data: bytes = b"") -> LoadedTranscript:
        """Create the transcript durably, from another transcript's bytes when importing one.

        Only the lines that parse are written, back to back; the report counts the others.
        The records come back located in the new file, read the way ``load`` reads them.
        """
        self._make_dir(session_id)
        path = self.transcript_path(session_id)
        report = ParseReport()
        chunks: list[bytes] = []
        records = _history_of(data, str(path), report, written=chunks)
        # The lines are in memory now: the copy on disk is for a crash and for a later load.
        atomic_write(path, b"".join(chunks), keep_cached=False)
        return LoadedTranscript(records=records, report=report)

    def append(self, session_id: str, records: Sequence[Record]) -> None:
        """Append records' lines with one write and fsync before returning."""
        if not records:
            return
        payload = b"".join(r.raw + b"\n" for r in records)
        path = self.transcript_path(session_id)
        with open(path, "ab") as fh:
            start = fh.seek(0, os.SEEK_END)
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        _locate(records, path, start)

    def lines_without_uuid(self, session_id: str) -> Counter[bytes]:
        """The session's transcript lines that have no uuid, counted (a followed transcript
        read again is matched against them: docs/follow.md#replaced)."""
        data = self.transcript_path(session_id).read_bytes()
        found: Counter[bytes] = Counter()
        pos = 0
        while pos < len(data):
            end = data.find(b"\n", pos)
            end = len(data) if end < 0 else end
            line = data[pos:end].strip()
            pos = end + 1
            # Only a line naming a uuid field is decoded (to see whether it is its own).
            if line and (b'"uuid"' not in line or line_uuid(line) is None):
                found[line] += 1
        return found

    def load(self, session_id: str, *, repair: bool = True) -> LoadedTranscript:
        """Read a transcript, without its torn tail or a compaction group cut short.

        With ``repair`` (the owner's load) those bytes are removed from the file too; without
        it (a read-only load, or any process that does not hold the lock) only from memory:
        what looks torn may be the owner's append in progress.
        """
        path = self.transcript_path(session_id)
        if not path.exists():
            return LoadedTranscript(records=History())
        data = path.read_bytes()
        truncated = 0
        # A torn tail was never acknowledged: drop it so later appends start on a clean line.
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            truncated = len(data) - cut
            data = data[:cut]
            if repair:
                with open(path, "r+b") as fh:
                    fh.truncate(cut)
                    fh.flush()
                    os.fsync(fh.fileno())
        report = ParseReport()
        records = _history_of(data, str(path), report)
        cut_at = _incomplete_group_start(records)
        if cut_at is not None and not repair:
            # The file's lines before the group, located where they are in the file.
            where = records[cut_at].location()
            end = where[1] if where is not None else len(data)
            truncated += len(data) - end
            records = _history_of(data[:end], str(path), ParseReport())
        elif cut_at is not None:
            new_data = b"".join(records.raw_line(i) + b"\n" for i in range(cut_at))
            truncated += len(data) - len(new_data)
            atomic_write(path, new_data)
            # Offsets changed with the rewrite (skipped lines are gone too): read it again.
            records = _history_of(new_data, str(path), ParseReport())
        return LoadedTranscript(records=records, report=report, truncated_bytes=truncated)


def _history_of(
    data: bytes, path: str, report: ParseReport, *, written: list[bytes] | None = None
) -> History:
    """The records of a transcript's bytes, located in ``path``.

    With ``written``, the bytes to write for an import are left there: the lines that parse,
    back to back, where the records are located (the bytes read themselves when they are just
    that, ``ReadBuffer.verbatim``). Otherwise the records are located where they are in
    ``data``. Only the lines from the last compaction boundary on stay decoded (the lines
    before it are released, so a long session is never held decoded whole); ``Session.rebuild``
    brings back what its context needs (entries a partial compaction kept, the view an undo
    restores).
    """
    parsed = read_buffer(data, report, packed=written is not None, shared=True)
    records = parsed.records
    offsets, lengths = parsed.starts, parsed.lengths
    if written is not None:
        # Two changes on the way (docs/durability.md#imported-transcripts): a boundary's group
        # size is dropped (only it is ever read, ``_incomplete_group_start``), and the summary of
        # a compaction a plugin's hook answered gets its mark. A file with neither is copied as
        # it is.
        summaries = hook_summaries(records)
        if summaries or any(GROUP_SIZE_FIELD.encode() in records[i].raw for i in parsed.boundaries):
            for i in summaries:
                records[i] = marked_summary(records[i])
            records = [as_imported(r) for r in records]
            lengths = [len(r.raw) for r in records]
            # Back to back: each line starts one byte (a newline) after the previous one ends.
            offsets = list(accumulate(map(_PLUS_NEWLINE, lengths[:-1]), initial=0))[: len(lengths)]
            written.extend(r.raw + b"\n" for r in records)
        elif parsed.verbatim:
            written.append(data)
        else:
            written.extend(r.raw + b"\n" for r in records)
    locate_all(records, path, offsets)
    # The history reads released lines back through the store's descriptor of the file.
    history = History(reader=functools.partial(read_line, path))
    history.adopt(records, path, offsets, lengths, parsed.uuids, parsed.boundaries)
    last = next(
        (i for i in reversed(parsed.boundaries) if records[i].subtype == COMPACT_BOUNDARY), None
    )
    if last is not None:
        history.retain(records[last:])
    return history


def as_imported(record: Record) -> Record:
    """A line of another transcript as an import (or a followed transcript) copies it.

    The imported file was written whole: a group size from the file it came from would let a
    later load cut acknowledged lines, so it is dropped; everything else is kept byte for byte.
    (The agent's reader has made its lines compactd's before: docs/agents.md#reading.)
    """
    if GROUP_SIZE_FIELD.encode() not in record.raw:
        return record
    obj = record.to_builtins()
    obj.pop(GROUP_SIZE_FIELD, None)
    return record_from_dict(obj)


def _locate(records: Sequence[Record], path: Path, offset: int) -> None:
    """Tell records written back to back from ``offset`` where their lines are."""
    for record in records:
        record.locate(str(path), offset)
        offset += len(record.raw) + 1


def _incomplete_group_start(records: History) -> int | None:
    """Index of a trailing compaction group that a crash cut short, if any.

    Only compaction boundaries carry a group size, so only they are looked at: walking every
    line back would read each released system line of a long history from the file again.
    """
    for i in reversed(boundary_indices(records)):
        size = _group_size(records[i])
        if size is None:
            continue
        return i if len(records) - i < size else None
    return None


def _group_size(record: Record) -> int | None:
    if GROUP_SIZE_FIELD.encode() not in record.raw:
        return None
    value = record.to_builtins().get(GROUP_SIZE_FIELD)
    return value if isinstance(value, int) and value > 0 else None
