"""Unit tests of the view after an undo (core/view.py: undo entries and last_undoable)."""

from __future__ import annotations

from typing import Any

from compactd.core.view import context_records, last_undoable, undone_ids
from compactd.transcript.model import Record, record_from_dict
from tests.helpers import linked_record, uuids


def _boundary(uid: str, cid: str, **meta: Any) -> Record:
    return record_from_dict(
        {
            "type": "system",
            "subtype": "compact_boundary",
            "uuid": uid,
            "parentUuid": None,
            "compactMetadata": {"compactionId": cid, **meta},
        }
    )


def _summary(uid: str, parent: str) -> Record:
    return record_from_dict(
        {
            "type": "user",
            "uuid": uid,
            "parentUuid": parent,
            "isCompactSummary": True,
            "message": {"role": "user", "content": "summary"},
        }
    )


def _attachment(uid: str, parent: str) -> Record:
    return record_from_dict(
        {"type": "attachment", "uuid": uid, "parentUuid": parent, "attachment": {"type": "x"}}
    )


def _undo(uid: str, target: str) -> Record:
    return _boundary(uid, f"undo-{uid}", undoes=target)


def _micro(uid: str, ids: list[str], **meta: Any) -> Record:
    return record_from_dict(
        {
            "type": "system",
            "subtype": "microcompact_boundary",
            "uuid": uid,
            "microcompactMetadata": {"compactedToolIds": ids, "tokensSaved": 10, **meta},
        }
    )


BASE = [
    linked_record("u1", "user"),
    linked_record("a1", "assistant", "u1"),
    linked_record("u2", "user", "a1"),
]


def test_undo_of_a_full_compaction_shows_the_previous_view_and_later_entries() -> None:
    c1 = [_boundary("b1", "C1"), _summary("s1", "b1"), _attachment("at1", "s1")]
    later = [linked_record("u3", "user", "at1")]
    records = [*BASE, *c1, *later, _undo("x1", "C1"), linked_record("a3", "assistant", "u3")]
    assert uuids(context_records(records)) == ["u1", "a1", "u2", "u3", "a3"]
    assert undone_ids(records) == {"C1"}
    assert last_undoable(records) is None


def test_undo_of_the_second_compaction_returns_to_the_first() -> None:
    c1 = [_boundary("b1", "C1"), _summary("s1", "b1")]
    mid = [linked_record("u3", "user", "s1"), linked_record("a3", "assistant", "u3")]
    c2 = [_boundary("b2", "C2"), _summary("s2", "b2")]
    records = [*BASE, *c1, *mid, *c2]
    before_c2 = context_records(records[: len(BASE) + len(c1) + len(mid)])
    assert last_undoable(records) == len(BASE) + len(c1) + len(mid)
    undone = [*records, _undo("x2", "C2")]
    assert context_records(undone) == before_c2
    assert last_undoable(undone) == len(BASE)  # next: C1
    both = [*undone, _undo("x1", "C1")]
    assert uuids(context_records(both)) == ["u1", "a1", "u2", "u3", "a3"]
    assert last_undoable(both) is None


def test_undo_of_a_partial_compaction_keeps_the_kept_entries_once() -> None:
    kept_seg = {"headUuid": "u2", "anchorUuid": "s1", "tailUuid": "u2"}
    c1 = [_boundary("b1", "C1", preservedSegment=kept_seg), _summary("s1", "b1")]
    records = [*BASE, *c1]
    assert uuids(context_records(records)) == ["b1", "s1", "u2"]
    assert uuids(context_records([*records, _undo("x", "C1")])) == ["u1", "a1", "u2"]


def test_unknown_target_makes_the_undo_entry_transparent() -> None:
    records = [*BASE, _undo("x", "nope"), linked_record("a2", "assistant", "u2")]
    assert uuids(context_records(records)) == ["u1", "a1", "u2", "a2"]


def test_microcompact_undo_targets() -> None:
    records = [*BASE, _micro("m1", ["t1"])]
    assert last_undoable(records) == 3
    undone = [*records, _micro("m2", [], undoes="m1", restoredToolIds=["t1"])]
    assert undone_ids(undone) == {"m1"}
    assert last_undoable(undone) is None
    # A compaction after the microcompact is undone first.
    records = [*BASE, _micro("m1", ["t1"]), _boundary("b1", "C1"), _summary("s1", "b1")]
    assert last_undoable(records) == 4
    assert last_undoable([*records, _undo("x", "C1")]) == 3
