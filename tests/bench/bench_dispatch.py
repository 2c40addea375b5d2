"""What compact/auto's decision costs, seen through compact/preview, beside tokens/status.

``compact/auto`` and ``compact/preview`` gather the same facts and call the same ``decide``; the
preview stops there, so its round trip is what auto spends deciding before it acts. Session:
2,000 entries, about 180K tokens (compactd.cli.synthetic), stamped recent so that no time-based
microcompact applies. Two cases per summarizer (offline, and a model that is never called):

- below the auto-compact threshold (the session opened with a 1M window): the gate answers;
- above it (a 200K window): microcompact's plan, which is enough here;
- forced: microcompact does not count, so the full compaction is predicted (for the offline
  summarizer the offline summary and its ledger check are built) with its attachments.

Then what deciding costs when auto acts: ``compact/auto`` with ``force`` against ``compact/full``
on identical sessions (offline summarizer), in alternating rounds, each on fresh sessions. Auto
decides on a plan and carries that plan out (docs/engine.md#plan), so it should cost little more
than full: the target is at most 1.25x (issue 27).

Figures, not a pass/fail test; the baseline is tokens/status on the same session in the same
run. Run: ``.venv/bin/python tests/bench/bench_dispatch.py`` (``--auto-only``: the last part)
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "clients" / "python")]

from compactd_client import Client  # noqa: E402

from compactd import protocol as p  # noqa: E402
from compactd.cli.synthetic import make_session  # noqa: E402
from tests.helpers import CWD  # noqa: E402

MODEL = "claude-sonnet-4-5"
STATUS_CALLS = 500
PREVIEW_CALLS = 30
COMPACT_ROUNDS = 10
SUMMARIZERS: dict[str, dict[str, Any]] = {
    "offline summarizer": {"offline": True},
    # A model summarizer on a port nothing listens on: a preview never calls it.
    "model summarizer": {"apiKey": "unused", "baseUrl": "http://127.0.0.1:9"},
}


def recent(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    now = time.time()
    for i, entry in enumerate(entries):
        stamp = datetime.fromtimestamp(now - (len(entries) - i), UTC).isoformat()
        entry["timestamp"] = stamp.replace("+00:00", "Z")
    return entries


async def timed(client: Client, method: str, params: dict[str, Any], calls: int) -> float:
    """Median seconds of ``calls`` round trips (after two unmeasured ones)."""
    for _ in range(2):
        await client.request(method, params)
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await client.request(method, params)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def bench(name: str, summarizer: dict[str, Any], entries: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        args = [sys.executable, "-m", "compactd", "serve", "--data-dir", tmp]
        options = {"summarizer": summarizer}
        async with Client.spawn(args, initialization_options=options) as client:
            sids = {}
            for case, window in (("below", 1_000_000), ("above", 200_000)):
                opened = await client.request(
                    p.SESSION_OPEN, {"cwd": CWD, "model": MODEL, "contextWindow": window}
                )
                sids[case] = str(opened["sessionId"])
                await client.append(sids[case], entries)
            status = await client.tokens_status(sids["above"])
            base = await timed(client, p.TOKENS_STATUS, {"sessionId": sids["above"]}, STATUS_CALLS)
            print(
                f"== {name}: {status.tokens:,} tokens, threshold {status.auto_compact_threshold:,}"
            )
            print(f"tokens/status (baseline): median {base * 1e3:.2f} ms")
            cases = [
                ("below the threshold", {"sessionId": sids["below"]}),
                ("above the threshold", {"sessionId": sids["above"]}),
                ("forced", {"sessionId": sids["above"], "force": True}),
            ]
            for case, asked in cases:
                params = {**asked, "mechanism": "auto"}
                mechanism = (await client.request(p.COMPACT_PREVIEW, params))["mechanism"]
                took = await timed(client, p.COMPACT_PREVIEW, params, PREVIEW_CALLS)
                print(
                    f"compact/preview auto, {case} ({mechanism}): median "
                    f"{took * 1e3:.2f} ms, {took / base:.1f}x tokens/status"
                )


async def auto_vs_full(entries: list[dict[str, Any]], rounds: int = COMPACT_ROUNDS) -> None:
    """Median seconds of compact/full and compact/auto (force) on identical fresh sessions."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [sys.executable, "-m", "compactd", "serve", "--data-dir", tmp]
        options = {"summarizer": {"offline": True}}
        async with Client.spawn(args, initialization_options=options) as client:
            took: dict[str, list[float]] = {"full": [], "auto": []}
            for i in range(rounds + 1):
                # Alternate which goes first, so a warming cache favours neither.
                order = [("full", p.COMPACT_FULL, {}), ("auto", p.COMPACT_AUTO, {"force": True})]
                if i % 2:
                    order.reverse()
                for name, method, extra in order:
                    opened = await client.request(
                        p.SESSION_OPEN, {"cwd": CWD, "model": MODEL, "contextWindow": 200_000}
                    )
                    sid = str(opened["sessionId"])
                    await client.append(sid, entries)
                    started = time.perf_counter()
                    result = await client.request(method, {"sessionId": sid, **extra})
                    elapsed = time.perf_counter() - started
                    if name == "auto" and not result.get("wasCompacted"):
                        raise SystemExit(f"compact/auto did not compact: {result.get('reason')}")
                    if i:  # the first round warms up
                        took[name].append(elapsed)
                    await client.request(p.SESSION_CLOSE, {"sessionId": sid})
            full = statistics.median(took["full"])
            auto = statistics.median(took["auto"])
            print(f"== compact/auto (force) vs compact/full, offline summarizer, {rounds} rounds")
            print(f"compact/full: median {full * 1e3:.1f} ms")
            print(
                f"compact/auto force: median {auto * 1e3:.1f} ms, {auto / full:.2f}x compact/full"
            )


async def main() -> None:
    entries = recent(make_session(entries=2000, target_tokens=180_000, model=MODEL))
    if "--auto-only" not in sys.argv:
        for name, summarizer in SUMMARIZERS.items():
            await bench(name, summarizer, entries)
    await auto_vs_full(entries)


if __name__ == "__main__":
    asyncio.run(main())
