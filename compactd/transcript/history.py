"""A session's records in file order, with only the live ones kept as objects.

Most of a long session is history: lines a compaction took out of the context. The model
never sees them again, but undo, recall and stats still read them. ``History`` keeps those
lines on disk and remembers, per line, where it is (offset and length), its kind and its slot
in the uuid index: about 25 bytes a line, where a released ``Record`` object with its uuid
string cost some 350.

Asking for a released line gives a ``Record`` that reads the line back when its content is
needed (``Record.stored``). While anyone holds that object, asking again gives the same one,
so code that tells records apart by identity keeps working.

``History`` opens no file itself: released lines come back through the ``reader`` it is given
by whoever owns the transcript file (the store). Without one, a released record reads the file
it was located in.
"""

from __future__ import annotations

import bisect
import operator
import weakref
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain
from typing import Final, cast, overload

from compactd.transcript.model import (
    BOUNDARY_SUBTYPES,
    LineReader,
    Record,
    is_boundary_line,
)

__all__ = ["BOUNDARY_SUBTYPES", "History", "UuidIndex", "boundary_indices"]

# Line codes of kinds beyond this many distinct (type, subtype) pairs share the last code and
# keep their pair in a side table (only hostile or very odd transcripts get there).
_MAX_KIND_CODES: Final = 255

# ``History`` sweeps dead weak references out of its handed-out records past this many.
_HANDED_SWEEP_MIN: Final = 1024

# Recent uuids stay in a dict until there are this many; then they are folded into the sorted
# arrays. compactd's own figure: a fold copies the arrays in a few slices, so folding this
# often costs little, and it bounds the uuid strings of released lines kept alive.
_UUID_FOLD_AT: Final = 1024

# A fold of at least one new uuid for this many already in the arrays (a whole transcript read
# at once) sorts everything in one go instead of inserting the new ones a run at a time.
_UUID_MERGE_RATIO: Final = 8


class UuidIndex:
    """The last line holding each uuid, in about 12 bytes a line.

    Recent uuids sit in a dict. Older ones are folded into two arrays sorted by the uuid's
    ``hash()`` (a process-local value, never stored), with the line beside it. A hash found
    in the arrays is confirmed with ``uuid_at`` (the uuid actually on that line), so lookups
    are exact. The uuids of a whole transcript read at once (``add_many``) wait in a dict of
    their own until lines are released (``fold_all``): while their records are live they hold
    the strings anyway, and sorting tens of thousands of them would cost the load as much as
    building the rest of the history.
    """

    __slots__ = ("_bulk", "_recent", "_sorted")

    def __init__(self) -> None:
        self._recent: dict[str, int] = {}
        self._bulk: dict[str, int] = {}
        self._sorted: tuple[array[int], array[int]] = (array("q"), array("I"))

    def __len__(self) -> int:
        return len(self._recent) + len(self._bulk) + len(self._sorted[0])

    def add(self, uuid: str, line: int) -> None:
        self._recent[uuid] = line
        if len(self._recent) >= _UUID_FOLD_AT:
            self.fold()

    def add_many(self, lines: dict[str, int]) -> None:
        """``add`` each uuid (the lines are newer than any added before) without sorting them."""
        self.fold()  # what ``add`` gave is older: the recent dict holds only the newest
        self._bulk.update(lines)

    def get(self, uuid: str, uuid_at: Callable[[int], str | None]) -> int | None:
        line = self._recent.get(uuid)
        if line is not None:
            return line  # the newest of all
        # A line read in bulk, or a newer one folded since: the later of the two.
        found = self._bulk.get(uuid)
        hashes, lines = self._sorted
        key = hash(uuid)
        at = bisect.bisect_left(hashes, key)
        while at < len(hashes) and hashes[at] == key:
            candidate = lines[at]
            if (found is None or candidate > found) and uuid_at(candidate) == uuid:
                found = candidate
            at += 1
        return found

    def fold_all(self) -> None:
        """``fold``, the uuids read in bulk included: lines were released."""
        self.fold()
        if self._bulk:
            hashes, lines = self._sorted
            self._sorted = _sorted_pairs(
                chain(hashes, map(hash, self._bulk)), chain(lines, self._bulk.values())
            )
            self._bulk = {}

    def fold(self) -> None:
        """Move the recent uuids into the sorted arrays (their strings are then let go)."""
        if not self._recent:
            return
        hashes, lines = self._sorted
        if len(self._recent) * _UUID_MERGE_RATIO >= len(hashes):
            self._sorted = _sorted_pairs(
                chain(hashes, map(hash, self._recent)), chain(lines, self._recent.values())
            )
            self._recent = {}
            return
        new_hashes: array[int] = array("q")
        new_lines: array[int] = array("I")
        done = 0
        for key, line in sorted((hash(u), line) for u, line in self._recent.items()):
            # Copy the run of older entries up to this key in one slice, then insert it.
            at = bisect.bisect_right(hashes, key, done)
            new_hashes.extend(hashes[done:at])
            new_lines.extend(lines[done:at])
            new_hashes.append(key)
            new_lines.append(line)
            done = at
        new_hashes.extend(hashes[done:])
        new_lines.extend(lines[done:])
        # One assignment, so a reader in another thread sees either the old or the new pair.
        self._sorted = (new_hashes, new_lines)
        self._recent = {}


_KIND: Final = operator.attrgetter("kind")
_LINE: Final = operator.attrgetter("line")


def _sorted_pairs(hashes: Iterable[int], lines: Iterable[int]) -> tuple[array[int], array[int]]:
    """The (hash, line) pairs sorted, as the two arrays of ``UuidIndex``, in one sort.

    Each pair is sorted as one integer, ``hash * 2**32 + line`` (a line fits in 32 bits, the
    arrays' own limit), which orders as the pair does: sorting plain integers is several times
    quicker than sorting tuples, and every step here runs in C.
    """
    keys = sorted(map(operator.add, map(_SHIFT.__rlshift__, hashes), lines))
    return array("q", map(_SHIFT.__rrshift__, keys)), array("I", map(_LOW.__and__, keys))


_SHIFT: Final = 32
_LOW: Final = (1 << 32) - 1


class History(Sequence[Record]):
    """Every record of one transcript in file order; released lines cost a few bytes each."""

    def __init__(self, records: Iterable[Record] = (), reader: LineReader | None = None) -> None:
        self._path: str | None = None
        self._reader = reader
        self._offsets: array[int] = array("q")  # -1: never written, so always live
        self._lengths: array[int] = array("I")
        self._kinds: array[int] = array("B")  # code into _kind_pairs
        self._kind_pairs: list[tuple[str, str | None]] = []
        self._kind_codes: dict[tuple[str, str | None], int] = {}
        self._odd_kinds: dict[int, tuple[str, str | None]] = {}
        self._boundaries: list[int] = []  # lines of compact and microcompact boundaries
        self._live: dict[int, Record] = {}
        # Released records handed out, by line, for as long as someone holds them. Plain weak
        # references (cheaper than a WeakValueDictionary on scans over the whole history);
        # dead ones are swept out once they outnumber the live ones.
        self._handed: dict[int, weakref.ref[Record]] = {}
        self._handed_sweep_at = _HANDED_SWEEP_MIN
        # The index gets ``_uuid_at`` with each lookup instead of keeping it: a kept bound
        # method would be a reference cycle, and a dropped History would then hold its
        # records until the cycle collector ran.
        self._uuids = UuidIndex()
        self.extend(records)

    # -- Sequence --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._offsets)

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> list[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | list[Record]:
        if isinstance(index, slice):
            return [self._get(i) for i in range(*index.indices(len(self._offsets)))]
        n = len(self._offsets)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"history line {index} out of range ({n} lines)")
        return self._get(i)

    def __iter__(self) -> Iterator[Record]:
        for i in range(len(self._offsets)):
            yield self._get(i)

    def __reversed__(self) -> Iterator[Record]:
        for i in range(len(self._offsets) - 1, -1, -1):
            yield self._get(i)

    # -- growing -----------------------------------------------------------------------------------

    def append(self, record: Record) -> None:
        line = len(self._offsets)
        where = record.location()
        if where is not None and self._path in (None, where[0]):
            self._path = where[0]
            self._offsets.append(where[1])
            self._lengths.append(where[2])
        else:
            # Not in this transcript's file (yet): it can never be released.
            self._offsets.append(-1)
            self._lengths.append(0)
        self._kinds.append(self._code(line, record.kind, record.subtype))
        if is_boundary_line(record.kind, record.subtype):
            self._boundaries.append(line)
        self._live[line] = record
        record.line = line
        uuid = record.uuid
        if uuid is not None:
            self._uuids.add(uuid, line)

    def extend(self, records: Iterable[Record]) -> None:
        for record in records:
            self.append(record)

    def adopt(
        self,
        records: list[Record],
        path: str,
        offsets: Sequence[int],
        lengths: Sequence[int],
        uuids: Sequence[str | None],
        boundaries: Iterable[int],
    ) -> None:
        """``extend`` by a whole transcript's records at once, with what ``append`` would work
        out of each given beside it (what ``reading.read_buffer`` gathers): their lines are at
        ``offsets`` in ``path``, ``lengths`` long, and hold ``uuids``; ``boundaries`` are the
        indices of the compact and microcompact boundaries among them. Each step runs over all
        of the records at once, in C where it can."""
        if self._path not in (None, path):
            self.extend(records)
            return
        # Kinds: an entry's type alone nearly always (a subtype marks system lines only).
        kinds = list(map(_KIND, records))
        subtyped = [i for i, r in enumerate(records) if r.subtype is not None]
        codes = self._kind_codes
        plain = {kind: (kind, None) for kind in set(kinds)}
        pairs = set(plain.values()).union((kinds[i], records[i].subtype) for i in subtyped)
        fresh = pairs.difference(codes)
        if len(self._kind_pairs) + len(fresh) > _MAX_KIND_CODES:
            self.extend(records)  # odd kinds are kept line by line
            return
        for pair in sorted(fresh, key=str):
            codes[pair] = len(self._kind_pairs)
            self._kind_pairs.append(pair)
        first = len(self._offsets)
        # One int object a line, shared by the live records' dict and the uuid index.
        lines = list(range(first, first + len(records)))
        self._path = path
        self._offsets.extend(offsets)
        self._lengths.extend(lengths)
        at = len(self._kinds)
        by_kind = {kind: codes[pair] for kind, pair in plain.items()}
        self._kinds.extend(map(by_kind.__getitem__, kinds))
        for i in subtyped:
            self._kinds[at + i] = codes[(kinds[i], records[i].subtype)]
        self._boundaries.extend(first + i for i in boundaries)
        for line, record in zip(lines, records, strict=True):
            record.line = line
        self._live.update(zip(lines, records, strict=True))
        named = dict(zip(uuids, lines, strict=True))
        named.pop(None, None)
        self._uuids.add_many(cast(dict[str, int], named))

    # -- lookups -----------------------------------------------------------------------------------

    def index_of(self, uuid: str) -> int | None:
        """The last line whose entry has ``uuid``, or None."""
        return self._uuids.get(uuid, self._uuid_at)

    def records_at(self, lines: Sequence[int]) -> list[Record]:
        """``[self[i] for i in lines]`` for lines known to be in range, without the checks."""
        found: list[Record | None] = list(map(self._live.get, lines))
        if all(found):  # all decoded (a context, nearly always): no line is read back
            return cast(list[Record], found)
        return [r if r is not None else self._get(i) for i, r in zip(lines, found, strict=True)]

    def raw_line(self, line: int) -> bytes:
        """The bytes of one line, without making a record of it (for scans over history)."""
        record = self._live.get(line)
        if record is not None:
            return record.raw
        if self._reader is None:
            return self._get(line).raw
        return self._reader(self._offsets[line], self._lengths[line])

    def boundary_lines(self, start: int = 0) -> list[int]:
        """Lines of the compact and microcompact boundaries in file order, from the
        ``start``-th one on (the caller has seen the ones before)."""
        return self._boundaries[start:]

    def live_count(self) -> int:
        """How many records are kept in memory (the rest are read back from the file)."""
        return len(self._live)

    # -- memory ------------------------------------------------------------------------------------

    def retain(self, keep: Iterable[Record]) -> None:
        """Keep the records of ``keep`` decoded in memory and release every other line.

        ``keep`` holds records of this history (typically the current context). Lines that
        were never written to the transcript stay in memory whatever ``keep`` says.
        """
        current = self._live
        keep = keep if isinstance(keep, list) else list(keep)
        if len(keep) == len(current) and self._all_live(keep):
            return  # the records decoded are those to keep (a context read whole): no change
        live: dict[int, Record] = {}
        for record in keep:
            line = record.line
            found = current.get(line)
            if found is not None and found is record:  # decoded already (most of a context)
                live[line] = found
            elif self._owns(line, record):
                record.materialize()
                live[line] = record
        self._live = live
        self._release(current)
        del current  # the released records die here, unless someone holds them
        for record in live.values():
            # Lines read from a whole file's bytes share them (``Record.of_buffer``): the kept
            # ones take their own copy, so that those bytes go with the released lines.
            record.detach()
        self._sweep()
        if len(self._live) < len(self._offsets):
            self._uuids.fold_all()  # their uuid strings need not stay

    # -- internals ---------------------------------------------------------------------------------

    def _all_live(self, records: list[Record]) -> bool:
        """Whether ``records`` are live records of this history, each line once."""
        lines = list(map(_LINE, records))
        live = self._live
        return len(set(lines)) == len(lines) and all(
            map(operator.is_, map(live.get, lines), records)
        )

    def _release(self, previous: dict[int, Record]) -> None:
        live = self._live
        for line in previous.keys() - live.keys():
            record = previous[line]
            if self._offsets[line] < 0:
                live[line] = record
                continue
            record.release(self._reader)
            # Whoever still holds it gets the same object back from ``_get``.
            self._handed[line] = weakref.ref(record)

    def _owns(self, line: int, record: Record) -> bool:
        if not 0 <= line < len(self._offsets):
            return False
        return self._live.get(line) is record or self._held(line) is record

    def _held(self, line: int) -> Record | None:
        ref = self._handed.get(line)
        return ref() if ref is not None else None

    def _get(self, line: int) -> Record:
        record = self._live.get(line)
        if record is not None:
            return record
        record = self._held(line)
        if record is None:
            kind, subtype = self._kind_of(line)
            assert self._path is not None  # only written lines are ever released
            record = Record.stored(
                self._path, self._offsets[line], self._lengths[line], kind, subtype, self._reader
            )
            record.line = line
            self._handed[line] = weakref.ref(record)
            if len(self._handed) >= self._handed_sweep_at:
                self._sweep()
        return record

    def _sweep(self) -> None:
        """Forget handed-out records that died; a new dict gives back the room they took."""
        # From a copy of the items: a worker thread reading history may add to the dict.
        handed = list(self._handed.items())
        self._handed = {line: ref for line, ref in handed if ref() is not None}
        self._handed_sweep_at = max(_HANDED_SWEEP_MIN, 2 * len(self._handed))

    def _uuid_at(self, line: int) -> str | None:
        return self._get(line).uuid

    def _code(self, line: int, kind: str, subtype: str | None) -> int:
        pair = (kind, subtype)
        code = self._kind_codes.get(pair)
        if code is not None:
            return code
        if len(self._kind_pairs) < _MAX_KIND_CODES:
            code = len(self._kind_pairs)
            self._kind_pairs.append(pair)
            self._kind_codes[pair] = code
            return code
        self._odd_kinds[line] = pair
        return _MAX_KIND_CODES

    def _kind_of(self, line: int) -> tuple[str, str | None]:
        code = self._kinds[line]
        if code == _MAX_KIND_CODES:
            return self._odd_kinds[line]
        return self._kind_pairs[code]


def boundary_indices(records: Sequence[Record]) -> list[int]:
    """Indices of the compact and microcompact boundaries in ``records``, in order.

    A ``History`` answers from its own list; a plain sequence is scanned by kind, which
    released records keep without decoding their lines.
    """
    if isinstance(records, History):
        return records.boundary_lines()
    return [i for i, r in enumerate(records) if is_boundary_line(r.kind, r.subtype)]
