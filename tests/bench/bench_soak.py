"""Soak benchmark: many sessions working at once for a bounded time against one real daemon.

Run: ``.venv/bin/python tests/bench/bench_soak.py [SECONDS] [SESSIONS]`` (defaults 60 s and 20
sessions; ``COMPACTD_SOAK_SECONDS`` / ``COMPACTD_SOAK_SESSIONS`` also work). Each session is
driven by its own task, like an agent loop: append a round of entries, ask for the token
status, now and then a microcompaction, and a full compaction (summarizer on the in-process
emulator of the Messages API, real HTTP) once enough has been appended since the last one.
Prints throughput by kind of operation, errors (the target is zero), p50 / p99 latencies, and
the daemon's resident memory (VmRSS from /proc) after a warm-up (the same load until every
session went through one full compaction) and at the end, with the growth.
The baseline is measured in the same run: the latency of ``session/list``, the cheapest call
(one round trip through the framing and dispatch), sampled before the load starts. Figures,
not a pass/fail test; targets: zero errors and RSS growth under 10%.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

from compactd_client import Client, RpcError

from compactd.cli.synthetic import make_session

# Run as a plain script (``make bench``): make the repository's ``tests`` package importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.e2e.test_compact_support import CACHE_SAFE, MODEL  # noqa: E402
from tests.emulator import Emulator  # noqa: E402
from tests.helpers import CWD  # noqa: E402

warnings.filterwarnings(
    "ignore", message=r"The model .* is deprecated", category=DeprecationWarning
)

ROUND = 4  # entries per append: a user turn, the assistant's tool call, its result, the reply
APPENDS_BEFORE_FULL = 60  # appends between two full compactions of one session
MICRO_EVERY = 15  # one microcompaction every this many appends


def _arg(index: int, env: str, default: int) -> int:
    if len(sys.argv) > index:
        return int(sys.argv[index])
    return int(os.environ.get(env, default))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS line")


class Pool:
    """Entries for appends: a synthetic conversation replayed with fresh uuids and timestamps."""

    def __init__(self) -> None:
        self.entries = make_session(entries=400, target_tokens=40_000, model=MODEL)
        self.pos = 0

    def batch(self, parent: str | None) -> list[dict[str, Any]]:
        out = []
        for _ in range(ROUND):
            src = self.entries[self.pos % len(self.entries)]
            self.pos += 1
            entry = {**src, "uuid": str(uuid.uuid4()), "parentUuid": parent}
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
            entry["timestamp"] = stamp
            out.append(entry)
            parent = entry["uuid"]
        return out


class Stats:
    def __init__(self) -> None:
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, list[str]] = defaultdict(list)

    async def timed(self, kind: str, call: Any) -> Any:
        start = time.perf_counter()
        try:
            return await call
        except RpcError as err:
            self.errors[kind].append(f"{err.code}: {err.message}")
            return None
        finally:
            self.latencies[kind].append((time.perf_counter() - start) * 1000)


async def _open(client: Client, sid: str, pool: Pool) -> str | None:
    await client.request(
        "session/open",
        {
            "sessionId": sid,
            "cwd": CWD,
            "model": MODEL,
            "cacheSafeParams": CACHE_SAFE,
        },
    )
    last: str | None = None
    for _ in range(10):
        batch = pool.batch(last)
        await client.append(sid, batch)
        last = batch[-1]["uuid"]
    return last


async def _agent(
    client: Client,
    sid: str,
    last: str | None,
    pool: Pool,
    stats: Stats,
    stop: float,
    seed: int,
    *,
    fulls: int | None = None,
) -> str | None:
    """One agent loop until ``stop`` (or, with ``fulls``, until it ran that many full
    compactions); returns the uuid of its last appended entry."""
    rng = random.Random(seed)
    appends = 0
    done = 0
    while time.monotonic() < stop and (fulls is None or done < fulls):
        batch = pool.batch(last)
        if await stats.timed("append", client.append(sid, batch)) is not None:
            last = batch[-1]["uuid"]
            appends += 1
        await stats.timed("status", client.tokens_status(sid))
        if appends % MICRO_EVERY == 0:
            await stats.timed("micro", client.compact_micro(sid))
        # Sessions reach their compactions at different moments, as real ones do.
        if appends >= APPENDS_BEFORE_FULL + rng.randrange(20):
            await stats.timed("full", client.compact_full(sid))
            appends = 0
            done += 1
    return last


def _disk(tmp: str) -> int:
    return sum(f.stat().st_size for f in Path(tmp).rglob("transcript.jsonl"))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(seconds: int, sessions: int) -> int:
    emu = Emulator()
    emu.start()
    pool = Pool()
    stats = Stats()
    try:
        with tempfile.TemporaryDirectory(prefix="compactd-soak-") as tmp:
            options = {
                "summarizer": {"baseUrl": emu.base_url, "apiKey": "test"},
                "keepAliveIntervalMs": 1_000,
            }
            args = [sys.executable, "-m", "compactd", "serve", "--data-dir", tmp]
            async with Client.spawn(args, initialization_options=options) as client:
                assert client.process is not None
                pid = client.process.pid
                sids = [f"soak-{i:02d}" for i in range(sessions)]
                lasts = [await _open(client, sid, pool) for sid in sids]
                rss_open = rss_kib(pid)
                # Warm-up: the same load until every session went through one full compaction
                # (which also loads the SDK). The working set, a context per session between
                # two compactions, is then at its steady size, so growth measured from here is
                # what the run adds: history and anything leaking.
                warm = Stats()
                lasts = list(
                    await asyncio.gather(
                        *(
                            _agent(
                                client, sid, last, pool, warm, time.monotonic() + 600, i, fulls=1
                            )
                            for i, (sid, last) in enumerate(zip(sids, lasts, strict=True))
                        )
                    )
                )
                warm_errors = sum(len(v) for v in warm.errors.values())
                base = Stats()
                for _ in range(200):
                    await base.timed("list", client.list_sessions())
                rss_start = rss_kib(pid)
                size_start = _disk(tmp)
                t0 = time.monotonic()
                stop = t0 + seconds
                samples: list[tuple[float, int, int]] = []

                async def sample() -> None:
                    # RSS beside the bytes on disk: growth that follows the data is the
                    # in-memory session (kept by design); growth beyond it would be a leak.
                    while time.monotonic() < stop:
                        await asyncio.sleep(seconds / 6)
                        samples.append((time.monotonic() - t0, rss_kib(pid), _disk(tmp)))

                await asyncio.gather(
                    sample(),
                    *(
                        _agent(client, sid, last, pool, stats, stop, seed=i)
                        for i, (sid, last) in enumerate(zip(sids, lasts, strict=True))
                    ),
                )
                elapsed = time.monotonic() - t0
                rss_end = rss_kib(pid)
                size = _disk(tmp)
            # A restart: a fresh daemon loads every session from its transcript again.
            async with Client.spawn(args, initialization_options=options) as client:
                assert client.process is not None
                started = time.perf_counter()
                for sid in sids:
                    await client.tokens_status(sid)
                reload_s = time.perf_counter() - started
                rss_reloaded = rss_kib(client.process.pid)
    finally:
        emu.stop()

    total_ops = sum(len(v) for v in stats.latencies.values())
    total_errors = sum(len(v) for v in stats.errors.values()) + warm_errors
    print(f"soak: {sessions} sessions for {elapsed:.1f} s against the emulator")
    print(
        f"warm-up (one full compaction per session, not in the figures below): "
        f"{sum(len(v) for v in warm.latencies.values())} ops, {warm_errors} errors"
    )
    print(f"baseline session/list round trip: p50 {_pct(base.latencies['list'], 0.5):.2f} ms")
    print(f"{'kind':<8} {'ops':>7} {'ops/s':>8} {'errors':>6} {'p50 ms':>8} {'p99 ms':>8}")
    for kind in ("append", "status", "micro", "full"):
        lat = stats.latencies.get(kind, [])
        if not lat:
            continue
        print(
            f"{kind:<8} {len(lat):>7} {len(lat) / elapsed:>8.1f} {len(stats.errors[kind]):>6} "
            f"{statistics.median(lat):>8.2f} {_pct(lat, 0.99):>8.2f}"
        )
    print(f"total    {total_ops:>7} {total_ops / elapsed:>8.1f} {total_errors:>6}")
    growth = (rss_end - rss_start) / rss_start * 100
    print(f"daemon RSS with the sessions opened, before the warm-up: {rss_open / 1024:.1f} MiB")
    print(
        f"daemon RSS: {rss_start / 1024:.1f} MiB after warm-up -> {rss_end / 1024:.1f} MiB at "
        f"the end ({growth:+.1f}%); transcripts on disk: {size / 1e6:.1f} MB"
    )
    print(
        f"after a restart, loading all {sessions} sessions ({size / 1e6:.1f} MB) took "
        f"{reload_s:.2f} s; daemon RSS then {rss_reloaded / 1024:.1f} MiB"
    )
    for at, rss, disk in samples:
        print(f"  at {at:5.1f} s: RSS {rss / 1024:6.1f} MiB, transcripts {disk / 1e6:6.1f} MB")
    if size > size_start:
        per_mb = (rss_end - rss_start) / 1024 / ((size - size_start) / 1e6)
        print(f"RSS growth per MB appended to the transcripts: {per_mb:.2f} MiB")
    for kind, errs in stats.errors.items():
        for msg in errs[:3]:
            print(f"error [{kind}]: {msg}")
    return 1 if total_errors else 0


def main() -> None:
    seconds = _arg(1, "COMPACTD_SOAK_SECONDS", 60)
    sessions = _arg(2, "COMPACTD_SOAK_SESSIONS", 20)
    sys.exit(asyncio.run(run(seconds, sessions)))


if __name__ == "__main__":
    main()
