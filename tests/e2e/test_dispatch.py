"""compact/preview with mechanism "auto" names what the following compact/auto does, end to end.

Each test brings a session into one branch of the decision (nothing to do, microcompact, session
memory, full compaction, circuit open, a compaction already running), asks for the preview, checks
that it changed nothing, then runs compact/auto and compares: same mechanism, same reason code,
and for the mechanisms that compact, post-compaction tokens within 20% of the real result (or,
when the model writes the summary, the preview estimates it within 20% too).
"""

from __future__ import annotations

import asyncio

import pytest
from compactd_client import Client

from compactd import protocol as p
from tests.e2e.test_compact_auto import MICRO_WINDOW, SMALL_WINDOW
from tests.e2e.test_compact_support import (
    Harness,
    harness_fixture,
    open_session,
    session_entries,
    transcript_bytes,
)
from tests.e2e.test_session_memory import notes_or_summary, wait_for_notes
from tests.emulator import Emulator, Reply, empty_reply
from tests.inproc import InProc

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio(loop_scope="module")]

harness = harness_fixture()


async def preview_then_auto(
    client: Client, sid: str, *, force: bool = False, fails: bool = False
) -> tuple[p.PreviewResult, p.AutoResult]:
    """The auto preview (which must leave the session as it was), then compact/auto; both
    must agree on the mechanism and the reason. With ``fails``, auto tries the mechanism the
    preview named and the attempt fails (it then reports no mechanism)."""
    before = (await transcript_bytes(client, sid), await client.tokens_status(sid))
    preview = await client.compact_preview(sid, mechanism="auto", force=force)
    assert (await transcript_bytes(client, sid), await client.tokens_status(sid)) == before
    assert preview.pre_tokens == before[1].tokens
    auto = await client.compact_auto(sid, force=force)
    assert preview.reason_code == auto.reason_code, (preview, auto)
    if fails:
        assert preview.would_compact and not auto.was_compacted, (preview, auto)
    else:
        assert preview.mechanism == (auto.mechanism or "none"), (preview, auto)
        assert preview.would_compact == auto.was_compacted
    return preview, auto


def within_20_percent(estimate: int, real: int) -> bool:
    return abs(estimate - real) <= 0.2 * real


async def test_nothing_to_do_below_the_threshold_and_forced(h: Harness) -> None:
    sid = await open_session(h.client)
    preview, auto = await preview_then_auto(h.client, sid)
    assert preview.mechanism == "none" and preview.reason_code == "belowThreshold"
    assert preview.estimated_post_tokens == preview.pre_tokens
    assert auto.reason and "below the auto-compact threshold" in auto.reason
    assert h.emu.message_requests == []

    forced, done = await preview_then_auto(h.client, sid, force=True)
    assert forced.mechanism == "full" and forced.reason_code == "noSessionMemory"
    assert done.result is not None
    # The model writes the summary: the preview estimates it from the offline summary.
    real = done.result.post_compact_tokens
    assert within_20_percent(forced.estimated_post_tokens, real), (forced, real)


async def test_microcompact_alone(h: Harness) -> None:
    # Stamped long ago: time-based microcompact clears enough to get under the threshold.
    sid = await open_session(h.client, session_entries(recent=False), contextWindow=MICRO_WINDOW)
    preview, auto = await preview_then_auto(h.client, sid)
    assert preview.mechanism == "micro" and preview.reason_code == "microcompactEnough"
    assert auto.micro is not None and auto.status is not None
    real = auto.status.tokens
    assert within_20_percent(preview.estimated_post_tokens, real), (preview, real)
    assert h.emu.message_requests == []


async def test_full_compaction_with_the_model(h: Harness) -> None:
    sid = await open_session(h.client, contextWindow=SMALL_WINDOW)
    preview, auto = await preview_then_auto(h.client, sid)
    assert preview.mechanism == "full" and preview.reason_code == "noSessionMemory"
    assert auto.result is not None and auto.result.summarizer != "offline"
    real = auto.result.post_compact_tokens
    assert within_20_percent(preview.estimated_post_tokens, real), (preview, real)
    assert preview.entries_summarized > 100 and preview.entries_kept == 0


async def test_full_compaction_offline(app_daemon: InProc) -> None:
    async with app_daemon(options={"summarizer": {"offline": True}}) as client:
        sid = await open_session(client, contextWindow=SMALL_WINDOW)
        preview, auto = await preview_then_auto(client, sid)
        assert preview.mechanism == "full" and auto.result is not None
        assert auto.result.summarizer == "offline"
        real = auto.result.post_compact_tokens
        assert within_20_percent(preview.estimated_post_tokens, real), (preview, real)

        # The explicit full preview predicts compact/full the same way.
        sid = await open_session(client, contextWindow=SMALL_WINDOW)
        planned = await client.compact_preview(sid, mechanism="full")
        result = await client.compact_full(sid)
        assert within_20_percent(planned.estimated_post_tokens, result.post_compact_tokens)


async def test_session_memory(app_emulated: InProc, emulator: Emulator) -> None:
    emulator.set_default(notes_or_summary)
    options = {"sessionMemory": {"enabled": True, "minTokenGrowth": 5_000, "minToolCalls": 3}}
    async with app_emulated(**options) as client:
        # 70K window: threshold 37K; the session holds about 60K, the notes and the entries
        # they leave about 12K.
        sid = await open_session(
            client, session_entries(entries=400, tokens=60_000), contextWindow=70_000
        )
        await wait_for_notes(client, sid)
        calls = len(emulator.message_requests)
        preview, auto = await preview_then_auto(client, sid)
        assert preview.mechanism == "sessionMemory" and preview.reason_code == "sessionMemoryFits"
        assert len(emulator.message_requests) == calls  # neither called the model
        assert auto.result is not None
        real = auto.result.post_compact_tokens
        assert within_20_percent(preview.estimated_post_tokens, real), (preview, real)
        assert preview.entries_kept == len(auto.result.kept_entries)


async def test_circuit_open(h: Harness) -> None:
    sid = await open_session(h.client, contextWindow=SMALL_WINDOW)
    h.emu.set_default(empty_reply())
    for _ in range(3):
        # Until the breaker opens, each attempt is the full compaction the preview names.
        preview, auto = await preview_then_auto(h.client, sid, fails=True)
        assert preview.mechanism == "full"
        assert auto.reason and auto.reason.startswith(p.ErrorCode.SUMMARY_FAILED)
    calls = len(h.emu.message_requests)
    preview, auto = await preview_then_auto(h.client, sid)
    assert preview.mechanism == "none" and preview.reason_code == "circuitOpen"
    assert auto.reason and "paused after 3 consecutive failures" in auto.reason
    assert len(h.emu.message_requests) == calls


async def test_compacting(h: Harness) -> None:
    sid = await open_session(h.client, contextWindow=SMALL_WINDOW)
    h.emu.script(Reply(delay=2.0))
    async with h.client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        running = asyncio.create_task(h.client.compact_full(sid))
        _, first = await asyncio.wait_for(queue.get(), 10)
        assert first["phase"] == "started"
        preview, auto = await preview_then_auto(h.client, sid)
        assert not running.done()
    assert preview.mechanism == "none" and preview.reason_code == "compacting"
    assert auto.reason == "a compaction of this session is already running"
    result = await running
    assert (await h.client.messages(sid)).boundary_uuid == result.boundary["uuid"]
