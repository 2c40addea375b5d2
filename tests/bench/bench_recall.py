"""Benchmark of recall/search over a 20,000-entry session, through the real daemon over stdio.

Run: ``.venv/bin/python -m tests.bench.bench_recall``. Opens a synthetic 20,000-entry session,
then times recall/search queries (a miss, which scans every entry, and a hit deep in the
history) before and after an offline full compaction (after it, the summarized records are
released from memory and read back from the transcript on demand). The baseline measured in
the same run is ``session/messages`` of the same session (one pass over the context). Figures,
not a pass/fail test.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from compactd_client import Client

from compactd import protocol as p
from compactd.cli.synthetic import make_session

# Run as a plain script (``make bench``): make the repository's ``tests`` package importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.conftest import daemon_args  # noqa: E402
from tests.helpers import CWD  # noqa: E402

RUNS = 7


async def median_ms(fn: Callable[[], Awaitable[Any]]) -> float:
    await fn()
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


async def main() -> None:
    entries = make_session(entries=20_000, target_tokens=1_500_000, seed=11)
    needle = next(
        e["message"]["content"][:30]
        for e in entries[10:]
        if e["type"] == "user" and isinstance(e["message"]["content"], str)
    )
    with tempfile.TemporaryDirectory() as tmp:
        options = {"summarizer": {"offline": True}}
        async with Client.spawn(daemon_args(Path(tmp)), initialization_options=options) as c:
            opened = await c.request(
                p.SESSION_OPEN,
                {"cwd": CWD, "model": "claude-sonnet-4-5", "contextWindow": 2_000_000},
            )
            sid = str(opened["sessionId"])
            for i in range(0, len(entries), 2_000):
                await c.append(sid, entries[i : i + 2_000])
            rows: list[tuple[str, float]] = []
            rows.append(("session/messages (baseline)", await median_ms(lambda: c.messages(sid))))
            rows.append(
                ("recall miss, all in memory", await median_ms(lambda: c.recall(sid, "zzqqxx")))
            )
            rows.append(
                (
                    "recall early hit, in memory",
                    await median_ms(lambda: c.recall(sid, needle, limit=200)),
                )
            )
            await c.compact_full(sid)
            rows.append(
                ("recall miss, history released", await median_ms(lambda: c.recall(sid, "zzqqxx")))
            )
            rows.append(
                (
                    "recall early hit, released",
                    await median_ms(lambda: c.recall(sid, needle, limit=200)),
                )
            )
    print(f"recall/search on {len(entries)} entries (median of {RUNS})")
    for name, ms in rows:
        print(f"  {name:<34} {ms:9.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
