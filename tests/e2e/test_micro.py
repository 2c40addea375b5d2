"""End-to-end tests of microcompact over stdio: ``compact/micro`` with each strategy, the cleared
view in ``session/messages``, the lower count in ``tokens/status``, the originals kept in the
transcript, restarts, cache edits, API-native context management, options and bad input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from compactd_client import Client, RpcError

from compactd import protocol as p
from compactd.core.normalize import CLEARED_TOOL_RESULT_PLACEHOLDER
from compactd.core.tokens import pad
from tests.conftest import daemon_args
from tests.helpers import CWD, MODEL, SessionBuilder, stored_transcript
from tests.inproc import InProc


def _coding_session(rounds: int = 12, ago_minutes: float = 0.5) -> tuple[SessionBuilder, list[str]]:
    b = SessionBuilder(ago_minutes)
    b.user("Fix the failing tests in the parser.")
    ids = []
    for i in range(rounds):
        ids.append(b.read(f"/work/src/mod_{i}.py", 3_000))
        ids.append(b.bash(f"pytest tests/test_{i}.py", 2_500))
    b.call("TodoWrite", {"todos": []}, "todo " * 8_000)  # large but never clearable
    return b, ids


def _tool_results(messages: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in messages:
        if isinstance(m["content"], list):
            for block in m["content"]:
                if block.get("type") == "tool_result":
                    out[block["tool_use_id"]] = block["content"]
    return out


def _raw(content: Any) -> int:
    assert isinstance(content, str)
    return (len(content) + 2) // 4


async def _open(client: Client, entries: list[dict[str, Any]], **fields: Any) -> str:
    opened = await client.open_session(cwd=CWD, model=MODEL, **fields)
    await client.append(opened.session_id, entries)
    return opened.session_id


# -- count-based --------------------------------------------------------------------------------


async def test_count_microcompact_clears_reports_and_survives_restart(
    app_daemon: InProc, tmp_path: Path
) -> None:
    b, ids = _coding_session()
    async with app_daemon() as client:
        sid = await _open(client, b.entries)
        before_status = await client.tokens_status(sid)
        before = _tool_results((await client.messages(sid)).messages)

        result = await client.compact_micro(sid)
        assert result.strategy == "count"
        cleared = result.cleared_tool_ids
        # Oldest first, never the newest three clearable results; enough to be worth it.
        assert cleared == ids[: len(cleared)] and len(cleared) <= len(ids) - 3
        assert result.tokens_saved >= 20_000
        assert result.pre_tokens == before_status.tokens
        assert result.post_tokens == before_status.tokens - result.tokens_saved
        # ids alternate Read of mod_i and Bash; only the Read paths leave the read-file state.
        assert result.cleared_read_paths == [
            f"/work/src/mod_{ids.index(t) // 2}.py" for t in cleared if ids.index(t) % 2 == 0
        ]
        assert result.boundary is not None
        assert result.boundary["subtype"] == "microcompact_boundary"

        status = await client.tokens_status(sid)
        assert status.tokens == result.post_tokens
        after_msgs = await client.messages(sid)
        after = _tool_results(after_msgs.messages)
        assert after_msgs.cache_edits is None and after_msgs.context_management is None
        assert set(after) == set(before)
        for tid, content in after.items():
            if tid in cleared:
                assert content == CLEARED_TOOL_RESULT_PLACEHOLDER
            else:
                assert content == before[tid]
        # The view and the count agree: what left the messages is what the count dropped.
        # The plain estimate: docs/microcompact.md#what-a-clearing-saves.
        dropped = sum(_raw(before[t]) - _raw(after[t]) for t in cleared)
        assert abs(dropped - result.tokens_saved) <= len(cleared)
        # What is left of the clearable results fits in the protected window.
        left = sum(_raw(after[t]) for t in ids if t not in cleared)
        assert pad(left) <= 40_000

        # Nothing is lost: the transcript keeps the originals and records the boundary.
        transcript = stored_transcript(tmp_path / "data", sid)
        lines = [json.loads(x) for x in transcript.read_bytes().splitlines()]
        originals = {
            blk["tool_use_id"]: blk["content"]
            for e in lines
            if e["type"] == "user" and isinstance(e["message"]["content"], list)
            for blk in e["message"]["content"]
            if blk.get("type") == "tool_result"
        }
        assert originals[cleared[0]] == before[cleared[0]]
        meta = lines[-1]["microcompactMetadata"]
        assert lines[-1]["subtype"] == "microcompact_boundary"
        assert meta["compactedToolIds"] == cleared
        assert meta["tokensSaved"] == result.tokens_saved
        assert meta["preTokens"] == before_status.tokens
        assert meta["trigger"] == "manual" and meta["clearedAttachmentUUIDs"] == []

        # A second call finds nothing new and writes nothing.
        again = await client.compact_micro(sid, "count")
        assert again.cleared_tool_ids == [] and again.tokens_saved == 0
        assert again.reason and "below the minimum" in again.reason
        assert len(transcript.read_bytes().splitlines()) == len(lines)
        assert (await client.tokens_status(sid)).tokens == status.tokens

    async with app_daemon() as restarted:
        again_msgs = await restarted.messages(sid)
        assert again_msgs.messages == after_msgs.messages
        assert (await restarted.tokens_status(sid)).tokens == status.tokens


async def test_count_options_from_initialization(app_daemon: InProc) -> None:
    b, ids = _coding_session(rounds=3)
    options = {"microcompact": {"keepRecent": 1, "protectedTokens": 0, "minSavings": 0}}
    async with app_daemon(options=options) as client:
        sid = await _open(client, b.entries)
        result = await client.compact_micro(sid, "count")
        assert result.cleared_tool_ids == ids[:-1]
        options = {"microcompact": {"clearableTools": ["TodoWrite"], "minSavings": 0}}
    async with app_daemon(options=options) as client:
        result = await client.compact_micro(sid, "count")
        # Only TodoWrite is clearable now, and a single result is within the last three.
        assert result.cleared_tool_ids == []


# -- time-based ---------------------------------------------------------------------------------


async def test_default_strategy_is_time_after_an_idle_hour(app_daemon: InProc) -> None:
    b, ids = _coding_session(rounds=5, ago_minutes=61)
    async with app_daemon() as client:
        sid = await _open(client, b.entries)
        result = await client.compact_micro(sid)
        assert result.strategy == "time"
        assert result.cleared_tool_ids == ids[:-5]
        after = _tool_results((await client.messages(sid)).messages)
        assert [t for t in ids if after[t] != CLEARED_TOOL_RESULT_PLACEHOLDER] == ids[-5:]

        fresh, _ = _coding_session(rounds=5, ago_minutes=59)
        sid2 = await _open(client, fresh.entries)
        explicit = await client.compact_micro(sid2, "time")
        assert explicit.cleared_tool_ids == [] and explicit.reason
        assert "after 60 min" in explicit.reason


# -- cached (cache_edits) -----------------------------------------------------------------------


async def test_cached_edits_are_pinned_and_survive_restart(app_daemon: InProc) -> None:
    b = SessionBuilder()
    b.user("Read the modules.")
    ids = [b.read(f"/work/src/m{i}.py", 2_000) for i in range(13)]
    options = {"microcompact": {"cacheEdits": True, "protectedTokens": 0, "minSavings": 0}}
    async with app_daemon(options=options) as client:
        sid = await _open(client, b.entries[:-2])  # twelve results
        before = await client.messages(sid)
        pre = (await client.tokens_status(sid)).tokens
        result = await client.compact_micro(sid)
        assert result.strategy == "cached"
        assert result.cleared_tool_ids == ids[:9]
        assert result.tokens_saved > 0 and result.post_tokens == pre - result.tokens_saved
        assert result.cleared_read_paths == [f"/work/src/m{i}.py" for i in range(9)]
        edits = result.cache_edits
        assert edits is not None and len(edits) == 1
        assert edits[0]["messageIndex"] == len(before.messages) - 1
        assert edits[0]["block"] == {
            "type": "cache_edits",
            "edits": [{"type": "delete", "cache_reference": t} for t in ids[:9]],
        }
        view = await client.messages(sid)
        # The prompt is not rewritten (that would break the cache); the edits ride along.
        assert view.messages == before.messages
        assert view.cache_edits == edits
        assert (await client.tokens_status(sid)).tokens == result.post_tokens

        await client.append(sid, b.entries[-2:])  # a thirteenth: 4 active, below 12
        step = await client.compact_micro(sid, "cached")
        assert step.cleared_tool_ids == [] and step.reason and "4 active" in step.reason
        assert step.cache_edits == edits

    async with app_daemon(options=options) as client:
        assert (await client.messages(sid)).cache_edits == edits
        # Clearing messages locally breaks the cache: the pinned edits go with it.
        cleared = await client.compact_micro(sid, "count")
        assert cleared.cleared_tool_ids == ids[:10]
        assert (await client.messages(sid)).cache_edits is None


# -- API-native context management --------------------------------------------------------------


async def test_api_context_management_session(app_daemon: InProc) -> None:
    b, ids = _coding_session(rounds=4)
    b.call("AskUserQuestion", {"question": "ok?"}, "yes")
    async with app_daemon() as client:
        sid = await _open(
            client,
            b.entries,
            api_context_management=True,
            cache_safe_params=p.CacheSafeParams(
                thinking={"type": "enabled", "budget_tokens": 4096},
                tools=[{"name": "Read"}, {"name": "Bash"}, {"name": "Task"}],
            ),
        )
        view = await client.messages(sid)
        assert view.betas == ["context-management-2025-06-27"]
        assert view.cache_edits is None
        assert view.context_management is not None
        edits = view.context_management["edits"]
        assert [e["type"] for e in edits] == ["clear_thinking_20251015", "clear_tool_uses_20250919"]
        assert edits[0]["keep"] == "all"
        status = await client.tokens_status(sid)
        tool_edit = edits[1]
        assert tool_edit["trigger"] == {"type": "input_tokens", "value": status.warning_threshold}
        assert tool_edit["keep"] == {"type": "tool_uses", "value": 3}
        assert tool_edit["clear_at_least"] == {"type": "input_tokens", "value": 20_000}
        assert tool_edit["exclude_tools"] == ["AskUserQuestion", "Task", "TodoWrite"]
        assert tool_edit["clear_tool_inputs"] is False

        result = await client.compact_micro(sid)
        assert result.strategy == "api" and result.cleared_tool_ids == []
        assert result.reason and "context_management" in result.reason
        assert (await client.messages(sid)).messages == view.messages


# -- switches and bad input ---------------------------------------------------------------------


async def test_disable_microcompact_and_bad_input(app_daemon: InProc, tmp_path: Path) -> None:
    b, _ = _coding_session()
    async with app_daemon(options={"env": {"DISABLE_MICROCOMPACT": "1"}}) as client:
        sid = await _open(client, b.entries)
        with pytest.raises(RpcError) as err:
            await client.compact_micro(sid)
        assert err.value.code == p.ErrorCode.COMPACTION_DISABLED
        assert "DISABLE_MICROCOMPACT" in err.value.message

    async with app_daemon() as client:
        for params, code in [
            ({"sessionId": "nope"}, p.ErrorCode.SESSION_NOT_FOUND),
            ({"sessionId": "../etc"}, p.ErrorCode.INVALID_PARAMS),
            ({"sessionId": sid, "strategy": "everything"}, p.ErrorCode.INVALID_PARAMS),
            ({"sessionId": sid, "dryRun": True}, p.ErrorCode.INVALID_PARAMS),
            ({}, p.ErrorCode.INVALID_PARAMS),
        ]:
            with pytest.raises(RpcError) as err:
                await client.request(p.COMPACT_MICRO, params)
            assert err.value.code == code, params
        transcript = stored_transcript(tmp_path / "data", sid)
        assert len(transcript.read_bytes().splitlines()) == len(b.entries)
        # The daemon is still serving and the session still compacts.
        assert (await client.compact_micro(sid)).cleared_tool_ids


async def test_invalid_microcompact_options_are_rejected(tmp_path: Path) -> None:
    client = await Client.spawn_process(daemon_args(tmp_path / "data"))
    try:
        with pytest.raises(RpcError) as err:
            await client.initialize({"microcompact": {"keepRecent": -1}})
        assert err.value.code == p.ErrorCode.INVALID_PARAMS
        assert "keepRecent" in err.value.message
    finally:
        await client.shutdown()
