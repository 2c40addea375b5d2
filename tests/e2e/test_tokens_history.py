"""tokens/history through the real daemon: one point per API response, compactions as drops."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from compactd_client import Client, RpcError

from compactd import protocol as p
from tests.conftest import SpawnDaemon
from tests.helpers import CWD, assistant, text_block, transcript_lines, user

FIXTURE = Path(__file__).parent.parent / "data/transcripts/claude-code-2.1.330__r16_manual.jsonl"


def _usage(tokens: int) -> dict[str, int]:
    # Split over the fields the total adds up, so a figure taken from one field alone fails.
    return {
        "input_tokens": tokens // 4,
        "cache_read_input_tokens": tokens // 2,
        "cache_creation_input_tokens": tokens // 4 - 10,
        "output_tokens": 10,
    }


def _turn(i: int, tokens: int, blocks: int = 1) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [user(f"question {i} " + "word " * 200, uuid=f"u{i}")]
    for b in range(blocks):
        out.append(
            assistant(
                [text_block(f"answer {i}.{b} " + "word " * 100)],
                uuid=f"a{i}.{b}",
                msg_id=f"msg{i}",
                model="claude-sonnet-4-5",
                usage=_usage(tokens),
            )
        )
    return out


async def test_history_has_a_point_per_response_and_the_compaction_as_a_drop(
    spawn_daemon: SpawnDaemon,
) -> None:
    options = {"summarizer": {"offline": True}}
    async with spawn_daemon(options=options, env={"ANTHROPIC_API_KEY": ""}) as client:
        opened = await client.open_session(cwd=CWD, model="claude-sonnet-4-5")
        sid = opened.session_id
        # A response written as two lines is one point; a sub-agent's is none.
        await client.append(sid, _turn(1, 4_000, blocks=2) + _turn(2, 9_000))
        side = assistant(
            [text_block("side")], uuid="s1", msg_id="side", usage=_usage(50_000), isSidechain=True
        )
        await client.append(sid, [side])
        await client.append(sid, _turn(3, 12_000))
        compacted = await client.compact_full(sid)
        await client.append(sid, _turn(4, 5_000))
        history = await client.tokens_history(sid)
        lines = transcript_lines(opened.transcript_path)

    assert [pt.tokens for pt in history.points] == [4_000, 9_000, 12_000, 5_000]
    assert history.entry_count == len(lines)
    uuids = [lines[pt.entry_index].get("uuid") for pt in history.points]
    assert uuids == ["a1.1", "a2.0", "a3.0", "a4.0"]
    (compaction,) = history.compactions
    assert lines[compaction.entry_index]["uuid"] == compacted.boundary["uuid"]
    assert compaction.pre_tokens == compacted.pre_compact_tokens
    assert compaction.post_tokens == compacted.post_compact_tokens < compaction.pre_tokens
    assert compaction.trigger == "manual"
    before = [pt for pt in history.points if pt.entry_index < compaction.entry_index]
    after = [pt for pt in history.points if pt.entry_index > compaction.entry_index]
    assert [pt.tokens for pt in before] == [4_000, 9_000, 12_000]
    assert [pt.tokens for pt in after] == [5_000]


async def test_history_of_an_imported_claude_code_transcript(
    daemon: Client, tmp_path: Path
) -> None:
    source = tmp_path / "session.jsonl"
    shutil.copy(FIXTURE, source)
    expected: list[int] = []
    last_id = None
    for line in transcript_lines(source):
        message = line.get("message")
        if not isinstance(message, dict):
            continue
        usage = message.get("usage")
        if line.get("type") != "assistant" or not usage or message.get("model") == "<synthetic>":
            continue
        total = sum(v for k, v in usage.items() if k.endswith("tokens") and isinstance(v, int))
        if message.get("id") == last_id and expected:
            expected[-1] = total
        else:
            expected.append(total)
        last_id = message.get("id")
    opened = await daemon.open_session(cwd=CWD, transcript_path=str(source))
    history = await daemon.tokens_history(opened.session_id)
    assert [pt.tokens for pt in history.points] == expected
    assert all(pt.timestamp for pt in history.points)  # Claude Code stamps every line
    lines = transcript_lines(opened.transcript_path)
    assert len(history.compactions) == 1
    boundary = lines[history.compactions[0].entry_index]
    assert boundary["subtype"] == "compact_boundary"
    assert history.compactions[0].pre_tokens == boundary["compactMetadata"]["preTokens"]


async def test_history_of_an_unknown_session_is_refused(daemon: Client) -> None:
    with pytest.raises(RpcError) as raised:
        await daemon.request(p.TOKENS_HISTORY, {"sessionId": "nope"})
    assert raised.value.code == "sessionNotFound"
