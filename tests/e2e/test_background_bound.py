"""A compaction always compacts: a prepared summary is never applied with a huge verbatim tail.

The scenario of docs/background.md#applying, over stdio against a real daemon process: a
200,000-token window, a model summarizer (the emulator, over HTTP), the defaults. Thirteen
appends of ten entries of about 1,000 tokens take the session past the start level, where a
summary is prepared and finishes; then one append of sixty more (an import, a follow catch-up)
arrives faster than any summary could. ``compact/full`` and ``compact/auto`` must each leave at
most a quarter of the auto-compact threshold besides the summary, with every message the person
wrote still in what the model sees.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from compactd_client import Client

from compactd import protocol as p
from compactd.core.tokens import estimate_text_tokens
from tests.e2e.test_compact_support import CACHE_SAFE, Harness, harness_fixture
from tests.emulator import request_kind
from tests.fidelity import items_of, recalls, view_text
from tests.helpers import CWD, assistant, text_block, user

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio(loop_scope="module")]

harness = harness_fixture(wire=True, backgroundCompaction={"enabled": True})

MODEL = "claude-sonnet-4-5"  # a 200,000-token window
# About 1,000 tokens of prose per entry.
BODY = "the quick brown fox jumps over the lazy dog near the river bank " * 50


class Burst:
    """A linked conversation appended ten (or sixty) entries at a time."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.n = 0
        self.last: str | None = None
        self.entries: list[dict[str, Any]] = []

    def take(self, count: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for _ in range(count):
            self.n += 1
            uuid = f"{self.tag}-{self.n:04d}"
            if self.n % 2:
                entry = user(f"request {uuid}: {BODY}", uuid=uuid, parentUuid=self.last)
            else:
                entry = assistant(
                    [text_block(f"answer {uuid}: {BODY}")],
                    uuid=uuid,
                    parentUuid=self.last,
                    msg_id=f"msg-{uuid}",
                    model=MODEL,
                )
            self.last = uuid
            out.append(entry)
        self.entries += out
        return out


async def _prepared_then_burst(client: Client, tag: str) -> tuple[str, Burst, p.TokenStatus]:
    """A session whose summary was prepared past the start level, then sixty entries at once."""
    opened = await client.request(
        p.SESSION_OPEN, {"cwd": CWD, "model": MODEL, "cacheSafeParams": CACHE_SAFE}
    )
    sid = str(opened["sessionId"])
    burst = Burst(tag)
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        for _ in range(13):
            await client.append(sid, burst.take(10))
        deadline = time.monotonic() + 60
        while True:
            _, note = await asyncio.wait_for(queue.get(), deadline - time.monotonic())
            if note.get("background") and note["phase"] in ("prepared", "failed"):
                assert note["phase"] == "prepared", note
                break
    ready = await client.tokens_status(sid)
    assert ready.preparation is not None and ready.preparation.state == "ready", ready
    await client.append(sid, burst.take(60))
    status = await client.tokens_status(sid)
    assert status.tokens > status.auto_compact_threshold, status
    return sid, burst, status


async def _check_bounded(
    client: Client, sid: str, burst: Burst, before: p.TokenStatus, result: p.CompactResult
) -> None:
    quarter = before.auto_compact_threshold // 4
    summary = str(result.summary["message"]["content"])
    besides = (
        result.post_compact_tokens - before.fixed_prefix_tokens - estimate_text_tokens(summary)
    )
    print(
        "BOUND",
        result.prepared,
        before.tokens,
        result.pre_compact_tokens,
        result.post_compact_tokens,
        besides,
        quarter,
        len(result.kept_entries),
    )
    assert besides <= quarter, (result.pre_compact_tokens, result.post_compact_tokens, quarter)
    view = view_text((await client.messages(sid)).messages)
    users, _, _ = recalls(items_of(burst.entries), view)
    assert users.found == users.total, (users.found, users.total)


async def test_compact_full_after_a_burst_is_bounded(h: Harness) -> None:
    sid, burst, before = await _prepared_then_burst(h.client, "f")
    result = await h.client.request(p.COMPACT_FULL, {"sessionId": sid})
    await _check_bounded(h.client, sid, burst, before, _decode(result))


async def test_compact_auto_after_a_burst_is_bounded(h: Harness) -> None:
    sid, burst, before = await _prepared_then_burst(h.client, "a")
    auto = await h.client.compact_auto(sid)
    assert auto.was_compacted and auto.mechanism == "full" and auto.result is not None, auto
    await _check_bounded(h.client, sid, burst, before, auto.result)
    # Only summaries were asked of the model here, never one over the whole context twice.
    assert all(request_kind(r.body) == "summary" for r in h.emu.message_requests)


def _decode(raw: dict[str, Any]) -> p.CompactResult:
    import msgspec

    return msgspec.convert(raw, p.CompactResult)
