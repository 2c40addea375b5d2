"""A session's long history of compactions and undos, in process (tests/inproc.py).

The view of a session is worked out boundary by boundary and remembered: a seeded random mix of
operations keeps every undo exact, cycles of ``compact/partial`` + ``compact/undo`` bring back
the same view (before and after a restart), and that work runs off the event loop, so another
session's ``tokens/status`` is answered while a compaction is still running. How long the
cycles take, and whether the last is as quick as the first, is a figure of
``tests/bench/bench_history_ops.py``: a test does not time anything (a busy machine would
fail it).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from compactd_client import Client, RpcError

from compactd import protocol as p
from tests.history_mix import KINDS, OPTIONS, Mix, partial_undo_cycle
from tests.inproc import InProc

MIX_OPS = 150
CYCLES = 20


async def test_a_random_mix_keeps_every_undo_exact(app_daemon: InProc) -> None:
    async with app_daemon(options=OPTIONS) as client:
        mix = await Mix.open(client, random.Random(1818), check=True)
        await mix.append(4)
        for _ in range(MIX_OPS):
            await mix.step()
        # Every kind of operation did something, and many undos were checked.
        done = {kind: len(mix.times.get(kind, [])) for kind in KINDS}
        assert all(count > 0 for count in done.values()), done
        assert mix.undo_checks >= 15, (mix.undo_checks, done)
        # Unwinding everything still in effect goes back, undo by undo, to the plain history.
        checked = mix.undo_checks
        assert await mix.undo_all() > 0
        assert mix.undo_checks > checked
        with pytest.raises(RpcError) as err:
            await client.compact_undo(mix.sid)
        assert err.value.code == p.ErrorCode.NOTHING_TO_UNDO


async def _cycles(client: Client, sid: str) -> None:
    before = (await client.messages(sid)).messages
    for _ in range(CYCLES):
        await partial_undo_cycle(client, sid, "q10")
        # The undo brings back exactly the view the partial compaction replaced.
        assert (await client.messages(sid)).messages == before


async def test_partial_undo_cycles_keep_the_view_across_a_restart(
    app_daemon: InProc, tmp_path: Path
) -> None:
    data = tmp_path / "cycles"
    async with app_daemon(options=OPTIONS, data_dir=data) as client:
        mix = await Mix.open(client, random.Random(7))
        await mix.append(20)
        await _cycles(client, mix.sid)
    async with app_daemon(options=OPTIONS, data_dir=data) as client:
        await client.tokens_status(mix.sid)  # loads the session from its transcript
        await _cycles(client, mix.sid)


async def test_status_of_another_session_is_answered_during_undo_work(
    app_daemon: InProc,
) -> None:
    async with app_daemon(options=OPTIONS) as client:
        busy = await Mix.open(client, random.Random(3))
        await busy.long_history(rounds=8, turns=40)  # q320..q359 are in the view
        other = await Mix.open(client, random.Random(4))
        await other.append(2)
        # Which request of the busy session is in flight (a number), or None between them.
        running: list[int | None] = [None]
        done = asyncio.Event()

        async def cycles() -> None:
            for i in range(10):
                running[0] = 2 * i
                await client.compact_partial(busy.sid, "q330", "from")
                running[0] = 2 * i + 1
                await client.compact_undo(busy.sid)
                running[0] = None
            done.set()

        work = asyncio.create_task(cycles())
        answers = within = 0
        while not done.is_set():
            asked_during = running[0]
            await client.tokens_status(other.sid)
            answers += 1
            # Asked and answered while one and the same busy request was running: the event
            # loop was free during that request's work.
            if asked_during is not None and running[0] == asked_during:
                within += 1
            await asyncio.sleep(0.001)
        await work
    print(f"{answers} tokens/status answers during the cycles, {within} within one request")
    assert answers >= 10
    assert within > 0
