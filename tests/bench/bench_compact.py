"""Benchmark of a full compaction on a ~180K-token session against the Messages API emulator.

Run: ``.venv/bin/python tests/bench/bench_compact.py``. Figures, not a pass/fail test.

1. The daemon's own overhead: the wall time of ``compact/full`` seen by the client, minus the
   time the emulator spent serving the model request (measured inside the emulator, which
   runs in this process). Beside it, the baseline measured in the same run: the same request
   body sent straight through the ``anthropic`` SDK from this process, minus the emulator's
   time (what any client pays for the SDK and the HTTP stream). Target: at most 50 ms.
2. Billed-equivalent input tokens of the compaction request (input + 0.1 x cache reads +
   1.25 x 5-minute writes + 2 x 1-hour writes) when the main loop's previous request is in
   the cache (replayed through the emulator first), beside the same compaction without cache
   sharing: the plain fallback request, and the cache-sharing request on a cold cache.
   Target: at most 15% of the request without cache sharing.
"""

from __future__ import annotations

import asyncio
import copy
import statistics
import sys
import tempfile
import threading
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from compactd_client import Client

from compactd import protocol as p
from compactd.cli.synthetic import make_session

# Run as a plain script (``make bench``): make the repository's ``tests`` package importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.emulator import Emulator, RecordedRequest  # noqa: E402
from tests.helpers import CWD  # noqa: E402

RUNS = 5
# The SDK warns on every call naming a deprecated model; the figures are what matters here.
warnings.filterwarnings(
    "ignore", message=r"The model .* is deprecated", category=DeprecationWarning
)
MODEL = "claude-sonnet-4-5"
SYSTEM: list[dict[str, Any]] = [
    {"type": "text", "text": "You are an AI coding agent working in the user's repository."},
    {
        "type": "text",
        "text": "Follow the repository's conventions and explain what you change. " * 150,
        "cache_control": {"type": "ephemeral"},
    },
]
TOOLS: list[dict[str, Any]] = [
    {
        "name": name,
        "description": f"{name}: " + "Use this tool carefully and report what it returned. " * 40,
        "input_schema": {
            "type": "object",
            "properties": {"file_path": {"type": "string"}, "command": {"type": "string"}},
        },
    }
    for name in ("Read", "Bash", "Grep", "Glob", "Edit", "Write", "TodoWrite", "WebFetch")
]
CACHE_SAFE = {"system": SYSTEM, "tools": TOOLS}


class TimedEmulator(Emulator):
    """The emulator, recording how long it spent on each /v1/messages exchange."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.spans: list[tuple[str, float]] = []
        self._span_lock = threading.Lock()

    def _handle(self, h: Any) -> None:
        start = time.perf_counter()
        try:
            super()._handle(h)
        finally:
            elapsed = time.perf_counter() - start
            with self._span_lock:
                self.spans.append((h.path, elapsed))

    def take_spans(self, expected: int) -> float:
        """Seconds spent on the ``expected`` message exchanges since the last call.

        A handler thread records its span just after the client got the last byte, so wait
        for it rather than attribute it to the next measurement.
        """
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self._span_lock:
                if len(self.spans) >= expected:
                    break
            time.sleep(0.001)
        with self._span_lock:
            total = sum(s for path, s in self.spans if path.split("?")[0].endswith("/messages"))
            self.spans.clear()
        return total


def _recent(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    now = time.time()
    for i, entry in enumerate(entries):
        stamp = datetime.fromtimestamp(now - (len(entries) - i), UTC)
        entry["timestamp"] = stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return entries


def billed(usage: dict[str, Any] | None) -> float:
    if not usage:
        return 0.0
    creation = usage.get("cache_creation") or {}
    return (
        usage.get("input_tokens", 0)
        + 0.1 * usage.get("cache_read_input_tokens", 0)
        + 1.25 * creation.get("ephemeral_5m_input_tokens", 0)
        + 2.0 * creation.get("ephemeral_1h_input_tokens", 0)
    )


def _main_loop_request(view: list[dict[str, Any]]) -> dict[str, Any]:
    """The request that produced the session's last response: everything before it, with the
    cache marker on its last block (where an agent's main loop puts it)."""
    last_assistant = max(i for i, m in enumerate(view) if m["role"] == "assistant")
    messages = copy.deepcopy(view[:last_assistant])
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return {
        "model": MODEL,
        "max_tokens": 4096,
        "system": SYSTEM,
        "tools": TOOLS,
        "messages": messages,
    }


async def _open(client: Client, entries: list[dict[str, Any]], cache_safe: bool) -> str:
    params: dict[str, Any] = {"cwd": CWD, "model": MODEL}
    if cache_safe:
        params["cacheSafeParams"] = CACHE_SAFE
    sid = str((await client.request(p.SESSION_OPEN, params))["sessionId"])
    await client.append(sid, entries)
    return sid


def _message_usage(emu: Emulator) -> dict[str, Any] | None:
    requests: list[RecordedRequest] = emu.message_requests
    return requests[-1].usage if requests else None


async def run() -> None:
    entries = _recent(make_session(entries=2000, target_tokens=180_000, model=MODEL))
    emu = TimedEmulator()
    emu.set_context_window(MODEL, 1_000_000)
    emu.start()
    try:
        with tempfile.TemporaryDirectory(prefix="compactd-bench-") as tmp:
            # The synchronous compaction request is what is measured here: a summary prepared in
            # the background while the 2,000 entries are appended (no main-loop request has
            # warmed the cache yet) would be applied instead. bench_wait measures that path.
            options = {
                "summarizer": {"baseUrl": emu.base_url, "apiKey": "test"},
                "backgroundCompaction": {"enabled": False},
            }
            args = [sys.executable, "-m", "compactd", "serve", "--data-dir", tmp]
            async with Client.spawn(args, initialization_options=options) as client:
                await _bench(client, emu, entries)
    finally:
        emu.stop()


async def _bench(client: Client, emu: TimedEmulator, entries: list[dict[str, Any]]) -> None:
    sdk = emu.async_client(max_retries=0)
    # Warm-up: the daemon loads the SDK on its first compaction; that is not per-compaction work.
    cold_sid = await _open(client, copy.deepcopy(entries), cache_safe=True)
    status = await client.tokens_status(cold_sid)
    started = time.perf_counter()
    await client.compact_full(cold_sid)
    first_ms = (time.perf_counter() - started) * 1000
    print(f"session: {len(entries)} entries, {status.tokens:,} tokens (tokens/status)")
    print(f"first compaction of the daemon (loads the SDK): {first_ms:.0f} ms")

    overheads: list[float] = []
    baselines: list[float] = []
    totals: list[float] = []
    warm_billed: list[float] = []
    cold_billed: list[float] = []
    plain_billed: list[float] = []
    for _ in range(RUNS):
        # The main loop's previous request, replayed: it puts the prefix in the cache.
        sid = await _open(client, copy.deepcopy(entries), cache_safe=True)
        view = (await client.messages(sid)).messages
        emu.reset()
        await sdk.messages.create(**_main_loop_request(view))
        emu.take_spans(1)

        started = time.perf_counter()
        result = await client.compact_full(sid)
        wall = time.perf_counter() - started
        served = emu.take_spans(1)
        assert result.summarizer == "cacheShared", result.summarizer
        totals.append(wall * 1000)
        overheads.append((wall - served) * 1000)
        warm_billed.append(billed(_message_usage(emu)))
        body = emu.message_requests[-1].body
        assert isinstance(body, dict)

        # Baseline: the same body straight through the SDK from this process.
        kwargs = {k: v for k, v in body.items() if k != "stream"}
        emu.clear_cache()
        started = time.perf_counter()
        async with await sdk.messages.create(**kwargs, stream=True) as stream:
            async for _event in stream:
                pass
        wall = time.perf_counter() - started
        baselines.append((wall - emu.take_spans(1)) * 1000)
        cold_billed.append(billed(_message_usage(emu)))  # the same request, cold cache

        # Without cache sharing: the plain fallback request of the same session.
        plain_sid = await _open(client, copy.deepcopy(entries), cache_safe=False)
        emu.reset()
        plain = await client.compact_full(plain_sid)
        assert plain.summarizer == "plain", plain.summarizer
        plain_billed.append(billed(_message_usage(emu)))
        emu.take_spans(1)

    med = statistics.median
    print(f"runs: {RUNS} (medians)")
    print(f"  compact/full wall time seen by the client:     {med(totals):8.1f} ms")
    print(
        f"  daemon overhead (wall minus emulator time):   {med(overheads):8.1f} ms  (target <= 50)"
    )
    print(f"  baseline: same request via the SDK directly:  {med(baselines):8.1f} ms  (SDK + HTTP)")
    print(
        f"  daemon overhead beyond the SDK baseline:      {med(overheads) - med(baselines):8.1f} ms"
    )
    warm, cold, plain_cost = med(warm_billed), med(cold_billed), med(plain_billed)
    print("billed-equivalent input tokens of the compaction request:")
    print(f"  cache-sharing, main loop's prefix warm:       {warm:10,.0f}")
    print(f"  cache-sharing request, cold cache:            {cold:10,.0f}")
    print(f"  plain fallback (no cache sharing):            {plain_cost:10,.0f}")
    print(
        f"  warm / plain: {warm / plain_cost:6.1%}   warm / cold: {warm / cold:6.1%}   "
        "(target <= 15%)"
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(run()))
