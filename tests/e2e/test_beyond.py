"""End-to-end tests of the ledger check, compact/preview, compact/undo and recall/search over
stdio, with the summarizer pointed at the Messages API emulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from compactd_client import RpcError

from compactd import protocol as p
from compactd.core.ledger import LEDGER_SECTION_TITLE
from compactd.core.normalize import CLEARED_TOOL_RESULT_PLACEHOLDER
from tests.e2e.test_compact_support import (
    Harness,
    harness_fixture,
    open_session,
    session_entries,
    transcript_bytes,
)
from tests.emulator import Reply
from tests.helpers import SessionBuilder, emulator_options
from tests.inproc import inproc

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio(loop_scope="module")]

harness = harness_fixture()

SECRET_REQUEST = "Please make sure the migration never drops the audit_log table, ever."


def _with_user_message(entries: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The synthetic session with one more human message in the middle."""
    at = next(
        i
        for i, e in enumerate(entries)
        if i > len(entries) // 3
        and e["type"] == "user"
        and isinstance(e["message"]["content"], str)
    )
    entries[at]["message"]["content"] = text
    return entries


async def test_ledger_restores_a_user_message_the_summary_dropped(h: Harness) -> None:
    sid = await open_session(h.client, _with_user_message(session_entries(), SECRET_REQUEST))
    h.emu.script(Reply(text="<summary>1. Primary Request: refactor the parser.</summary>"))
    result = await h.client.compact_full(sid)
    text = result.summary["message"]["content"]
    assert "refactor the parser" in text
    assert LEDGER_SECTION_TITLE in text
    assert SECRET_REQUEST in text
    assert result.restored_from_ledger is not None
    assert any(SECRET_REQUEST[:60] in item for item in result.restored_from_ledger)
    # What the model sees next is the completed summary.
    after = await h.client.messages(sid)
    assert SECRET_REQUEST in after.messages[0]["content"][0]["text"]


async def test_ledger_adds_nothing_to_the_offline_summary(tmp_path: Path) -> None:
    options = {"summarizer": {"offline": True}}
    async with inproc(tmp_path, options) as client:
        sid = await open_session(client, _with_user_message(session_entries(), SECRET_REQUEST))
        result = await client.compact_full(sid)
        assert result.summarizer == "offline"
        assert result.restored_from_ledger is None
        assert LEDGER_SECTION_TITLE not in result.summary["message"]["content"]


async def test_preview_estimates_and_changes_nothing(h: Harness) -> None:
    sid = await open_session(h.client)
    before_bytes = await transcript_bytes(h.client, sid)
    before_status = await h.client.tokens_status(sid)
    preview = await h.client.compact_preview(sid, mechanism="full")
    assert await transcript_bytes(h.client, sid) == before_bytes
    assert await h.client.tokens_status(sid) == before_status
    assert h.emu.message_requests == []
    assert preview.mechanism == "full" and preview.would_compact
    assert preview.pre_tokens == before_status.tokens
    assert preview.entries_summarized > 100 and preview.entries_kept == 0
    auto = await h.client.compact_preview(sid)
    assert auto.mechanism == "none" and not auto.would_compact
    assert auto.reason_code == "belowThreshold"

    result = await h.client.compact_full(sid)
    # A model's summary is estimated from the offline summary of the same entries: within 20%.
    real = result.post_compact_tokens
    assert abs(preview.estimated_post_tokens - real) <= real * 0.2, (preview, real)
    assert preview.estimated_post_tokens <= preview.pre_tokens * 1.1


def _middle_uuid(entries: list[dict[str, Any]], *, prompt: bool) -> str:
    """The first user entry past the middle: a typed prompt, or else a tool result."""
    return next(
        str(e["uuid"])
        for e in entries[len(entries) // 2 :]
        if e["type"] == "user" and isinstance(e["message"]["content"], str) == prompt
    )


@pytest.mark.parametrize("direction", ["upTo", "from"])
async def test_partial_preview_counts_what_compact_partial_then_does(
    h: Harness, direction: str
) -> None:
    entries = session_entries()
    sid = await open_session(h.client, entries)
    before_bytes = await transcript_bytes(h.client, sid)
    before_status = await h.client.tokens_status(sid)
    # A typed prompt is a safe cut: compact/partial keeps the pivot where it was asked.
    pivot = _middle_uuid(entries, prompt=True)
    preview = await h.client.compact_preview(
        sid, mechanism="partial", pivot_uuid=pivot, direction=direction
    )
    assert await transcript_bytes(h.client, sid) == before_bytes
    assert await h.client.tokens_status(sid) == before_status
    assert h.emu.message_requests == []
    assert preview.mechanism == "partial" and preview.would_compact
    assert preview.pre_tokens == before_status.tokens
    assert preview.entries_summarized + preview.entries_kept == len(entries)

    result = await h.client.compact_partial(sid, pivot, direction)
    assert result.partial is not None and result.partial.moved == "none"
    assert (preview.entries_summarized, preview.entries_kept) == (
        result.partial.summarized_entries,
        result.partial.kept_entries,
    )
    real = result.post_compact_tokens
    assert real / 4 <= preview.estimated_post_tokens <= real * 4
    assert preview.estimated_post_tokens < preview.pre_tokens


@pytest.mark.parametrize("direction", ["upTo", "from"])
async def test_partial_preview_moves_an_unsafe_pivot_as_compact_partial_does(
    h: Harness, direction: str
) -> None:
    entries = session_entries()
    sid = await open_session(h.client, entries)
    pivot = _middle_uuid(entries, prompt=False)  # a tool result: the cut must move
    preview = await h.client.compact_preview(
        sid, mechanism="partial", pivot_uuid=pivot, direction=direction
    )
    result = await h.client.compact_partial(sid, pivot, direction)
    assert result.partial is not None and result.partial.moved != "none"
    assert (preview.entries_summarized, preview.entries_kept) == (
        result.partial.summarized_entries,
        result.partial.kept_entries,
    )


async def test_undo_restores_the_view_survives_restart_then_nothing_to_undo(
    h: Harness,
) -> None:
    sid = await open_session(h.client)
    before = await h.client.messages(sid)
    before_status = await h.client.tokens_status(sid)
    result = await h.client.compact_full(sid)
    assert (await h.client.tokens_status(sid)).tokens < before_status.tokens

    undone = await h.client.compact_undo(sid)
    assert undone.undone_compaction_id == result.compaction_id
    assert undone.boundary["compactMetadata"]["undoes"] == result.compaction_id
    after = await h.client.messages(sid)
    assert after.messages == before.messages
    assert after.boundary_uuid == before.boundary_uuid
    assert undone.status.tokens == before_status.tokens
    assert (await h.client.tokens_status(sid)).tokens == before_status.tokens

    with pytest.raises(RpcError) as err:
        await h.client.compact_undo(sid)
    assert err.value.data["code"] == p.ErrorCode.NOTHING_TO_UNDO

    # A second daemon on the same data dir derives the same view from the transcript (once
    # the first has closed the session: one daemon owns a session at a time).
    await h.client.close_session(sid)
    options = emulator_options(h.emu)
    async with inproc(h.root / "data", options) as c2:
        again = await c2.messages(sid)
        assert again.messages == before.messages
        assert (await c2.tokens_status(sid)).tokens == before_status.tokens
        with pytest.raises(RpcError) as err2:
            await c2.compact_undo(sid)
        assert err2.value.data["code"] == p.ErrorCode.NOTHING_TO_UNDO


async def test_undo_of_microcompact_restores_cleared_results_and_recall_finds_them(
    h: Harness,
) -> None:
    b = SessionBuilder()
    b.user("Read the modules and run the tests.")
    for i in range(8):
        b.read(f"/work/src/mod_{i}.py", 6_000)
        b.bash(f"pytest tests/test_mod_{i}.py", 3_000)
    b.user("Now summarize what you saw.")
    sid = await open_session(h.client, b.entries)
    before = await h.client.messages(sid)
    before_tokens = (await h.client.tokens_status(sid)).tokens
    planned = await h.client.compact_preview(sid, mechanism="micro")
    micro = await h.client.compact_micro(sid, "count")
    assert planned.would_compact and planned.pre_tokens == before_tokens
    assert planned.estimated_post_tokens == before_tokens - micro.tokens_saved
    assert micro.cleared_tool_ids
    cleared_view = await h.client.messages(sid)
    assert cleared_view.messages != before.messages
    assert CLEARED_TOOL_RESULT_PLACEHOLDER in str(cleared_view.messages)

    # Recall still finds the cleared result's text, flagged as compacted.
    found = await h.client.recall(sid, query="def f3(): return 3  # /work/src/mod_0.py")
    assert found.hits and found.hits[0].compacted is True
    assert "mod_0.py" in found.hits[0].snippet

    undone = await h.client.compact_undo(sid)
    assert undone.undone_compaction_id == micro.boundary["uuid"]  # type: ignore[index]
    assert (await h.client.messages(sid)).messages == before.messages
    assert (await h.client.tokens_status(sid)).tokens == before_tokens
    found = await h.client.recall(sid, query="def f3(): return 3  # /work/src/mod_0.py")
    assert found.hits[0].compacted is False


async def test_recall_finds_compacted_text_and_fetches_by_uuid(h: Harness) -> None:
    b = SessionBuilder()
    b.user("Check the build.")
    b.bash("make build", 200)
    b.entries[-1]["message"]["content"][0]["content"] += "\nERROR: zebra-unique-token missing"
    b.user("Thanks, continue.")
    for i in range(4):
        b.read(f"/work/src/x{i}.py", 1_000)
    sid = await open_session(h.client, b.entries)
    await h.client.compact_full(sid)
    found = await h.client.recall(sid, query="ZEBRA-unique-token")
    assert len(found.hits) == 1
    hit = found.hits[0]
    assert hit.compacted is True and "zebra-unique-token" in hit.snippet
    assert hit.uuid == b.entries[2]["uuid"]
    fetched = await h.client.recall(sid, uuids=[hit.uuid, "nope"])
    assert [x.uuid for x in fetched.hits] == [hit.uuid]
    assert fetched.hits[0].entry is not None and fetched.hits[0].entry["uuid"] == hit.uuid
    # Most recent first, limit honoured.
    reads = await h.client.recall(sid, query="return 3  # /work/src/x", limit=2)
    assert [x.uuid for x in reads.hits] == [b.entries[-1]["uuid"], b.entries[-3]["uuid"]]
    for bad in ({"limit": 0, "query": "x"}, {"query": "  "}, {}):
        with pytest.raises(RpcError) as err:
            await h.client.request(p.RECALL_SEARCH, {"sessionId": sid, **bad})
        assert err.value.data["code"] == p.ErrorCode.INVALID_PARAMS
    with pytest.raises(RpcError) as err:
        await h.client.recall("no-such-session", query="x")
    assert err.value.data["code"] == p.ErrorCode.SESSION_NOT_FOUND


async def test_bad_input_to_preview_and_undo_changes_nothing(h: Harness) -> None:
    sid = await open_session(h.client)
    before = await transcript_bytes(h.client, sid)
    cases: list[tuple[str, dict[str, Any], str]] = [
        (p.COMPACT_PREVIEW, {"sessionId": sid, "mechanism": "partial"}, p.ErrorCode.INVALID_PARAMS),
        (
            p.COMPACT_PREVIEW,
            {"sessionId": sid, "mechanism": "partial", "pivotUuid": "nope"},
            p.ErrorCode.PIVOT_NOT_FOUND,
        ),
        (p.COMPACT_PREVIEW, {"sessionId": sid, "mechanism": "huge"}, p.ErrorCode.INVALID_PARAMS),
        (p.COMPACT_UNDO, {"sessionId": "no-such-session"}, p.ErrorCode.SESSION_NOT_FOUND),
        (p.COMPACT_UNDO, {"sessionId": sid}, p.ErrorCode.NOTHING_TO_UNDO),
    ]
    for method, params, code in cases:
        with pytest.raises(RpcError) as err:
            await h.client.request(method, params)
        assert err.value.data["code"] == code, (method, params)
    assert await transcript_bytes(h.client, sid) == before
