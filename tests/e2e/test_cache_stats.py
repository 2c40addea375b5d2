"""End to end: prompt-cache break detection and session/stats through the real daemon."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from compactd_client import Client, RpcError
from compactd_client import protocol as cp

from compactd import protocol as p
from compactd.cli.synthetic import make_session
from tests.conftest import FIXTURES
from tests.helpers import CWD, assistant, drain, text_block, tool_call, tool_result, user
from tests.inproc import InProc

T0 = 1_800_000_000.0
R2_AUTO = FIXTURES / "claude-code-2.1.330__r2_auto.jsonl"

TOOLS = [
    {"name": "Read", "description": "read a file", "input_schema": {"type": "object"}},
    {"name": "Bash", "description": "run a command", "input_schema": {"type": "object"}},
]
SYSTEM = [
    {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}
]


async def open_session(client: Client, **fields: Any) -> str:
    fields.setdefault("model", "claude-sonnet-4-5")
    opened = await client.open_session(cwd=CWD, **fields)
    return opened.session_id


def usage(cache_read: int) -> dict[str, int]:
    return {
        "input_tokens": 500,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cache_read,
        "output_tokens": 80,
    }


async def turn(
    client: Client,
    sid: str,
    at: float,
    cache_read: int,
    tools: list[dict[str, Any]] = TOOLS,
    **fields: Any,
) -> p.CacheAck:
    """One main-loop request: report its inputs, then the usage of its response."""
    await client.cache_before(
        sid, system=SYSTEM, tools=tools, model="claude-sonnet-4-5", timestamp=at, **fields
    )
    source = fields.get("query_source")
    extra = {"query_source": source} if source else {}
    return await client.cache_after(sid, usage(cache_read), timestamp=at + 2, **extra)


def compaction_entries(n: int, **meta: Any) -> list[dict[str, Any]]:
    """A boundary and its summary, as a client that compacted on its own would append them."""
    return [
        {
            "type": "system",
            "subtype": "compact_boundary",
            "uuid": f"boundary-{n}",
            "parentUuid": None,
            "timestamp": f"2026-11-22T12:0{n}:00.000Z",
            "content": "Conversation compacted",
            "level": "info",
            "compactMetadata": meta,
        },
        {
            "type": "user",
            "uuid": f"summary-{n}",
            "parentUuid": f"boundary-{n}",
            "isCompactSummary": True,
            "isVisibleInTranscriptOnly": True,
            "message": {"role": "user", "content": f"Summary {n}: the work so far."},
        },
    ]


def reply(n: int) -> dict[str, Any]:
    return assistant(
        [text_block(f"Step {n} is done. " + "detail " * 3_000)],
        uuid=f"reply-{n}",
        msg_id=f"msg_reply_{n}",
    )


# -- cache breaks -------------------------------------------------------------------------------


async def test_changed_tool_list_produces_one_break_naming_the_tools(app_client: Client) -> None:
    sid = await open_session(app_client)
    async with app_client.subscribe(p.NOTIFY_CACHE_BREAK) as breaks:
        assert (await turn(app_client, sid, T0, 0)).recorded
        assert (await turn(app_client, sid, T0 + 10, 40_000)).cache_break is None
        assert (await turn(app_client, sid, T0 + 20, 42_000)).cache_break is None
        new_tools = [TOOLS[0], {"name": "WebSearch", "input_schema": {"type": "object"}}]
        ack = await turn(app_client, sid, T0 + 30, 1_200, tools=new_tools)
        # A steady request after the break is compared with the new, low baseline.
        assert (await turn(app_client, sid, T0 + 40, 44_000, tools=new_tools)).cache_break is None
        # The notification is written before the response that carries the same break.
        sent = drain(breaks)
    assert ack.cache_break is not None
    assert len(sent) == 1
    note = msgspec.convert(sent[0], cp.CacheBreak)  # the client's type, as ack.cache_break
    assert note == ack.cache_break
    assert note.session_id == sid and note.query_source == "main"
    assert (note.previous_cache_read, note.cache_read, note.dropped_tokens) == (
        42_000,
        1_200,
        40_800,
    )
    assert note.reasons == ["tools added: WebSearch", "tools removed: Bash"]
    assert note.causes == ["tools"]
    assert "WebSearch" in note.explanation and "Bash" in note.explanation

    st = await app_client.stats(sid)
    assert st.cache_breaks == [note]


async def test_compaction_in_between_is_not_a_break(app_client: Client) -> None:
    sid = await open_session(app_client)
    await app_client.append(sid, [user("write the parser", uuid="p1")])
    async with app_client.subscribe(p.NOTIFY_CACHE_BREAK) as breaks:
        await turn(app_client, sid, T0, 90_000)
        await app_client.append(
            sid, compaction_entries(1, trigger="auto", preTokens=95_000, postTokens=6_000)
        )
        # Even with a changed tool list, the drop right after a compaction is expected.
        ack = await turn(app_client, sid, T0 + 10, 3_000, tools=TOOLS[:1])
        assert ack.cache_break is None and ack.baseline_reset
        # The reset is used up: the next unexplained fall is flagged again.
        await turn(app_client, sid, T0 + 20, 30_000, tools=TOOLS[:1])
        ack = await turn(app_client, sid, T0 + 30, 5_000, tools=TOOLS[:1])
        sent = drain(breaks)
    assert ack.cache_break is not None and ack.cache_break.causes == ["serverSide"]
    assert len(sent) == 1


async def test_microcompact_and_cache_deletions_reset_the_baseline(app_client: Client) -> None:
    sid = await open_session(app_client)
    await turn(app_client, sid, T0, 80_000)
    await app_client.append(
        sid,
        [
            {
                "type": "system",
                "subtype": "microcompact_boundary",
                "uuid": "mc-1",
                "microcompactMetadata": {"trigger": "auto", "preTokens": 1, "tokensSaved": 30_000},
            }
        ],
    )
    ack = await turn(app_client, sid, T0 + 10, 50_000)
    assert ack.baseline_reset and ack.cache_break is None

    deletion = {"type": "delete", "cache_reference": "toolu_01"}
    ack = await turn(app_client, sid, T0 + 20, 20_000, cache_edits=[deletion])
    assert ack.baseline_reset and ack.cache_break is None
    # Re-sending the same pinned deletion explains nothing: this fall is a break.
    ack = await turn(app_client, sid, T0 + 30, 5_000, cache_edits=[deletion])
    assert ack.cache_break is not None
    st = await app_client.stats(sid)
    assert st.microcompactions == 1 and st.microcompact_tokens_saved == 30_000
    assert st.compactions == []


async def test_idle_gap_and_query_sources(app_client: Client) -> None:
    sid = await open_session(app_client)
    await turn(app_client, sid, T0, 60_000)
    # A sub-agent with its own, smaller cache does not disturb the main thread's baseline.
    await turn(app_client, sid, T0 + 5, 8_000, query_source="agent-42")
    await turn(app_client, sid, T0 + 10, 61_000)
    # Seven minutes of silence: the 5-minute cache entry expired.
    ack = await turn(app_client, sid, T0 + 10 + 7 * 60, 2_000)
    assert ack.cache_break is not None
    assert ack.cache_break.causes == ["ttlExpiry"]
    assert ack.cache_break.reasons[0].startswith("possible TTL expiry: 7.0 minutes")
    # The sub-agent's break is reported under its own source.
    ack = await turn(app_client, sid, T0 + 500, 1_000, query_source="agent-42", effort="low")
    assert ack.cache_break is not None and ack.cache_break.query_source == "agent-42"
    st = await app_client.stats(sid)
    assert [b.query_source for b in st.cache_breaks] == ["main", "agent-42"]


async def test_usage_without_cache_field_is_not_recorded(app_client: Client) -> None:
    sid = await open_session(app_client)
    await turn(app_client, sid, T0, 50_000)
    ack = await app_client.cache_after(
        sid, {"input_tokens": 10, "output_tokens": 5}, timestamp=T0 + 5
    )
    assert not ack.recorded and ack.cache_break is None
    # The baseline is still the 50,000 of the first response.
    ack = await turn(app_client, sid, T0 + 10, 10_000)
    assert ack.cache_break is not None and ack.cache_break.previous_cache_read == 50_000


BAD_INPUT: list[tuple[str, dict[str, Any], str]] = [
    (p.CACHE_AFTER_RESPONSE, {"sessionId": "nope", "usage": {}}, p.ErrorCode.SESSION_NOT_FOUND),
    (p.CACHE_BEFORE_REQUEST, {"sessionId": "../etc"}, p.ErrorCode.INVALID_PARAMS),
    (p.SESSION_STATS, {"sessionId": "missing"}, p.ErrorCode.SESSION_NOT_FOUND),
    (
        p.CACHE_BEFORE_REQUEST,
        {"sessionId": "SID", "tools": ["Read"]},
        p.ErrorCode.INVALID_PARAMS,
    ),
    (
        p.CACHE_BEFORE_REQUEST,
        {"sessionId": "SID", "tools": [{"name": 7}]},
        p.ErrorCode.INVALID_PARAMS,
    ),
    (
        p.CACHE_BEFORE_REQUEST,
        {"sessionId": "SID", "querySource": " "},
        p.ErrorCode.INVALID_PARAMS,
    ),
    (p.CACHE_BEFORE_REQUEST, {"sessionId": "SID", "bogus": 1}, p.ErrorCode.INVALID_PARAMS),
    (
        p.CACHE_AFTER_RESPONSE,
        {"sessionId": "SID", "usage": {"cache_read_input_tokens": -5}},
        p.ErrorCode.INVALID_PARAMS,
    ),
    (
        p.CACHE_AFTER_RESPONSE,
        {"sessionId": "SID", "usage": {"cache_read_input_tokens": "many"}},
        p.ErrorCode.INVALID_PARAMS,
    ),
    (p.CACHE_AFTER_RESPONSE, {"sessionId": "SID"}, p.ErrorCode.INVALID_PARAMS),
    (
        p.CACHE_AFTER_RESPONSE,
        {"sessionId": "SID", "usage": {"cache_read_input_tokens": 1}, "timestamp": -1},
        p.ErrorCode.INVALID_PARAMS,
    ),
    (
        p.CACHE_BEFORE_REQUEST,
        {"sessionId": "SID", "querySource": "a" * 500},
        p.ErrorCode.INVALID_PARAMS,
    ),
]


async def test_bad_input_is_rejected_and_changes_nothing(app_client: Client) -> None:
    sid = await open_session(app_client)
    for i, (method, params, code) in enumerate(BAD_INPUT):
        at = T0 + 100 * i
        await turn(app_client, sid, at, 70_000)
        if params.get("sessionId") == "SID":
            params = {**params, "sessionId": sid}
        with pytest.raises(RpcError) as info:
            await app_client.request(method, params)
        assert info.value.data["code"] == code, (method, params)
        # Nothing was recorded: the baseline is the last good response and no input changed.
        ack = await app_client.cache_after(sid, usage(40_000), timestamp=at + 10)
        assert ack.cache_break is not None, (method, params)
        assert ack.cache_break.previous_cache_read == 70_000
        assert ack.cache_break.causes == ["serverSide"]


# -- session/stats ------------------------------------------------------------------------------


async def test_stats_after_two_compactions_survive_a_restart(
    app_daemon: InProc, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    appended = [
        user("now add a test for the echo step", uuid="p1"),
        user("and document it", uuid="p2"),
        assistant(
            [text_block("Done.")],
            uuid="a1",
            msg_id="msg_a1",
            model="claude-opus-5-5",
            usage={"input_tokens": 4_000, "cache_read_input_tokens": 21_000},
        ),
        *compaction_entries(
            2,
            trigger="manual",
            preTokens=25_100,
            postTokens=4_600,
            durationMs=3_250,
            mechanism="full",
            compactionId="cmp-second",
        ),
    ]
    async with app_daemon(data_dir=data) as client:
        sid = await open_session(client, transcript_path=str(R2_AUTO), model="claude-opus-5-5")
        await client.append(sid, appended)
        first_view = await client.stats(sid)
    async with app_daemon(data_dir=data) as client:
        st = await client.stats(sid)
    assert st == first_view
    first, second = st.compactions
    # The fixture's own auto compaction, from its compactMetadata.
    assert (first.trigger, first.mechanism) == ("auto", "full")
    assert (first.pre_tokens, first.post_tokens, first.dropped_tokens) == (
        970_258,
        2_939,
        967_319,
    )
    assert first.duration_ms == 18 and first.entries_summarized == 15
    assert not first.recompaction and first.turns_since_previous is None
    assert first.compaction_id == "9909a6d2-6ad9-4e45-aff5-e4aede217c2e"
    # The appended one: a re-compaction two user prompts later.
    assert (second.compaction_id, second.trigger, second.mechanism) == (
        "cmp-second",
        "manual",
        "full",
    )
    assert (second.pre_tokens, second.post_tokens, second.dropped_tokens) == (
        25_100,
        4_600,
        20_500,
    )
    assert second.duration_ms == 3_250
    assert second.recompaction and second.turns_since_previous == 2
    # Everything the first compaction left in context (summary, its 3 preserved entries,
    # attachments, 12 later entries) plus the 3 appended messages.
    assert second.entries_summarized == 28
    assert second.timestamp == "2026-11-22T12:02:00.000Z"
    assert not first.thrash and not second.thrash


async def test_stats_flag_thrash_with_contributors(app_client: Client) -> None:
    sid = await open_session(app_client)  # 200K window: auto-compact threshold 167,000
    big = "x" * 240_000  # about 80,000 tokens once padded
    entries = [
        user("start", uuid="p0"),
        *compaction_entries(1, trigger="auto", preTokens=170_000, postTokens=15_000),
        user("read the logs", uuid="p1"),
        tool_call("t1", "Bash", uuid="a1", msg_id="m1"),
        tool_result("t1", big, uuid="r1"),
        tool_result("t1", big, uuid="r2"),
        *compaction_entries(2, trigger="auto", preTokens=176_000, postTokens=16_000),
    ]
    await app_client.append(sid, entries)
    first, second = (await app_client.stats(sid)).compactions
    assert first.thrash and first.refill_turns == 1
    assert first.refill_contributors is not None
    assert first.refill_contributors[0].startswith("Bash tool results: 160,000 tokens")
    assert not second.thrash


def test_status_cli_prints_the_compactions(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "compactd", "status", str(R2_AUTO), "--model", "claude-opus-5-5"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=True,
    ).stdout
    assert "compactions in the transcript: 1" in out
    assert re.search(r"^1\s+auto\s+full\s+970,258\s+2,939\s+\d+$", out, re.M), out


# -- with the real compaction engine ------------------------------------------------------------


async def test_real_full_compactions_reset_cache_baseline_and_show_in_stats(
    app_daemon: InProc,
) -> None:
    async with app_daemon(options={"summarizer": {"offline": True}}) as client:
        sid = await open_session(client)
        await client.append(sid, make_session(entries=60, target_tokens=20_000))
        async with client.subscribe(p.NOTIFY_CACHE_BREAK) as breaks:
            await turn(client, sid, T0, 18_000)
            first = await client.compact_full(sid)
            ack = await turn(client, sid, T0 + 10, 2_500)
            assert ack.baseline_reset and ack.cache_break is None
            for n in (1, 2):
                await client.append(sid, [user("keep going", uuid=f"p-after-{n}"), reply(n)])
            second = await client.compact_full(sid, custom_instructions="keep file names")
            ack = await turn(client, sid, T0 + 20, 1_000)
            assert ack.baseline_reset and ack.cache_break is None
            assert drain(breaks) == []
        st = await client.stats(sid)
    one, two = st.compactions
    for stat, result in ((one, first), (two, second)):
        assert stat.compaction_id == result.compaction_id
        assert (stat.trigger, stat.mechanism) == ("manual", "full")
        assert stat.pre_tokens == result.pre_compact_tokens
        assert stat.post_tokens == result.post_compact_tokens
        # The boundary is written before the result is assembled: its duration is the record.
        meta = result.boundary["compactMetadata"]
        assert stat.duration_ms == meta["durationMs"] <= result.duration_ms
        assert stat.boundary_uuid == result.boundary["uuid"]
        assert stat.dropped_tokens == result.pre_compact_tokens - result.post_compact_tokens
        assert stat.entries_summarized > 0
    assert not one.recompaction
    assert two.recompaction and two.turns_since_previous == 2
    assert st.cache_breaks == []
