"""compact/auto end to end: threshold, force, the circuit breaker, the thrash guard, the flags."""

from __future__ import annotations

import pytest
from compactd_client import RpcError

from compactd import protocol as p
from tests.e2e.test_compact_support import (
    Harness,
    harness_fixture,
    open_session,
    session_entries,
    transcript_path,
)
from tests.emulator import Emulator, Reply, empty_reply
from tests.helpers import MODEL, assistant, transcript_lines, user
from tests.inproc import InProc

pytestmark = [pytest.mark.timeout(40), pytest.mark.asyncio(loop_scope="module")]

harness = harness_fixture()

# A 40K window: effective 20K, auto-compact threshold 7K; the test sessions hold about 16K.
SMALL_WINDOW = 40_000
# A window whose threshold the synthetic session is above, but whose headroom (75% of the
# threshold) what time-based microcompact leaves of it fits in.
MICRO_WINDOW = 45_000
# A window whose threshold (10K) what count-based clearing leaves of the session (about 9K) is
# under, but not under its headroom (7.5K).
HEADROOM_WINDOW = 43_000


async def test_below_threshold_nothing_happens_and_force_compacts(h: Harness) -> None:
    client, emu = h.client, h.emu
    sid = await open_session(client)
    status = await client.tokens_status(sid)
    assert not status.is_above_auto_compact_threshold
    result = await client.compact_auto(sid)
    assert not result.was_compacted and result.mechanism is None
    assert result.reason and "below the auto-compact threshold" in result.reason
    assert emu.message_requests == []

    forced = await client.compact_auto(sid, force=True)
    assert forced.was_compacted and forced.mechanism == "full"
    assert forced.result is not None
    assert forced.result.boundary["compactMetadata"]["trigger"] == "auto"
    assert len(emu.message_requests) == 1


async def test_above_threshold_runs_a_full_compaction_that_continues_silently(
    h: Harness,
) -> None:
    client = h.client
    sid = await open_session(client, contextWindow=SMALL_WINDOW)
    status = await client.tokens_status(sid)
    assert status.is_above_auto_compact_threshold
    result = await client.compact_auto(sid)
    assert result.was_compacted and result.mechanism == "full"
    assert result.micro is not None  # microcompact ran first
    assert result.result is not None
    text = result.result.summary["message"]["content"]
    assert "without asking the user any further questions" in text
    assert "Do not acknowledge or recap this summary" in text
    assert result.status is not None and not result.status.is_above_auto_compact_threshold
    assert result.status.tokens == (await client.tokens_status(sid)).tokens


async def test_microcompact_alone_can_be_enough(h: Harness) -> None:
    client, emu = h.client, h.emu
    # Stamped long ago: the prompt cache has expired, so time-based microcompact clears all
    # but the newest tool results, which brings the session under the threshold.
    entries = session_entries(recent=False)
    sid = await open_session(client, entries, contextWindow=MICRO_WINDOW)
    assert (await client.tokens_status(sid)).is_above_auto_compact_threshold
    result = await client.compact_auto(sid)
    assert result.was_compacted and result.mechanism == "micro"
    assert result.micro is not None and result.micro.tokens_saved > 0
    assert result.result is None
    assert result.status is not None and not result.status.is_above_auto_compact_threshold
    assert emu.message_requests == []


async def test_microcompact_that_leaves_too_little_headroom_gives_way_to_a_summary(
    app_daemon: InProc,
) -> None:
    # Clearing old results would leave the session under the threshold but above 75% of it:
    # it would cross again a few turns later. A full compaction runs.
    async with app_daemon(options={"summarizer": {"offline": True}}) as client:
        sid = await open_session(
            client, session_entries(recent=False), contextWindow=HEADROOM_WINDOW
        )
        status = await client.tokens_status(sid)
        micro = await client.compact_preview(sid, mechanism="micro")
        room = int(status.auto_compact_threshold * 0.75)
        assert room < micro.estimated_post_tokens < status.auto_compact_threshold
        result = await client.compact_auto(sid)
        assert result.was_compacted and result.mechanism == "full"
        assert result.reason_code == "microcompactTooSmall"
        assert result.status is not None and result.status.tokens <= room


async def test_circuit_breaker_trips_after_three_failures_and_resets(h: Harness) -> None:
    client, emu = h.client, h.emu
    sid = await open_session(client, contextWindow=SMALL_WINDOW)
    emu.set_default(empty_reply())
    for n in range(1, 4):
        result = await client.compact_auto(sid)
        assert not result.was_compacted
        assert result.reason and result.reason.startswith(p.ErrorCode.SUMMARY_FAILED)
        status = await client.tokens_status(sid)
        assert status.consecutive_failures == n
        assert status.circuit_open == (n >= 3)
    calls = len(emu.message_requests)
    tripped = await client.compact_auto(sid)
    assert not tripped.was_compacted
    assert tripped.reason and "paused after 3 consecutive failures" in tripped.reason
    assert len(emu.message_requests) == calls  # no model call while the breaker is open
    assert not any(
        ln.get("subtype") == "compact_boundary"
        for ln in transcript_lines(await transcript_path(client, sid))
    )
    # A successful (manual) compaction closes the breaker.
    emu.set_default(Reply())
    await client.compact_full(sid)
    status = await client.tokens_status(sid)
    assert not status.circuit_open and status.consecutive_failures == 0


async def test_thrash_guard_refuses_a_summary_that_does_not_shrink(h: Harness) -> None:
    client, emu = h.client, h.emu
    sid = await open_session(client, contextWindow=SMALL_WINDOW)
    before = await client.messages(sid)
    bloated = "<summary>" + "a very long summary line\n" * 4_000 + "</summary>"
    emu.set_default(Reply(text=bloated))
    with pytest.raises(RpcError) as info:
        await client.compact_full(sid)
    assert info.value.code == p.ErrorCode.COMPACTION_INEFFECTIVE
    assert "would not be smaller" in info.value.message
    assert (await client.messages(sid)) == before
    result = await client.compact_auto(sid)
    assert not result.was_compacted
    assert result.reason and result.reason.startswith(p.ErrorCode.COMPACTION_INEFFECTIVE)
    assert (await client.tokens_status(sid)).consecutive_failures == 1


async def test_a_fixed_prefix_above_the_threshold_is_refused_before_any_model_call(
    h: Harness,
) -> None:
    client, emu = h.client, h.emu
    probe = await open_session(client, [], contextWindow=SMALL_WINDOW)
    threshold = (await client.tokens_status(probe)).auto_compact_threshold
    # A sub-agent whose answers already report more than the threshold for a few hundred
    # characters of messages: the rest is its system prompt and tools.
    entries = [
        user("Find where the config is loaded.", uuid="u1"),
        assistant(
            "Looking.",
            uuid="a1",
            msg_id="m1",
            model=MODEL,
            usage={"input_tokens": threshold + 4_000, "output_tokens": 10},
        ),
        user("And its tests?", uuid="u2"),
        assistant(
            "They are in tests/config.",
            uuid="a2",
            msg_id="m2",
            model=MODEL,
            usage={"input_tokens": threshold + 4_030, "output_tokens": 12},
        ),
    ]
    sid = await open_session(client, entries, contextWindow=SMALL_WINDOW)
    status = await client.tokens_status(sid)
    assert status.fixed_prefix_source == "usage"
    assert status.fixed_prefix_tokens >= threshold and status.message_tokens < 100
    preview = await client.compact_preview(sid)
    assert not preview.would_compact and preview.reason_code == "fixedPrefixTooLarge"
    assert f"{status.fixed_prefix_tokens:,} tokens" in preview.reason
    assert f"{threshold:,}" in preview.reason
    auto = await client.compact_auto(sid)
    assert not auto.was_compacted and auto.reason_code == "fixedPrefixTooLarge"
    forced = await client.compact_auto(sid, force=True)
    assert not forced.was_compacted and forced.reason_code == "fixedPrefixTooLarge"
    with pytest.raises(RpcError) as info:
        await client.compact_full(sid)
    assert info.value.code == p.ErrorCode.FIXED_PREFIX_TOO_LARGE
    assert "system prompt" in str(info.value)
    assert emu.message_requests == []


async def test_disable_flags(app_emulated: InProc, emulator: Emulator) -> None:
    async with app_emulated(env={"DISABLE_AUTO_COMPACT": "1"}) as client:
        sid = await open_session(client, contextWindow=SMALL_WINDOW)
        result = await client.compact_auto(sid, force=True)
        assert not result.was_compacted
        assert result.reason and "DISABLE_AUTO_COMPACT" in result.reason
        assert emulator.message_requests == []
        assert (await client.tokens_status(sid)).consecutive_failures == 0
        # Manual compaction is still allowed: an empty session fails for its own reason.
        empty = await open_session(client, [])
        with pytest.raises(RpcError) as info:
            await client.compact_full(empty)
        assert info.value.code == p.ErrorCode.NOT_ENOUGH_MESSAGES
    emulator.reset()
    async with app_emulated(env={"DISABLE_COMPACT": "true"}) as client:
        sid = await open_session(client, contextWindow=SMALL_WINDOW)
        result = await client.compact_auto(sid, force=True)
        assert not result.was_compacted
        assert result.reason and "DISABLE_COMPACT" in result.reason
        with pytest.raises(RpcError) as info:
            await client.compact_full(sid)
        assert info.value.code == p.ErrorCode.COMPACTION_DISABLED
        assert emulator.message_requests == []
