"""compact/full failure paths against the emulator: prompt too long, retries, fallbacks, errors.

Each failing compaction must leave the session exactly as it was: same API view, same
transcript bytes.
"""

from __future__ import annotations

from typing import Any

import pytest

from compactd import protocol as p
from compactd.core import split
from tests.e2e.test_compact_support import (
    Harness,
    compact_full_fails,
    harness_fixture,
    open_session,
)
from tests.emulator import (
    ApiError,
    Emulator,
    Reply,
    cut_stream,
    empty_reply,
    mid_stream_error,
    no_message_stop,
    overloaded,
    prompt_too_long,
)
from tests.inproc import InProc

pytestmark = [pytest.mark.timeout(40), pytest.mark.asyncio(loop_scope="module")]

harness = harness_fixture()


def _conversation(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages of a summarization request without the instruction block."""
    msgs = [
        {
            **m,
            "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]],
        }
        for m in body["messages"]
    ]
    last = dict(msgs[-1])
    last["content"] = last["content"][:-1]
    msgs[-1] = last
    return [m for m in msgs if m["content"]]


async def test_prompt_too_long_once_then_success_drops_the_oldest_rounds(
    h: Harness,
) -> None:
    client, emulator = h.client, h.emu
    sid = await open_session(client)
    emulator.script(prompt_too_long(over_by=3_000))
    result = await client.compact_full(sid)
    first, second = (r.body for r in emulator.message_requests)
    assert isinstance(first, dict) and isinstance(second, dict)
    before, after = _conversation(first), _conversation(second)
    groups_before = split.group_api_rounds(before)
    assert len(after) < len(before)
    # Whole rounds went from the head, the rest is unchanged.
    tail = after[1:] if after[0]["content"][0].get("text") == split.TRUNCATION_MARKER else after
    flat_before = [m for g in groups_before for m in g]
    assert flat_before[-len(tail) :] == tail
    assert after[0]["role"] == "user"
    # Still the cache-sharing request, with its instruction on the last user message.
    assert second["system"] == first["system"] and second["tools"] == first["tools"]
    assert result.summarizer == "cacheShared"
    assert (await client.messages(sid)).boundary_uuid == result.boundary["uuid"]


async def test_unparseable_gap_drops_a_fifth_of_the_rounds(
    h: Harness,
) -> None:
    client, emulator = h.client, h.emu
    sid = await open_session(client)
    emulator.script(ApiError(type="invalid_request_error", message="prompt is too long"))
    await client.compact_full(sid)
    first, second = (r.body for r in emulator.message_requests)
    assert isinstance(first, dict) and isinstance(second, dict)
    n_before = len(split.group_api_rounds(_conversation(first)))
    after = _conversation(second)
    if after[0]["content"][0].get("text") == split.TRUNCATION_MARKER:
        after = after[1:]
    n_after = len(split.group_api_rounds(after))
    assert n_after == n_before - max(1, int(n_before * split.PTL_DROP_FRACTION))


async def test_too_long_until_the_end_is_summarized_offline_and_says_why(
    h: Harness,
) -> None:
    client, emulator = h.client, h.emu
    sid = await open_session(client)
    emulator.set_default(prompt_too_long(over_by=10))
    result = await client.compact_full(sid)
    # The first try, three retries without the oldest rounds, then pieces for the window the
    # error names, which is too small: the offline summary is the last resort.
    bodies = [r.body for r in emulator.message_requests]
    whole = [b for b in bodies if "tools" in b]
    pieces = [b for b in bodies if "tools" not in b]
    assert len(whole) == 4
    # Each piece is one user message carrying a part of the conversation.
    assert pieces and all(len(b["messages"]) == 1 for b in pieces)
    assert result.summarizer == "offlineFallback"
    report = result.summarized_by
    assert report is not None and report.provider == "offline"
    (passed,) = report.passed_over
    assert passed.provider == "anthropic" and "too small to summarize with" in passed.reason

    # A gap larger than the whole conversation: nothing would be left after dropping, and
    # the window the error names is too small for pieces.
    emulator.reset()
    emulator.set_default(prompt_too_long(tokens=10_000_000, maximum=1_000))
    sid = await open_session(client)
    result = await client.compact_full(sid)
    assert len(emulator.message_requests) == 1
    assert result.summarizer == "offlineFallback"
    status = await client.tokens_status(sid)
    assert status.consecutive_failures == 0


@pytest.mark.parametrize(
    ("fault", "requests"),
    [
        (overloaded(retry_after_ms=5), 2),  # 529 before the stream: the SDK retries it
        (mid_stream_error(), 2),  # event: error mid-stream: compactd retries once
        (cut_stream(), 2),  # connection dropped mid-stream
        (no_message_stop(), 2),  # the stream ended without message_stop
    ],
    ids=["529", "mid-stream-error", "cut-stream", "no-message-stop"],
)
async def test_transient_faults_are_retried(
    h: Harness,
    fault: Any,
    requests: int,
) -> None:
    client, emulator = h.client, h.emu
    sid = await open_session(client)
    emulator.script(fault)
    result = await client.compact_full(sid)
    assert len(emulator.message_requests) == requests
    assert result.summarizer == "cacheShared"
    assert "Summary:" in result.summary["message"]["content"]
    assert (await client.messages(sid)).boundary_uuid == result.boundary["uuid"]


async def test_empty_summary_falls_back_to_plain_then_fails(
    h: Harness,
) -> None:
    client, emulator = h.client, h.emu
    sid = await open_session(client)
    # A tool call instead of text counts as an empty summary too.
    emulator.script(Reply(text=None, tool_uses=[]), empty_reply())
    emulator.set_default(empty_reply())
    await compact_full_fails(client, sid, p.ErrorCode.SUMMARY_FAILED, "no summary text")
    bodies = [r.body for r in emulator.message_requests]
    assert len(bodies) == 2
    assert "tools" in bodies[0] and "tools" not in bodies[1]
    assert bodies[1]["thinking"] == {"type": "disabled"}

    emulator.reset()
    emulator.script(empty_reply())
    result = await client.compact_full(sid)
    assert result.summarizer == "plain"
    assert len(emulator.message_requests) == 2


async def test_api_down_falls_back_to_the_offline_summary(
    h: Harness,
) -> None:
    client, emulator = h.client, h.emu
    sid = await open_session(client)
    emulator.set_default(overloaded(retry_after_ms=5))
    result = await client.compact_full(sid)
    assert result.summarizer == "offlineFallback"
    assert result.warnings and "built offline" in result.warnings[0]
    assert "6. All User Messages:" in result.summary["message"]["content"]
    # cache-sharing, then plain, each tried three times by the SDK (max_retries 2)
    assert len(emulator.message_requests) == 6


async def test_without_offline_fallback_api_errors_and_timeouts_fail(
    app_emulated: InProc, emulator: Emulator
) -> None:
    summarizer = {"maxRetries": 0, "offlineFallback": False, "timeoutMs": 700}
    async with app_emulated(summarizer=summarizer) as client:
        sid = await open_session(client)
        emulator.set_default(overloaded())
        err = await compact_full_fails(client, sid, p.ErrorCode.SUMMARY_FAILED, "529")
        assert "Overloaded" in err.message

        emulator.reset()
        emulator.set_default(Reply(delay=3.0))
        await compact_full_fails(
            client, sid, p.ErrorCode.SUMMARY_FAILED, "did not finish within 0.7 s"
        )
