"""A compaction in flight: keep-alives, cancellation, progress, appends and a second request.

The emulator delays its answer so that the test can act while the daemon waits on the model.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from compactd_client import RpcError

from compactd import protocol as p
from tests.conftest import SpawnDaemon
from tests.e2e.test_compact_support import (
    Harness,
    harness_fixture,
    open_session,
    phases,
    snapshot,
    transcript_path,
)
from tests.emulator import Emulator, Reply
from tests.helpers import MODEL, assistant, drain, text_block, transcript_lines, user

pytestmark = [pytest.mark.timeout(40), pytest.mark.asyncio(loop_scope="module")]

# Keep-alive notifications on the pipe and a cancel of a request in flight: the real daemon.
harness = harness_fixture(wire=True)


async def _until_requested(emu: Emulator, n: int = 1, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while len(emu.message_requests) < n:
        assert time.monotonic() < deadline, "the daemon never called the model"
        await asyncio.sleep(0.01)


async def _through_phase(queue: asyncio.Queue[tuple[str, Any]], phase: str) -> list[Any]:
    """The status notifications queued, waiting (with a generous deadline) until ``phase``."""
    notes = drain(queue)
    while not notes or notes[-1]["phase"] != phase:
        notes.append((await asyncio.wait_for(queue.get(), 20))[1])
    return notes


async def test_keep_alive_every_interval_while_the_model_writes(h: Harness) -> None:
    client, emu = h.client, h.emu
    # Warm-up on another session: the first compaction also loads the SDK.
    await client.compact_full(await open_session(client))
    sid = await open_session(client)
    emu.script(Reply(delay=1.0))
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        result = await client.compact_full(sid)
        notes = drain(queue)
    assert {n["compactionId"] for n in notes} == {result.compaction_id}
    seen = phases(notes)
    first, last = seen.index("summarizing"), seen.index("rehydrating")
    beats = [n for n in notes[first:last] if n["phase"] == "keepAlive"]
    # 1 s of model time at 200 ms intervals: several, none outside the model call. How many
    # depends on how much time the model call took on this machine, not on a count fixed here.
    assert len(beats) >= 2, seen
    assert all(n["phase"] != "keepAlive" for n in notes[:first] + notes[last:]), seen
    assert [ph for ph in seen if ph != "keepAlive"] == [
        "started",
        "preCompactHooks",
        "summarizing",
        "rehydrating",
        "sessionStartHooks",
        "completed",
    ]
    # One beat per interval, never more often (a busy machine can only make them later).
    gaps = [b["elapsedMs"] - a["elapsedMs"] for a, b in zip(beats, beats[1:], strict=False)]
    assert all(g >= 150 for g in gaps), gaps


async def test_cancel_mid_call_leaves_the_session_unchanged(h: Harness) -> None:
    client, emu = h.client, h.emu
    sid = await open_session(client)
    before = await snapshot(client, sid, tokens=True)
    emu.script(Reply(delay=8.0))
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        msg_id, fut = await client.request_with_id(p.COMPACT_FULL, {"sessionId": sid})
        await _until_requested(emu)
        await client.cancel(msg_id)
        with pytest.raises(RpcError) as info:
            await asyncio.wait_for(fut, 20)
        # The HTTP call was abandoned, not awaited: the emulator is still holding its reply
        # back (it records an outcome only once the scripted delay is over).
        assert emu.message_requests[-1].outcome == ""
        notes = await _through_phase(queue, "cancelled")
    assert info.value.number == -32800
    assert phases(notes)[-1] == "cancelled"
    assert await snapshot(client, sid, tokens=True) == before
    assert not any(
        ln.get("subtype") == "compact_boundary"
        for ln in transcript_lines(await transcript_path(client, sid))
    )
    # Nothing is left locked or flagged: the next compaction runs normally.
    result = await client.compact_full(sid)
    assert (await client.messages(sid)).boundary_uuid == result.boundary["uuid"]


def _more_work(tag: str, parent: str | None = None) -> list[dict[str, Any]]:
    return [
        user(f"New request {tag}: rename the module.", uuid=f"{tag}-u", parentUuid=parent),
        assistant(
            [text_block(f"Renamed the module ({tag}).")],
            uuid=f"{tag}-a",
            msg_id=f"msg-{tag}",
            model=MODEL,
            # Measured on the whole conversation before the compaction.
            usage={"input_tokens": 20, "cache_read_input_tokens": 16_000, "output_tokens": 9},
            parentUuid=f"{tag}-u",
        ),
    ]


async def test_entries_appended_during_the_call_stay_after_the_summary(
    h: Harness,
) -> None:
    client, emu = h.client, h.emu
    sid = await open_session(client)
    last_uuid = transcript_lines(await transcript_path(client, sid))[-1]["uuid"]
    emu.script(Reply(delay=1.0))
    task = asyncio.ensure_future(client.compact_full(sid))
    await _until_requested(emu)
    # A second compaction of the same session is refused while this one runs.
    with pytest.raises(RpcError) as info:
        await client.compact_full(sid)
    assert info.value.code == p.ErrorCode.SESSION_BUSY
    auto = await client.compact_auto(sid, force=True)
    assert not auto.was_compacted and auto.reason and "already running" in auto.reason
    # The agent keeps working meanwhile.
    await client.append(sid, _more_work("live", parent=last_uuid))
    result = await task

    meta = result.boundary["compactMetadata"]
    assert meta["preservedSegment"] == {
        "headUuid": "live-u",
        "anchorUuid": result.summary["uuid"],
        "tailUuid": "live-a",
    }
    assert [e["uuid"] for e in result.kept_entries] == ["live-u", "live-a"]
    assert result.boundary["logicalParentUuid"] == last_uuid  # the snapshot's last entry
    lines = transcript_lines(await transcript_path(client, sid))
    order = [ln.get("uuid") for ln in lines]
    assert order.index("live-a") < order.index(result.boundary["uuid"])  # written before
    view = await client.messages(sid)
    assert view.messages[0]["content"][0]["text"] == result.summary["message"]["content"]
    texts = [b.get("text") for m in view.messages for b in m["content"]]
    assert "New request live: rename the module." in texts
    assert "Renamed the module (live)." in texts
    assert texts.index("New request live: rename the module.") > 0
    # The kept response's usage predates the compaction: it does not anchor the new count.
    status = await client.tokens_status(sid)
    assert status.tokens == result.post_compact_tokens < 5_000


async def test_work_done_progress_and_progress_cancel(
    spawn_emulated: SpawnDaemon, emulator: Emulator
) -> None:
    caps = {"window": {"workDoneProgress": True}}
    async with spawn_emulated(capabilities=caps) as client:
        sid = await open_session(client)
        async with client.subscribe("$/progress") as queue:
            result = await client.compact_full(sid)
            progress = drain(queue)
            while progress[-1]["value"]["kind"] != "end":  # if it comes after the answer
                progress.append((await asyncio.wait_for(queue.get(), 20))[1])
        kinds = [n["value"]["kind"] for n in progress]
        assert kinds[0] == "begin" and kinds[-1] == "end"
        assert "report" in kinds
        assert len({n["token"] for n in progress}) == 1
        assert progress[0]["value"]["cancellable"] is True
        assert result.compaction_id

        # The user cancels from the progress bar: the compaction stops, nothing is written.
        sid = await open_session(client)
        before = await snapshot(client, sid, tokens=True)
        emulator.script(Reply(delay=8.0))
        async with client.subscribe("$/progress") as queue:
            task = asyncio.ensure_future(client.compact_full(sid))
            await _until_requested(emulator, 2)
            token = (await queue.get())[1]["token"]
            await client.notify("window/workDoneProgress/cancel", {"token": token})
            with pytest.raises(RpcError) as info:
                await asyncio.wait_for(task, 5)
        assert info.value.code == p.ErrorCode.CANCELLED
        assert await snapshot(client, sid, tokens=True) == before
