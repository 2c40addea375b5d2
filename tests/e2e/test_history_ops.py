"""A session's long history of compactions and undos, through the real daemon over stdio.

The view of a session is worked out boundary by boundary and remembered, so its cost follows
the context, not the history: a seeded random mix of operations keeps every undo exact, cycles
of ``compact/partial`` + ``compact/undo`` do not slow down (before and after a restart), and
that work runs off the event loop, so another session's ``tokens/status`` is answered at once.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path

import pytest
from compactd_client import Client, RpcError

from compactd import protocol as p
from tests.conftest import SpawnDaemon
from tests.history_mix import KINDS, OPTIONS, Mix, partial_undo_cycle, status_while

MIX_OPS = 150
CYCLES = 20
# The last cycle may take twice the first, plus this much for the noise of a shared machine.
CYCLE_SLACK_MS = 40.0
# tokens/status of another session while one works: the bound of any single answer.
STATUS_BOUND_MS = 100.0


async def test_a_random_mix_keeps_every_undo_exact(spawn_daemon: SpawnDaemon) -> None:
    async with spawn_daemon(options=OPTIONS) as client:
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


async def _cycles(client: Client, sid: str) -> list[float]:
    before = (await client.messages(sid)).messages
    totals = []
    for _ in range(CYCLES):
        totals.append(sum(await partial_undo_cycle(client, sid, "q10")))
        # The undo brings back exactly the view the partial compaction replaced.
        assert (await client.messages(sid)).messages == before
    return totals


def _flat(totals: list[float], label: str) -> None:
    first, last = totals[0], totals[-1]
    print(f"{label}: first cycle {first:.1f} ms, last {last:.1f} ms")
    assert last <= 2 * first + CYCLE_SLACK_MS, (label, totals)


async def test_partial_undo_cycles_stay_flat_across_a_restart(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    data = tmp_path / "cycles"
    async with spawn_daemon(options=OPTIONS, data_dir=data) as client:
        mix = await Mix.open(client, random.Random(7))
        await mix.append(20)
        _flat(await _cycles(client, mix.sid), "before the restart")
    async with spawn_daemon(options=OPTIONS, data_dir=data) as client:
        start = time.perf_counter()
        await client.tokens_status(mix.sid)
        print(
            f"loading the session after {CYCLES} cycles: {(time.perf_counter() - start) * 1e3:.1f} ms"
        )
        _flat(await _cycles(client, mix.sid), "after the restart")


async def test_status_of_another_session_is_answered_during_undo_work(
    spawn_daemon: SpawnDaemon,
) -> None:
    async with spawn_daemon(options=OPTIONS) as client:
        busy = await Mix.open(client, random.Random(3))
        await busy.long_history(rounds=8, turns=40)  # q320..q359 are in the view
        other = await Mix.open(client, random.Random(4))
        await other.append(2)

        async def cycles() -> float:
            start = time.perf_counter()
            for _ in range(10):
                await partial_undo_cycle(client, busy.sid, "q330")
            return (time.perf_counter() - start) * 1000

        work_ms, answers = await status_while(client, other.sid, cycles())
    print(
        f"tokens/status of another session during {work_ms:.0f} ms of partial/undo cycles: "
        f"{len(answers)} answers, median {statistics.median(answers):.1f} ms, "
        f"max {max(answers):.1f} ms"
    )
    assert len(answers) >= 10
    assert max(answers) < STATUS_BOUND_MS, answers
