"""Benchmark of following a live transcript: from a line's write to the status reflecting it.

Run: ``.venv/bin/python tests/bench/bench_follow.py``. Figures, not a pass/fail test.

A daemon follows a Claude Code transcript (the fixture ``claude-code-2.1.330__r16_manual``,
its compaction included) while this process appends it a line at a time, as Claude Code does.
The delay of a line is the time from its write to the ``session/followed`` notification whose
status counts it (the daemon's watcher, its debounce, the read, the durable commit and the
notification). Target: within 1 s (issue 29). Beside it, measured in the same run: the round
trip of a ``tokens/status`` request, what any status a client asks for costs, and the
watcher's quiet period (``FOLLOW_QUIET_SECONDS``), the floor the debounce sets.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from compactd_client import Client

from compactd.engine.follow import FOLLOW_QUIET_SECONDS

# Run as a plain script (``make bench``): make the repository's ``tests`` package importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.conftest import FIXTURES, daemon_args  # noqa: E402
from tests.helpers import CWD  # noqa: E402

SOURCE = FIXTURES / "claude-code-2.1.330__r16_manual.jsonl"
# Sessions followed one after the other, each the whole fixture written a line at a time.
ROUNDS = 3
# Lines the session is opened with (the rest is written while it is followed).
OPENED_WITH = 3
DEADLINE = 30.0


def quantiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (
        f"p50 {statistics.median(ordered) * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms   "
        f"max {ordered[-1] * 1000:7.1f} ms   (n={len(ordered)})"
    )


def append(path: Path, line: bytes) -> float:
    """Append ``line`` as Claude Code does (one write); when the write began."""
    with open(path, "ab") as fh:
        start = time.perf_counter()
        fh.write(line)
    return start


async def follow_round(client: Client, path: Path, sid: str) -> tuple[list[float], list[float]]:
    lines = SOURCE.read_bytes().splitlines(keepends=True)
    # Every round is a new Claude Code session: new uuids would be the same lines otherwise.
    lines = [line.replace(b'"uuid":"', f'"uuid":"{sid}-'.encode()) for line in lines]
    path.write_bytes(b"".join(lines[:OPENED_WITH]))
    delays: list[float] = []
    round_trips: list[float] = []
    async with client.follow_updates(sid) as updates:
        opened = await client.open_session(
            cwd=CWD, session_id=sid, transcript_path=str(path), follow=True
        )
        count = opened.entry_count
        for line in lines[OPENED_WITH:]:
            start = append(path, line)
            count += 1
            while True:
                note = await updates.next(DEADLINE)
                if note.entry_count >= count:
                    break
            delays.append(time.perf_counter() - start)
            start = time.perf_counter()
            status = await client.tokens_status(sid)
            round_trips.append(time.perf_counter() - start)
            assert status == note.status, "the notification's status is not the session's"
        await client.close_session(sid)
    return delays, round_trips


async def main() -> None:
    delays: list[float] = []
    round_trips: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        projects = root / "projects"
        projects.mkdir()
        async with Client.spawn(daemon_args(root / "data")) as client:
            for i in range(ROUNDS):
                d, r = await follow_round(client, projects / f"s{i}.jsonl", f"bench-{i}")
                delays += d
                round_trips += r
    print(f"followed {len(delays)} lines written one at a time ({ROUNDS} sessions)")
    print(f"write -> status reflects it:  {quantiles(delays)}")
    print(f"tokens/status round trip:     {quantiles(round_trips)}")
    print(f"watcher quiet period:         {FOLLOW_QUIET_SECONDS * 1000:.0f} ms")
    ratio = statistics.median(delays) / statistics.median(round_trips)
    print(f"median delay / median round trip: {ratio:.1f}x   (target: every delay within 1 s)")


if __name__ == "__main__":
    asyncio.run(main())
