"""An answer says what happened, and a kill loses nothing acknowledged.

- Cancels at random moments of every kind of mutating request: a ``cancelled`` answer leaves
  the transcript byte-identical; any other answer matches what the transcript then holds.
- Seeded SIGKILLs while appends stream in and a compaction, a partial compaction, a
  microcompact or an undo is in flight: after each restart every acknowledged entry is there
  and no half-written compaction shows.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from pathlib import Path
from typing import Any

from compactd import protocol as p
from tests.e2e.test_crash import (
    Appender,
    _big_entries,
    _check_file,
    _daemon,
    _entries,
    _kill,
    _open,
)
from tests.helpers import CWD, stored_transcript, tool_call, tool_result, user
from tests.wire import Wire

# The default run keeps each test well inside the suite's timeout on a busy 2-core machine (a
# kill trial spawns a daemon: a second of imports); ``make fuzz`` runs the full form
# (CANCEL_TRIALS=100, KILL_TRIALS=50) with the same checks.
CANCELS_PER_KIND = int(os.environ.get("CANCEL_TRIALS", "20"))
KILL_TRIALS = int(os.environ.get("KILL_TRIALS", "10"))


def _turn(i: int, tag: str) -> list[dict[str, Any]]:
    """A user request, a tool call and its result: what microcompact can clear."""
    call = tool_call(f"{tag}-c{i}", "Read", {"file_path": f"{CWD}/f{i % 7}.py"}, uuid=f"{tag}-a{i}")
    return [
        user(f"{tag} request {i} " + "word " * 60, uuid=f"{tag}-u{i}"),
        call,
        tool_result(f"{tag}-c{i}", "line of code\n" * 300, uuid=f"{tag}-r{i}"),
    ]


def _uuids(data: bytes) -> list[str]:
    return [json.loads(line).get("uuid") for line in data.splitlines()]


def test_cancels_at_random_moments_answer_what_happened(tmp_path: Path) -> None:
    data = tmp_path / "data"
    w = Wire(data, tmp_path / "daemon.log")
    rng = random.Random(17)
    path = stored_transcript(data, "c")
    kinds = ["append", "full", "partial", "micro", "undo"]
    tally = {k: {"cancelled": 0, "answered": 0, "refused": 0} for k in kinds}
    try:
        w.call(
            "initialize",
            {
                "processId": None,
                "capabilities": {},
                "initializationOptions": {"dataDir": str(data), "summarizer": {"offline": True}},
            },
        )
        w.call(p.SESSION_OPEN, {"cwd": CWD, "model": "claude-sonnet-4-5", "sessionId": "c"})
        seq = 0
        started = time.monotonic()
        for trial in range(CANCELS_PER_KIND * len(kinds)):
            kind = kinds[trial % len(kinds)]
            seq += 1
            turn = _turn(seq, "t")
            assert w.call(p.SESSION_APPEND, {"sessionId": "c", "entries": turn})["result"]
            params: dict[str, Any] = {"sessionId": "c"}
            method = {
                "append": p.SESSION_APPEND,
                "full": p.COMPACT_FULL,
                "partial": p.COMPACT_PARTIAL,
                "micro": p.COMPACT_MICRO,
                "undo": p.COMPACT_UNDO,
            }[kind]
            new: list[dict[str, Any]] = []
            if kind == "append":
                seq += 1
                new = _turn(seq, "x")
                params["entries"] = new
            elif kind == "partial":
                params.update(pivotUuid=turn[0]["uuid"], direction=rng.choice(["from", "upTo"]))
            elif kind == "micro":
                params["strategy"] = "count"
            before = path.read_bytes()
            msg_id = f"r{trial}"
            w.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
            delay = rng.choice([0.0, 0.0, rng.uniform(0, 0.002), rng.uniform(0, 0.03)])
            if delay:
                w.flush()
                time.sleep(delay)
            w.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": msg_id}})
            w.flush()
            msg = w.answer(wait=60)
            assert msg["id"] == msg_id
            after = path.read_bytes()
            if "error" in msg:
                # Refused or cancelled, the session is as it was.
                assert after == before, (kind, msg)
                code = msg["error"]["data"]["code"]
                tally[kind]["cancelled" if code == "cancelled" else "refused"] += 1
                continue
            tally[kind]["answered"] += 1
            result = msg["result"]
            written = _uuids(after[len(before) :])
            assert after.startswith(before)
            if kind == "append":
                assert result["appended"] == len(new)
                assert written == [e["uuid"] for e in new]
            elif kind in ("full", "partial", "undo"):
                assert result["boundary"]["uuid"] in written, (kind, result)
            elif result.get("boundary"):
                assert result["boundary"]["uuid"] in written
            else:
                assert written == []
        took = time.monotonic() - started
    finally:
        w.close()
    print(f"{CANCELS_PER_KIND * len(kinds)} cancels in {took:.1f} s: {tally}")
    for kind in kinds:
        assert tally[kind]["cancelled"] > 0, (kind, tally)
    assert sum(t["answered"] for t in tally.values()) > 0


async def test_seeded_kills_lose_nothing_acknowledged(tmp_path: Path) -> None:
    data = tmp_path / "data"
    sid = "kills"
    rng = random.Random(23)
    acked: list[str] = []
    sent: set[str] = set()
    ops = ["appends", "full", "partial", "micro", "undo"]
    done = {op: 0 for op in ops}
    answered = 0
    opts = {"summarizer": {"offline": True}}
    started = time.monotonic()
    for trial in range(KILL_TRIALS):
        op = ops[trial % len(ops)]
        async with _daemon(data, opts) as client:
            opened = await _open(client, sid)
            if trial == 0:
                base = _entries(60, 8_000, "base")
                sent.update(e["uuid"] for e in base)
                await client.append(sid, base)
                acked.extend(e["uuid"] for e in base)
            batch = _big_entries(80, f"k{trial:03d}", text_chars=rng.choice([200, 5_000]))
            app = Appender(client, sid, batch, 2)
            tasks = await app.run_until(acks=2, writers=3)
            pivot = app.acked[0]
            work: asyncio.Task[Any] | None = None
            if op == "full":
                work = asyncio.create_task(client.compact_full(sid))
            elif op == "partial":
                work = asyncio.create_task(
                    client.compact_partial(sid, pivot, rng.choice(["from", "upTo"]))
                )
            elif op == "micro":
                work = asyncio.create_task(client.compact_micro(sid, strategy="count"))
            elif op == "undo":
                work = asyncio.create_task(client.compact_undo(sid))
            await asyncio.sleep(rng.uniform(0.0, 0.06))
            await _kill(client)
            await asyncio.gather(*tasks)
            if work is not None:
                try:
                    await work
                    answered += 1
                except Exception:  # killed before it answered, or refused
                    pass
            acked.extend(app.acked)
            sent.update(app.sent)
            done[op] += 1
            assert opened.session_id == sid
        _check_file(stored_transcript(data, sid), acked, sent)
    took = time.monotonic() - started
    print(
        f"{KILL_TRIALS} kills in {took:.1f} s ({done}); {answered} operations answered before "
        f"their kill; {len(acked)} acknowledged entries, none lost"
    )
    assert sum(done.values()) == KILL_TRIALS
