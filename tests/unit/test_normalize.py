"""Tests for compactd.core.normalize: one test per rule, then every fixture transcript."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compactd.core.normalize import (
    CLEARED_TOOL_RESULT_PLACEHOLDER,
    DOCUMENT_MARKER,
    IMAGE_MARKER,
    LEADING_USER_PLACEHOLDER,
    api_view,
    attachment_blocks,
    to_api_messages,
)
from compactd.core.view import context_records
from compactd.transcript.model import Record, record_from_dict
from tests import helpers
from tests.conftest import fixture_transcripts, load_fixture
from tests.helpers import numbering, text_block, tool_result_block, tool_use_block

FIXTURE_NAMES = [path.name for path in fixture_transcripts()]

_uuid = numbering("e")


def user(content: Any, **extra: Any) -> Record:
    return record_from_dict(helpers.user(content, uuid=_uuid(), **extra))


def assistant(mid: str | None, content: Any, model: str = "claude-x", **extra: Any) -> Record:
    entry = helpers.assistant(content, uuid=_uuid(), msg_id=mid, model=model, **extra)
    return record_from_dict(entry)


def attachment(payload: dict[str, Any], rendered: Any = None) -> Record:
    obj: dict[str, Any] = {"type": "attachment", "uuid": _uuid(), "attachment": payload}
    if rendered is not None:
        obj["rendered"] = rendered
    return record_from_dict(obj)


def other(kind: str, **extra: Any) -> Record:
    return record_from_dict({"type": kind, "uuid": _uuid(), **extra})


def use(tid: str, name: str = "Bash") -> dict[str, Any]:
    return tool_use_block(tid, name, {"command": "ls"})


def image() -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}


def document() -> dict[str, Any]:
    return {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}}


def shape(messages: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Each message as (role, [block summary]) for compact assertions."""
    out = []
    for m in messages:
        parts = []
        for b in m["content"]:
            kind = b["type"]
            if kind == "text":
                parts.append(b["text"])
            elif kind == "tool_use":
                parts.append(f"use:{b['id']}")
            elif kind == "tool_result":
                parts.append(f"result:{b['tool_use_id']}")
            else:
                parts.append(kind)
        out.append((m["role"], parts))
    return out


def check_api_invariants(messages: list[dict[str, Any]]) -> None:
    """What the Messages API demands of a message list (and what normalize promises)."""
    if not messages:
        return
    assert messages[0]["role"] == "user"
    for prev, cur in zip(messages, messages[1:], strict=False):
        assert prev["role"] != cur["role"], "roles must alternate"
    seen_uses: set[str] = set()
    for i, m in enumerate(messages):
        assert m["content"], "no empty message"
        kinds = [b["type"] for b in m["content"]]
        if m["role"] == "user":
            prev_uses = (
                {b["id"] for b in messages[i - 1]["content"] if b["type"] == "tool_use"}
                if i > 0
                else set()
            )
            results = [b["tool_use_id"] for b in m["content"] if b["type"] == "tool_result"]
            assert set(results) <= prev_uses, "tool_result without its tool_use just before"
            assert len(results) == len(set(results))
            n = len(results)
            assert all(k == "tool_result" for k in kinds[:n]), "tool results come first"
        else:
            uses = [b["id"] for b in m["content"] if b["type"] == "tool_use"]
            assert not (set(uses) & seen_uses), "duplicate tool_use id"
            seen_uses.update(uses)
            if i + 1 < len(messages):
                answered = {
                    b["tool_use_id"]
                    for b in messages[i + 1]["content"]
                    if b["type"] == "tool_result"
                }
                assert set(uses) <= answered, "tool_use without a result"
        for b in m["content"]:
            if b["type"] == "text":
                assert b["text"].strip()
    assert not all(b["type"] in ("thinking", "redacted_thinking") for b in messages[-1]["content"])


# -- filtering -------------------------------------------------------------------------------------


def test_drops_non_conversation_entries() -> None:
    records = [
        other("summary", summary="old", leafUuid="x"),
        user("hi"),
        other("progress", data={"x": 1}),
        other("system", subtype="informational", content="note"),
        other("queue-operation", operation="enqueue"),
        other("file-history-snapshot"),
        assistant("m1", [text_block("hello")]),
    ]
    assert shape(to_api_messages(records)) == [("user", ["hi"]), ("assistant", ["hello"])]


def test_drops_synthetic_api_errors() -> None:
    records = [
        user("hi"),
        assistant("m0", [text_block("API Error: 500")], model="<synthetic>"),
        assistant(None, [text_block("Prompt is too long")], isApiErrorMessage=True),
        user("again"),
        assistant("m1", [text_block("ok")]),
    ]
    assert shape(to_api_messages(records)) == [("user", ["hi", "again"]), ("assistant", ["ok"])]


def test_slices_at_the_last_boundary() -> None:
    records = [
        user("old"),
        assistant("m0", [text_block("old answer")]),
        other("system", subtype="compact_boundary", content="Conversation compacted"),
        user("Summary: ...", isCompactSummary=True),
        assistant("m1", [text_block("new")]),
    ]
    assert shape(to_api_messages(records)) == [("user", ["Summary: ..."]), ("assistant", ["new"])]


def test_strings_become_text_blocks() -> None:
    msgs = to_api_messages([user("plain"), assistant("m", "also plain")])
    assert msgs == [
        {"role": "user", "content": [{"type": "text", "text": "plain"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "also plain"}]},
    ]


def test_empty_text_blocks_are_dropped() -> None:
    records = [
        user([text_block(""), text_block("x")]),
        assistant("m", [text_block("  "), text_block("y")]),
    ]
    assert shape(to_api_messages(records)) == [("user", ["x"]), ("assistant", ["y"])]


# -- merging ---------------------------------------------------------------------------------------


def test_consecutive_users_merge() -> None:
    records = [
        user("one"),
        user([text_block("two")]),
        user("three"),
        assistant("m", [text_block("a")]),
    ]
    assert shape(to_api_messages(records)) == [
        ("user", ["one", "two", "three"]),
        ("assistant", ["a"]),
    ]


def test_assistant_entries_with_same_id_merge() -> None:
    records = [
        user("go"),
        assistant("m1", [{"type": "thinking", "thinking": "hmm", "signature": "sig"}]),
        assistant("m1", [text_block("doing it")]),
        assistant("m1", [use("t1")]),
        user([tool_result_block("t1")]),
    ]
    msgs = to_api_messages(records)
    assert shape(msgs) == [
        ("user", ["go"]),
        ("assistant", ["thinking", "doing it", "use:t1"]),
        ("user", ["result:t1"]),
    ]
    # Thinking is kept with its signature.
    assert msgs[1]["content"][0] == {"type": "thinking", "thinking": "hmm", "signature": "sig"}


def test_interleaved_parallel_tool_results() -> None:
    # One response written as three entries with each tool's result right after its call.
    records = [
        user("go"),
        assistant("m1", [text_block("two things")]),
        assistant("m1", [use("t1")]),
        user([tool_result_block("t1", "one")]),
        assistant("m1", [use("t2")]),
        user([tool_result_block("t2", "two")]),
        assistant("m2", [text_block("done")]),
    ]
    msgs = to_api_messages(records)
    assert shape(msgs) == [
        ("user", ["go"]),
        ("assistant", ["two things", "use:t1", "use:t2"]),
        ("user", ["result:t1", "result:t2"]),
        ("assistant", ["done"]),
    ]
    check_api_invariants(msgs)


def test_different_responses_do_not_merge_across_results() -> None:
    records = [
        user("go"),
        assistant("m1", [use("t1")]),
        user([tool_result_block("t1")]),
        assistant("m2", [use("t2")]),
        user([tool_result_block("t2")]),
    ]
    assert shape(to_api_messages(records)) == [
        ("user", ["go"]),
        ("assistant", ["use:t1"]),
        ("user", ["result:t1"]),
        ("assistant", ["use:t2"]),
        ("user", ["result:t2"]),
    ]


def test_tool_results_come_first_in_their_message() -> None:
    records = [
        user("go"),
        assistant("m1", [use("t1")]),
        attachment({"type": "hook"}, rendered=[{"content": "hook said hi"}]),
        user([tool_result_block("t1")]),
    ]
    assert shape(to_api_messages(records))[-1] == ("user", ["result:t1", "hook said hi"])


# -- attachments -----------------------------------------------------------------------------------


def test_attachment_rendered_text_is_used() -> None:
    records = [
        user("hi"),
        attachment(
            {"type": "date", "date": "2026-01-01"},
            rendered=[{"content": "<system-reminder>date</system-reminder>"}, {"content": "more"}],
        ),
        assistant("m", [text_block("a")]),
    ]
    assert shape(to_api_messages(records)) == [
        ("user", ["hi", "<system-reminder>date</system-reminder>", "more"]),
        ("assistant", ["a"]),
    ]


def test_attachment_rendered_blocks_and_strings() -> None:
    raw = {
        "attachment": {"type": "file"},
        "rendered": [{"content": [text_block("file body"), image()]}, {"content": ""}],
    }
    assert attachment_blocks(raw) == [text_block("file body"), image()]
    assert attachment_blocks({"attachment": {"type": "x"}, "rendered": "flat"}) == [
        text_block("flat")
    ]
    assert attachment_blocks({"attachment": {"type": "x"}, "rendered": []}) == []


def test_attachment_without_rendering_gets_a_text_form() -> None:
    blocks = attachment_blocks({"attachment": {"type": "todo", "items": [{"id": 1}]}})
    assert len(blocks) == 1
    assert "todo" in blocks[0]["text"] and '"items"' in blocks[0]["text"]
    blocks = attachment_blocks({"attachment": {"type": "plan", "content": "the plan"}})
    assert "the plan" in blocks[0]["text"]


def test_silent_attachments_render_nothing() -> None:
    payload = {"type": "prompt_snapshot", "systemPrompt": "secret system prompt"}
    assert attachment_blocks({"attachment": payload}) == []


def test_skill_listing_dropped_on_request() -> None:
    listing = attachment({"type": "skill_listing", "content": "- s"}, rendered=[{"content": "S"}])
    records = [user("hi"), listing, assistant("m", [text_block("a")])]
    assert shape(to_api_messages(records))[0] == ("user", ["hi", "S"])
    assert shape(to_api_messages(records, drop_skill_listing=True))[0] == ("user", ["hi"])


def test_leading_attachment_starts_the_user_message() -> None:
    records = [attachment({"type": "x"}, rendered=[{"content": "env"}]), user("hi")]
    assert shape(to_api_messages(records)) == [("user", ["env", "hi"])]


# -- trailing thinking -----------------------------------------------------------------------------


def test_trailing_thinking_only_assistant_dropped() -> None:
    records = [
        user("hi"),
        assistant("m1", [text_block("a")]),
        user("more"),
        assistant("m2", [{"type": "thinking", "thinking": "...", "signature": "s"}]),
        assistant("m3", [{"type": "redacted_thinking", "data": "zz"}]),
    ]
    assert shape(to_api_messages(records)) == [
        ("user", ["hi"]),
        ("assistant", ["a"]),
        ("user", ["more"]),
    ]


def test_thinking_with_text_is_kept_at_the_end() -> None:
    records = [
        user("hi"),
        assistant("m1", [{"type": "thinking", "thinking": "t", "signature": "s"}]),
        assistant("m1", [text_block("a")]),
    ]
    assert shape(to_api_messages(records))[-1] == ("assistant", ["thinking", "a"])


# -- media -----------------------------------------------------------------------------------------


def test_strip_media_replaces_images_and_documents() -> None:
    records = [
        user([text_block("look"), image(), document()]),
        assistant("m1", [use("t1", "Read")]),
        user(
            [
                tool_result_block("t1", [text_block("png follows"), image()]),
                tool_result_block("t2", [document()]),
            ]
        ),
    ]
    kept = to_api_messages(records)
    assert shape(kept)[0] == ("user", ["look", "image", "document"])
    stripped = to_api_messages(records, strip_media=True)
    assert shape(stripped)[0] == ("user", ["look", IMAGE_MARKER, DOCUMENT_MARKER])
    tool_content = stripped[2]["content"][0]["content"]
    assert tool_content == [text_block("png follows"), text_block(IMAGE_MARKER)]


def test_strip_media_in_rendered_attachment() -> None:
    records = [user("hi"), attachment({"type": "file"}, rendered=[{"content": [image()]}])]
    assert shape(to_api_messages(records, strip_media=True)) == [("user", ["hi", IMAGE_MARKER])]


# -- cleared tool results --------------------------------------------------------------------------


def test_cleared_tool_results_get_the_placeholder() -> None:
    records = [
        user("go"),
        assistant("m1", [use("t1"), use("t2")]),
        user(
            [
                tool_result_block("t1", "big output"),
                tool_result_block("t2", [text_block("kept"), image()]),
            ]
        ),
    ]
    msgs = to_api_messages(records, cleared_tool_ids=frozenset({"t1"}))
    results = msgs[2]["content"]
    assert results[0]["content"] == CLEARED_TOOL_RESULT_PLACEHOLDER
    assert results[1]["content"] == [text_block("kept"), image()]
    custom = to_api_messages(records, cleared_tool_ids=frozenset({"t2"}), placeholder="[gone]")
    assert custom[2]["content"][1]["content"] == "[gone]"
    assert custom[2]["content"][0]["content"] == "big output"


def test_is_error_and_unknown_blocks_survive() -> None:
    server_use = {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}}
    records = [
        user("go"),
        assistant("m1", [server_use, use("t1")]),
        user(
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "is_error": True,
                    "content": [{"type": "tool_reference", "tool_name": "X"}],
                }
            ]
        ),
    ]
    msgs = to_api_messages(records)
    assert msgs[1]["content"][0] == server_use
    assert msgs[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "t1",
        "is_error": True,
        "content": [{"type": "tool_reference", "tool_name": "X"}],
    }


def test_cache_control_is_not_inherited() -> None:
    block = {**text_block("hi"), "cache_control": {"type": "ephemeral"}}
    assert to_api_messages([user([block])]) == [{"role": "user", "content": [text_block("hi")]}]


# -- orphans and structure -------------------------------------------------------------------------


def test_orphan_tool_result_after_boundary_is_dropped() -> None:
    records = [
        user("old"),
        assistant("m0", [use("t0")]),
        other("system", subtype="compact_boundary", content="Conversation compacted"),
        user("Summary", isCompactSummary=True),
        user([tool_result_block("t0")]),
        assistant("m1", [text_block("next")]),
    ]
    msgs = to_api_messages(records)
    assert shape(msgs) == [("user", ["Summary"]), ("assistant", ["next"])]


def test_tool_use_without_result_dropped_unless_last() -> None:
    records = [
        user("go"),
        assistant("m1", [text_block("try"), use("t1")]),
        user("never mind"),
        assistant("m2", [use("t2")]),
    ]
    msgs = to_api_messages(records)
    assert shape(msgs) == [
        ("user", ["go"]),
        ("assistant", ["try"]),
        ("user", ["never mind"]),
        ("assistant", ["use:t2"]),
    ]


def test_assistant_emptied_by_orphan_removal_merges_neighbours() -> None:
    records = [
        user("go"),
        assistant("m1", [use("lost")]),
        user("second"),
        assistant("m2", [text_block("answer")]),
    ]
    assert shape(to_api_messages(records)) == [
        ("user", ["go", "second"]),
        ("assistant", ["answer"]),
    ]


def test_duplicate_tool_use_ids_are_dropped() -> None:
    records = [
        user("go"),
        assistant("m1", [use("t1")]),
        user([tool_result_block("t1"), tool_result_block("t1")]),
        assistant("m2", [use("t1")]),
        user([tool_result_block("t1")]),
        assistant("m3", [text_block("end")]),
    ]
    msgs = to_api_messages(records)
    check_api_invariants(msgs)
    assert shape(msgs) == [
        ("user", ["go"]),
        ("assistant", ["use:t1"]),
        ("user", ["result:t1"]),
        ("assistant", ["end"]),
    ]


def test_starts_with_user() -> None:
    records = [assistant("m1", [text_block("hello first")]), user("hi")]
    assert shape(to_api_messages(records)) == [
        ("user", [LEADING_USER_PLACEHOLDER]),
        ("assistant", ["hello first"]),
        ("user", ["hi"]),
    ]


def test_empty_session() -> None:
    assert to_api_messages([]) == []
    assert to_api_messages([other("system", subtype="informational")]) == []


def test_consecutive_distinct_responses_become_one_message() -> None:
    records = [user("go"), assistant("m1", [text_block("a")]), assistant("m2", [text_block("b")])]
    assert shape(to_api_messages(records)) == [("user", ["go"]), ("assistant", ["a", "b"])]


def test_sources_name_the_entries_of_each_message() -> None:
    records = [
        user("go"),
        assistant("m1", [text_block("a")]),
        assistant("m1", [use("t1")]),
        user([tool_result_block("t1")]),
    ]
    view = api_view(records)
    ids = [r.entry.uuid for r in records]
    assert view.sources == [[ids[0]], [ids[1], ids[2]], [ids[3]]]


def test_inline_sidechain_entries_are_dropped() -> None:
    records = [
        user("go"),
        assistant("m1", [use("t1"), use("t2")]),
        user("sub task", isSidechain=True),
        assistant("s1", [text_block("sub answer")], isSidechain=True),
        user([tool_result_block("t1")]),
        user([tool_result_block("t2")]),
    ]
    assert shape(to_api_messages(records)) == [
        ("user", ["go"]),
        ("assistant", ["use:t1", "use:t2"]),
        ("user", ["result:t1", "result:t2"]),
    ]


def test_degraded_entry_uses_the_raw_message() -> None:
    # ``message.usage`` of the wrong type makes the typed view fail; the content survives.
    bad = record_from_dict(
        {
            "type": "assistant",
            "uuid": "bad",
            "message": {
                "role": "assistant",
                "id": "m1",
                "content": [text_block("raw")],
                "usage": 5,
            },
        }
    )
    assert bad.entry.message is None
    assert shape(to_api_messages([user("go"), bad])) == [("user", ["go"]), ("assistant", ["raw"])]


# -- real transcripts ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("strip", [False, True])
def test_fixture_normalizes_to_a_valid_request(name: str, strip: bool) -> None:
    records = load_fixture(name)
    view = context_records(records)
    msgs = to_api_messages(view, strip_media=strip, drop_skill_listing=strip)
    assert msgs, "every fixture has some conversation after its last boundary"
    check_api_invariants(msgs)
    assert to_api_messages(records, strip_media=strip, drop_skill_listing=strip) == msgs


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_whole_transcript_without_slicing(name: str) -> None:
    # Normalizing every entry, boundaries and all, must still give a valid request.
    records = [r for r in load_fixture(name) if not r.entry.is_compact_boundary]
    msgs = to_api_messages(records)
    assert msgs, "every fixture has some conversation"
    check_api_invariants(msgs)


def test_fixture_auto_compaction_view() -> None:
    name = "claude-code-2.1.330__r2_auto.jsonl"
    msgs = to_api_messages(load_fixture(name), drop_skill_listing=True)
    got = shape(msgs)
    assert got[0][0] == "user"
    assert any(p.startswith("This session is being continued") for p in got[0][1])
    # The kept step-2 response and its result come right after the summary.
    assert got[1] == ("assistant", ["Running step 2.", "use:toolu_675b37fb5fa3471d90c42240"])
    assert got[2][1][0] == "result:toolu_675b37fb5fa3471d90c42240"
    assert got[-1] == ("assistant", ["All steps done. FINAL_ANSWER."])
    assert not any("dataviz" in p for _, parts in got for p in parts)


def test_fixture_manual_compaction_view() -> None:
    name = "claude-code-2.1.330__r16_manual.jsonl"
    got = shape(to_api_messages(load_fixture(name)))
    assert got[1] == ("assistant", ["All steps done. FINAL_ANSWER."])
    assert any("Now do one more step" in p for p in got[2][1])


# -- the per-record block cache --------------------------------------------------------------------


def test_blocks_are_computed_once_and_rewrites_never_reach_the_cache() -> None:
    from compactd.services.summarizer import plain_messages, with_instruction

    records = [
        user([text_block("go"), {**text_block("marked"), "cache_control": {"type": "ephemeral"}}]),
        assistant("m1", [use("t1")]),
        user([tool_result_block("t1", [text_block("out"), image()])]),
        assistant("m2", [text_block("done")]),
    ]
    first = to_api_messages(records)
    cached = records[1].api_blocks()
    assert records[1].api_blocks() is cached  # computed once, then reused
    assert first[1]["content"][0] is cached[0]
    # The rewrites compaction and microcompact apply build new blocks instead of editing them.
    to_api_messages(records, cleared_tool_ids=frozenset({"t1"}), strip_media=True)
    with_instruction(first, "summarize", cache_marker=True)
    plain_messages(first)
    assert to_api_messages(records) == first
    assert records[0].api_blocks()[1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in first[0]["content"][1]
    assert records[2].api_blocks()[0]["content"] == [text_block("out"), image()]


def test_a_released_record_forgets_its_cached_blocks(tmp_path: Path) -> None:
    record = user([text_block("hello")])
    path = tmp_path / "t.jsonl"
    path.write_bytes(record.raw + b"\n")
    record.locate(str(path), 0)
    assert record.api_blocks() == [text_block("hello")]
    record.release()
    again = record.api_blocks()
    assert again == [text_block("hello")]
    assert record.api_blocks() is not again  # read back from the file, not kept
