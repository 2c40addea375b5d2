"""Tests for compactd.core.view: slicing at the last boundary and relinking kept entries."""

from __future__ import annotations

from typing import Any

from compactd.core.view import (
    context_records,
    last_boundary_index,
    main_thread,
    preserved_records,
)
from compactd.transcript.model import Record, record_from_dict
from tests.conftest import load_fixture
from tests.helpers import linked_record, uuids


def boundary(uuid: str, segment: dict[str, str] | None = None, last: str | None = None) -> Record:
    meta: dict[str, Any] = {"trigger": "manual", "preTokens": 100}
    if segment is not None:
        meta["preservedSegment"] = segment
    return record_from_dict(
        {
            "type": "system",
            "subtype": "compact_boundary",
            "uuid": uuid,
            "parentUuid": None,
            "logicalParentUuid": last,
            "content": "Conversation compacted",
            "compactMetadata": meta,
        }
    )


def summary(uuid: str, parent: str) -> Record:
    return linked_record(
        uuid, "user", parent, isCompactSummary=True, isVisibleInTranscriptOnly=True
    )


def test_no_boundary_gives_everything() -> None:
    records = [linked_record("u1"), linked_record("a1", "assistant", "u1")]
    assert last_boundary_index(records) is None
    assert uuids(context_records(records)) == ["u1", "a1"]


def test_slices_at_the_last_boundary() -> None:
    records = [
        linked_record("u1"),
        boundary("b1"),
        summary("s1", "b1"),
        linked_record("u2", parent="s1"),
        boundary("b2"),
        summary("s2", "b2"),
        linked_record("u3", parent="s2"),
    ]
    assert last_boundary_index(records) == 4
    assert uuids(context_records(records)) == ["b2", "s2", "u3"]


def _partial_session(segment: dict[str, str]) -> list[Record]:
    return [
        linked_record("u1"),
        linked_record("a1", "assistant", "u1"),
        linked_record("u2", parent="a1"),
        linked_record("a2", "assistant", "u2"),
        linked_record("side", "assistant", "zz", isSidechain=True),
        linked_record("a2b", "assistant", "a2"),
        linked_record("r2", "user", "a2b"),
        boundary("b", segment, last="r2"),
        linked_record("att", "attachment", "b", attachment={"type": "date", "date": "x"}),
        summary("s", "att"),
        linked_record("u3", parent="s"),
    ]


def test_preserved_segment_follows_parent_links() -> None:
    records = _partial_session({"headUuid": "a2", "anchorUuid": "s", "tailUuid": "r2"})
    view = context_records(records)
    # The sidechain entry sits between head and tail in the file but not on the chain.
    assert uuids(view) == ["b", "att", "s", "a2", "a2b", "r2", "u3"]
    assert uuids(preserved_records(records, 7)) == ["a2", "a2b", "r2"]


def test_preserved_segment_falls_back_to_file_order() -> None:
    records = _partial_session({"headUuid": "a2", "anchorUuid": "s", "tailUuid": "r2"})
    # Break the chain: r2 now points at an entry that does not exist.
    records[6] = linked_record("r2", "user", "missing")
    view = context_records(records)
    assert uuids(view) == ["b", "att", "s", "a2", "a2b", "r2", "u3"]


def test_preserved_without_anchor_goes_after_the_summary() -> None:
    records = _partial_session({"headUuid": "a2", "tailUuid": "r2"})
    assert uuids(context_records(records)) == ["b", "att", "s", "a2", "a2b", "r2", "u3"]


def test_preserved_without_summary_goes_after_the_boundary() -> None:
    records = _partial_session({"headUuid": "a2", "tailUuid": "r2"})
    del records[9]
    records[9] = linked_record("u3", parent="att")
    assert uuids(context_records(records)) == ["b", "a2", "a2b", "r2", "att", "u3"]


def test_unknown_preserved_uuids_are_ignored() -> None:
    records = _partial_session({"headUuid": "nope", "anchorUuid": "s", "tailUuid": "r2"})
    assert uuids(context_records(records)) == ["b", "att", "s", "u3"]


def test_single_preserved_entry() -> None:
    records = _partial_session({"headUuid": "r2", "anchorUuid": "s", "tailUuid": "r2"})
    assert uuids(context_records(records)) == ["b", "att", "s", "r2", "u3"]


def test_preserved_entries_already_after_the_boundary_are_not_duplicated() -> None:
    records = [
        linked_record("u1"),
        boundary("b", {"headUuid": "k1", "anchorUuid": "s", "tailUuid": "k2"}),
        summary("s", "b"),
        linked_record("k1", "assistant", "s"),
        linked_record("k2", "user", "k1"),
    ]
    assert uuids(context_records(records)) == ["b", "s", "k1", "k2"]


def test_context_records_is_idempotent() -> None:
    records = _partial_session({"headUuid": "a2", "anchorUuid": "s", "tailUuid": "r2"})
    once = context_records(records)
    assert uuids(context_records(once)) == uuids(once)


def test_main_thread_drops_inline_sidechains() -> None:
    records = [
        linked_record("u1"),
        linked_record("x1", "user", None, isSidechain=True),
        linked_record("x2", "assistant", "x1", isSidechain=True),
        linked_record("a1", "assistant", "u1", isSidechain=False),
    ]
    assert uuids(main_thread(records)) == ["u1", "a1"]
    only_side = records[1:3]
    assert uuids(main_thread(only_side)) == ["x1", "x2"]


# -- real transcripts ------------------------------------------------------------------------------


def test_fixture_auto_compaction_relinks_preserved_entries() -> None:
    records = load_fixture("claude-code-2.1.330__r2_auto.jsonl")
    view = context_records(records)
    head = [r.entry for r in view[:7]]
    assert head[0].is_compact_boundary
    # Two attachments were written between the boundary and the summary.
    assert [e.type for e in head[1:3]] == ["attachment", "attachment"]
    assert head[3].is_compact_summary is True
    raw_meta = view[0].to_builtins()["compactMetadata"]
    kept = raw_meta["preservedMessages"]["uuids"]
    assert [e.uuid for e in head[4:7]] == kept
    # What came after the summary follows the kept entries, in file order.
    after = [r.entry.uuid for r in records[records.index(view[3]) + 1 :] if r.entry.uuid]
    assert [r.entry.uuid for r in view[7:] if r.entry.uuid] == after


def test_fixture_manual_compaction_relinks_preserved_entries() -> None:
    records = load_fixture("claude-code-2.1.330__r16_manual.jsonl")
    view = context_records(records)
    assert view[0].entry.is_compact_boundary
    assert view[1].entry.is_compact_summary is True
    kept = view[0].to_builtins()["compactMetadata"]["preservedMessages"]["uuids"]
    assert [r.entry.uuid for r in view[2 : 2 + len(kept)]] == kept
    after = [r.entry.uuid for r in records[records.index(view[1]) + 1 :] if r.entry.uuid]
    assert [r.entry.uuid for r in view[2 + len(kept) :] if r.entry.uuid] == after


def test_fixture_boundary_without_preserved_segment() -> None:
    records = load_fixture("NotTahaAli__sessclone__compaction.jsonl")
    b = last_boundary_index(records)
    assert b is not None
    assert context_records(records) == records[b:]
