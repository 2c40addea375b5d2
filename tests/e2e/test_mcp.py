"""``compactd mcp`` end to end: the real server spawned over stdio and driven by the MCP SDK's
own stdio client (docs/recall.md#mcp-tools).

Claude Code's side is a fake ``CLAUDE_CONFIG_DIR`` holding a copy of a real transcript in the
project folder Claude Code would use for the working directory; the current session is found
as the newest transcript there, or as a hook recorded it (``agents/claude_code/services/state``). A
compactd session is made by the real daemon and named by its id.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from compactd_client import RpcError
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

from compactd.agents.claude_code.services import state as claude_state
from compactd.core.recall_render import ANSWER_BUDGET_TOKENS, CHARS_PER_TOKEN
from compactd.services.recall_index import index_path
from tests.conftest import FIXTURES, SpawnDaemon
from tests.helpers import CWD, damage_page, index_pages, page_bytes
from tests.recall_items import Item, dropped

MANUAL = FIXTURES / "claude-code-2.1.330__r16_manual.jsonl"
AUTO = FIXTURES / "claude-code-2.1.330__r2_auto.jsonl"


def _text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


@asynccontextmanager
async def mcp_session(
    data_dir: Path, config_dir: Path, cwd: str, *extra: str
) -> AsyncIterator[ClientSession]:
    # Codex's folder beside Claude Code's: neither is the user's own.
    env = {**os.environ, "CLAUDE_CONFIG_DIR": str(config_dir),
           "CODEX_HOME": str(config_dir.parent / "codex")}  # fmt: skip
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "compactd", "mcp", "--data-dir", str(data_dir), "--cwd", cwd, *extra],
        env=env,
    )
    with (data_dir.parent / "mcp.log").open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def _place(config_dir: Path, cwd: str, source: Path, name: str) -> Path:
    """A copy of ``source`` where Claude Code keeps ``cwd``'s transcripts."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CLAUDE_CONFIG_DIR", str(config_dir))
        folder = claude_state.project_dir(cwd)
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(source, folder / f"{name}.jsonl"))


def _message(path: Path) -> Item:
    return next(i for i in dropped(path) if i.kind == "message")


async def test_recall_finds_what_the_summary_dropped(tmp_path: Path) -> None:
    config, data = tmp_path / "claude", tmp_path / "data"
    copy = _place(config, CWD, MANUAL, "11111111-aaaa-4bbb-8ccc-000000000001")
    before = copy.read_bytes()
    item = _message(MANUAL)
    async with mcp_session(data, config, CWD) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert set(tools) == {"recall", "context"}
        assert "after a compaction" in (tools["recall"].description or "")
        assert set(tools["recall"].input_schema["properties"]) == {"query", "limit", "session"}

        found = await mcp.call_tool("recall", {"query": item.query})
        text = _text(found)
        assert not found.is_error
        assert "newest Claude Code transcript" in text
        assert text.splitlines()[1].startswith("[1] user")
        assert f"recall:{item.uuid}" in text.splitlines()[1]

        whole = await mcp.call_tool("recall", {"query": f"recall:{item.uuid}"})
        assert not whole.is_error and item.text in _text(whole)

        status = _text(await mcp.call_tool("context", {}))
        assert "of the auto-compact threshold" in status
        assert "compactions so far: 1" in status
    # Only read: the transcript is as it was, and the index lives in the data dir.
    assert copy.read_bytes() == before
    assert list(copy.parent.iterdir()) == [copy]
    assert list((data / "recall").glob("*.sqlite"))


async def test_the_session_a_hook_recorded_wins(tmp_path: Path) -> None:
    config, data = tmp_path / "claude", tmp_path / "data"
    recorded = _place(config, CWD, AUTO, "22222222-aaaa-4bbb-8ccc-000000000002")
    newest = _place(config, CWD, MANUAL, "33333333-aaaa-4bbb-8ccc-000000000003")
    os.utime(recorded, (1_000_000, 1_000_000))
    claude_state.record_current(
        data,
        claude_state.CurrentSession(
            session_id=recorded.stem, transcript_path=str(recorded), cwd=CWD
        ),
    )
    item = _message(AUTO)
    async with mcp_session(data, config, CWD) as mcp:
        text = _text(await mcp.call_tool("recall", {"query": item.query, "limit": 3}))
        assert "as compactd's hook recorded it" in text and recorded.stem in text
        assert f"recall:{item.uuid}" in text
        # The other session is there by name.
        other = await mcp.call_tool("context", {"session": newest.stem})
        assert newest.stem in _text(other)


async def test_bad_input_is_a_tool_error_not_a_crash(tmp_path: Path) -> None:
    config, data = tmp_path / "claude", tmp_path / "data"
    _place(config, CWD, MANUAL, "44444444-aaaa-4bbb-8ccc-000000000004")
    async with mcp_session(data, config, CWD) as mcp:
        cases = {
            "empty": ({"query": "   "}, "query is empty"),
            "unknown uuid": ({"query": "recall:no-such-entry"}, "no entry recall:no-such-entry"),
            "bad limit": ({"query": "notes", "limit": 0}, "limit must be between"),
            "no transcript": (
                {"query": "notes", "session": str(tmp_path / "gone.jsonl")},
                "unknown session",
            ),
            "not a string": ({"query": 42}, "query"),
        }
        for name, (args, message) in cases.items():
            result = await mcp.call_tool("recall", args)
            assert result.is_error, name
            assert message in _text(result), name
        # Still serving.
        assert not (await mcp.call_tool("recall", {"query": "notes"})).is_error
    # A folder with no Claude Code session at all.
    async with mcp_session(data, config, "/nowhere/at/all") as mcp:
        result = await mcp.call_tool("context", {})
        assert result.is_error and "no Claude Code or Codex or Gemini CLI session found" in _text(
            result
        )


async def test_a_compactd_session_by_id(tmp_path: Path, spawn_daemon: SpawnDaemon) -> None:
    data = tmp_path / "data"
    async with spawn_daemon(data_dir=data) as client:
        opened = await client.open_session(
            cwd=CWD, model="claude-sonnet-4-5", transcript_path=str(MANUAL)
        )
        sid = opened.session_id
        await client.close_session(sid)
    item = _message(MANUAL)
    async with mcp_session(data, tmp_path / "claude", CWD, "--session", sid) as mcp:
        text = _text(await mcp.call_tool("recall", {"query": item.query}))
        assert "compactd session" in text and f"recall:{item.uuid}" in text
        status = _text(await mcp.call_tool("context", {}))
        assert "model claude-sonnet-4-5" in status


@pytest.mark.parametrize("limit", [1, 3])
async def test_limit_and_more(tmp_path: Path, limit: int) -> None:
    config, data = tmp_path / "claude", tmp_path / "data"
    _place(config, CWD, MANUAL, "55555555-aaaa-4bbb-8ccc-000000000005")
    async with mcp_session(data, config, CWD) as mcp:
        text = _text(await mcp.call_tool("recall", {"query": "echo", "limit": limit}))
        assert text.count("\n[") == limit
        assert "more matching entries not shown" in text


# -- damage, locks, bounds, refusals, frames (docs/recall.md#sharing, docs/recall.md#damage) ---


async def test_one_damaged_page_anywhere_and_the_next_search_answers(tmp_path: Path) -> None:
    config, data = tmp_path / "claude", tmp_path / "data"
    copy = _place(config, CWD, MANUAL, "66666666-aaaa-4bbb-8ccc-000000000006")
    item = _message(MANUAL)
    queries = [item.query, "echo step", f"recall:{item.uuid}", "notes.txt"]
    async with mcp_session(data, config, CWD) as mcp:
        expected = [_text(await mcp.call_tool("recall", {"query": q})) for q in queries]
        index = index_path(data, copy)
        pages = index_pages(index)
        assert pages > 10
        rebuilt = 0
        for page in range(pages):  # every page, the header page included
            garbage = damage_page(index, page, seed=1)
            for query, want in zip(queries, expected, strict=True):
                got = await mcp.call_tool("recall", {"query": query})
                assert not got.is_error and _text(got) == want, (page, query, _text(got))
            # Damage SQLite saw was healed by building the index again: the bytes are gone.
            # (A page no search reads, a free one, may keep them: the answers are right.)
            rebuilt += page_bytes(index, page) != garbage
    assert rebuilt > pages // 2, (rebuilt, pages)
    assert copy.read_bytes() == MANUAL.read_bytes()


async def test_a_damaged_index_heals_under_the_daemon_too(
    tmp_path: Path, spawn_daemon: SpawnDaemon
) -> None:
    data = tmp_path / "data"
    async with spawn_daemon(data_dir=data) as client:
        opened = await client.open_session(
            cwd=CWD, model="claude-sonnet-4-5", transcript_path=str(MANUAL)
        )
        sid = opened.session_id
        want = [h.uuid for h in (await client.recall(sid, query="echo step")).hits]
        assert want
        transcript = data / "sessions" / sid / "transcript.jsonl"
        index = index_path(data, transcript)
        pages = index_pages(index)
        for page in range(0, pages, 3):
            damage_page(index, page, seed=2)
            got = await client.recall(sid, query="echo step")
            assert [h.uuid for h in got.hits] == want, page


def _hold_write_lock(index: Path) -> subprocess.Popen[str]:
    """Another process holding ``index``'s write lock, in a transaction that writes a row of
    its own, until its stdin is closed; it prints "held" once it holds the lock."""
    script = f"""
import sqlite3, sys
db = sqlite3.connect({str(index)!r}, isolation_level=None)
db.execute("BEGIN IMMEDIATE")
db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('holder', 'was here')")
print("held", flush=True)
sys.stdin.read()
db.execute("COMMIT")
"""
    return subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _files(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_ino for p in folder.iterdir()}


# How long the other process holds the lock: past the 30 s SQLite wait that used to take a
# lock for damage, and past every deadline of a search.
HOLD_S = 60.0


@pytest.mark.timeout(240)
async def test_a_write_lock_held_for_60_s(tmp_path: Path, spawn_daemon: SpawnDaemon) -> None:
    data = tmp_path / "data"
    new_line = {"type": "user", "uuid": "kraken-1", "timestamp": "2026-01-02T00:00:00Z",
                "message": {"role": "user", "content": "remember the kraken in the bucket"}}  # fmt: skip
    async with spawn_daemon(data_dir=data) as client:
        warm = await client.open_session(cwd=CWD, model="m", transcript_path=str(MANUAL))
        cold = await client.open_session(cwd=CWD, model="m", transcript_path=str(AUTO))
        store = data / "sessions"
        warm_index = index_path(data, store / warm.session_id / "transcript.jsonl")
        cold_transcript = store / cold.session_id / "transcript.jsonl"
        cold_index = index_path(data, cold_transcript)
        item = _message(AUTO)
        async with (
            mcp_session(data, tmp_path / "claude", CWD, "--session", warm.session_id) as mcp,
        ):
            assert not (await mcp.call_tool("recall", {"query": "echo"})).is_error  # built
            await client.append(warm.session_id, [new_line])
            holders = [
                _hold_write_lock(warm_index),
                _cold_build(data, cold_transcript),
            ]
            for holder in holders:
                assert holder.stdout is not None
                assert await anyio.to_thread.run_sync(holder.stdout.readline) == "held\n"
            files = _files(warm_index.parent)
            held_since = time.monotonic()
            rounds = 0
            # The cold index: nothing committed yet, so the search waits to its deadline and
            # says busy (the build is the other process's, never started twice).
            busy = await mcp.call_tool("recall", {"query": item.query, "session": cold.session_id})
            assert busy.is_error and "another process is building the recall index" in _text(busy)
            assert holders[1].poll() is None  # answered while the build still held the lock
            while time.monotonic() - held_since < HOLD_S:
                assert all(h.poll() is None for h in holders)  # still holding
                rounds += 1
                # The warm index: answered at once from the index as it was, saying so.
                old = await mcp.call_tool("recall", {"query": "echo"})
                assert not old.is_error and "another process is updating the index" in _text(old)
                new = await mcp.call_tool("recall", {"query": "kraken bucket"})
                assert _text(new).startswith("Nothing matches")
                # The daemon: a clear busy, at once (its partial answer would look whole).
                with pytest.raises(RpcError) as refused:
                    await client.recall(warm.session_id, query="echo")
                assert refused.value.code == "sessionBusy" and "another process" in str(
                    refused.value
                )
                assert _files(warm_index.parent) == files  # nothing removed, nothing replaced
                await anyio.sleep(5)
            assert rounds >= 3
            for holder in holders:  # let go, after at least HOLD_S
                assert holder.stdin is not None and holder.poll() is None
                holder.stdin.close()
                await anyio.to_thread.run_sync(lambda h=holder: h.wait(timeout=120))
                assert holder.returncode == 0
            # The holder's writes are there; the new line is found now.
            with sqlite3.connect(warm_index) as db:
                assert db.execute("SELECT value FROM meta WHERE key = 'holder'").fetchall() == [
                    ("was here",)
                ]
            db.close()
            found = _text(await mcp.call_tool("recall", {"query": "kraken bucket"}))
            assert "recall:kraken-1" in found and "another process" not in found
            assert [
                h.uuid for h in (await client.recall(warm.session_id, query="kraken")).hits
            ] == ["kraken-1"]
            # The cold index the other process built is the one searched: not built again.
            inode = cold_index.stat().st_ino
            hit = _text(
                await mcp.call_tool("recall", {"query": item.query, "session": cold.session_id})
            )
            assert f"recall:{item.uuid}" in hit and cold_index.stat().st_ino == inode


def _cold_build(data: Path, transcript: Path) -> subprocess.Popen[str]:
    """compactd's own index build of ``transcript``, its first transaction held until its stdin
    is closed: a cold build that takes that long. It prints "held" once it holds the lock."""
    script = """
import sys
from pathlib import Path
from compactd.services import recall_index as ri
chunk = ri.RecallIndex._index_chunk
def slow(self, fd):
    out = chunk(self, fd)
    print("held", flush=True)
    sys.stdin.read()
    return out
ri.RecallIndex._index_chunk = slow
with ri.RecallIndex(Path(sys.argv[1]), Path(sys.argv[2])) as built:
    built.refresh()
"""
    return subprocess.Popen(
        [sys.executable, "-c", script, str(data), str(transcript)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


# The bound a recall answer keeps (docs/recall.md#output), and one for a refusal: what the
# caller sent is quoted at most 200 characters long (docs/secrets.md#bounded-echoes).
ANSWER_CHARS = ANSWER_BUDGET_TOKENS * CHARS_PER_TOKEN
NOTE_CHARS = 300
REFUSAL_CHARS = 1_000
VIEWER = FIXTURES / "d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"


async def test_every_answer_is_bounded_echoes_and_errors_included(tmp_path: Path) -> None:
    config, data = tmp_path / "claude", tmp_path / "data"
    _place(config, CWD, VIEWER, "77777777-aaaa-4bbb-8ccc-000000000007")
    key = "sk-ant-api03-" + "Q7x" * 30
    calls: list[tuple[dict[str, Any], bool]] = [  # (arguments, an error?)
        ({"query": "x" * 1_000_000}, True),
        ({"query": "zq" * 4_999}, False),  # nothing matches: the echo is cut
        ({"query": "-", "limit": 200}, False),
        ({"query": "e", "limit": 200}, False),
        ({"query": "recall:" + "a" * 9_000}, True),
        ({"query": "recall:abc+99999999999"}, True),
        ({"query": "notes", "session": "s" * 300_000}, True),
        ({"query": "notes", "session": "/" + "p/" * 3_000 + "t.jsonl"}, True),
        ({"query": f"where is {key} used"}, False),
        ({"query": "notes", "limit": 10**30}, True),
        ({"query": ["a"] * 100_000}, True),
    ]
    async with mcp_session(data, config, CWD) as mcp:
        for arguments, error in calls:
            result = await mcp.call_tool("recall", arguments)
            text = _text(result)
            shown = str(arguments)[:60]
            assert result.is_error == error, (shown, text[:300])
            assert len(text) <= (REFUSAL_CHARS if error else ANSWER_CHARS + NOTE_CHARS), (
                shown,
                len(text),
            )
            assert key not in text
            assert text.strip() != "Error executing tool recall"  # always a reason


async def test_every_refusal_says_why(tmp_path: Path) -> None:
    config, data = tmp_path / "claude", tmp_path / "data"
    copy = _place(config, CWD, MANUAL, "88888888-aaaa-4bbb-8ccc-000000000008")
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    async with mcp_session(data, config, CWD) as mcp:
        cases = {
            "a path over the length limit": (
                {"query": "notes", "session": "/" + "a" * 5_000 + ".jsonl"},
                "at most 4,096",
            ),
            "a FIFO": ({"query": "notes", "session": str(fifo)}, "not a regular file"),
            "a folder": ({"query": "notes", "session": str(folder)}, "not a regular file"),
            "a NUL": ({"query": "notes", "session": "a\x00b.jsonl"}, "NUL character"),
            "a long query": ({"query": "q" * 10_001}, "10,001 characters long"),
        }
        for name, (arguments, says) in cases.items():
            result = await mcp.call_tool("recall", arguments)
            assert result.is_error and says in _text(result), (name, _text(result))
        # The index's path is a folder: said, not taken for an unreadable transcript.
        index = index_path(data, copy)
        index.parent.mkdir(parents=True)
        index.mkdir()
        result = await mcp.call_tool("recall", {"query": "notes"})
        assert result.is_error and f"{index} is a directory" in _text(result)
        assert "cannot read the transcript" not in _text(result)
        index.rmdir()
        assert not (await mcp.call_tool("recall", {"query": "notes"})).is_error
        # The data dir's recall folder is a file.
        shutil.rmtree(data / "recall")
        (data / "recall").write_text("not a folder")
        result = await mcp.call_tool("recall", {"query": "notes"})
        assert result.is_error and "the recall index" in _text(result), _text(result)
        assert "cannot be used" in _text(result)


def _frames(
    data: Path, config: Path, lines: list[bytes], wait_for: frozenset[Any] = frozenset()
) -> list[dict[str, Any]]:
    """``compactd mcp`` over raw pipes: initialize, then ``lines`` as they are, then a ping
    (id "last"); every message it sent until the ping's reply and those to ``wait_for``."""
    env = {**os.environ, "CLAUDE_CONFIG_DIR": str(config)}
    args = ["-m", "compactd", "mcp", "--data-dir", str(data), "--cwd", CWD]
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}}  # fmt: skip
    head = [json.dumps(init).encode(), b'{"jsonrpc": "2.0", "method": "notifications/initialized"}']
    tail = [b'{"jsonrpc": "2.0", "id": "last", "method": "ping"}']
    server = subprocess.Popen(
        [sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    assert server.stdin is not None and server.stdout is not None
    try:
        server.stdin.write(b"".join(line + b"\n" for line in [*head, *lines, *tail]))
        server.stdin.flush()
        replies: list[dict[str, Any]] = []
        while not {"last", *wait_for} <= {r.get("id") for r in replies}:
            raw = server.stdout.readline()
            assert raw, "the server stopped"
            replies.append(json.loads(raw))
        return replies[1:]
    finally:
        server.stdin.close()
        server.wait(timeout=60)


def test_malformed_frames_are_answered_with_an_error(tmp_path: Path) -> None:
    config, data = tmp_path / "claude", tmp_path / "data"
    _place(config, CWD, MANUAL, "99999999-aaaa-4bbb-8ccc-000000000009")
    call = {"jsonrpc": "2.0", "method": "tools/call",
            "params": {"name": "recall", "arguments": {"query": "notes"}}}  # fmt: skip
    cases: list[tuple[bytes, Any, int, str]] = [  # (line, id answered, code, the reason says)
        (
            json.dumps({**call, "id": 1}).replace("notes", "\\ud800").encode(),
            1,
            -32600,
            "lone surrogate (\\ud800)",
        ),
        (
            json.dumps({**call, "id": 2}).replace("notes", "a\\udfffb").encode(),
            2,
            -32600,
            "lone surrogate (\\udfff)",
        ),
        (json.dumps({**call, "id": 3, "params": 5}).encode(), 3, -32600, "params"),
        (json.dumps({**call, "id": 4, "params": []}).encode(), 4, -32600, "params"),
        (json.dumps({**call, "id": {"a": 1}}).encode(), None, -32600, "id"),
        (json.dumps({**call, "id": 1.5}).encode(), None, -32600, "id"),
        (b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping"}', None, -32600, "surrogate"),
        (json.dumps({**call, "id": 5, "jsonrpc": "1.0"}).encode(), 5, -32600, "jsonrpc"),
        (json.dumps({**call, "id": 6, "method": 7}).encode(), 6, -32600, "method"),
        (b"not json at all", None, -32700, "not JSON"),
        (b'{"jsonrpc": "2.0", "id": 7, "method": "ping"', None, -32700, "not JSON"),
        (b"[1, 2, 3]", None, -32600, "not a JSON-RPC object"),
        (b"\xff\xfe garbage", None, -32700, "not JSON"),
    ]
    quiet = [  # a notification or a response: JSON-RPC answers neither
        b'{"jsonrpc": "2.0", "method": "notifications/x", "params": "\\udc00"}',
        b'{"jsonrpc": "2.0", "id": 99, "result": "\\ud800"}',
        b"",
        b"   ",
    ]
    replies = _frames(data, config, [c[0] for c in cases] + quiet)
    answers = [r for r in replies if r.get("id") != "last"]
    assert len(answers) == len(cases), answers
    for (line, msg_id, code, says), reply in zip(cases, answers, strict=True):
        assert reply["id"] == msg_id and reply["error"]["code"] == code, (line, reply)
        assert says in reply["error"]["message"], (line, reply)
    # Still serving, a well-formed call among them answered as usual.
    lines = [json.dumps({**call, "id": 8}).encode(), b"\xff"]
    ok = {r["id"]: r for r in _frames(data, config, lines, frozenset({8}))}
    assert "result" in ok[8] and ok[None]["error"]["code"] == -32700
