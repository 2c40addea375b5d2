"""tokens/status latency over stdio beside a full recount of the same session, same run.

Session: 2,000 entries, about 180K tokens (compactd.cli.synthetic). Targets (issue 3): p50 of the
status round trip at most 1 ms, and at least 50x faster than a full recount per call.
Run: ``.venv/bin/python tests/bench/bench_tokens.py``
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "clients" / "python")]

from compactd_client import Client  # noqa: E402

from compactd import protocol as p  # noqa: E402
from compactd.cli.synthetic import make_session  # noqa: E402
from compactd.core import tokens  # noqa: E402
from compactd.core.view import context_records  # noqa: E402
from compactd.transcript.model import record_from_dict  # noqa: E402
from tests.helpers import CWD  # noqa: E402

CALLS = 2000


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main() -> None:
    entries = make_session(entries=2000, target_tokens=180_000)
    records = [record_from_dict(e) for e in entries]

    # Baseline: what a status call would cost if it recounted the session each time.
    recount = []
    for _ in range(50):
        t = time.perf_counter()
        ctx = context_records(records)
        count = tokens.count_tokens([r.entry for r in ctx if tokens.counts_toward_context(r.entry)])
        recount.append(time.perf_counter() - t)

    # A second baseline: a counter without the usage anchor estimates every entry.
    naive = []
    for _ in range(20):
        t = time.perf_counter()
        tokens.estimate_entries(r.entry for r in context_records(records))
        naive.append(time.perf_counter() - t)

    with tempfile.TemporaryDirectory() as tmp:
        async with Client.spawn(
            [sys.executable, "-m", "compactd", "serve", "--data-dir", tmp]
        ) as client:
            opened = await client.open_session(cwd=CWD, model="claude-sonnet-4-5")
            await client.append(opened.session_id, entries)
            params = {"sessionId": opened.session_id}
            for _ in range(200):  # warm up
                await client.request(p.TOKENS_STATUS, params)
            rtt = []
            for _ in range(CALLS):
                t = time.perf_counter()
                status = await client.request(p.TOKENS_STATUS, params)
                rtt.append(time.perf_counter() - t)

    p50, p99 = pct(rtt, 0.5), pct(rtt, 0.99)
    base = statistics.median(recount)
    print(
        f"session: {len(entries)} entries, {status['tokens']:,} tokens (core recount says {count.tokens:,})"
    )
    print(
        f"tokens/status over stdio: p50 {p50 * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms ({CALLS} calls)"
    )
    print(f"full recount per call (in-process, no transport): median {base * 1e3:.3f} ms")
    nbase = statistics.median(naive)
    print(f"estimate-everything recount (no usage anchor): median {nbase * 1e3:.3f} ms")
    print(
        f"status round trip vs anchored recount: {base / p50:.1f}x; vs estimate-everything "
        f"recount: {nbase / p50:.1f}x (target >= 50x, p50 <= 1 ms)"
    )


if __name__ == "__main__":
    asyncio.run(main())
