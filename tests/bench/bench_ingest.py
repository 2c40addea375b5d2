"""Import throughput: a transcript through the daemon (session/open with transcriptPath) beside
stdlib ``json`` parsing of the same bytes, measured in the same run.

Target: the daemon at least two thirds of json's speed on both inputs (``json/daemon`` >= 0.67:
the import's request round trip, fsync of the copy included, against parsing the same lines
with the standard library). Run: ``.venv/bin/python tests/bench/bench_ingest.py``
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "clients" / "python")]

from compactd_client import Client  # noqa: E402

from compactd.cli.synthetic import make_session, to_jsonl  # noqa: E402
from tests.helpers import CWD  # noqa: E402

FIXTURES = ROOT / "tests" / "data" / "transcripts"
RUNS = 7


def json_parse_seconds(data: bytes) -> float:
    best = []
    for _ in range(RUNS):
        t = time.perf_counter()
        for line in data.splitlines():
            if line.strip():
                json.loads(line)
        best.append(time.perf_counter() - t)
    return statistics.median(best)


async def daemon_import_seconds(path: Path, data_dir: Path) -> tuple[float, int]:
    async with Client.spawn(
        [sys.executable, "-m", "compactd", "serve", "--data-dir", str(data_dir)]
    ) as client:
        times = []
        entries = 0
        for i in range(RUNS):
            t = time.perf_counter()
            opened = await client.open_session(
                session_id=f"bench-{i}",
                cwd=CWD,
                model="claude-sonnet-4-5",
                transcript_path=str(path),
            )
            times.append(time.perf_counter() - t)
            entries = opened.entry_count
        return statistics.median(times), entries


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        candidates = sorted(FIXTURES.glob("*.jsonl"), key=lambda p: p.stat().st_size)
        synthetic = tmpdir / "synthetic-20k.jsonl"
        synthetic.write_bytes(to_jsonl(make_session(entries=20_000, target_tokens=1_800_000)))
        targets = [candidates[-1], synthetic]
        print(
            f"{'transcript':<44} {'MB':>6} {'entries':>8} {'daemon ms':>10} {'daemon MB/s':>12} "
            f"{'json ms':>8} {'json MB/s':>10} {'json/daemon':>11}"
        )
        for path in targets:
            data = path.read_bytes()
            mb = len(data) / 1e6
            j = json_parse_seconds(data)
            d, entries = await daemon_import_seconds(path, tmpdir / f"data-{path.stem[:10]}")
            print(
                f"{path.name[:44]:<44} {mb:>6.2f} {entries:>8} {d * 1e3:>10.1f} {mb / d:>12.1f}"
                f" {j * 1e3:>8.1f} {mb / j:>10.1f} {j / d:>11.2f}"
            )
        print("target: json/daemon >= 0.67 on both (the daemon at two thirds of json's speed)")


if __name__ == "__main__":
    asyncio.run(main())
