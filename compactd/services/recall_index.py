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
bytes) is indexed again from the start. The transcript is only ever read.

Two processes may bring one index up to date at once: the update runs in one ``BEGIN
IMMEDIATE`` transaction that reads the offset again, so one waits and then finds nothing to do.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

from compactd import port
from compactd.core.recall_render import Found, Revision, Stored
from compactd.core.recall_words import SOME_WORDS, SUBSTRING, Query, file_key, fold, indexed

__all__ = ["RecallIndex", "SearchOutcome", "index_path", "open_index"]

# Bumped when the schema or what is indexed changes: an index of another version is rebuilt.
_SCHEMA_VERSION: Final = 1
# Bytes hashed at the start of the transcript and just before the indexed offset.
_HEAD_BYTES: Final = 4096
_TAIL_BYTES: Final = 256
# SQLite waits this long for another process's update before giving up (milliseconds).
_BUSY_TIMEOUT_S: Final = 30.0

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


def _stored(row: Sequence[Any]) -> Stored:
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


class RecallIndex:
    """The index of one transcript. Open, ``refresh``, query, ``close`` (or use ``with``)."""

    def __init__(self, data_dir: Path, transcript: Path) -> None:
        self.transcript = transcript
        self.path = index_path(data_dir, transcript)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.create_function("casefold", 1, str.casefold, deterministic=True)
            self._db.executescript(_SCHEMA)
        except BaseException:
            self._db.close()
            raise

    def __enter__(self) -> RecallIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    # -- keeping up to date -----------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        return dict(self._db.execute("SELECT key, value FROM meta").fetchall())

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _still_valid(self, meta: dict[str, Any], st: os.stat_result, f: Any) -> bool:
        if meta.get("version") != _SCHEMA_VERSION or meta.get("ino") != st.st_ino:
            return False
        offset = int(meta.get("offset", 0))
        if st.st_size < offset:
            return False
        head = min(_HEAD_BYTES, offset)
        f.seek(0)
        if _hash(f.read(head)) != meta.get("head"):
            return False
        tail = min(_TAIL_BYTES, offset)
        f.seek(offset - tail)
        return _hash(f.read(tail)) == meta.get("tail")

    def _reset(self) -> None:
        for table in ("entries", "files", "calls", "fts", "meta"):
            self._db.execute(f"DELETE FROM {table}")  # noqa: S608 (names are constants)

    def refresh(self) -> int:
        """Index the whole lines appended since the last call; the number of lines read.

        Raises OSError when the transcript cannot be read.
        """
        with self.transcript.open("rb") as f, self._transaction():
            st = os.fstat(f.fileno())
            meta = self._meta()
            if not self._still_valid(meta, st, f):
                self._reset()
                meta = {}
            offset = int(meta.get("offset", 0))
            lines = int(meta.get("lines", 0))
            f.seek(offset)
            data = f.read()
            end = data.rfind(b"\n") + 1
            # An agent's lines as compactd's own (docs/agents.md#reading).
            for raw in port.transcript(data[:end]).split(b"\n")[:-1]:
                self._add(raw, lines)
                lines += 1
            offset += end
            f.seek(0)
            head = f.read(min(_HEAD_BYTES, offset))
            f.seek(offset - min(_TAIL_BYTES, offset))
            tail = f.read(min(_TAIL_BYTES, offset))
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
            return lines - int(meta.get("lines", 0))

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
        except sqlite3.OperationalError:
            return SearchOutcome([], 0)  # an expression FTS5 rejects: the next stage answers
        return self._finish(rows, name, count)

    def _substring(self, text: str, limit: int) -> SearchOutcome:
        needle = text.casefold()
        if not needle.strip():
            return SearchOutcome([], 0)
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM entries e WHERE instr(casefold(e.text), ?) "  # noqa: S608
            "ORDER BY e.line DESC",
            (needle,),
        ).fetchall()
        return self._finish(rows[:limit], SUBSTRING, len(rows))

    # -- the revision rule (docs/recall.md#revisions) -----------------------------------------

    def _revisions(self, row: Sequence[Any]) -> Iterator[Revision]:
        entry_id, line, role = int(row[_ID]), int(row[5]), str(row[1])
        # A tool result is about the files its call named.
        about = self._db.execute(
            "SELECT coalesce((SELECT c.entry FROM calls c WHERE c.call_id = e.tool_use_id), e.id) "
            "FROM entries e WHERE e.id = ?",
            (entry_id,),
        ).fetchone()[0]
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


def _open(data_dir: Path, transcript: Path) -> RecallIndex:
    index = RecallIndex(data_dir, transcript)
    try:
        index.refresh()
    except BaseException:
        index.close()
        raise
    return index


def open_index(data_dir: Path, transcript: Path) -> RecallIndex:
    """An index of ``transcript`` brought up to date (OSError when it cannot be read).

    The index is a cache of the transcript: one SQLite cannot open (a damaged or foreign file)
    is removed and built again.
    """
    try:
        return _open(data_dir, transcript)
    except sqlite3.DatabaseError:
        path = index_path(data_dir, transcript)
        for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            stale.unlink(missing_ok=True)
        return _open(data_dir, transcript)
