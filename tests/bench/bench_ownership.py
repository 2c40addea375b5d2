"""Stress run of one owner per session, through two real daemons on one data dir.

Run: ``.venv/bin/python tests/bench/bench_ownership.py [SECONDS]`` (default 60). Daemon A
appends MB-sized entries (three of about 1 MB per request) and compacts every third request
(offline summarizer) for SECONDS; daemon B meanwhile opens the session (refused with
``sessionLocked``), opens it ``readOnly`` and closes it, in a loop. Printed: the entries A
acknowledged, its compactions, B's refused opens and read-only opens, and the acknowledged
entries missing from the transcript afterwards (target: 0; the run stops on the first check
that fails). ``tests/e2e/test_ownership.py`` runs the same for a few seconds.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

# Run as a plain script (``make bench``): make the repository's ``tests`` package importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.e2e.test_ownership import stress  # noqa: E402


async def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    with tempfile.TemporaryDirectory(prefix="bench-ownership-") as tmp:
        started = time.monotonic()
        counts = await stress(Path(tmp) / "data", seconds)
        elapsed = time.monotonic() - started
    # ``stress`` checked every acknowledged entry is in the transcript: none is missing.
    print(f"owner: {counts['acked']} entries acknowledged, {counts['compactions']} compactions")
    print(
        f"reader: {counts['locked']} opens refused (sessionLocked), "
        f"{counts['readOnly']} read-only opens, {counts['other']} other answers"
    )
    print(f"acknowledged entries lost: 0 (run of {elapsed:.0f} s including start and checks)")


if __name__ == "__main__":
    asyncio.run(main())
