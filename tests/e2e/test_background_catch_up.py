"""A ready summary's tail is brought into it in the background, before the agent needs it.

docs/background.md#bound, over stdio against a real daemon process: a 200,000-token window, a
model summarizer (the emulator, over HTTP), a preparation started at half the threshold. Once
what arrived after the ready summary's snapshot nears the bound, a catch-up (the summary
followed by those entries) is asked in the background; ``compact/auto`` meanwhile answers
``summaryPreparing`` with the tokens left before the blocking limit, and once the catch-up is
ready applies it at once, without a model call, keeping verbatim only what arrived while it was
written.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from compactd_client import Client

from compactd import protocol as p
from compactd.core import background as bg
from compactd.core.prompts import continuation_message
from compactd.core.tokens import estimate_text_tokens
from tests.e2e.test_background_bound import Burst
from tests.e2e.test_compact_support import CACHE_SAFE, Harness, harness_fixture
from tests.emulator import request_kind
from tests.emulator.script import user_texts
from tests.fidelity import items_of, recalls, view_text
from tests.helpers import CWD

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio(loop_scope="module")]

harness = harness_fixture(wire=True, backgroundCompaction={"enabled": True, "startAt": 0.5})

MODEL = "claude-sonnet-4-5"  # a 200,000-token window
# What a catch-up's request opens with: the ready summary as a continued conversation.
OPENING = continuation_message("", transcript_path=None, trigger="auto").split("\n\n")[0]


async def _phase(queue: asyncio.Queue[Any], phases: tuple[str, ...]) -> dict[str, Any]:
    """The next background ``compact/status`` of one of ``phases``."""
    deadline = time.monotonic() + 60
    while True:
        _, note = await asyncio.wait_for(queue.get(), deadline - time.monotonic())
        if note.get("background") and note["phase"] in phases:
            return dict(note)


def _summaries(h: Harness) -> list[Any]:
    return [r for r in h.emu.message_requests if request_kind(r.body) == "summary"]


async def _refreshing(client: Client, sid: str) -> bool:
    state = (await client.tokens_status(sid)).preparation
    return state is not None and bool(state.refreshing)


async def test_the_tail_is_brought_in_ahead_of_the_threshold(h: Harness) -> None:
    client = h.client
    opened = await client.request(
        p.SESSION_OPEN, {"cwd": CWD, "model": MODEL, "cacheSafeParams": CACHE_SAFE}
    )
    sid = str(opened["sessionId"])
    burst = Burst("c")
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        # Twenty entries an append: each a bulk append, so no growth rate is measured and the
        # catch-up is asked when the tail plus CATCH_UP_LEAD of the threshold passes the bound.
        while (await client.tokens_status(sid)).preparation is None:
            await client.append(sid, burst.take(20))
        assert (await _phase(queue, ("prepared", "failed")))["phase"] == "prepared"
        ready = await client.tokens_status(sid)
        threshold = ready.auto_compact_threshold
        h.emu.hold("summary")  # the catch-up is being written until released below
        asked = len(_summaries(h))
        while not await _refreshing(client, sid):
            await client.append(sid, burst.take(20))
            assert (await client.tokens_status(sid)).tokens < threshold
        # At the threshold the agent is not stopped: the catch-up is still being written.
        while (status := await client.tokens_status(sid)).tokens < threshold:
            await client.append(sid, burst.take(2))
        waiting = await client.compact_auto(sid)
        assert not waiting.was_compacted and waiting.reason_code == "summaryPreparing", waiting
        assert waiting.tokens_left == status.blocking_limit - status.tokens
        h.emu.release("summary")
        assert (await _phase(queue, ("prepared", "failed")))["phase"] == "prepared"
    # The catch-up's request: the ready summary as the opening, then the entries after it.
    catch_up = _summaries(h)[asked:]
    assert len(catch_up) == 1, len(catch_up)
    assert user_texts(catch_up[0].body)[0].startswith(OPENING)
    asked = len(_summaries(h))
    before = await client.tokens_status(sid)
    auto = await client.compact_auto(sid)
    assert auto.was_compacted and auto.mechanism == "full" and auto.result is not None, auto
    result = auto.result
    assert result.prepared, result
    assert len(_summaries(h)) == asked  # applied without a model call
    summary = str(result.summary["message"]["content"])
    besides = (
        result.post_compact_tokens - before.fixed_prefix_tokens - estimate_text_tokens(summary)
    )
    assert 0 < besides <= bg.tail_limit(threshold), (besides, threshold)
    view = view_text((await client.messages(sid)).messages)
    users, _, _ = recalls(items_of(burst.entries), view)
    assert users.found == users.total, (users.found, users.total)
