"""One owner per session, end to end: two real daemons over stdio on one data dir.

The first daemon to open (or load through any request) a session owns it; the second is told
``sessionLocked`` with the owner's pid, may open it ``readOnly`` (reads answer, writes are
``sessionReadOnly``, no byte of the session directory changes), and takes it once the owner
closed it or was killed. Two daemons creating one id at the same instant never answer
``internalError``, and one daemon appending MB-sized entries and compacting while the other
opens and closes the session in a loop loses no acknowledged entry. The full-length stress run
is ``tests/bench/bench_ownership.py``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from compactd_client import Client, RpcError

from compactd import protocol as p
from tests.conftest import daemon_args, daemon_log
from tests.e2e.test_crash import _big_entries, _check_file, _entries, _kill
from tests.helpers import CWD, MODEL, run_cli, stored_transcript

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio]

OFFLINE = {"summarizer": {"offline": True}}
RACE_TRIALS = int(os.environ.get("OWNERSHIP_RACE_TRIALS", "300"))
RACE_WIDTH = 6
STRESS_SECONDS = float(os.environ.get("OWNERSHIP_STRESS_SECONDS", "7"))


@asynccontextmanager
async def _daemon(data: Path) -> AsyncIterator[Client]:
    with daemon_log(data.parent) as log:
        client = await Client.spawn_process(daemon_args(data), stderr=log)
        try:
            await client.initialize(OFFLINE)
            yield client
        finally:
            await client.shutdown(grace=5)


def _two(data: Path) -> AbstractAsyncContextManager[tuple[Client, Client]]:
    @asynccontextmanager
    async def both() -> AsyncIterator[tuple[Client, Client]]:
        async with AsyncExitStack() as stack:
            a = await stack.enter_async_context(_daemon(data))
            b = await stack.enter_async_context(_daemon(data))
            yield a, b

    return both()


def _pid(client: Client) -> int:
    assert client.process is not None
    return client.process.pid


async def _open(client: Client, sid: str, **kw: Any) -> p.OpenResult:
    return await client.open_session(session_id=sid, cwd=CWD, model=MODEL, **kw)


async def _refused(call: Any, code: str) -> RpcError:
    with pytest.raises(RpcError) as refused:
        await call
    assert refused.value.code == code, refused.value
    assert refused.value.number == -32000
    return refused.value


def _snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of a directory: its bytes and modification time."""
    return {
        f.name: (f.read_bytes(), f.stat().st_mtime_ns)
        for f in sorted(directory.iterdir())
        if f.is_file()
    }


async def test_a_second_daemon_is_told_who_holds_the_session(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with _two(data) as (a, b):
        await _open(a, "s")
        await a.append("s", _entries(6, 600, "a"))
        refused = await _refused(_open(b, "s"), p.ErrorCode.SESSION_LOCKED)
        assert refused.data["holderPid"] == _pid(a)
        assert refused.data["sessionId"] == "s"
        assert refused.data["since"]
        assert str(_pid(a)) in refused.message and "readOnly" in refused.message
        # A request that would load the session lazily is refused the same way.
        lazy = await _refused(b.tokens_status("s"), p.ErrorCode.SESSION_LOCKED)
        assert lazy.data["holderPid"] == _pid(a)
        listed = {s.session_id: s for s in (await b.list_sessions()).sessions}
        assert listed["s"].held_by is not None and listed["s"].held_by.pid == _pid(a)
        assert not listed["s"].open
        assert (await b.close_session("s")).closed is False  # B never had it open
        own = {s.session_id: s for s in (await a.list_sessions()).sessions}
        assert own["s"].open and own["s"].held_by is None  # its own sessions are just open
        assert (await a.close_session("s")).closed
        listed = {s.session_id: s for s in (await b.list_sessions()).sessions}
        assert listed["s"].held_by is None
        taken = await _open(b, "s")
        assert taken.entry_count == 6 and not taken.read_only
        await _refused(_open(a, "s"), p.ErrorCode.SESSION_LOCKED)


async def test_a_read_only_open_reads_and_changes_no_byte(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with _two(data) as (a, b):
        await _open(a, "s")
        await a.append("s", _entries(40, 8_000, "a"))
        await a.compact_full("s")
        await a.append("s", _entries(6, 600, "b"))
        path = stored_transcript(data, "s")
        # The owner's next append, caught half-written: to a reader it looks like a torn tail.
        torn = b'{"type":"user","uuid":"in-flight","message":{"role":"user","content":"ha'
        with path.open("ab") as fh:
            fh.write(torn)
        before = _snapshot(path.parent)

        opened = await _open(b, "s", read_only=True)
        assert opened.read_only
        assert opened.held_by is not None and opened.held_by.pid == _pid(a)
        owner = await a.tokens_status("s")
        assert opened.entry_count == len(path.read_bytes().splitlines()) - 1
        assert (await b.tokens_status("s")).tokens == owner.tokens
        assert (await b.messages("s")).messages == (await a.messages("s")).messages
        assert (await b.tokens_breakdown("s")).categories
        assert await b.tokens_history("s") == await a.tokens_history("s")
        preview = await b.compact_preview("s", mechanism="full")
        assert preview == await a.compact_preview("s", mechanism="full")
        assert len((await b.stats("s")).compactions) == 1
        found = await b.recall("s", query="message")
        assert found.hits and found == await a.recall("s", query="message")
        await b.file_state("s")
        await b.session_memory("s")
        listed = {s.session_id: s for s in (await b.list_sessions()).sessions}
        assert listed["s"].read_only and listed["s"].held_by is not None

        writes = [
            b.append("s", _entries(2, 200, "c")),
            b.compact_full("s"),
            b.compact_micro("s"),
            b.compact_auto("s"),
            b.compact_undo("s"),
            b.record_file("s", str(Path(CWD) / "README.md")),
            b.extract_session_memory("s"),
            b.pending_attachments("s"),
        ]
        for write in writes:
            refused = await _refused(write, p.ErrorCode.SESSION_READ_ONLY)
            assert refused.data["sessionId"] == "s"
        # Re-opening read-only reads the file again; still nothing written.
        assert (await _open(b, "s", read_only=True)).entry_count == opened.entry_count
        assert (await b.close_session("s")).closed
        assert _snapshot(path.parent) == before

        # The owner finishes its write; the owner is unaffected by the reader.
        with path.open("r+b") as fh:
            fh.truncate(len(before["transcript.jsonl"][0]) - len(torn))
        more = await a.append("s", _entries(2, 200, "d"))
        assert more.appended == 2
        # Without readOnly the reader is still refused; a read-only open of a session that
        # does not exist creates nothing.
        await _refused(_open(b, "s"), p.ErrorCode.SESSION_LOCKED)
        with pytest.raises(RpcError) as missing:
            await _open(b, "nothing-here", read_only=True)
        assert missing.value.code == p.ErrorCode.SESSION_NOT_FOUND
        assert not (data / "sessions" / "nothing-here").exists()


async def test_the_cli_status_reads_a_held_session(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with _daemon(data) as a:
        await _open(a, "s")
        await a.append("s", _entries(10, 2_000, "a"))
        path = stored_transcript(data, "s")
        before = _snapshot(path.parent)
        code, out, err = await run_cli("status", str(path), "--json")
        assert code == 0, err
        assert '"status"' in out
        assert _snapshot(path.parent) == before
        assert (await a.append("s", _entries(2, 200, "b"))).appended == 2


async def test_shutdown_lets_the_sessions_go(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with _two(data) as (a, b):
        await _open(a, "s")
        await _refused(_open(b, "s"), p.ErrorCode.SESSION_LOCKED)
        assert await a.request("shutdown") is None
        # Before exit: once shutdown is answered, another daemon can take the session.
        assert not (await _open(b, "s")).read_only


async def test_after_kill_9_of_the_holder_the_other_takes_the_session(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with _two(data) as (a, b):
        await _open(a, "s")
        await a.append("s", _entries(8, 800, "a"))
        await _refused(_open(b, "s"), p.ErrorCode.SESSION_LOCKED)
        await _kill(a)
        taken = await _open(b, "s")
        assert taken.entry_count == 8 and not taken.read_only
        assert (await b.append("s", _entries(2, 200, "b"))).appended == 2


async def test_two_daemons_creating_one_id_at_once_never_answer_internal_error(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    outcomes: dict[str, int] = {}

    async def open_and_close(client: Client, sid: str) -> str:
        try:
            opened = await _open(client, sid)
        except RpcError as exc:
            return exc.code or str(exc.number)
        assert opened.session_id == sid
        await client.close_session(sid)
        return "opened"

    async def trial(sid: str) -> None:
        got = await asyncio.gather(open_and_close(a, sid), open_and_close(b, sid))
        for outcome in got:
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        assert "opened" in got, got
        assert set(got) <= {"opened", p.ErrorCode.SESSION_LOCKED}, got

    async with _two(data) as (a, b):
        # A few ids race at a time (each id its own pair of creations), to keep the test short.
        for first in range(0, RACE_TRIALS, RACE_WIDTH):
            ids = [f"race-{i}" for i in range(first, min(first + RACE_WIDTH, RACE_TRIALS))]
            await asyncio.gather(*(trial(sid) for sid in ids))
    print(f"{RACE_TRIALS} trials: {outcomes}")
    assert set(outcomes) <= {"opened", p.ErrorCode.SESSION_LOCKED}
    # Each id was created once, by whichever daemon won.
    assert len(list((data / "sessions").iterdir())) == RACE_TRIALS


async def test_a_reader_opening_in_a_loop_never_costs_the_owner_an_entry(tmp_path: Path) -> None:
    data = tmp_path / "data"
    counts = await stress(data, STRESS_SECONDS)
    print(counts)
    assert counts["acked"] > 0 and counts["compactions"] > 0
    assert counts["locked"] > 0 and counts["readOnly"] > 0


async def stress(data: Path, seconds: float) -> dict[str, int]:
    """Daemon A appends MB-sized entries and compacts for ``seconds``; daemon B meanwhile opens
    the session (refused), opens it read-only and closes it, in a loop. Checks that every entry
    A acknowledged is in the transcript and B's view never went back; returns the counts."""
    sid = "stress"
    acked: list[str] = []
    sent: set[str] = set()
    counts = {"acked": 0, "compactions": 0, "locked": 0, "readOnly": 0, "other": 0}
    async with _two(data) as (a, b):
        await _open(a, sid)
        done = asyncio.Event()

        async def owner() -> None:
            deadline = time.monotonic() + seconds
            batch = 0
            while time.monotonic() < deadline:
                batch += 1
                entries = _big_entries(3, f"m{batch:x}", text_chars=1_000_000)
                sent.update(e["uuid"] for e in entries)
                await a.append(sid, entries)
                acked.extend(e["uuid"] for e in entries)
                if batch % 3 == 0:
                    await a.compact_full(sid)
                    counts["compactions"] += 1
            done.set()

        async def reader() -> None:
            seen = 0
            while not done.is_set():
                try:
                    await _open(b, sid)
                    counts["other"] += 1  # must never succeed while A holds it
                except RpcError as exc:
                    key = "locked" if exc.code == p.ErrorCode.SESSION_LOCKED else "other"
                    counts[key] += 1
                opened = await _open(b, sid, read_only=True)
                assert opened.entry_count >= seen, "a reader's view went back"
                seen = opened.entry_count
                counts["readOnly"] += 1
                await b.close_session(sid)

        await asyncio.wait_for(asyncio.gather(owner(), reader()), seconds + 40)
        assert (await a.close_session(sid)).closed
    counts["acked"] = len(acked)
    assert counts["other"] == 0, counts
    lines = _check_file(stored_transcript(data, sid), acked, sent)
    assert {e.get("uuid") for e in lines} >= set(acked)
    return counts
