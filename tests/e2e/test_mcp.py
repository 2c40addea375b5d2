"""``compactd mcp`` end to end: the real server spawned over stdio and driven by the MCP SDK's
own stdio client (docs/recall.md#mcp-tools).

Claude Code's side is a fake ``CLAUDE_CONFIG_DIR`` holding a copy of a real transcript in the
project folder Claude Code would use for the working directory; the current session is found
as the newest transcript there, or as a hook recorded it (``agents/claude_code/services/state``). A
compactd session is made by the real daemon and named by its id.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

from compactd.agents.claude_code.services import state as claude_state
from tests.conftest import FIXTURES, SpawnDaemon
from tests.helpers import CWD
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
    env = {**os.environ, "CLAUDE_CONFIG_DIR": str(config_dir)}
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
        assert result.is_error and "no Claude Code session found" in _text(result)


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
