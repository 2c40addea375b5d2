"""Recall from a few words: what Claude Code's summaries dropped, found again by ``recall``.

For each compaction in the real transcripts of ``tests/data/transcripts`` (Claude Code's own
compactions, and for a transcript without one a summary written the way Claude Code's are),
the items the summary dropped are asked for the way an agent asks (a few lowercased words,
short words and apostrophes dropped; ``tests/recall_items.py`` has the rules), and counted as
found when the item's own entry is among the first five results. The same queries go to the
full-text index ``recall`` uses now and, as the baseline measured in the same run, to the exact
substring search recall/search had before it. Then the same for the synthetic sessions of the
fidelity benchmark (``tests/fidelity.SESSIONS``: hundreds of similar commands, long pastes),
where a few words often fit many entries.

Figures, not a pass/fail test (the test on the same data is in
``tests/unit/test_recall_index.py``). Run: ``.venv/bin/python tests/bench/bench_recall_words.py``
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "clients" / "python")]

from tests.fidelity import SESSIONS  # noqa: E402
from tests.recall_items import TOP, Tally, measure, transcripts  # noqa: E402


def _print(title: str, tallies: dict[str, Tally]) -> None:
    print(title)
    print(f"  {'item':<10} {'dropped':>8} {'index (now)':>12} {'substring (before)':>19}")
    for kind, t in tallies.items():
        print(f"  {kind:<10} {t.total:>8} {t.index:>12} {t.substring:>19}")
    total = sum(t.total for t in tallies.values())
    index = sum(t.index for t in tallies.values())
    substring = sum(t.substring for t in tallies.values())
    print(f"  {'ALL':<10} {total:>8} {index:>12} {substring:>19}")
    for t in tallies.values():
        for item, query in t.missed or []:
            print(f"    missed {item.kind} ({item.source}): query {query!r} for {item.text[:70]!r}")


def main() -> None:
    print(f"found = the item's own entry among the first {TOP} results\n")
    _print("real transcripts (tests/data/transcripts)", measure(transcripts()))
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, make in SESSIONS.items():
            path = Path(tmp) / f"synthetic__{name.replace(' ', '-').replace('/', '-')}.jsonl"
            lines = [json.dumps(e) for e in make(str(Path(tmp) / "project")).entries]
            path.write_text("\n".join(lines) + "\n")
            paths.append(path)
        print()
        _print("synthetic sessions (tests/fidelity.SESSIONS)", measure(paths))


if __name__ == "__main__":
    main()
