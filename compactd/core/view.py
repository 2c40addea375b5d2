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

Everything here is pure and linear in the number of records examined, because the server
rebuilds the view on every ``session/messages`` request.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from compactd.history import BOUNDARY_SUBTYPES, boundary_indices
from compactd.model import PreservedSegment, Record

__all__ = [
    "context_records",
    "last_boundary_index",
    "main_thread",
    "preserved_prefix_records",
    "preserved_records",
    "compaction_key",
    "last_undoable",
    "undone_ids",
    "undone_target",
]


def last_boundary_index(records: Sequence[Record]) -> int | None:
    """Index of the last ``compact_boundary`` record, or None when there is none."""
    return _last_boundary_before(records, len(records))


def preserved_records(records: Sequence[Record], boundary_index: int) -> list[Record]:
    """The entries a partial compaction kept, found before the boundary at ``boundary_index``.

    Returns them in file order, or an empty list when the boundary names no preserved segment
    or its head / tail cannot be found before it.
    """
    meta = records[boundary_index].entry.compact_metadata
    segment = meta.preserved_segment if meta is not None else None
    if segment is None:
        return []
    return _resolve_segment(records, boundary_index, segment)


def context_records(records: Sequence[Record], end: int | None = None) -> list[Record]:
    """The records from the last compact boundary on, with preserved entries relinked.

    Without a boundary this is every record. With one, it is the boundary, then the records
    after it in file order; the entries named by the boundary's preserved segment are inserted
    right after the anchor (the continuation summary), before anything that came later, and
    those named by its preserved prefix right after the boundary itself.
    Entries that already appear after the boundary are not inserted twice, which also makes
    the function idempotent: ``context_records(context_records(r)) == context_records(r)``.
    ``end`` limits the view to ``records[:end]`` without copying the list.
    """
    stop = len(records) if end is None else max(0, min(end, len(records)))
    b = _last_boundary_before(records, stop)
    if b is None:
        return list(records[:stop])
    if undone_target(records[b]) is not None:
        return _undo_view(records, b, stop)
    view = list(records[b:stop])
    prefix = preserved_prefix_records(records, b)
    if prefix:
        present = {r.entry.uuid for r in view if r.entry.uuid is not None}
        view = view[:1] + [r for r in prefix if r.entry.uuid not in present] + view[1:]
    kept = preserved_records(records, b)
    if not kept:
        return view
    present = {r.entry.uuid for r in view if r.entry.uuid is not None}
    kept = [r for r in kept if r.entry.uuid not in present]
    if not kept:
        return view
    at = _insertion_point(view)
    return view[: at + 1] + kept + view[at + 1 :]


def preserved_prefix_records(records: Sequence[Record], boundary_index: int) -> list[Record]:
    """The leading entries a partial compaction ``from`` a pivot kept before its summary.

    They are the start of the view as it was just before the boundary (which may itself come
    from an earlier compaction), from the prefix's head through its tail, without that earlier
    boundary record. Empty when the boundary names no prefix or its tail cannot be found.
    """
    meta = records[boundary_index].entry.compact_metadata
    segment = meta.preserved_prefix if meta is not None else None
    if segment is None or segment.tail_uuid is None:
        return []
    before = context_records(records, boundary_index)
    ids = [r.entry.uuid for r in before]
    try:
        tail_at = ids.index(segment.tail_uuid)
    except ValueError:
        return []
    head_at = 0
    if segment.head_uuid is not None and segment.head_uuid in ids[: tail_at + 1]:
        head_at = ids.index(segment.head_uuid)
    return [r for r in before[head_at : tail_at + 1] if not r.entry.is_compact_boundary]


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


# -- internals -----------------------------------------------------------------------------------


def _last_boundary_before(records: Sequence[Record], stop: int) -> int | None:
    # By kind, which released records keep: walking back decodes no line.
    for i in range(stop - 1, -1, -1):
        record = records[i]
        if record.kind == "system" and record.subtype == "compact_boundary":
            return i
    return None


def _insertion_point(view: list[Record]) -> int:
    """Index in ``view`` after which preserved entries go: the anchor, else the summary."""
    boundary = view[0].entry
    meta = boundary.compact_metadata
    segment = meta.preserved_segment if meta is not None else None
    anchor = segment.anchor_uuid if segment is not None else None
    summary_at: int | None = None
    for i, record in enumerate(view):
        entry = record.entry
        if anchor is not None and entry.uuid == anchor:
            return i
        if summary_at is None and entry.type == "user" and entry.is_compact_summary is True:
            summary_at = i
            if anchor is None:
                break
    return summary_at if summary_at is not None else 0


def _resolve_segment(
    records: Sequence[Record], boundary_index: int, segment: PreservedSegment
) -> list[Record]:
    head = segment.head_uuid or segment.tail_uuid
    tail = segment.tail_uuid or segment.head_uuid
    if head is None or tail is None:
        return []
    # Walk back from the boundary only as far as the head: kept entries are the most recent
    # ones before the boundary, so this touches few records even in a long transcript.
    index: dict[str, int] = {}
    head_at: int | None = None
    for i in range(boundary_index - 1, -1, -1):
        uuid = records[i].entry.uuid
        if uuid is None:
            continue
        index.setdefault(uuid, i)
        if uuid == head:
            head_at = i
            break
    tail_at = index.get(tail)
    if head_at is None or tail_at is None:
        return []
    if tail_at < head_at:
        head_at, tail_at = tail_at, head_at
        head, tail = tail, head

    chain = _parent_chain(records, index, head, tail, head_at, tail_at)
    if chain is not None:
        return [records[i] for i in sorted(chain)]
    # A segment kept by compactd is a run of the view just before this boundary; it may span an
    # earlier boundary (kept entries of an earlier partial compaction, then newer ones), where
    # the file holds summarized entries between head and tail and the parent links need not
    # join up. Take that run of the earlier view when both ends are in it.
    sidechain = records[head_at].entry.is_sidechain is True
    if any(records[i].entry.is_compact_boundary for i in range(head_at, tail_at)):
        earlier = context_records(records, boundary_index)
        at = {r.entry.uuid: i for i, r in enumerate(earlier) if r.entry.uuid is not None}
        first, last = at.get(head), at.get(tail)
        if first is not None and last is not None and first <= last:
            return [
                r
                for r in earlier[first : last + 1]
                if not r.entry.is_compact_boundary and (r.entry.is_sidechain is True) == sidechain
            ]
    # The parent links do not lead from tail to head (rewritten or missing ids): fall back to
    # the conversation entries between them in file order.
    return [
        r
        for r in records[head_at : tail_at + 1]
        if r.entry.uuid is not None
        and (r.entry.is_sidechain is True) == sidechain
        and not r.entry.is_compact_boundary
    ]


def _parent_chain(
    records: Sequence[Record],
    index: dict[str, int],
    head: str,
    tail: str,
    head_at: int,
    tail_at: int,
) -> list[int] | None:
    """Indexes on the parentUuid path from tail back to head, or None if there is no path."""
    chain = [tail_at]
    current = tail
    # A path visits each record between head and tail at most once; more steps mean a cycle.
    for _ in range(tail_at - head_at + 1):
        if current == head:
            return chain
        parent = records[index[current]].entry.parent_uuid
        if parent is None:
            return None
        at = index.get(parent)
        if at is None or at < head_at:
            return None
        chain.append(at)
        current = parent
    return chain if current == head else None


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
    return record.kind == "system" and record.subtype in BOUNDARY_SUBTYPES


def undone_target(record: Record) -> str | None:
    """The compaction (id or boundary uuid) that ``record`` undoes, or None."""
    if not _is_boundary(record):
        return None
    entry = record.entry
    if entry.is_compact_boundary and entry.compact_metadata is not None:
        return entry.compact_metadata.undoes
    if entry.is_microcompact_boundary and entry.microcompact_metadata:
        value = entry.microcompact_metadata.get("undoes")
        return value if isinstance(value, str) and value else None
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


def _undo_view(records: Sequence[Record], b: int, stop: int) -> list[Record]:
    target = undone_target(records[b])
    t = next(
        (
            i
            for i in range(b - 1, -1, -1)
            if _is_boundary(records[i])
            and records[i].entry.is_compact_boundary
            and target in (compaction_key(records[i]), records[i].entry.uuid)
        ),
        None,
    )
    if t is None:
        # The undone boundary is unknown: the undo entry is simply transparent.
        return context_records(records, b) + list(records[b + 1 : stop])
    # Records are compared by identity. A released record read back from a ``History`` keeps
    # one identity only while someone holds it, so ``before`` and ``group`` stay referenced
    # until the comparison is done.
    before = context_records(records, t)
    group = _group_of(records, t)
    seen = {id(r) for r in before} | {id(r) for r in group}
    since = [r for r in context_records(records, b) if id(r) not in seen]
    return before + since + list(records[b + 1 : stop])


def _group_of(records: Sequence[Record], t: int) -> list[Record]:
    """The boundary at ``t`` and the summary and attachments written with it."""
    group = [records[t]]
    chain = {group[0].entry.uuid}
    for i in range(t + 1, len(records)):
        record = records[i]
        entry = record.entry
        part = entry.is_compact_summary is True or entry.type == "attachment"
        if not part or entry.parent_uuid not in chain:
            break
        chain.add(entry.uuid)
        group.append(record)
    return group


def last_undoable(records: Sequence[Record]) -> int | None:
    """Index of the most recent compaction or microcompact boundary not undone yet, or None.

    Undo entries themselves are skipped: undoing twice undoes the compaction before.
    """
    undone: set[str] = set()
    # Only boundaries matter: a ``History`` lists them without a record made for every line.
    for i in reversed(boundary_indices(records)):
        record = records[i]
        target = undone_target(record)
        if target is not None:
            undone.add(target)
            continue
        entry = record.entry
        if entry.is_compact_boundary:
            if compaction_key(record) in undone or entry.uuid in undone:
                continue
            return i
        if entry.is_microcompact_boundary and entry.uuid not in undone:
            return i
    return None
