"""Crash safety: SIGKILL the real daemon mid-work, restart it on the same data dir, check nothing
acknowledged was lost and nothing half-written shows.

The invariants checked after every restart (``_check_after_restart``): every entry whose
``session/append`` got an answer before the kill is in the transcript; the transcript parses with
no skipped line once the store has repaired it (torn tail cut, an incomplete compaction group
dropped); every compaction group in it is complete; nothing appears twice; and the restarted
daemon serves appends, token status and a compaction. The store's repair is also driven
directly, by cutting a real transcript at every line boundary and many byte offsets inside a
compaction group.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from compactd_client import Client

from compactd import protocol as p
from compactd.services.store import Store
from compactd.transcript.model import GROUP_SIZE_FIELD, ParseReport, parse_lines
from tests.conftest import daemon_args, daemon_log
from tests.e2e.test_compact_support import session_entries
from tests.emulator import Emulator, Reply
from tests.helpers import CWD, MODEL, emulator_options, stored_transcript, transcript_lines

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio]


@asynccontextmanager
async def _daemon(data_dir: Path, options: dict[str, Any] | None = None) -> AsyncIterator[Client]:
    """A daemon on ``data_dir``; killed with SIGKILL by ``_kill``, else shut down politely."""
    with daemon_log(data_dir.parent) as log:
        client = await Client.spawn_process(daemon_args(data_dir), stderr=log)
        try:
            await client.initialize(options or {})
            yield client
        finally:
            await client.shutdown(grace=5)


async def _kill(client: Client) -> None:
    assert client.process is not None
    client.process.send_signal(signal.SIGKILL)
    assert await client.process.wait() == -signal.SIGKILL


def _entries(n: int, tokens: int, tag: str) -> list[dict[str, Any]]:
    """A synthetic conversation whose uuids carry ``tag`` (the generator numbers them from 1
    every time, and a test appends several batches to one session)."""
    out = session_entries(entries=n, tokens=tokens)
    text = json.dumps(out).replace('"00000000-0000-4000-8000-', f'"{tag:0>8.8}-0000-4000-8000-')
    loaded: list[dict[str, Any]] = json.loads(text)
    return loaded


def _big_entries(n: int, tag: str, text_chars: int) -> list[dict[str, Any]]:
    """``n`` user/assistant entries whose text is ``text_chars`` long (writes that take time)."""
    entries = _entries(n, n * 40, tag)
    filler = "x" * text_chars
    for e in entries:
        if e.get("type") == "user" and isinstance(e["message"].get("content"), str):
            e["message"]["content"] += filler
    return entries


async def _open(client: Client, sid: str) -> p.OpenResult:
    return await client.open_session(session_id=sid, cwd=CWD, model=MODEL)


class Appender:
    """Concurrent writers appending chunks of a shared entry list; remembers what was acked."""

    def __init__(self, client: Client, sid: str, entries: list[dict[str, Any]], chunk: int):
        self.client = client
        self.sid = sid
        self.chunks: Iterator[list[dict[str, Any]]] = iter(
            [entries[i : i + chunk] for i in range(0, len(entries), chunk)]
        )
        self.acked: list[str] = []
        self.sent: set[str] = set()
        self.acks = 0
        self.enough = asyncio.Event()
        self.want = 0

    async def writer(self) -> None:
        for batch in self.chunks:
            self.sent.update(e["uuid"] for e in batch)
            try:
                await self.client.append(self.sid, batch)
            except ConnectionError:
                return  # killed: this batch was never acknowledged
            self.acked.extend(e["uuid"] for e in batch)
            self.acks += 1
            if self.want and self.acks >= self.want:
                self.enough.set()

    async def run_until(self, acks: int, writers: int) -> list[asyncio.Task[None]]:
        self.want = acks
        tasks = [asyncio.create_task(self.writer()) for _ in range(writers)]
        await asyncio.wait_for(self.enough.wait(), 30)
        return tasks


_OWN_SUBTYPES = {"compact_boundary", "microcompact_boundary"}


def _check_file(path: Path, acked: list[str], sent: set[str]) -> list[dict[str, Any]]:
    """The repaired transcript: parses cleanly, holds every acked entry, has complete groups."""
    # What a restart does first: the store cuts a torn tail (a write the kill interrupted was
    # never acknowledged) and a half-written compaction group.
    Store(path.parents[2]).load(path.parent.name)
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), "a torn tail survived the restart"
    report = ParseReport()
    records = list(parse_lines(data.split(b"\n"), report))
    assert report.skipped == 0, report.first_error
    lines = transcript_lines(path)
    uuids = [e.get("uuid") for e in lines]
    assert len(uuids) == len(set(uuids)), "an entry was written twice"
    missing = set(acked) - set(uuids)
    assert not missing, f"{len(missing)} acknowledged entries were lost"
    for i, e in enumerate(lines):
        size = e.get(GROUP_SIZE_FIELD)
        if size:
            assert len(lines) - i >= size, "a half-written compaction is visible"
    assert len(records) == len(lines)
    # Whatever the daemon wrote came from the client or is a compaction's own entries.
    for e in lines:
        assert (
            e["uuid"] in sent
            or e.get(GROUP_SIZE_FIELD)
            or e.get("isCompactSummary")
            or (e.get("type") == "attachment")
            # Microcompact boundaries and undo entries are single lines of compactd's own.
            or (e.get("type") == "system" and e.get("subtype") in _OWN_SUBTYPES)
        ), e
    return lines


async def _check_serving(client: Client, sid: str, entries_in_file: int) -> list[str]:
    """After a restart: reopen restores every line; append, status and compaction work.
    Returns the uuids it appended."""
    opened = await _open(client, sid)
    assert opened.entry_count == entries_in_file
    more = _entries(6, 600, f"e{entries_in_file:x}")
    appended = await client.append(sid, more)
    assert appended.appended == len(more)
    status = await client.tokens_status(sid)
    assert status.tokens > 0
    result = await client.compact_full(sid)
    assert (await client.messages(sid)).boundary_uuid == result.boundary["uuid"]
    return [e["uuid"] for e in more]


async def test_kill_during_a_stream_of_appends_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    sid = "crash-appends"
    entries = _big_entries(1_200, "a", text_chars=2_000)
    async with _daemon(data) as client:
        await _open(client, sid)
        app = Appender(client, sid, entries, chunk=5)
        tasks = await app.run_until(acks=40, writers=8)
        await _kill(client)
        await asyncio.gather(*tasks)
        in_flight = app.sent - set(app.acked)
    assert in_flight, "the kill landed while no append was in flight"
    lines = _check_file(stored_transcript(data, sid), app.acked, app.sent)
    async with _daemon(data) as client:
        appended = await _check_serving(client, sid, len(lines))
    _check_file(stored_transcript(data, sid), app.acked + appended, app.sent | set(appended))


async def test_kill_during_the_model_call_leaves_no_compaction(
    tmp_path: Path, emulator: Emulator
) -> None:
    data = tmp_path / "data"
    sid = "crash-model-call"
    emulator.set_default(Reply(delay=30))
    opts = emulator_options(emulator)
    async with _daemon(data, opts) as client:
        await _open(client, sid)
        first = _entries(160, 16_000, "b")
        await client.append(sid, first)
        async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as notes:
            compaction = asyncio.create_task(client.compact_full(sid))
            while True:
                _, params = await asyncio.wait_for(notes.get(), 20)
                if params["phase"] == "summarizing":
                    break
        # The agent keeps appending while the model writes; these are acknowledged.
        during = _entries(20, 2_000, "c")
        await client.append(sid, during)
        for _ in range(1_000):  # the request is sent just after the phase change
            if emulator.message_requests:
                break
            await asyncio.sleep(0.01)
        assert emulator.message_requests, "the kill must land during the model call"
        await _kill(client)
        with pytest.raises(ConnectionError):
            await compaction
    acked = [e["uuid"] for e in first + during]
    lines = _check_file(stored_transcript(data, sid), acked, set(acked))
    assert not any(e.get("subtype") == "compact_boundary" for e in lines)
    assert len(lines) == len(acked)
    emulator.set_default(Reply())
    async with _daemon(data, opts) as client:
        await _check_serving(client, sid, len(lines))


async def test_kills_around_the_commit_never_show_half_a_compaction(tmp_path: Path) -> None:
    """Rounds of: concurrent appends of large entries plus an offline compaction (its commit
    is a single write), SIGKILL at a random moment, restart, check. A compaction answered
    before the kill must be in the file; one not answered may or may not be, but whole."""
    data = tmp_path / "data"
    sid = "crash-commit"
    rng = random.Random(5)
    acked: list[str] = []
    sent: set[str] = set()
    committed: list[str] = []
    outcomes = {"answered": 0, "unanswered_present": 0, "unanswered_absent": 0}
    for rnd in range(6):
        async with _daemon(data) as client:
            await _open(client, sid)
            if rnd == 0:
                base = _entries(120, 12_000, "d")
                sent.update(e["uuid"] for e in base)
                await client.append(sid, base)
                acked.extend(e["uuid"] for e in base)
            app = Appender(client, sid, _big_entries(400, f"f{rnd}", text_chars=20_000), 2)
            tasks = await app.run_until(acks=3, writers=6)
            compaction = asyncio.create_task(client.compact_full(sid))
            await asyncio.sleep(rng.uniform(0.0, 0.08))
            await _kill(client)
            await asyncio.gather(*tasks)
            try:
                result = await compaction
            except ConnectionError:
                result = None
            acked.extend(app.acked)
            sent.update(app.sent)
        lines = _check_file(stored_transcript(data, sid), acked, sent)
        boundaries = [e["uuid"] for e in lines if e.get("subtype") == "compact_boundary"]
        assert all(b in boundaries for b in committed)
        if result is not None:
            outcomes["answered"] += 1
            assert result.boundary["uuid"] in boundaries
            committed.append(result.boundary["uuid"])
        else:
            new = [b for b in boundaries if b not in committed]
            outcomes["unanswered_present" if new else "unanswered_absent"] += 1
            committed.extend(new)
    assert sum(outcomes.values()) == 6
    async with _daemon(data) as client:
        await _check_serving(client, sid, len(transcript_lines(stored_transcript(data, sid))))


async def test_store_drops_a_compaction_group_cut_anywhere(tmp_path: Path) -> None:
    """A real transcript with a compaction, cut at every line boundary and at byte offsets
    inside the group: loading keeps exactly the lines before the group, parses them all, and
    leaves the file ready for appends."""
    data = tmp_path / "data"
    sid = "store-cuts"
    async with _daemon(data) as client:
        await _open(client, sid)
        await client.append(sid, _entries(80, 8_000, "1"))
        await client.compact_full(sid)  # offline summarizer: no API key configured
        await client.append(sid, _entries(4, 400, "2"))
    full = stored_transcript(data, sid).read_bytes()
    lines = full.split(b"\n")[:-1]
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    group_at = next(i for i, line in enumerate(lines) if GROUP_SIZE_FIELD.encode() in line)
    size = json.loads(lines[group_at])[GROUP_SIZE_FIELD]
    assert size >= 2
    group_start, group_end = starts[group_at], starts[group_at + size]
    before = full[:group_start]

    cuts = set(range(group_start, group_end, max(1, (group_end - group_start) // 60)))
    cuts.update(starts[group_at : group_at + size])  # clean cuts between the group's lines
    cuts.update({group_start + 1, group_end - 1})
    cuts.discard(group_start)
    sandbox = tmp_path / "sandbox"
    store = Store(sandbox)
    path = store.transcript_path(sid)
    path.parent.mkdir(parents=True, exist_ok=True)
    for cut in sorted(cuts):
        path.write_bytes(full[:cut])
        loaded = store.load(sid)
        assert path.read_bytes() == before, f"cut at {cut - group_start} bytes into the group"
        assert len(loaded.records) == group_at and loaded.report.skipped == 0
        assert loaded.truncated_bytes == cut - group_start

    # The complete group survives; a torn line after it is cut alone.
    path.write_bytes(full[: starts[group_at + size]] + lines[group_at + size][:10])
    loaded = store.load(sid)
    assert len(loaded.records) == group_at + size
    assert path.read_bytes() == full[: starts[group_at + size]]
    # A torn ordinary line before the group: only that line goes.
    path.write_bytes(full[: starts[3] + 7])
    loaded = store.load(sid)
    assert len(loaded.records) == 3 and loaded.truncated_bytes == 7
    # And the whole file loads unchanged.
    path.write_bytes(full)
    assert len(store.load(sid).records) == len(lines)
    assert path.read_bytes() == full

    # A daemon started on a data dir holding a cut transcript serves the repaired session.
    (data / "sessions" / sid / "transcript.jsonl").write_bytes(full[: group_start + 100])
    async with _daemon(data) as client:
        opened = await _open(client, sid)
        assert opened.entry_count == group_at
        assert (await client.messages(sid)).boundary_uuid is None
        await _check_serving(client, sid, group_at)
