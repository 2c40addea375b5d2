"""Unit tests of recall search and fetch (core/recall.py), including a speed check's shape."""

from __future__ import annotations

from compactd.cli.synthetic import make_session
from compactd.core import recall
from compactd.core.recall import SNIPPET_CONTEXT_CHARS, entry_text, fetch, search
from compactd.transcript.model import record_from_dict
from tests.helpers import assistant, to_records, tool_result, tool_use_block, user

RECORDS = to_records(
    [
        user("The Quick brown fox", uuid="a"),
        assistant([tool_use_block("t1", "Grep", {"pattern": "quick"})], uuid="b"),
        tool_result("t1", "x" * 300 + " QUICK " + "y" * 300, uuid="c"),
        user('a "quoted" word \\ with backslash and ünïcode', uuid="d"),
    ]
)


def test_search_is_case_insensitive_most_recent_first_and_limited() -> None:
    hits = search(RECORDS, "quick")
    assert [h.record.entry.uuid for h in hits] == ["c", "b", "a"]
    assert [h.record.entry.uuid for h in search(RECORDS, "QUICK", limit=2)] == ["c", "b"]
    assert search(RECORDS, "absent") == []


def test_snippet_is_a_window_around_the_match() -> None:
    hit = search(RECORDS, "quick", limit=1)[0]
    assert hit.snippet.startswith("...") and hit.snippet.endswith("...")
    assert "QUICK" in hit.snippet
    assert len(hit.snippet) == 2 * SNIPPET_CONTEXT_CHARS + len(" QUICK ") - 2 + 6


def test_cleared_tool_results_are_flagged() -> None:
    hit = search(RECORDS, "QUICK", limit=1, cleared_tool_ids=frozenset({"t1"}))[0]
    assert hit.hidden_part is True
    assert search(RECORDS, "fox", cleared_tool_ids=frozenset({"t1"}))[0].hidden_part is False


def test_queries_json_escapes_are_still_found() -> None:
    assert [h.record.entry.uuid for h in search(RECORDS, '"quoted" word \\ with')] == ["d"]
    assert [h.record.entry.uuid for h in search(RECORDS, "ÜNÏCODE")] == ["d"]


def test_fetch_by_uuid_keeps_the_requested_order() -> None:
    hits = fetch(RECORDS, ["c", "missing", "a", "c"])
    assert [h.record.entry.uuid for h in hits] == ["c", "a"]
    assert "Grep" in entry_text(RECORDS[1])


def test_search_over_a_long_transcript_finds_the_oldest_match() -> None:
    entries = make_session(entries=3000, target_tokens=200_000, seed=3)
    records = [record_from_dict(e) for e in entries]
    first = next(
        r for r in records if r.entry.type == "user" and isinstance(r.entry.message.content, str)
    )  # type: ignore[union-attr]
    needle = first.entry.message.content[:40]  # type: ignore[union-attr,index]
    hits = search(records, needle, limit=200)
    assert first in [h.record for h in hits]


def test_recall_pointers_name_entries_by_uuid() -> None:
    uid = "958521ac-8062-4244-acfb-ce47e3b31791"
    assert recall.pointer(uid) == f"recall:{uid}"
    text = (
        f"[… 12 characters left out; {recall.pointer(uid)} returns it whole …] recall:e7 recall:e7"
    )
    assert recall.pointer_uuids(text) == [uid, "e7"]
    assert recall.pointer_uuids("no pointer here: recall/search") == []
