"""How true the figures are after a compaction: compactd's status against the next request.

Each session (every fixture transcript, and a synthetic one) is replayed turn by turn into a
daemon (offline summarizer) as an agent would: ``compact/auto`` before each request. The usage
of every recorded response is replaced by what the emulator's token rule counts for the
request that response answered (system prompt and tools from cacheSafeParams, then the
session's ``session/messages``): the replay then behaves like a session against an API whose
counts are known. After each compaction, the status (an estimate until the next response) is
compared with that count of the next request.

Prints per session: compactions, the median and worst relative error of the post-compaction
estimate (goal: median within 5%, no session's worst beyond 10%), beside the same figure with
the reference's 4/3 margin on the estimated part (the baseline, from the same statuses: the
prefix plus the padded estimate of the messages, docs/thresholds.md#after-a-compaction), the
summary calls a model would have answered and the input they would have billed. Run:
``.venv/bin/python tests/bench/bench_accounting.py``
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "clients" / "python")]

from compactd_client import Client  # noqa: E402

from compactd import protocol as p  # noqa: E402
from compactd.cli.replay import plan_replay  # noqa: E402
from compactd.cli.synthetic import make_session, to_jsonl  # noqa: E402
from compactd.core.tokens import pad  # noqa: E402
from tests.conftest import FIXTURES, daemon_args  # noqa: E402
from tests.e2e.test_compact_support import CACHE_SAFE  # noqa: E402
from tests.emulator.tokens import estimate_tokens, output_tokens_for  # noqa: E402
from tests.helpers import CWD  # noqa: E402

DEBUG = "-v" in sys.argv


def next_request(messages: list[dict[str, Any]]) -> int:
    """The emulator's count of a request carrying ``messages`` (the API's role here)."""
    body = {"system": CACHE_SAFE["system"], "tools": CACHE_SAFE["tools"], "messages": messages}
    return estimate_tokens(body)


def with_usage(entry: dict[str, Any], input_tokens: int) -> dict[str, Any]:
    message = entry.get("message")
    if entry.get("type") != "assistant" or not isinstance(message, dict):
        return entry
    content = message.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
    out = sum(output_tokens_for(b) for b in blocks if isinstance(b, dict))
    usage = {"input_tokens": input_tokens, "output_tokens": out}
    return {**entry, "message": {**message, "usage": usage}}


async def replay(client: Client, name: str, lines: list[bytes], window: int) -> dict[str, Any]:
    plan = plan_replay(lines)
    sid = (
        await client.open_session(
            cwd=CWD,
            model="claude-sonnet-4-5",
            context_window=window,
            max_output_tokens=4_000,
            cache_safe_params=p.CacheSafeParams(
                system=CACHE_SAFE["system"], tools=CACHE_SAFE["tools"]
            ),
        )
    ).session_id
    errors: list[float] = []
    padded: list[float] = []
    calls = billed = compactions = 0
    for batch in plan.batches:
        for entry in batch:
            if entry.get("type") == "assistant":
                # Its usage is what the request it answers counts now.
                messages = (await client.messages(sid)).messages
                entry = with_usage(entry, next_request(messages))
            await client.append(sid, [entry])
        auto = await client.compact_auto(sid)
        if not auto.was_compacted:
            continue
        compactions += 1
        if auto.result is not None:
            calls += 1
            billed += auto.result.pre_compact_tokens
        status = await client.tokens_status(sid)
        real = next_request((await client.messages(sid)).messages)
        errors.append((status.tokens - real) / real)
        if status.exact_tokens == 0:
            # The baseline: the same parts with the estimate padded by 4/3.
            estimated = status.tokens + status.cleared_tokens - status.fixed_prefix_tokens
            margin = status.fixed_prefix_tokens + pad(estimated) - status.cleared_tokens
            padded.append((margin - real) / real)
        else:
            padded.append(errors[-1])  # anchored by usage: no estimate to pad
        if DEBUG:
            print(
                name[:20],
                auto.mechanism,
                status.tokens,
                real,
                status.fixed_prefix_tokens,
                status.message_tokens,
                status.cleared_tokens,
                status.fixed_prefix_source,
            )
    return {
        "name": name,
        "compactions": compactions,
        "median": statistics.median(abs(e) for e in errors) if errors else None,
        "worst": max(errors, key=abs) if errors else None,
        "padded_median": statistics.median(abs(e) for e in padded) if padded else None,
        "padded_worst": max(padded, key=abs) if padded else None,
        "calls": calls,
        "billed": billed,
    }


def window_for(name: str) -> int:
    """A window the session overflows a few times: the fixtures are small, the synthetic is not
    (threshold = window - 4,000 output tokens - 13,000 buffer)."""
    return 40_000 if name.startswith("synthetic") else 21_000


async def main() -> None:
    sessions = [
        (path.name[:44], path.read_bytes().splitlines())
        for path in sorted(FIXTURES.glob("*.jsonl"))
    ]
    synthetic = to_jsonl(make_session(entries=600, target_tokens=150_000)).splitlines()
    sessions.append(("synthetic, 600 entries, ~150K tokens", synthetic))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        async with Client.spawn(
            daemon_args(str(Path(tmp) / "data")),
            initialization_options={"summarizer": {"offline": True}},
        ) as client:
            for name, lines in sessions:
                rows.append(await replay(client, name, lines, window=window_for(name)))
    print(
        f"{'session':46} {'compactions':>11} {'median err':>10} {'worst':>8} "
        f"{'padded med':>10} {'worst':>8} {'calls':>5} {'billed input':>12}"
    )

    def cell(value: float | None, fmt: str) -> str:
        return format(value, fmt) if value is not None else "-"

    for r in rows:
        print(
            f"{r['name']:46} {r['compactions']:>11} {cell(r['median'], '.1%'):>10} "
            f"{cell(r['worst'], '+.1%'):>8} {cell(r['padded_median'], '.1%'):>10} "
            f"{cell(r['padded_worst'], '+.1%'):>8} {r['calls']:>5} {r['billed']:>12,}"
        )
    for label, key, worst_key in (
        ("compactd", "median", "worst"),
        ("padded (baseline)", "padded_median", "padded_worst"),
    ):
        medians = [r[key] for r in rows if r[key] is not None]
        worsts = [abs(r[worst_key]) for r in rows if r[worst_key] is not None]
        if medians:
            print(
                f"{label}: median of the sessions' medians {statistics.median(medians):.1%}, "
                f"worst {max(worsts):.1%} (goal: within 5%, no worst beyond 10%)"
            )


if __name__ == "__main__":
    asyncio.run(main())
