"""The typed Python client against the real daemon: every method family, attach mode, and the
four server notifications decoded into their Structs."""

from __future__ import annotations

import asyncio
import inspect
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from compactd_client import TYPED_METHODS, TYPED_NOTIFICATIONS, Client, RpcError
from compactd_client import protocol as cp

from compactd import protocol as p
from compactd.cli.synthetic import make_session
from tests.conftest import SpawnDaemon, daemon_args
from tests.helpers import CWD, numbered_read, user

OFFLINE = p.InitializationOptions(summarizer=p.SummarizerOptions(offline=True))
TOOLS = [
    {"name": "Read", "description": "read a file", "input_schema": {"type": "object"}},
    {"name": "Bash", "description": "run a command", "input_schema": {"type": "object"}},
]


# -- the client covers the protocol -------------------------------------------------------------


def test_every_request_and_notification_has_a_typed_counterpart() -> None:
    assert set(TYPED_METHODS) == set(p.REQUESTS)
    assert set(TYPED_NOTIFICATIONS) == set(p.NOTIFICATIONS)
    for method, attr in TYPED_METHODS.items():
        params_type, _ = p.REQUESTS[method]
        fields = {f.name for f in msgspec.structs.fields(params_type)}
        signature = inspect.signature(getattr(Client, attr))
        names = set(signature.parameters) - {"self"}
        # Each typed method takes exactly the fields of its params Struct.
        assert names == fields, (method, names ^ fields)


def test_the_client_types_are_the_daemons() -> None:
    """The client's Structs (generated from the schema) have the daemon's fields, by Python
    name and by wire name, and each method's params and result have the same names."""
    assert set(cp.REQUESTS) == set(p.REQUESTS)
    pairs = [
        (ours, theirs)
        for m in p.REQUESTS
        for ours, theirs in zip(cp.REQUESTS[m], p.REQUESTS[m], strict=True)
    ]
    pairs += [(cp.NOTIFICATIONS[m], t) for m, t in p.NOTIFICATIONS.items()]
    for ours, theirs in pairs:
        assert ours.__name__ == theirs.__name__
        mine = [(f.name, f.encode_name) for f in msgspec.structs.fields(ours)]
        daemon = [(f.name, f.encode_name) for f in msgspec.structs.fields(theirs)]
        assert mine == daemon, ours.__name__


# -- attach mode --------------------------------------------------------------------------------


async def _started_daemon(data_dir: Path) -> asyncio.subprocess.Process:
    """A daemon started by someone else: a client can attach to its stdin and stdout."""
    return await asyncio.create_subprocess_exec(
        *daemon_args(data_dir),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def test_connect_attaches_to_a_running_daemon(tmp_path: Path) -> None:
    process = await _started_daemon(tmp_path / "data")
    assert process.stdout is not None and process.stdin is not None
    try:
        async with Client.connect(process.stdout, process.stdin, OFFLINE) as client:
            assert client.server_info.get("name") == "compactd"
            opened = await client.open_session(cwd=str(tmp_path), model="claude-sonnet-4-5")
            await client.append(opened.session_id, [user("hello " * 400, uuid="u1")])
            status = await client.tokens_status(opened.session_id)
            assert status.tokens > opened.status.tokens
        # Leaving the block shut the daemon down politely.
        assert await asyncio.wait_for(process.wait(), 10) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_detached_client_leaves_the_daemon_running(tmp_path: Path) -> None:
    process = await _started_daemon(tmp_path / "data")
    assert process.stdout is not None and process.stdin is not None
    async with Client.connect(process.stdout, process.stdin, shutdown_on_exit=False) as client:
        sid = (await client.open_session(cwd=str(tmp_path), model="m")).session_id
    assert process.returncode is None
    # A second client on the same streams finds the daemon and its session.
    second = Client(process.stdout, process.stdin, process)
    second.start()
    listed = await second.list_sessions()
    assert [s.session_id for s in listed.sessions] == [sid]
    assert await second.shutdown() == 0


# -- method families ----------------------------------------------------------------------------


async def test_session_family(daemon: Client, tmp_path: Path) -> None:
    opened = await daemon.open_session(
        cwd=str(tmp_path),
        model="claude-sonnet-4-5",
        context_window=120_000,
        max_output_tokens=8_000,
        agent_kind="main",
        cache_safe_params=p.CacheSafeParams(system="You are terse.", tools=TOOLS),
    )
    assert isinstance(opened, cp.OpenResult) and opened.entry_count == 0
    assert opened.status.context_window == 120_000
    sid = opened.session_id
    appended = await daemon.append(
        sid, [user("fix the parser", uuid="u1"), user("and test", uuid="u2")]
    )
    assert appended.appended == 2 and appended.status.tokens > 0
    view = await daemon.messages(sid)
    assert [m["role"] for m in view.messages] == ["user"]  # consecutive user turns merge
    assert "fix the parser" in msgspec.json.encode(view.messages).decode()
    listed = await daemon.list_sessions()
    [info] = listed.sessions
    assert (info.session_id, info.entry_count, info.open) == (sid, 2, True)
    stats = await daemon.stats(sid)
    assert stats.compactions == [] and stats.microcompactions == 0
    assert (await daemon.close_session(sid)).closed is True
    with pytest.raises(RpcError) as err:
        await daemon.messages("no-such-session")
    assert err.value.code == p.ErrorCode.SESSION_NOT_FOUND


async def test_tokens_family_and_threshold_crossings(daemon: Client) -> None:
    # 50K window, 8K output: effective 42,000, auto-compact 29,000, warning = error = 9,000.
    opened = await daemon.open_session(
        cwd=CWD, model="m", context_window=50_000, max_output_tokens=8_000
    )
    sid = opened.session_id
    async with daemon.threshold_crossings(sid) as crossings:
        result = await daemon.append(sid, [user("word " * 8_000, uuid="u1")])
        first = await crossings.next(within=5)
        second = await crossings.next(within=5)
    assert isinstance(first, cp.ThresholdNotification)
    assert {first.level, second.level} == {"warning", "error"}
    assert first.session_id == sid and first.tokens == result.status.tokens
    assert first.status == result.status
    status = await daemon.tokens_status(sid)
    assert status == result.status and status.is_above_warning_threshold
    breakdown = await daemon.tokens_breakdown(sid)
    human = {c.name: c.tokens for c in breakdown.categories}["human"]
    assert human > 9_000 and breakdown.total_tokens >= human


async def test_compaction_family_and_status_updates(spawn_daemon: SpawnDaemon) -> None:
    entries = make_session(entries=120, target_tokens=40_000)
    async with spawn_daemon(options=msgspec.to_builtins(OFFLINE)) as client:
        opened = await client.open_session(cwd=CWD, model="claude-sonnet-4-5")
        sid = opened.session_id
        await client.append(sid, entries)
        below = await client.compact_auto(sid)
        assert below.was_compacted is False and below.reason and "below" in below.reason
        micro = await client.compact_micro(sid, strategy="count")
        assert isinstance(micro, cp.MicroResult) and micro.strategy == "count"
        assert micro.post_tokens == micro.pre_tokens - micro.tokens_saved
        async with client.status_updates(sid) as updates:
            full = await client.compact_full(sid, custom_instructions="keep the file names")
            phases = [n.phase for n in updates.drain()]
        assert phases[0] == "started" and phases[-1] == "completed"
        assert full.post_compact_tokens < full.pre_compact_tokens
        assert full.summarizer == "offline"
        status = await client.tokens_status(sid)
        assert status.tokens < full.pre_compact_tokens

        # The beyond-the-reference methods, each with a result checked against the session.
        preview = await client.compact_preview(sid, mechanism="full")
        assert preview.pre_tokens == status.tokens
        assert preview.mechanism == "full"
        first = next(e for e in entries if e["type"] == "user")
        found = await client.recall(sid, query=first["message"]["content"][:30], limit=3)
        assert 1 <= len(found.hits) <= 3
        original = [hit for hit in found.hits if hit.uuid == first["uuid"]]
        assert original and original[0].compacted  # summarized by compact_full above
        undo = await client.compact_undo(sid)
        assert undo.undone_compaction_id == full.compaction_id
        assert undo.status.tokens > full.post_compact_tokens
        pivot = [e["uuid"] for e in entries if e["type"] == "user"][len(entries) // 8]
        partial = await client.compact_partial(sid, pivot, "upTo")
        assert partial.kept_entries
        assert partial.boundary["compactMetadata"]["mechanism"] == "partial"
        notes = await client.extract_session_memory(sid)
        assert notes.last_extracted_at is not None and notes.content.strip()
        again = await client.session_memory(sid)
        assert (again.path, again.content) == (notes.path, notes.content)
        forced = await client.compact_auto(sid, force=True)
        # Below the threshold, force still compacts: a full compaction triggered as "auto".
        assert forced.was_compacted and forced.mechanism == "full", forced.reason
        assert forced.result is not None and forced.status is not None
        assert forced.result.boundary["compactMetadata"]["trigger"] == "auto"
        assert forced.status.tokens == (await client.tokens_status(sid)).tokens


async def test_files_family_and_memory_changes(spawn_daemon: SpawnDaemon, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "CLAUDE.md").write_text("project rules\n")
    (ws / "app.py").write_text("print('hi')\n")
    (ws / "plan.md").write_text("# Plan\n")
    async with spawn_daemon() as client:
        sid = (await client.open_session(cwd=str(ws), model="claude-sonnet-4-5")).session_id
        await client.append(sid, numbered_read(1, ws / "app.py", time.time(), "x"))
        recorded = await client.record_file(sid, "plan.md", content="# Plan\n")
        assert str(ws / "plan.md") in {f.path for f in recorded.files}
        pending = await client.pending_attachments(sid)
        assert [a["attachment"]["type"] for a in pending.attachments] == ["nested_memory"]
        extras = cp.RehydrationExtras(
            plan_file_path="plan.md",
            announcements=[{"type": "mcp_instructions_delta", "addedNames": ["db"]}],
        )
        rehydrated = await client.rehydrate(sid, extras=extras)
        kinds = [a["attachment"]["type"] for a in rehydrated.attachments]
        assert "plan_file_reference" in kinds and "mcp_instructions_delta" in kinds
        memory = str(ws / "CLAUDE.md")
        deadline = time.monotonic() + 20
        while memory not in {f.path for f in (await client.file_state(sid)).files if f.watched}:
            assert time.monotonic() < deadline, "CLAUDE.md is never watched"
            await asyncio.sleep(0.05)
        async with client.memory_changes(sid) as changes:
            (ws / "CLAUDE.md").write_text("project rules, edited\n")
            note = await changes.next(within=5)
        assert note == cp.MemoryChangedNotification(session_id=sid, path=memory, change="modified")


async def test_cache_family_and_cache_breaks(daemon: Client) -> None:
    sid = (await daemon.open_session(cwd=CWD, model="claude-sonnet-4-5")).session_id
    t0 = 1_800_000_000.0

    async def turn(at: float, cache_read: int, tools: list[dict[str, Any]]) -> p.CacheAck:
        await daemon.cache_before(
            sid, system="You are terse.", tools=tools, model="claude-sonnet-4-5", timestamp=at
        )
        usage = {"input_tokens": 300, "cache_read_input_tokens": cache_read, "output_tokens": 50}
        return await daemon.cache_after(sid, usage, timestamp=at + 1)

    async with daemon.cache_breaks(sid) as breaks:
        assert (await turn(t0, 0, TOOLS)).recorded
        assert (await turn(t0 + 10, 30_000, TOOLS)).cache_break is None
        ack = await turn(t0 + 20, 1_000, TOOLS[:1])
        note = await breaks.next(within=5)
    assert isinstance(note, cp.CacheBreak) and note == ack.cache_break
    assert note.causes == ["tools"] and note.dropped_tokens == 29_000
    assert (await daemon.stats(sid)).cache_breaks == [note]


async def test_subscriptions_end_when_the_daemon_goes_away(tmp_path: Path) -> None:
    async with Client.spawn(daemon_args(tmp_path / "data")) as client:
        updates = client.status_updates()
    # The connection is closed: iterating ends instead of waiting forever.
    assert [n async for n in updates] == []
    updates.close()
