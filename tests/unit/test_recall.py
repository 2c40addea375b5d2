"""Unit tests of recall's fetch, snippets and pointers (core/recall.py); word search is in
test_recall_index.py."""

from __future__ import annotations

from compactd.core import recall
from compactd.core.recall import SNIPPET_CONTEXT_CHARS, entry_text, fetch
from tests.helpers import assistant, to_records, tool_result, tool_use_block, user

RECORDS = to_records(
    [
        user("The Quick brown fox", uuid="a"),
        assistant([tool_use_block("t1", "Grep", {"pattern": "quick"})], uuid="b"),
        tool_result("t1", "x" * 300 + " QUICK " + "y" * 300, uuid="c"),
        user('a "quoted" word \\ with backslash and ünïcode', uuid="d"),
    ]
)


def test_snippet_is_a_window_around_the_match() -> None:
    text = "x" * 300 + " QUICK " + "y" * 300
    snippet = recall.snippet_at(text, text.index("QUICK"), len("QUICK"))
    assert snippet.startswith("...") and snippet.endswith("...")
    assert "QUICK" in snippet
    assert len(snippet) == 2 * SNIPPET_CONTEXT_CHARS + len(" QUICK ") - 2 + 6
    assert recall.snippet_at("short", 0, 5) == "short"


def test_fetch_by_uuid_keeps_the_requested_order() -> None:
    hits = fetch(RECORDS, ["c", "missing", "a", "c"])
    assert [h.record.entry.uuid for h in hits] == ["c", "a"]
    assert "Grep" in entry_text(RECORDS[1])


def test_recall_pointers_name_entries_by_uuid() -> None:
    uid = "958521ac-8062-4244-acfb-ce47e3b31791"
    assert recall.pointer(uid) == f"recall:{uid}"
    text = (
        f"[… 12 characters left out; {recall.pointer(uid)} returns it whole …] recall:e7 recall:e7"
    )
    assert recall.pointer_uuids(text) == [uid, "e7"]
    assert recall.pointer_uuids("no pointer here: recall/search") == []
