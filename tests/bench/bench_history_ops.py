"""Benchmark of one session's long history of compactions and undos, through the real daemon.

Run: ``.venv/bin/python tests/bench/bench_history_ops.py [OPS] [CYCLES] [IMPORT_MB]`` (defaults
600, 20 and 200). The summarizer is the offline one, so the figures are the daemon's own work.

1. A seeded random mix of ``OPS`` operations on one session (``tests/history_mix.py``):
   appends, ``compact/full``, ``compact/partial`` ``from`` / ``upTo`` at random prompts,
   ``compact/micro`` and ``compact/undo``, each followed by ``session/messages`` and
   ``tokens/status``. For each kind: the median time of its first 50 and last 50 requests
   (fewer when the kind ran fewer than 100 times) and their ratio. Target: last within 2x.
   Beside them, the median size of the context those requests saw: a compaction's own work
   (summarizing, counting) follows the context, and the offline summary of a long session
   keeps every prompt, so the context grows along the run even though the history does not
   weigh on the view.
2. ``CYCLES`` cycles of ``compact/partial`` (``from`` a fixed prompt) + ``compact/undo`` on one
   session, then the daemon is restarted on the same data and ``CYCLES`` more run: the first
   and last cycle of each run, the ratio (target: within 2x), and the first request after the
   restart, which loads the session from its transcript.
3. ``tokens/status`` of an idle session, asked over and over while another session works:
   during ten partial / undo cycles on a long history, and during the import of an
   ``IMPORT_MB`` MB transcript. Target: every answer within a few milliseconds.
The baseline of each ratio is measured in the same run: the first requests of the same kind.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from compactd_client import Client

# Run as a plain script (``make bench``): make the repository's ``tests`` package importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.conftest import daemon_args  # noqa: E402
from tests.helpers import (
    CWD,  # noqa: E402
    MODEL,  # noqa: E402
)
from tests.history_mix import (  # noqa: E402
    KINDS,
    OPTIONS,
    Mix,
    partial_undo_cycle,
    status_while,
    turn,
)

SEED = 18
WINDOW = 50  # requests at each end of a kind's series
PROGRESS_EVERY = 100  # operations between two lines of progress
CYCLE_TURNS = 40  # turns appended before the partial / undo cycles
CYCLE_PIVOT = "q20"


def _arg(index: int, default: int) -> int:
    return int(sys.argv[index]) if len(sys.argv) > index else default


def _ends(samples: list[float]) -> tuple[float, float, int]:
    n = min(WINDOW, len(samples) // 2)
    return statistics.median(samples[:n]), statistics.median(samples[-n:]), n


async def run_mix(data: Path, ops: int) -> None:
    print(f"{ops} random operations on one session (seed {SEED})")
    started = time.perf_counter()
    async with Client.spawn(daemon_args(data), initialization_options=OPTIONS) as client:
        mix = await Mix.open(client, random.Random(SEED))
        await mix.append(4)
        block = time.perf_counter()
        for done in range(1, ops + 1):
            await mix.step()
            if done % PROGRESS_EVERY == 0:
                now = time.perf_counter()
                print(f"  operations {done - PROGRESS_EVERY + 1}-{done}: {now - block:.1f} s")
                block = now
    wall = time.perf_counter() - started
    print(f"  in all {wall:.1f} s, {mix.turns} turns appended")
    print(
        f"  {'request':<18} {'count':>5} {'refused':>7} {'first':>9} {'last':>9} {'ratio':>6}"
        f"   context tokens, first -> last"
    )
    for kind in (*KINDS, "session/messages", "tokens/status"):
        samples = mix.times.get(kind, [])
        if len(samples) < 2:
            print(f"  {kind:<18} {len(samples):>5} (too few to compare)")
            continue
        first, last, n = _ends(samples)
        small, large, _ = _ends([float(t) for t in mix.sizes[kind]])
        print(
            f"  {kind:<18} {len(samples):>5} {mix.refused.get(kind, 0):>7} {first:>7.1f}ms "
            f"{last:>7.1f}ms {last / first:>5.2f}x   {small:>7,.0f} -> {large:>7,.0f}"
            f"  (medians of {n})"
        )


async def _cycles(client: Client, sid: str, count: int) -> list[tuple[float, float]]:
    return [await partial_undo_cycle(client, sid, CYCLE_PIVOT) for _ in range(count)]


def _report(label: str, cycles: list[tuple[float, float]]) -> None:
    first, last = cycles[0], cycles[-1]
    print(
        f"  {label:<15} first: partial {first[0]:7.1f} ms, undo {first[1]:7.1f} ms | "
        f"last: partial {last[0]:7.1f} ms, undo {last[1]:7.1f} ms | "
        f"ratio {sum(last) / sum(first):5.2f}x"
    )


async def run_cycles(data: Path, count: int) -> None:
    async with Client.spawn(daemon_args(data), initialization_options=OPTIONS) as client:
        mix = await Mix.open(client, random.Random(SEED))
        await mix.append(CYCLE_TURNS)
        before = await _cycles(client, mix.sid, count)
    async with Client.spawn(daemon_args(data), initialization_options=OPTIONS) as client:
        start = time.perf_counter()
        await client.tokens_status(mix.sid)
        load_ms = (time.perf_counter() - start) * 1000
        after = await _cycles(client, mix.sid, count)
    print(f"{count} cycles of compact/partial (from {CYCLE_PIVOT}) + compact/undo, one session")
    _report("before restart", before)
    print(f"  first request after the restart (loads the session): {load_ms:.1f} ms")
    _report("after restart", after)


def _answers(label: str, answers: list[float]) -> None:
    print(
        f"  {label:<44} {len(answers):>4} answers, median {statistics.median(answers):5.1f} ms, "
        f"max {max(answers):6.1f} ms"
    )


def _write_transcript(path: Path, megabytes: int) -> int:
    """A linked transcript of about ``megabytes`` MB; returns its number of turns."""
    count, parent = 0, None
    with path.open("w") as fh:
        while fh.tell() < megabytes * 1_000_000:
            for entry in turn(count, parent, output_lines=200):
                fh.write(json.dumps(entry) + "\n")
            parent = f"a{count}"
            count += 1
    return count


async def run_stalls(data: Path, megabytes: int) -> None:
    source = data / "import.jsonl"
    data.mkdir(parents=True)
    turns = _write_transcript(source, megabytes)
    print("tokens/status of an idle session while another one works")
    async with Client.spawn(daemon_args(data), initialization_options=OPTIONS) as client:
        idle = await Mix.open(client, random.Random(SEED))
        await idle.append(2)
        busy = await Mix.open(client, random.Random(SEED))
        await busy.long_history(rounds=8, turns=40)

        async def cycles() -> None:
            for _ in range(10):
                await partial_undo_cycle(client, busy.sid, "q330")

        _, answers = await status_while(client, idle.sid, cycles())
        _answers("during 10 partial/undo cycles (long history)", answers)
        imported = client.open_session(
            cwd=CWD, model=MODEL, context_window=2_000_000, transcript_path=str(source)
        )
        _, answers = await status_while(client, idle.sid, imported)
        _answers(f"during the import of {megabytes} MB ({turns} turns)", answers)


async def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]
    ops, cycles, megabytes = _arg(1, 600), _arg(2, 20), _arg(3, 200)
    with tempfile.TemporaryDirectory(prefix="compactd-history-") as tmp:
        await run_mix(Path(tmp) / "mix", ops)
        await run_cycles(Path(tmp) / "cycles", cycles)
        await run_stalls(Path(tmp) / "stalls", megabytes)


if __name__ == "__main__":
    asyncio.run(main())
