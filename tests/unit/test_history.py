"""History: records in file order, released lines kept as offsets, an exact uuid index."""

from __future__ import annotations

import gc
import tracemalloc
import weakref
from pathlib import Path
from typing import Any

import pytest

from compactd.core.recall import fetch
from compactd.core.view import context_records, last_undoable
from compactd.services.store import Store
from compactd.transcript.history import History, UuidIndex, boundary_indices
from compactd.transcript.model import Record, record_from_dict


def _entry(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "type": "user",
        "uuid": f"u-{i}",
        "message": {"role": "user", "content": f"message {i} " + "x" * (i % 50)},
        **extra,
    }


def _boundary(uuid: str, subtype: str = "compact_boundary") -> dict[str, Any]:
    return {"type": "system", "subtype": subtype, "uuid": uuid, "content": "Conversation compacted"}


def _written(tmp_path: Path, objs: list[dict[str, Any]]) -> list[Record]:
    """Records written to a real transcript file, located the way the store locates them."""
    data = b"".join(record_from_dict(o).raw + b"\n" for o in objs)
    return list(Store(tmp_path).create_transcript("s", data).records)


def test_sequence_behaviour_and_lookups_survive_release(tmp_path: Path) -> None:
    objs = [_entry(i) for i in range(10)]
    objs[4] = _boundary("b-4")
    records = _written(tmp_path, objs)
    history = History(records)
    assert len(history) == 10
    assert history[-1] is records[-1] and history[2:4] == records[2:4]
    history.retain(records[7:])
    assert history.live_count() == 3
    assert records[0].released and not records[8].released
    # Released lines read back exactly, by index, slice, iteration and uuid.
    assert [r.raw for r in history] == [r.raw for r in _written(tmp_path / "again", objs)]
    assert history[1].entry.uuid == "u-1" and history[1].kind == "user"
    assert history[4].kind == "system" and history[4].subtype == "compact_boundary"
    assert history.index_of("u-3") == 3 and history.index_of("b-4") == 4
    assert history.index_of("nope") is None
    assert boundary_indices(history) == [4] == boundary_indices(list(history))
    with pytest.raises(IndexError):
        history[10]


def test_a_released_line_is_one_object_while_held(tmp_path: Path) -> None:
    records = _written(tmp_path, [_entry(i) for i in range(5)])
    history = History(records)
    history.retain([])
    first = history[1]
    assert history[1] is first  # identity holds while someone keeps the record
    assert history[0:3][1] is first
    history.retain([first])  # brought back into the context
    assert history.live_count() == 1 and not first.released
    assert history[1] is first


def test_lines_never_written_stay_in_memory() -> None:
    records = [record_from_dict(_entry(i)) for i in range(3)]
    history = History(records)
    history.retain([])
    assert history.live_count() == 3
    assert all(not r.released for r in history)


def test_uuid_index_is_exact_past_folding_and_keeps_the_last_line() -> None:
    names = {i: f"id-{i}" for i in range(10_000)}
    index = UuidIndex()
    for i in range(10_000):
        index.add(names[i], i)
    # A repeated uuid (an imported transcript may hold one) resolves to its last line.
    names[10_000] = "id-7"
    index.add("id-7", 10_000)
    assert len(index) == 10_001
    assert all(index.get(f"id-{i}", names.get) == i for i in range(0, 10_000, 7) if i != 7)
    assert index.get("id-7", names.get) == 10_000
    assert index.get("id-10001", names.get) is None


def test_uuid_index_confirms_hash_matches_against_the_line() -> None:
    # Two uuids forced onto one line slot: the wrong one must not be reported present.
    names = {0: "alpha"}
    index = UuidIndex()
    index.add("alpha", 0)
    for i in range(1, 1024):
        names[i] = f"n{i}"
        index.add(f"n{i}", i)
    names[0] = "rewritten"  # the line no longer holds "alpha"
    assert index.get("alpha", names.get) is None


def test_released_history_costs_a_few_bytes_a_line(tmp_path: Path) -> None:
    """The point of History: memory follows the context, not the transcript's length."""
    count = 20_000
    objs = [_entry(i) for i in range(count)]
    gc.collect()
    tracemalloc.start()
    try:
        records = _written(tmp_path, objs)
        history = History(records)
        decoded = tracemalloc.get_traced_memory()[0]
        keep = records[-50:]
        del records
        history.retain(keep)
        gc.collect()
        released = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert history.live_count() == 50
    assert decoded / count > 300  # every line decoded: hundreds of bytes each
    assert released / count < 40, released / count  # offsets, kinds and the uuid index
    assert history[123].entry.uuid == "u-123"


def test_recall_fetch_uses_the_uuid_index_and_agrees_with_a_scan(tmp_path: Path) -> None:
    records = _written(tmp_path, [_entry(i) for i in range(300)])
    history = History(records)
    history.retain(records[-10:])
    wanted = ["u-5", "missing", "u-295", "u-5", "u-150"]
    by_index = [h.record.entry.uuid for h in fetch(history, wanted)]
    by_scan = [h.record.entry.uuid for h in fetch(list(history), wanted)]
    assert by_index == by_scan == ["u-5", "u-295", "u-150"]


def _linked(uid: str, kind: str, parent: str | None = None, **extra: Any) -> dict[str, Any]:
    role = "user" if kind == "user" else "assistant"
    return {
        "type": kind,
        "uuid": uid,
        "parentUuid": parent,
        "message": {"role": role, "content": f"{uid} says hello"},
        **extra,
    }


def _group(b: str, cid: str, **meta: Any) -> list[dict[str, Any]]:
    return [
        {**_boundary(b), "compactMetadata": {"compactionId": cid, **meta}},
        {**_linked(f"s-{b}", "user", b), "isCompactSummary": True},
        {"type": "attachment", "uuid": f"at-{b}", "parentUuid": f"s-{b}", "attachment": {}},
    ]


_SCENARIOS = {
    "undo of the only compaction": [
        _linked("u1", "user"),
        _linked("a1", "assistant", "u1"),
        *_group("b1", "C1"),
        _linked("u2", "user", "at-b1"),
        {**_boundary("x1"), "compactMetadata": {"compactionId": "X1", "undoes": "C1"}},
        _linked("a2", "assistant", "u2"),
    ],
    "undo of the second of two": [
        _linked("u1", "user"),
        _linked("a1", "assistant", "u1"),
        *_group("b1", "C1"),
        _linked("u2", "user", "at-b1"),
        _linked("a2", "assistant", "u2"),
        *_group("b2", "C2"),
        {**_boundary("x2"), "compactMetadata": {"compactionId": "X2", "undoes": "C2"}},
    ],
    "partial compaction keeping entries before its boundary": [
        _linked("u1", "user"),
        _linked("a1", "assistant", "u1"),
        _linked("u2", "user", "a1"),
        _linked("a2", "assistant", "u2"),
        *_group(
            "b1",
            "C1",
            preservedSegment={"headUuid": "u2", "anchorUuid": "s-b1", "tailUuid": "a2"},
        ),
    ],
}


@pytest.mark.parametrize("name", sorted(_SCENARIOS))
def test_views_over_a_loaded_history_match_the_plain_list(tmp_path: Path, name: str) -> None:
    """Loading releases lines at each boundary; the views built over it must not change."""
    objs = _SCENARIOS[name]
    plain = [record_from_dict(o) for o in objs]
    store = Store(tmp_path)
    created = store.create_transcript("s", b"".join(r.raw + b"\n" for r in plain)).records
    loaded = store.load("s").records
    assert [r.uuid for r in context_records(created)] == [r.uuid for r in context_records(plain)]
    assert isinstance(loaded, History) and loaded.live_count() < len(objs)
    expected = [r.uuid for r in context_records(plain)]
    assert [r.uuid for r in context_records(loaded)] == expected
    assert last_undoable(loaded) == last_undoable(plain)


def test_dropping_a_history_frees_its_records_without_the_cycle_collector() -> None:
    records = [record_from_dict(_entry(i)) for i in range(3)]
    history = History(records)
    assert history.index_of("u-1") == 1
    probe = weakref.ref(records[1])
    gc.disable()
    try:
        del records, history
        assert probe() is None  # freed by reference counting alone: no reference cycle
    finally:
        gc.enable()
