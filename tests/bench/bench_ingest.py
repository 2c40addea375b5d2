"""Import throughput: a transcript through the daemon (session/open with transcriptPath) beside
the standard library's ``json`` parsing the same bytes, in the same run (docs/durability.md#imported-transcripts).

Target: the import at least two thirds of json's speed on both inputs (``json/import`` >= 0.67),
on the largest real transcript of ``tests/data/transcripts`` (0.8 MB) and a synthetic one of
20,000 entries (15 MB, ``compactd.cli.synthetic``).

What is timed. One daemon is started (``compactd serve``, as a client starts it) and every
import goes through it: a ``session/open`` with ``transcriptPath`` and a new session id, whose
answer comes once the transcript was read, decoded into typed entries, copied into the
session's own transcript and fsynced with its folder and the meta file, and the session's view,
token count and read-file state worked out. The baseline is ``json.loads`` of each of the same
lines in this process, the objects dropped as they come (it keeps nothing, writes nothing). The
two alternate, round after round, so that both see the machine in the same state:

- ``cpu``: the daemon's CPU time for the request (all its threads, the kernel's work for it
  included: reading the file, page faults, writing the copy) against the CPU time of the json
  parse. CPU time is what the work costs, and it is not stretched by the other processes of a
  busy machine the way the clock is: this is the figure the target is judged on.
- ``wall``: the request's round trip on the clock against the json parse on the clock. It adds
  what the daemon waits for: the fsyncs that make the import durable before it is answered
  (docs/durability.md), and its turn on a shared CPU.

Each figure is the median over the rounds of the per-round ratio, so one round slowed by a
neighbour moves none of them; beside it, the spread of the middle half of the rounds. The small
transcript takes a few milliseconds, where the noise of a shared machine is the largest: it gets
five times the rounds. CPU time of another process is read through the kernel's clock of that
process (``clock_getcpuclockid``); where there is none (not Linux) only ``wall`` is shown.

Run: ``.venv/bin/python tests/bench/bench_ingest.py [ROUNDS]`` (ROUNDS for the synthetic
transcript, five times as many for the real one; about a minute).
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "clients" / "python")]

from compactd_client import Client  # noqa: E402

from compactd.cli.synthetic import make_session, to_jsonl  # noqa: E402
from tests.helpers import CWD  # noqa: E402

FIXTURES = ROOT / "tests" / "data" / "transcripts"
ROUNDS = 9
TARGET = 0.67


def cpu_clock_of(pid: int) -> Callable[[], float] | None:
    """The CPU time of process ``pid`` (all its threads) in seconds, or None where unknown."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        clock = ctypes.c_int()
        if libc.clock_getcpuclockid(pid, ctypes.byref(clock)) != 0:
            return None
        time.clock_gettime(clock.value)
    except (OSError, AttributeError):
        return None
    return lambda: time.clock_gettime(clock.value)


def json_parse(data: bytes) -> None:
    for line in data.splitlines():
        if line.strip():
            json.loads(line)


@dataclass
class Rounds:
    json_cpu: list[float] = field(default_factory=list)
    json_wall: list[float] = field(default_factory=list)
    import_cpu: list[float] = field(default_factory=list)
    import_wall: list[float] = field(default_factory=list)

    def ratios(self, name: str) -> list[float]:
        base, daemon = getattr(self, f"json_{name}"), getattr(self, f"import_{name}")
        return [j / d for j, d in zip(base, daemon, strict=True)]

    def ratio(self, name: str) -> str:
        """The median per-round ratio, and the range of the middle half of the rounds."""
        found = self.ratios(name)
        low, _, high = statistics.quantiles(found, n=4)
        return f"{statistics.median(found):.2f} ({low:.2f}-{high:.2f})"


async def measure(
    client: Client, daemon_cpu: Callable[[], float] | None, path: Path, rounds: int
) -> tuple[Rounds, int]:
    data = path.read_bytes()
    out = Rounds()
    entries = 0
    for i in range(rounds):
        c0, w0 = time.process_time(), time.perf_counter()
        json_parse(data)
        out.json_wall.append(time.perf_counter() - w0)
        out.json_cpu.append(time.process_time() - c0)
        d0 = daemon_cpu() if daemon_cpu else 0.0
        w0 = time.perf_counter()
        opened = await client.open_session(
            session_id=f"{path.stem[:24]}-{i}",
            cwd=CWD,
            model="claude-sonnet-4-5",
            transcript_path=str(path),
        )
        out.import_wall.append(time.perf_counter() - w0)
        if daemon_cpu:
            out.import_cpu.append(daemon_cpu() - d0)
        entries = opened.entry_count
        # The session stays open, as an editor's would: the next import lands beside it.
    return out, entries


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        largest = max(FIXTURES.glob("*.jsonl"), key=lambda p: p.stat().st_size)
        synthetic = tmpdir / "synthetic-20k.jsonl"
        synthetic.write_bytes(to_jsonl(make_session(entries=20_000, target_tokens=1_800_000)))
        async with Client.spawn(
            [sys.executable, "-m", "compactd", "serve", "--data-dir", str(tmpdir / "data")]
        ) as client:
            assert client.process is not None
            daemon_cpu = cpu_clock_of(client.process.pid)
            # A throwaway import first: the daemon's first one imports its reading code.
            await client.open_session(
                session_id="warm-up",
                cwd=CWD,
                model="claude-sonnet-4-5",
                transcript_path=str(min(FIXTURES.glob("*.jsonl"), key=lambda p: p.stat().st_size)),
            )
            print(
                f"{'transcript':<34} {'MB':>5} {'entries':>7} {'rounds':>6} │"
                f" {'json':>6} {'import':>6} {'json/import':>17} │"
                f" {'json':>6} {'import':>6} {'json/import':>17}"
            )
            print(f"{'':<56} │ {'cpu ms':^32} │ {'wall ms':^32}")
            results = []
            for path, times in ((largest, 5 * rounds), (synthetic, rounds)):
                found, entries = await measure(client, daemon_cpu, path, times)
                mb = path.stat().st_size / 1e6
                cpu = (
                    f"{statistics.median(found.json_cpu) * 1e3:>6.1f}"
                    f" {statistics.median(found.import_cpu) * 1e3:>6.1f}"
                    f" {found.ratio('cpu'):>17}"
                    if daemon_cpu
                    else f"{'(no CPU clock of the daemon here)':>32}"
                )
                print(
                    f"{path.name[:34]:<34} {mb:>5.2f} {entries:>7} {times:>6} │ {cpu} │"
                    f" {statistics.median(found.json_wall) * 1e3:>6.1f}"
                    f" {statistics.median(found.import_wall) * 1e3:>6.1f}"
                    f" {found.ratio('wall'):>17}"
                )
                results.append((path.name, found))
        print(
            "json and import alternating; json/import: median of the rounds' ratios (middle half); "
            f"target: >= {TARGET} on both ({'cpu' if daemon_cpu else 'wall'})"
        )
        if daemon_cpu:
            for name, found in results:
                waits = [w - c for w, c in zip(found.import_wall, found.import_cpu, strict=True)]
                print(
                    f"  {name[:34]}: the import waited {statistics.median(waits) * 1e3:.1f} ms "
                    "beside its CPU time (fsyncs before the answer, its turn on the CPU)"
                )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS))
