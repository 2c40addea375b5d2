"""The full-text index recall searches: SQLite FTS5 with BM25 ranking, one per transcript,
kept under compactd's data dir and brought up to date before each search (docs/recall.md#index).

Every entry of the transcript with words in it (a person's message, the assistant's text, each
tool call with its inputs, each tool result, summaries) becomes a row: its original text for
display and, in the FTS5 table, the same text as ``core.recall_words.fold`` makes it (so that
"dont" finds "don't"), tokenized by ``unicode61`` and stemmed by ``porter`` ("trying" finds
"try"). Paths a tool call names or writes go in a side table for the revision rule.

Incremental: the index remembers how many bytes of the transcript it has read, and the hash
of its first bytes and of the bytes just before that offset. A search reads only what was
appended since, and only whole lines (a line still being written waits for its newline). A
transcript that was replaced, truncated or rewritten (another file, a different head, fewer
bytes) is indexed again from the start. The transcript is only ever read, and only when it is
a regular file (``services/safe_io``).

Several processes share one index (docs/recall.md#sharing): the update runs in ``BEGIN
IMMEDIATE`` transactions of at most ``CHUNK_BYTES`` of the transcript each, each reading the
offset again inside it, so processes that update at once take turns and never index a line
twice, and a cold build of a long transcript is shared, never started twice. A process that
finds another one holding the write lock does not take that for damage: it waits a little when
the index already has something, then searches the index as it is (WAL readers never wait for
the writer) and says what is not searched yet; an index with nothing in it yet is waited for up
to the caller's deadline, then reported busy (``IndexBusy``).

The index is a cache of the transcript: damage SQLite detects, on any path (opening, updating,
searching), is healed by building it again (``use_index``). The damaged files are removed only
under an exclusive ``flock`` of the index's lock file, which every process holds shared while it
has the index open: an index another process holds is never deleted under it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import msgspec

from compactd import port
from compactd.core.recall_render import Found, Revision, Stored
from compactd.core.recall_words import SOME_WORDS, SUBSTRING, Query, file_key, fold, indexed
from compactd.services.recall_damage import (
    GARBLED_TEXT,
    SQLITE_ERROR,
    Damaged,
    IndexBusy,
    IndexUnusable,
    RecallIndexError,
    TranscriptUnreadable,
    flock,
    inode_of,
    is_busy,
    is_damage,
    lock_path,
    remove_damaged,
    result_code,
    unusable,
)
from compactd.services.safe_io import Deadline, NotRegularFile, line_from, open_regular

__all__ = [
    "CHUNK_BYTES",
    "Coverage",
    "IndexBusy",
    "IndexUnusable",
    "RecallIndex",
    "RecallIndexError",
    "SearchOutcome",
    "TranscriptUnreadable",
    "index_path",
    "use_index",
]

# Bumped when the schema or what is indexed changes: an index of another version is rebuilt.
_SCHEMA_VERSION: Final = 1
# Bytes hashed at the start of the transcript and just before the indexed offset.
_HEAD_BYTES: Final = 4096
_TAIL_BYTES: Final = 256
# The most of the transcript one update transaction indexes (compactd's choice: a second or
# two of work, so that processes sharing the index take turns and progress is kept).
CHUNK_BYTES: Final = 4 * 1024 * 1024
# How long an update waits for another process's when the index already has something: past
# it, the search answers from the index as it is (compactd's choice: other processes' updates
# are a few milliseconds; one longer than this is a cold build or a stuck process).
WARM_WAIT_S: Final = 1.0
# SQLite's own wait for a lock outside the update (opening a WAL index after a crash).
_OPEN_WAIT_S: Final = 2.0

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value);
CREATE TABLE IF NOT EXISTS entries(
    id INTEGER PRIMARY KEY, line INTEGER NOT NULL, uuid TEXT UNIQUE, role TEXT NOT NULL,
    type TEXT NOT NULL, timestamp TEXT, text TEXT NOT NULL, tool_use_id TEXT,
    correction INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS entries_role_line ON entries(role, line);
CREATE TABLE IF NOT EXISTS files(entry INTEGER NOT NULL, name TEXT NOT NULL, path TEXT NOT NULL,
    written INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS files_name ON files(name, written);
CREATE INDEX IF NOT EXISTS files_entry ON files(entry);
CREATE TABLE IF NOT EXISTS calls(call_id TEXT PRIMARY KEY, entry INTEGER NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
    body, tokenize = 'porter unicode61 remove_diacritics 2');
"""

_COLUMNS: Final = "e.uuid, e.role, e.type, e.timestamp, e.text, e.line, e.tool_use_id, e.id"
# Where the entry's row id and what follows the columns sit in a row.
_ID: Final = 7
_EXTRA: Final = 8


def index_path(data_dir: Path, transcript: Path) -> Path:
    """Where the index of ``transcript`` lives: under the data dir, named by its real path."""
    key = hashlib.sha256(os.path.realpath(transcript).encode("utf-8", "surrogatepass"))
    return data_dir / "recall" / f"{key.hexdigest()[:24]}.sqlite"


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    found: list[Found]
    total: int  # entries that matched, beyond those returned


# The types of the columns of a row (``_COLUMNS``) as compactd writes them: any other value
# read back means a damaged page.
_OPTIONAL_TEXT: Final[tuple[type, ...]] = (str, type(None))
_ROW_TYPES: Final[tuple[tuple[type, ...], ...]] = (
    _OPTIONAL_TEXT, (str,), (str,), _OPTIONAL_TEXT, (str,), (int,), _OPTIONAL_TEXT, (int,),
)  # fmt: skip


def _stored(row: Sequence[Any]) -> Stored:
    if len(row) < len(_ROW_TYPES) or not all(
        isinstance(value, kind) for value, kind in zip(row, _ROW_TYPES, strict=False)
    ):
        raise Damaged("a row holds values compactd never writes")
    return Stored(
        uuid=row[0],
        role=row[1],
        type=row[2],
        timestamp=row[3],
        text=row[4],
        line=row[5],
        tool_use_id=row[6],
    )


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class Coverage:
    """How much of the transcript the index answered from."""

    indexed: int  # bytes of the transcript indexed
    size: int  # bytes of the transcript when the search ran
    busy: bool  # another process was updating the index, and the search did not wait for it
    complete: bool  # the index held every whole line of the transcript


class RecallIndex:
    """The index of one transcript. Open, ``refresh``, query, ``close`` (or use ``with``).

    Raises ``IndexUnusable`` when the index cannot be opened, ``IndexBusy`` when a process
    healing it holds it past ``deadline``, and ``sqlite3.DatabaseError`` for damage (which
    ``use_index`` heals).
    """

    def __init__(
        self, data_dir: Path, transcript: Path, *, deadline: Deadline | None = None
    ) -> None:
        self.transcript = transcript
        self.path = index_path(data_dir, transcript)
        self.busy = False  # the last refresh found another process's update in the way
        self.caught_up = False  # the last refresh indexed every whole line
        self._odd = False  # a value compactd never writes was read (damage)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock = os.open(lock_path(self.path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise IndexUnusable(unusable(self.path, exc)) from None
        try:
            if not flock(self._lock, fcntl.LOCK_SH, deadline or Deadline(_OPEN_WAIT_S)):
                raise IndexBusy(
                    f"the recall index {self.path} is being rebuilt by another process; "
                    "ask again in a moment"
                )
            if self.path.is_dir():
                raise IndexUnusable(
                    f"the recall index {self.path} is a directory, not an index file: "
                    "remove it (compactd builds the index again)"
                )
            self.inode = inode_of(self.path)
            self._db = sqlite3.connect(self.path, timeout=_OPEN_WAIT_S, isolation_level=None)
        except sqlite3.Error as exc:
            os.close(self._lock)
            raise IndexUnusable(unusable(self.path, exc)) from None
        except BaseException:
            os.close(self._lock)
            raise
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.create_function("casefold", 1, self._casefold, deterministic=True)
            self._db.executescript(_SCHEMA)
        except BaseException as exc:
            self.close()
            if isinstance(exc, sqlite3.Error):
                raise self.classify(exc) from exc
            raise

    def _casefold(self, value: Any) -> str:
        if isinstance(value, str):
            return value.casefold()
        self._odd = True  # a text column holds something else: the page was damaged
        raise TypeError("not a text value")

    def __enter__(self) -> RecallIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._db.close()
        finally:
            os.close(self._lock)

    def damaged(self, exc: sqlite3.Error) -> bool:
        """Whether ``exc`` says the index is damaged (rather than busy, full or read-only):
        SQLite says so, or a text compactd wrote no longer reads as text (``casefold`` raised,
        or the bytes are not UTF-8 any more)."""
        return (
            is_damage(exc)
            or (self._odd and result_code(exc) == SQLITE_ERROR)
            or any(sign in str(exc) for sign in GARBLED_TEXT)
        )

    def classify(self, exc: sqlite3.Error) -> Exception:
        """What SQLite's error ``exc`` means: ``IndexBusy`` (another process holds a lock;
        never taken for damage), ``Damaged``, else ``IndexUnusable`` saying why."""
        if is_busy(exc):
            return IndexBusy(
                f"the recall index {self.path} is locked by another process; ask again in a moment"
            )
        if self.damaged(exc):
            return Damaged(str(exc))
        return IndexUnusable(unusable(self.path, exc))

    # -- keeping up to date -----------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        return dict(self._db.execute("SELECT key, value FROM meta").fetchall())

    def indexed_bytes(self) -> int:
        """How many bytes of the transcript the index holds (as committed)."""
        value = self._meta().get("offset", 0)
        return value if isinstance(value, int) and value >= 0 else 0

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # a failed statement may have ended the transaction already
            raise
        self._db.execute("COMMIT")

    def _still_valid(self, meta: dict[str, Any], st: os.stat_result, fd: int) -> bool:
        if meta.get("version") != _SCHEMA_VERSION or meta.get("ino") != st.st_ino:
            return False
        offset, lines = meta.get("offset"), meta.get("lines")
        if not isinstance(offset, int) or not isinstance(lines, int) or offset < 0 or lines < 0:
            return False  # values compactd never writes: start again
        if st.st_size < offset:
            return False
        head = min(_HEAD_BYTES, offset)
        if _hash(os.pread(fd, head, 0)) != meta.get("head"):
            return False
        tail = min(_TAIL_BYTES, offset)
        return _hash(os.pread(fd, tail, offset - tail)) == meta.get("tail")

    def _reset(self) -> None:
        for table in ("entries", "files", "calls", "fts", "meta"):
            self._db.execute(f"DELETE FROM {table}")  # noqa: S608 (names are constants)

    def _open_transcript(self) -> int:
        try:
            return open_regular(self.transcript)
        except FileNotFoundError:
            raise TranscriptUnreadable(f"the transcript {self.transcript} does not exist") from None
        except NotRegularFile as exc:
            raise TranscriptUnreadable(
                f"the transcript {self.transcript} is {exc.what}, not a transcript file"
            ) from None
        except OSError as exc:
            raise TranscriptUnreadable(
                f"cannot read the transcript {self.transcript}: {exc.strerror}"
            ) from None

    def refresh(self, deadline: Deadline | None = None, *, wait_s: float | None = None) -> int:
        """Index the whole lines appended since the last call; the number of lines read.

        Works in transactions of at most ``CHUNK_BYTES`` and stops between them once
        ``deadline`` has passed (None: until caught up). Waits ``wait_s`` for another process's
        update (None: until the deadline, else 30 s), then stops and sets ``busy``. Raises
        ``TranscriptUnreadable``, and ``sqlite3.Error`` for damage or a full disk.
        """
        self.busy = self.caught_up = False
        read = 0
        fd = self._open_transcript()
        try:
            while True:
                wait = (
                    wait_s
                    if wait_s is not None
                    else (deadline.remaining() if deadline is not None else 30.0)
                )
                self._db.execute(f"PRAGMA busy_timeout = {max(0, int(wait * 1000))}")
                try:
                    with self._transaction():
                        added, done = self._index_chunk(fd)
                except sqlite3.OperationalError as exc:
                    if not is_busy(exc):
                        raise
                    self.busy = True
                    return read
                read += added
                if done:
                    self.caught_up = True
                    return read
                if deadline is not None and deadline.expired:
                    return read
        finally:
            os.close(fd)
            self._db.execute(f"PRAGMA busy_timeout = {int(_OPEN_WAIT_S * 1000)}")

    def _index_chunk(self, fd: int) -> tuple[int, bool]:
        """Inside a write transaction: index up to ``CHUNK_BYTES`` of whole lines after the
        offset. The lines added, and whether the index has caught up."""
        st = os.fstat(fd)
        meta = self._meta()
        if not self._still_valid(meta, st, fd):
            self._reset()
            meta = {}
        start = offset = int(meta.get("offset", 0))
        lines = int(meta.get("lines", 0))
        data = os.pread(fd, min(CHUNK_BYTES, st.st_size - offset), offset)
        end = len(port.complete(data))
        if offset == 0 and end == len(data) < st.st_size and not data.endswith(b"\n"):
            # A file written whole (a compressed rollout): read whole, never in chunks.
            data = os.pread(fd, st.st_size, 0)
            end = len(port.complete(data))
        elif end == 0 and len(data) == CHUNK_BYTES:
            # One line longer than a chunk: read on to its end.
            data = line_from(fd, offset, st.st_size, CHUNK_BYTES)
            end = data.rfind(b"\n") + 1
        # Whole lines only (or a compressed file whole), read as compactd's own lines
        # (docs/agents.md#reading).
        for raw in port.transcript(data[:end]).split(b"\n")[:-1]:
            self._add(raw, lines)
            lines += 1
        offset += end
        head = os.pread(fd, min(_HEAD_BYTES, offset), 0)
        tail = os.pread(fd, min(_TAIL_BYTES, offset), offset - min(_TAIL_BYTES, offset))
        values = {
            "version": _SCHEMA_VERSION,
            "ino": st.st_ino,
            "offset": offset,
            "lines": lines,
            "head": _hash(head),
            "tail": _hash(tail),
        }
        self._db.executemany(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", values.items()
        )
        return lines - int(meta.get("lines", 0)), start + len(data) >= st.st_size

    def _add(self, raw: bytes, line: int) -> None:
        try:
            decoded = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return  # a line of another kind, or damaged: nothing to find in it
        if not isinstance(decoded, dict):
            return
        item = indexed(decoded)
        if item is None:
            return
        row = (item.role, item.type, item.timestamp, item.text, item.tool_use_id)
        existing = None
        if item.uuid is not None:
            existing = self._db.execute(
                "SELECT id FROM entries WHERE uuid = ?", (item.uuid,)
            ).fetchone()
        if existing is not None:
            # The same entry written again (a kept copy after a compaction): the latest text,
            # the first position.
            entry_id = int(existing[0])
            self._db.execute(
                "UPDATE entries SET role=?, type=?, timestamp=?, text=?, tool_use_id=?, "
                "correction=? WHERE id=?",
                (*row, item.correction, entry_id),
            )
            self._db.execute("DELETE FROM fts WHERE rowid = ?", (entry_id,))
            self._db.execute("DELETE FROM files WHERE entry = ?", (entry_id,))
        else:
            cursor = self._db.execute(
                "INSERT INTO entries(line, uuid, role, type, timestamp, text, tool_use_id, "
                "correction) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (line, item.uuid, *row, item.correction),
            )
            entry_id = int(cursor.lastrowid or 0)
        self._db.execute("INSERT INTO fts(rowid, body) VALUES (?, ?)", (entry_id, fold(item.text)))
        self._db.executemany(
            "INSERT INTO files(entry, name, path, written) VALUES (?, ?, ?, ?)",
            [(entry_id, file_key(p), p, p in item.written) for p in item.named],
        )
        self._db.executemany(
            "INSERT OR REPLACE INTO calls(call_id, entry) VALUES (?, ?)",
            [(c, entry_id) for c in item.call_ids],
        )

    # -- queries ----------------------------------------------------------------------------

    def entry_count(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM entries").fetchone()[0])

    def fetch(self, uuid: str) -> Stored | None:
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM entries e WHERE e.uuid = ?",  # noqa: S608
            (uuid,),
        ).fetchone()
        return None if row is None else _stored(row)

    def search(self, query: Query, limit: int) -> SearchOutcome:
        """The entries matching ``query``, best first (docs/recall.md#ranking).

        The stages are tried in order and the first that finds anything answers: all the
        words, all of them as prefixes, the query as one case-insensitive string (most recent
        first), any of the words. Within a word stage BM25 ranks, then the most recent wins.
        """
        for name, stage in query.stages:
            if name != SOME_WORDS:
                outcome = self._match(name, stage, limit)
                if outcome.found:
                    return outcome
        outcome = self._substring(query.text, limit)
        for name, stage in query.stages:
            if name == SOME_WORDS and not outcome.found:
                outcome = self._match(name, stage, limit)
        return outcome

    def _finish(self, rows: Sequence[Sequence[Any]], match: str, total: int) -> SearchOutcome:
        found = [Found(_stored(row), match, tuple(self._revisions(row))) for row in rows]
        return SearchOutcome(found, max(total, len(found)))

    def _match(self, name: str, stage: str, limit: int) -> SearchOutcome:
        try:
            total = self._db.execute("SELECT count(*) FROM fts WHERE fts MATCH ?", (stage,))
            count = int(total.fetchone()[0])
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM fts JOIN entries e ON e.id = fts.rowid "  # noqa: S608
                "WHERE fts MATCH ? ORDER BY bm25(fts), e.line DESC LIMIT ?",
                (stage, limit),
            ).fetchall()
        except sqlite3.OperationalError as exc:
            if self.damaged(exc) or result_code(exc) != SQLITE_ERROR:
                raise
            return SearchOutcome([], 0)  # an expression FTS5 rejects: the next stage answers
        return self._finish(rows, name, count)

    def _substring(self, text: str, limit: int) -> SearchOutcome:
        needle = text.casefold()
        if not needle.strip():
            return SearchOutcome([], 0)
        count = self._db.execute(
            "SELECT count(*) FROM entries e WHERE instr(casefold(e.text), ?)", (needle,)
        ).fetchone()[0]
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM entries e WHERE instr(casefold(e.text), ?) "  # noqa: S608
            "ORDER BY e.line DESC LIMIT ?",
            (needle, limit),
        ).fetchall()
        return self._finish(rows, SUBSTRING, int(count))

    # -- the revision rule (docs/recall.md#revisions) -----------------------------------------

    def _revisions(self, row: Sequence[Any]) -> Iterator[Revision]:
        entry_id, line, role = row[_ID], row[5], row[1]
        # A tool result is about the files its call named.
        found = self._db.execute(
            "SELECT coalesce((SELECT c.entry FROM calls c WHERE c.call_id = e.tool_use_id), e.id) "
            "FROM entries e WHERE e.id = ?",
            (entry_id,),
        ).fetchone()
        if found is None:
            raise Damaged(f"entry {entry_id} found by a search is not in the table")
        about = found[0]
        names = [
            r[0]
            for r in self._db.execute("SELECT DISTINCT name FROM files WHERE entry = ?", (about,))
        ]
        if names:
            marks = ",".join("?" * len(names))
            later = self._db.execute(
                f"SELECT {_COLUMNS}, f.path FROM files f JOIN entries e ON e.id = f.entry "  # noqa: S608
                f"WHERE f.written = 1 AND f.name IN ({marks}) AND e.line > ? "
                "ORDER BY e.line DESC LIMIT 1",
                (*names, line),
            ).fetchone()
            if later is not None:
                yield Revision(_stored(later), f"changed later ({later[_EXTRA]})")
        if role in ("user", "assistant"):
            after = self._db.execute(
                f"SELECT {_COLUMNS}, e.correction FROM entries e "  # noqa: S608
                "WHERE e.role = 'user' AND e.line > ? ORDER BY e.line LIMIT 1",
                (line,),
            ).fetchone()
            if after is not None and after[_EXTRA]:
                yield Revision(_stored(after), "the person's next message corrects it")


T = TypeVar("T")


def use_index(
    data_dir: Path,
    transcript: Path,
    work: Callable[[RecallIndex], T],
    *,
    deadline: Deadline,
    warm_wait_s: float = WARM_WAIT_S,
) -> tuple[T, Coverage]:
    """``work`` on the index of ``transcript``, brought up to date first, and how much of the
    transcript it covered.

    The update stops at ``deadline`` (the work then searches what is indexed, and ``Coverage``
    says how much that is). Another process's update is waited for ``warm_wait_s`` when the
    index has something, until the deadline when it has nothing (then ``IndexBusy``). Damage
    found anywhere (opening, updating, in ``work``) removes the index and builds it again,
    once. Raises ``TranscriptUnreadable``, ``IndexBusy``, ``IndexUnusable``.
    """
    path = index_path(data_dir, transcript)
    for attempt in (1, 2):
        inode = inode_of(path)
        try:
            with RecallIndex(data_dir, transcript, deadline=deadline) as index:
                inode = index.inode
                try:
                    warm = index.indexed_bytes() > 0
                    index.refresh(deadline, wait_s=warm_wait_s if warm else None)
                    indexed = index.indexed_bytes()
                    if index.busy and indexed == 0:
                        raise IndexBusy(
                            f"another process is building the recall index of {transcript}; "
                            "ask again in a moment"
                        )
                    result = work(index)
                except sqlite3.Error as exc:
                    raise index.classify(exc) from exc
                busy, complete = index.busy, index.caught_up
        except Damaged as exc:
            if attempt == 2:
                raise IndexUnusable(
                    f"the recall index {path} is damaged ({exc}) and building it again did not help"
                ) from None
            remove_damaged(path, inode, deadline)
            continue
        return result, Coverage(indexed, max(_size(transcript), indexed), busy, complete)
    raise AssertionError("unreachable")


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
