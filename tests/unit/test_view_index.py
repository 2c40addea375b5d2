"""ViewIndex: a kept index over a growing history answers like a fresh computation, and long
chains of partial compactions and undos resolve without recursion."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compactd.core.partial import PartialError, plan_partial
from compactd.core.view import ViewIndex, context_records, last_undoable
from compactd.services.store import Store
from compactd.transcript.history import History
from compactd.transcript.model import Record, record_from_dict
from tests.helpers import linked_record, uuids


def _boundary(tag: str, **meta: Any) -> Record:
    return record_from_dict(
        {
            "type": "system",
            "subtype": "compact_boundary",
            "uuid": f"b-{tag}",
            "parentUuid": None,
            "compactMetadata": {"compactionId": f"C-{tag}", **meta},
        }
    )


def _summary(tag: str) -> Record:
    return linked_record(f"s-{tag}", "user", f"b-{tag}", isCompactSummary=True)


def _turns(first: int, count: int, parent: str | None) -> list[Record]:
    out = []
    for i in range(first, first + count):
        out.append(linked_record(f"u{i}", "user", parent))
        out.append(linked_record(f"a{i}", "assistant", f"u{i}"))
        parent = f"a{i}"
    return out


def _partial(view: list[Record], direction: Any, tag: str) -> list[Record]:
    """What the engine appends for a partial compaction of ``view`` at the first prompt (after
    the first) where one can be made."""
    prompts = [r.entry.uuid for r in view if r.kind == "user" and not r.entry.is_compact_summary]
    for pivot in prompts[1:]:
        try:
            plan = plan_partial(view, str(pivot), direction)
            break
        except PartialError:
            continue
    else:
        raise AssertionError(f"no prompt of the view can be a {direction} pivot")
    meta: dict[str, Any] = {}
    before = [r.entry.uuid for r in plan.kept_before if not r.entry.is_compact_boundary]
    if before:
        meta["preservedPrefix"] = {"headUuid": before[0], "tailUuid": before[-1]}
    kept = [r.entry.uuid for r in plan.kept]
    if kept:
        meta["preservedSegment"] = {
            "headUuid": kept[0],
            "anchorUuid": f"s-{tag}",
            "tailUuid": kept[-1],
        }
    return [_boundary(tag, **meta), _summary(tag)]


def _undo(tag: str, target: str) -> Record:
    return _boundary(tag, undoes=target)


def test_a_kept_index_follows_a_growing_history_of_partials_and_undos() -> None:
    history = History(_turns(0, 6, None))
    index = ViewIndex(history)
    last = "a5"
    for cycle in range(60):
        before = uuids(index.context())
        direction = "from" if cycle % 3 else "upTo"
        history.extend(_partial(index.context(), direction, f"p{cycle}"))
        compacted = uuids(index.context())
        assert compacted != before
        if cycle % 4 == 3:
            # Keep this one: work goes on after it, and the next cycle starts from here.
            history.extend(_turns(100 + cycle, 1, last))
            last = f"a{100 + cycle}"
            continue
        history.extend([_undo(f"x{cycle}", f"C-p{cycle}")])
        # The undo brings back exactly the view the compaction replaced.
        assert uuids(index.context()) == before
    # The kept index, a fresh one and the plain list agree on every prefix of the history.
    plain = list(history)
    for end in range(0, len(plain) + 1, 5):
        expected = uuids(context_records(plain, end))
        assert uuids(index.context(end)) == expected
        assert uuids(ViewIndex(history).context(end)) == expected
    assert index.last_undoable() == last_undoable(plain)


def test_a_loaded_history_resolves_a_long_undo_chain(tmp_path: Path) -> None:
    """After a restart every boundary is released; the chain is resolved from the file."""
    records = _turns(0, 4, None)
    for cycle in range(200):
        records += _partial(context_records(records), "from", f"p{cycle}")
        records.append(_undo(f"x{cycle}", f"C-p{cycle}"))
    store = Store(tmp_path)
    store.create_transcript("s", b"".join(r.raw + b"\n" for r in records))
    loaded = store.load("s").records
    assert loaded.live_count() < len(records)
    assert uuids(ViewIndex(loaded).context()) == uuids(_turns(0, 4, None))
