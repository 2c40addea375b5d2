"""Session memory end to end: background extraction, sessionMemory/get and /extract, and
compact/auto compacting from the notes with no model call (or falling back to a full one)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from compactd_client import Client, RpcError

from compactd import protocol as p
from compactd.core import session_memory as sm
from compactd.core import tokens
from tests.e2e.test_compact_support import (
    Harness,
    harness_fixture,
    open_session,
    session_entries,
)
from tests.emulator import Reply
from tests.emulator.script import user_texts
from tests.emulator.server import RecordedRequest
from tests.inproc import InProc

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio(loop_scope="module")]

# Microcompact is switched off so that compact/auto goes straight to the session-memory stage.
harness = harness_fixture(
    sessionMemory={"enabled": True, "minTokenGrowth": 5_000, "minToolCalls": 3},
    env={"DISABLE_MICROCOMPACT": "1"},
)

NOTES = sm.template().replace(
    "# Current State\n", "# Current State\nRefactoring the ingest pipeline; tests green.\n", 1
)
MARKER = f"<{sm.NOTES_REPLY_TAG}>"


def is_extraction(req: RecordedRequest) -> bool:
    texts = user_texts(req.body) if isinstance(req.body, dict) else []
    return bool(texts) and MARKER in texts[-1]


def notes_or_summary(req: RecordedRequest) -> Reply:
    """The emulated model: the notes for an extraction request, a summary otherwise."""
    if is_extraction(req):
        return Reply(text=f"Here are the notes.\n{MARKER}\n{NOTES}</{sm.NOTES_REPLY_TAG}>")
    return Reply()


async def wait_for_notes(client: Client, sid: str) -> p.SessionMemoryResult:
    for _ in range(200):
        got = await client.session_memory(sid)
        if got.last_extracted_at is not None and not got.extracting:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError("no extraction ran")


async def test_extraction_then_compaction_from_the_notes_without_a_model_call(
    h: Harness,
) -> None:
    h.emu.set_default(notes_or_summary)
    # 70K window: threshold 37K; the session holds about 60K, the notes plus the kept tail
    # about 12K.
    sid = await open_session(
        h.client, session_entries(entries=400, tokens=60_000), contextWindow=70_000
    )
    status = await h.client.tokens_status(sid)
    assert status.is_above_auto_compact_threshold

    got = await wait_for_notes(h.client, sid)
    assert [r for r in h.emu.message_requests if is_extraction(r)], "no extraction request"
    assert got.content == NOTES
    assert Path(got.path).read_text() == NOTES
    assert Path(got.path).parent.name == sid and got.path.endswith("notes.md")
    assert got.tokens == tokens.estimate_text_tokens(NOTES)

    before = len(h.emu.message_requests)
    result = await h.client.compact_auto(sid)
    assert result.was_compacted and result.mechanism == "sessionMemory"
    assert len(h.emu.message_requests) == before  # no summarization request
    assert result.result is not None
    assert result.result.summarizer == "sessionMemory"
    assert result.result.boundary["compactMetadata"]["mechanism"] == "sessionMemory"
    summary_text = result.result.summary["message"]["content"]
    assert "Refactoring the ingest pipeline; tests green." in summary_text
    assert got.path in summary_text
    assert "_A short, specific name" not in summary_text  # guide lines are left out
    kept = result.result.kept_entries
    assert len(kept) >= 5
    assert result.status is not None and not result.status.is_above_auto_compact_threshold

    # The context is now boundary, notes summary, then the kept entries verbatim.
    view = await h.client.messages(sid)
    texts = [m for m in view.messages if m["role"] == "user"]
    assert "Refactoring the ingest pipeline" in str(texts[0]["content"])
    assert result.result.post_compact_tokens < status.tokens


def fresh_ids(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A synthetic batch with its own uuids, message ids and tool ids (they are counters)."""
    text = json.dumps(entries)
    for old, new in (("00000000-0000", "22222222-0000"), ("msg_0000", "msg_2222")):
        text = text.replace(old, new)
    out: list[dict[str, Any]] = json.loads(text.replace("toolu_0000", "toolu_2222"))
    return out


async def test_second_round_compacts_from_the_new_notes(h: Harness) -> None:
    h.emu.set_default(notes_or_summary)
    sid = await open_session(
        h.client, session_entries(entries=400, tokens=60_000), contextWindow=70_000
    )
    first = await wait_for_notes(h.client, sid)
    assert (await h.client.compact_auto(sid)).mechanism == "sessionMemory"
    await asyncio.sleep(0.01)  # the next extraction gets a later timestamp

    # More work after the compaction: enough growth for a new extraction.
    await h.client.append(sid, fresh_ids(session_entries(entries=200, tokens=26_000, seed=3)))
    for _ in range(200):
        second = await h.client.session_memory(sid)
        if second.last_extracted_at != first.last_extracted_at and not second.extracting:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("no second extraction")
    # The second extraction saw the compacted context: the first notes summary comes first.
    extraction = [r for r in h.emu.message_requests if is_extraction(r)][-1]
    assert "Refactoring the ingest pipeline" in user_texts(extraction.body)[0]

    before = len(h.emu.message_requests)
    again = await h.client.compact_auto(sid, force=True)
    assert again.mechanism == "sessionMemory" and len(h.emu.message_requests) == before
    assert again.result is not None
    view = (await h.client.messages(sid)).messages
    roles = [m["role"] for m in view]
    assert roles[0] == "user" and all(a != b for a, b in zip(roles, roles[1:], strict=False))
    # One notes summary only: the previous one was replaced, not kept.
    summaries = [m for m in view if "Session notes kept up to date" in json.dumps(m)]
    assert len(summaries) == 1
    assert again.result.post_compact_tokens < again.result.pre_compact_tokens


async def test_falls_back_to_full_when_the_kept_part_stays_above_threshold(
    h: Harness,
) -> None:
    h.emu.set_default(notes_or_summary)
    # 40K window: threshold 7K, below the 10K tokens a session-memory compaction keeps.
    sid = await open_session(h.client, contextWindow=40_000)
    await wait_for_notes(h.client, sid)
    before = len(h.emu.message_requests)
    result = await h.client.compact_auto(sid)
    assert result.was_compacted and result.mechanism == "full"
    new = h.emu.message_requests[before:]
    assert len(new) == 1 and not is_extraction(new[0])
    assert result.result is not None and result.result.summarizer != "sessionMemory"


async def test_extract_on_demand_and_bad_input(h: Harness) -> None:
    h.emu.set_default(notes_or_summary)
    # Too small for the background trigger (10K tokens before the first notes).
    sid = await open_session(h.client, session_entries(entries=40, tokens=3_000))
    empty = await h.client.session_memory(sid)
    assert empty.content == "" and empty.last_extracted_at is None and not empty.extracting
    assert not [r for r in h.emu.message_requests if is_extraction(r)]

    got = await h.client.extract_session_memory(sid)
    assert got.content == NOTES and got.last_extracted_at is not None
    assert len([r for r in h.emu.message_requests if is_extraction(r)]) == 1

    # A reply without the notes fails the extraction and leaves the file as it was.
    h.emu.set_default(Reply(text="I would rather read some files first."))
    with pytest.raises(RpcError) as info:
        await h.client.extract_session_memory(sid)
    assert info.value.code == p.ErrorCode.SUMMARY_FAILED
    assert (await h.client.session_memory(sid)).content == NOTES

    with pytest.raises(RpcError) as info:
        await h.client.session_memory("no-such-session")
    assert info.value.code == p.ErrorCode.SESSION_NOT_FOUND
    with pytest.raises(RpcError) as info:
        await h.client.extract_session_memory("../etc")
    assert info.value.code == p.ErrorCode.INVALID_PARAMS


async def test_offline_notes_are_built_from_the_transcript(app_daemon: InProc) -> None:
    options = {"sessionMemory": {"enabled": True}, "summarizer": {"offline": True}}
    async with app_daemon(options=options) as client:
        sid = await open_session(client, session_entries(entries=160, tokens=16_000))
        for _ in range(200):
            got = await client.session_memory(sid)
            if got.last_extracted_at is not None:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("no offline extraction ran")
        headings = [heading for heading, _ in sm.parse_sections(got.content)]
        assert headings == [s.heading for s in sm.SECTIONS]
        assert sm.has_content(got.content)
        assert got.tokens > 0
    # The notes and when they were written survive a restart.
    async with app_daemon(options=options) as client:
        again = await client.session_memory(sid)
        assert again.content == got.content
        assert again.last_extracted_at == got.last_extracted_at
