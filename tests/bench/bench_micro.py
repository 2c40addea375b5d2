"""Benchmark of the microcompact core on a 180K-token synthetic session.

Run: ``.venv/bin/python tests/bench/bench_micro.py``. Prints the median time of each core
function beside two baselines measured in the same run on the same entries: a full
``count_tokens`` pass, an estimate of every entry and a JSON round-trip of the session. Figures, not a pass/fail test; the
target for a count-based plan is at most 5 ms.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from compactd.cli.synthetic import make_session
from compactd.core import microcompact as mc
from compactd.core.tokens import count_tokens, estimate_entries
from compactd.transcript.model import record_from_dict

RUNS = 50


def median_ms(fn: Callable[[], Any], runs: int = RUNS) -> float:
    fn()  # warm up
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> None:
    dicts = make_session(entries=2000, target_tokens=180_000)
    entries = [record_from_dict(d).entry for d in dicts]
    count = count_tokens(entries)
    results = mc.clearable_results(entries)
    plan = mc.plan_count(entries)
    # "now" just after the last entry (count) and two hours later (time-based clearing).
    last = mc.last_response_time(entries) or 0.0
    idle_now = last + 2 * 3600

    print(f"session: {len(entries)} entries, {count.tokens} tokens, {len(results)} clearable")
    print(
        f"count plan: clears {len(plan.cleared)} results, saves {plan.tokens_saved} tokens"
        f" ({plan.reason or 'ok'})"
    )
    rows = [
        ("baseline: count_tokens (anchored count)", lambda: count_tokens(entries)),
        ("baseline: estimate_entries (every entry)", lambda: estimate_entries(entries)),
        ("baseline: JSON round-trip of the session", lambda: json.loads(json.dumps(dicts))),
        ("clearable_results", lambda: mc.clearable_results(entries)),
        ("plan_count", lambda: mc.plan_count(entries)),
        (
            "plan_count, second call (cleared ids given)",
            lambda: mc.plan_count(entries, cleared=set(plan.cleared_ids)),
        ),
        ("plan_time (idle 2 h)", lambda: mc.plan_time(entries, idle_now)),
        ("choose_strategy", lambda: mc.choose_strategy(entries, last + 60)),
        (
            "advance_cached (register all, delete)",
            lambda: mc.advance_cached(mc.CachedState(), results, len(entries)),
        ),
    ]
    width = max(len(name) for name, _ in rows)
    for name, fn in rows:
        print(f"{name:<{width}}  {median_ms(fn):8.3f} ms (median of {RUNS})")


if __name__ == "__main__":
    main()
