"""The current context of a session: which transcript records the model sees next.

A transcript is append-only, so after a compaction it still holds everything that was
summarized. What counts is the slice that starts at the last ``compact_boundary``: the boundary,
the continuation summary and everything appended after them. A partial compaction keeps some
entries verbatim without copying them: the boundary's ``compactMetadata.preservedSegment``
names the first (head) and last (tail) of those entries, which sit before the boundary in the
file, and the entry they hang off (anchor, normally the summary). Claude Code relinks them
after the summary when it loads the transcript; ``context_records`` does the same. A partial
compaction ``from`` a pivot keeps the EARLIER part instead: compactd's own
``compactMetadata.preservedPrefix`` names the first and last entries of the previous view that
stay, and they are placed between the boundary and the summary, so the request still starts
with the same messages and their prompt cache is reused.

How the view is worked out. A view is a list of line numbers. Each compact boundary is
*resolved* once, oldest first, into what it adds to the lines that follow it: the prefix and
the kept segment it relinks, or, for an undo entry, the whole view it brings back. Resolving a
boundary may need the view just before it (a prefix is a run of that view; an undo restores
the view before the compaction it cancels), which is the previous boundary's resolution plus
the lines between them: that is memoized too. Nothing recurses, and after a long history of
compactions and undos a new boundary costs time in proportion to the context, not to the
history. ``ViewIndex`` holds these memos for one transcript (a session keeps one for its
``History``); the module functions build a throwaway one for a single answer.

Pure: no I/O of its own. Released lines of a ``History`` are read through the reader the
history was given.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from compactd.transcript.history import History
from compactd.transcript.model import (
    PreservedSegment,
    Record,
    is_boundary_line,
    is_compact_boundary_line,
)

__all__ = [
    "ViewIndex",
    "compaction_key",
    "context_records",
    "last_boundary_index",
    "last_undoable",
    "main_thread",
    "preserved_prefix_records",
    "preserved_records",
    "undone_ids",
    "undone_target",
]

# A view (or a part of one) as line numbers of the transcript.
Lines = Sequence[int]
_NONE: Lines = ()


def last_boundary_index(records: Sequence[Record]) -> int | None:
    """Index of the last ``compact_boundary`` record, or None when there is none."""
    # By kind, which released records keep: walking back decodes no line.
    for i in range(len(records) - 1, -1, -1):
        record = records[i]
        if is_compact_boundary_line(record.kind, record.subtype):
            return i
    return None


def context_records(records: Sequence[Record], end: int | None = None) -> list[Record]:
    """The records from the last compact boundary on, with preserved entries relinked.

    Without a boundary this is every record. With one, it is the boundary, then the records
    after it in file order; the entries named by the boundary's preserved segment are inserted
    right after the anchor (the continuation summary), before anything that came later, and
    those named by its preserved prefix right after the boundary itself. After an undo entry
    it is the view before the compaction it undoes, then what was appended since.
    Entries that already appear after the boundary are not inserted twice, which also makes
    the function idempotent: ``context_records(context_records(r)) == context_records(r)``.
    ``end`` limits the view to ``records[:end]`` without copying the list.
    """
    return ViewIndex(records).context(end)


def preserved_records(records: Sequence[Record], boundary_index: int) -> list[Record]:
    """The entries a partial compaction kept, found before the boundary at ``boundary_index``.

    Returns them in file order, or an empty list when the boundary names no preserved segment
    or its head / tail cannot be found before it.
    """
    return ViewIndex(records).preserved(boundary_index)


def preserved_prefix_records(records: Sequence[Record], boundary_index: int) -> list[Record]:
    """The leading entries a partial compaction ``from`` a pivot kept before its summary.

    They are the start of the view as it was just before the boundary (which may itself come
    from an earlier compaction), from the prefix's head through its tail, without that earlier
    boundary record. Empty when the boundary names no prefix or its tail cannot be found.
    """
    return ViewIndex(records).preserved_prefix(boundary_index)


def main_thread(records: Sequence[Record]) -> list[Record]:
    """Drop sub-agent (sidechain) entries written inline into a main session's transcript.

    Older Claude Code versions wrote a sub-agent's conversation into the parent's file with
    ``isSidechain: true``, interleaved with the parent's parallel tool calls. They never reach
    the parent's API requests. A transcript made only of sidechain entries is a sub-agent's own
    session and is returned whole.
    """
    if not any(r.entry.is_sidechain is True for r in records):
        return list(records)
    has_main = any(
        r.entry.is_sidechain is not True and r.entry.type in ("user", "assistant") for r in records
    )
    if not has_main:
        return list(records)
    return [r for r in records if r.entry.is_sidechain is not True]


# -- undo ----------------------------------------------------------------------------------------
#
# ``compact/undo`` appends; it never deletes. Undoing a compaction appends a new
# ``compact_boundary`` whose ``compactMetadata.undoes`` names the compaction (its compactionId,
# or the boundary's uuid for one without an id). Such a boundary shows no summary of its own:
# the view becomes the view just before the undone compaction, followed by whatever was
# appended since, minus the undone boundary and its group (summary, attachments, hook context).
# Undoing a microcompact appends a ``microcompact_boundary`` with ``undoes`` in its metadata;
# the session then ignores the undone one (``undone_ids``).


def _is_boundary(record: Record) -> bool:
    # From the fields a released record keeps: scans over history must not decode every line.
    return is_boundary_line(record.kind, record.subtype)


def undone_target(record: Record) -> str | None:
    """The compaction (id or boundary uuid) that ``record`` undoes, or None."""
    if not _is_boundary(record):
        return None
    entry = record.entry
    if entry.is_compact_boundary and entry.compact_metadata is not None:
        return entry.compact_metadata.undoes
    if entry.is_microcompact_boundary and entry.microcompact_metadata is not None:
        return entry.microcompact_metadata.undoes or None
    return None


def undone_ids(records: Iterable[Record]) -> set[str]:
    """Ids and uuids of every compaction or microcompact an undo entry in ``records`` names."""
    out: set[str] = set()
    for record in records:
        target = undone_target(record)
        if target is not None:
            out.add(target)
    return out


def compaction_key(record: Record) -> str | None:
    """How undo entries name a compaction: its compactionId, else its boundary's uuid."""
    meta = record.entry.compact_metadata
    if meta is not None and meta.compaction_id:
        return meta.compaction_id
    return record.entry.uuid


def last_undoable(records: Sequence[Record]) -> int | None:
    """Index of the most recent compaction or microcompact boundary not undone yet, or None.

    Undo entries themselves are skipped: undoing twice undoes the compaction before.
    """
    return ViewIndex(records).last_undoable()


# -- the index -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Boundary:
    """What the view and undo need of one boundary line, read from it once."""

    compact: bool  # a compact_boundary (else a microcompact_boundary)
    uuid: str | None
    key: str | None  # ``compaction_key``
    target: str | None  # ``undone_target``
    prefix: PreservedSegment | None
    segment: PreservedSegment | None


@dataclass(frozen=True, slots=True)
class _Cut:
    """A compaction boundary, resolved: the lines it relinks."""

    prefix: Lines  # after the boundary itself
    kept: Lines  # after the anchor (or the summary)
    anchor: str | None


@dataclass(frozen=True, slots=True)
class _Undo:
    """An undo entry, resolved: the view it stands for, before what is appended after it."""

    base: Lines


@dataclass(frozen=True, slots=True)
class _Facts:
    """The fields of one line the view looks at (decoded once per call)."""

    uuid: str | None
    parent: str | None
    type: str
    summary: bool
    sidechain: bool


def _stored(lines: Iterable[int]) -> Lines:
    # Kept memos take four bytes a line.
    return array("I", lines)


class ViewIndex:
    """The views of one transcript, with every boundary resolved once and remembered.

    ``records`` must only ever grow (a ``History`` does); then what was worked out for a
    boundary stays true. Calls on one index must not overlap (a session makes them under its
    lock). For a plain list the index is cheap to build and meant for a single answer.
    """

    def __init__(self, records: Sequence[Record]) -> None:
        self.records = records
        self._history = records if isinstance(records, History) else None
        self._scanned = 0  # how far a plain list was searched for boundaries
        self._boundaries: list[int] = []  # compact and microcompact boundary lines
        self._compact: list[int] = []  # compact boundary lines
        self._info: dict[int, _Boundary] = {}
        # Compaction keys and boundary uuids -> compact boundary lines naming them, ascending.
        self._names: dict[str, list[int]] = {}
        self._undone: set[str] = set()
        self._resolved: dict[int, _Cut | _Undo] = {}
        self._resolved_count = 0  # boundaries of ``_compact`` resolved, oldest first
        self._before: dict[int, Lines] = {}  # the view of ``records[:line]``, by line
        self._facts: dict[int, _Facts] = {}  # for the duration of one call
        # Plain lists only: uuid -> lines, and the length of the list it was built for.
        self._uuid_lines: dict[str, list[int]] = {}
        self._uuid_lines_size = -1

    # -- answers ---------------------------------------------------------------------------------

    def context(self, end: int | None = None) -> list[Record]:
        """``context_records(records, end)``."""
        records = self.records
        stop = len(records) if end is None else max(0, min(end, len(records)))
        try:
            self._sync()
            lines = self._view(stop)
            if self._history is not None:
                return self._history.records_at(lines)
            return [records[i] for i in lines]
        finally:
            self._facts.clear()

    def preserved(self, b: int) -> list[Record]:
        """``preserved_records(records, b)``."""
        return self._relinked(b, prefix=False)

    def preserved_prefix(self, b: int) -> list[Record]:
        """``preserved_prefix_records(records, b)``."""
        return self._relinked(b, prefix=True)

    def _relinked(self, b: int, *, prefix: bool) -> list[Record]:
        meta = self.records[b].entry.compact_metadata
        if meta is None:
            return []
        segment = meta.preserved_prefix if prefix else meta.preserved_segment
        if segment is None:
            return []
        try:
            self._sync()
            self._resolve(b - 1)
            lines = self._prefix(b, segment) if prefix else self._kept(b, segment)
            return [self.records[i] for i in lines]
        finally:
            self._facts.clear()

    def undone_ids(self) -> set[str]:
        """``undone_ids`` of every boundary of the transcript."""
        self._sync()
        return set(self._undone)

    def last_undoable(self) -> int | None:
        """``last_undoable(records)``, from what was read of each boundary once."""
        self._sync()
        undone: set[str] = set()
        for line in reversed(self._boundaries):
            info = self._info[line]
            if info.target is not None:
                undone.add(info.target)
                continue
            if info.compact:
                if info.key in undone or info.uuid in undone:
                    continue
                return line
            if info.uuid not in undone:
                return line
        return None

    # -- boundaries ------------------------------------------------------------------------------

    def _sync(self) -> None:
        """Take in the boundaries appended since the last call."""
        records = self.records
        if self._history is not None:
            new: Iterable[int] = self._history.boundary_lines(len(self._boundaries))
        else:
            size = len(records)
            new = [i for i in range(self._scanned, size) if _is_boundary(records[i])]
            self._scanned = size
        for line in new:
            info = _describe(records[line])
            self._boundaries.append(line)
            self._info[line] = info
            if info.target is not None:
                self._undone.add(info.target)
            if not info.compact:
                continue
            self._compact.append(line)
            for name in {info.key, info.uuid}:
                if name is not None:
                    self._names.setdefault(name, []).append(line)

    def _resolve(self, upto: int) -> None:
        """Resolve every compact boundary at or before line ``upto``, oldest first."""
        compact = self._compact
        while self._resolved_count < len(compact) and compact[self._resolved_count] <= upto:
            b = compact[self._resolved_count]
            info = self._info[b]
            if info.target is not None:
                self._resolved[b] = _Undo(self._undo_base(b, info.target))
            else:
                anchor = info.segment.anchor_uuid if info.segment is not None else None
                prefix = self._prefix(b, info.prefix) if info.prefix is not None else _NONE
                kept = self._kept(b, info.segment) if info.segment is not None else _NONE
                self._resolved[b] = _Cut(prefix, kept, anchor)
            self._resolved_count += 1

    def _is_compact(self, line: int) -> bool:
        at = bisect.bisect_left(self._compact, line)
        return at < len(self._compact) and self._compact[at] == line

    # -- views -----------------------------------------------------------------------------------

    def _view(self, stop: int) -> Lines:
        """The view of ``records[:stop]``."""
        at = bisect.bisect_left(self._compact, stop) - 1
        if at < 0:
            return range(stop)
        b = self._compact[at]
        self._resolve(b)
        return self._assemble(b, stop)

    def _view_before(self, line: int) -> Lines:
        """The view of ``records[:line]``, remembered."""
        got = self._before.get(line)
        if got is None:
            view = self._view(line)
            got = view if isinstance(view, range) else _stored(view)
            self._before[line] = got
        return got

    def _assemble(self, b: int, stop: int) -> list[int]:
        """The view of ``records[:stop]`` whose last compact boundary is ``b`` (resolved)."""
        done = self._resolved[b]
        if isinstance(done, _Undo):
            return [*done.base, *range(b + 1, stop)]
        view = list(range(b, stop))
        if done.prefix:
            present = self._uuids(view)
            view[1:1] = [i for i in done.prefix if self._uuid(i) not in present]
        if not done.kept:
            return view
        present = self._uuids(view)
        kept = [i for i in done.kept if self._uuid(i) not in present]
        if not kept:
            return view
        at = self._insertion_point(view, done.anchor)
        view[at + 1 : at + 1] = kept
        return view

    def _insertion_point(self, view: list[int], anchor: str | None) -> int:
        """Index in ``view`` after which kept entries go: the anchor, else the summary."""
        summary_at: int | None = None
        for i, line in enumerate(view):
            facts = self._f(line)
            if anchor is not None and facts.uuid == anchor:
                return i
            if summary_at is None and facts.type == "user" and facts.summary:
                summary_at = i
                if anchor is None:
                    break
        return summary_at if summary_at is not None else 0

    # -- what one boundary relinks ---------------------------------------------------------------

    def _prefix(self, b: int, segment: PreservedSegment) -> Lines:
        """Lines of the prefix a ``from`` compaction kept: a run of the view before it."""
        if segment.tail_uuid is None:
            return _NONE
        before = self._view_before(b)
        ids = [self._uuid(i) for i in before]
        try:
            tail_at = ids.index(segment.tail_uuid)
        except ValueError:
            return _NONE
        head_at = 0
        if segment.head_uuid is not None and segment.head_uuid in ids[: tail_at + 1]:
            head_at = ids.index(segment.head_uuid)
        return _stored(i for i in before[head_at : tail_at + 1] if not self._is_compact(i))

    def _kept(self, b: int, segment: PreservedSegment) -> Lines:
        """Lines of the segment a partial compaction kept, found before its boundary ``b``."""
        head = segment.head_uuid or segment.tail_uuid
        tail = segment.tail_uuid or segment.head_uuid
        if head is None or tail is None:
            return _NONE
        # Kept entries are the most recent ones before the boundary: found by uuid, not by
        # walking the file back to them.
        head_at = self._last_line(head, 0, b)
        if head_at is None:
            return _NONE
        tail_at = self._last_line(tail, head_at, b)
        if tail_at is None:
            return _NONE
        chain = self._parent_chain(head, tail, head_at, tail_at, b)
        if chain is not None:
            return _stored(sorted(chain))
        # A segment kept by compactd is a run of the view just before this boundary; it may span
        # an earlier boundary (kept entries of an earlier partial compaction, then newer ones),
        # where the file holds summarized entries between head and tail and the parent links
        # need not join up. Take that run of the earlier view when both ends are in it.
        sidechain = self._f(head_at).sidechain
        first_compact = bisect.bisect_left(self._compact, head_at)
        if first_compact < len(self._compact) and self._compact[first_compact] < tail_at:
            earlier = self._view_before(b)
            at: dict[str, int] = {}
            for i, line in enumerate(earlier):
                uuid = self._uuid(line)
                if uuid is not None:
                    at[uuid] = i
            first, last = at.get(head), at.get(tail)
            if first is not None and last is not None and first <= last:
                return _stored(
                    line
                    for line in earlier[first : last + 1]
                    if not self._is_compact(line) and self._f(line).sidechain == sidechain
                )
        # The parent links do not lead from tail to head (rewritten or missing ids): fall back
        # to the conversation entries between them in file order.
        return _stored(
            line
            for line in range(head_at, tail_at + 1)
            if self._f(line).uuid is not None
            and self._f(line).sidechain == sidechain
            and not self._is_compact(line)
        )

    def _parent_chain(
        self, head: str, tail: str, head_at: int, tail_at: int, b: int
    ) -> list[int] | None:
        """Lines on the parentUuid path from tail back to head, or None if there is none."""
        chain = [tail_at]
        current, at = tail, tail_at
        # A path visits each line between head and tail at most once; more steps mean a cycle.
        for _ in range(tail_at - head_at + 1):
            if current == head:
                return chain
            parent = self._f(at).parent
            if parent is None:
                return None
            found = self._last_line(parent, head_at, b)
            if found is None:
                return None
            chain.append(found)
            current, at = parent, found
        return chain if current == head else None

    def _undo_base(self, b: int, target: str) -> Lines:
        """The view an undo entry at ``b`` stands for (what was appended after it aside)."""
        t = self._target_line(target, b)
        if t is None:
            # The undone boundary is unknown: the undo entry is simply transparent.
            return self._view_before(b)
        before = self._view_before(t)
        seen = set(before)
        seen.update(self._group(t))
        return _stored([*before, *(i for i in self._view_before(b) if i not in seen)])

    def _target_line(self, target: str, b: int) -> int | None:
        """The last compact boundary before ``b`` whose key or uuid is ``target``."""
        lines = self._names.get(target)
        if not lines:
            return None
        at = bisect.bisect_left(lines, b) - 1
        return lines[at] if at >= 0 else None

    def _group(self, t: int) -> list[int]:
        """The boundary at ``t`` and the summary and attachments written with it."""
        group = [t]
        chain = {self._f(t).uuid}
        for i in range(t + 1, len(self.records)):
            facts = self._f(i)
            part = facts.summary or facts.type == "attachment"
            if not part or facts.parent not in chain:
                break
            chain.add(facts.uuid)
            group.append(i)
        return group

    # -- lines -----------------------------------------------------------------------------------

    def _f(self, line: int) -> _Facts:
        facts = self._facts.get(line)
        if facts is None:
            entry = self.records[line].entry
            facts = _Facts(
                entry.uuid,
                entry.parent_uuid,
                entry.type,
                entry.is_compact_summary is True,
                entry.is_sidechain is True,
            )
            self._facts[line] = facts
        return facts

    def _uuid(self, line: int) -> str | None:
        facts = self._facts.get(line)
        if facts is not None:
            return facts.uuid
        record = self.records[line]
        # A live record has its uuid at hand; a released one is decoded once for this call.
        return record.uuid if not record.released else self._f(line).uuid

    def _uuids(self, lines: Iterable[int]) -> set[str]:
        return {uuid for line in lines if (uuid := self._uuid(line)) is not None}

    def _last_line(self, uuid: str, lo: int, hi: int) -> int | None:
        """The last line in ``[lo, hi)`` whose entry has ``uuid``, or None."""
        if lo >= hi:
            return None
        if self._history is not None:
            at = self._history.index_of(uuid)
            if at is None:
                return None
            if at < hi:
                return at if at >= lo else None
            # The uuid is repeated after ``hi`` (an imported transcript may do that): look back.
            for line in range(hi - 1, lo - 1, -1):
                if self._uuid(line) == uuid:
                    return line
            return None
        if self._uuid_lines_size != len(self.records):
            index: dict[str, list[int]] = {}
            for line, record in enumerate(self.records):
                if record.uuid is not None:
                    index.setdefault(record.uuid, []).append(line)
            self._uuid_lines, self._uuid_lines_size = index, len(self.records)
        lines = self._uuid_lines.get(uuid)
        if not lines:
            return None
        at = bisect.bisect_left(lines, hi) - 1
        return lines[at] if at >= 0 and lines[at] >= lo else None


def _describe(record: Record) -> _Boundary:
    entry = record.entry
    if entry.is_compact_boundary:
        meta = entry.compact_metadata
        return _Boundary(
            compact=True,
            uuid=entry.uuid,
            key=compaction_key(record),
            target=meta.undoes if meta is not None else None,
            prefix=meta.preserved_prefix if meta is not None else None,
            segment=meta.preserved_segment if meta is not None else None,
        )
    return _Boundary(
        compact=False,
        uuid=entry.uuid,
        key=entry.uuid,
        target=undone_target(record),
        prefix=None,
        segment=None,
    )
