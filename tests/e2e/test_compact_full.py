"""End-to-end tests of compact/full through the real daemon and the Messages API emulator."""

from __future__ import annotations

from typing import Any

import pytest
from compactd_client import RpcError

from compactd import protocol as p
from compactd.core import prompts
from tests.e2e.test_compact_support import (
    CACHE_SAFE,
    MODEL,
    SYSTEM,
    THINKING,
    TOOLS,
    Harness,
    harness_fixture,
    last_request_body,
    open_session,
    phases,
    session_entries,
    transcript_path,
)
from tests.emulator import Reply
from tests.helpers import drain, transcript_lines
from tests.inproc import InProc

pytestmark = [pytest.mark.timeout(30), pytest.mark.asyncio(loop_scope="module")]

harness = harness_fixture()


def _strip_marker(message: dict[str, Any]) -> dict[str, Any]:
    content = [{k: v for k, v in b.items() if k != "cache_control"} for b in message["content"]]
    return {"role": message["role"], "content": content}


async def test_full_compaction_shares_the_cache_and_commits_boundary_and_summary(
    h: Harness,
) -> None:
    client, emulator = h.client, h.emu
    sid = await open_session(client)
    before = await client.messages(sid)
    status_before = await client.tokens_status(sid)
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        result = await client.compact_full(sid)
        notes = drain(queue)

    # The request: the main loop's model, system, tools and thinking, its messages as the
    # prefix, the instruction as an extra block on the last user message and the cache
    # marker on the second-to-last message.
    assert len(emulator.message_requests) == 1
    body = last_request_body(emulator)
    assert body["model"] == MODEL
    assert body["system"] == SYSTEM
    assert body["tools"] == TOOLS
    assert body["thinking"] == THINKING
    assert body["stream"] is True
    sent = body["messages"]
    main = before.messages
    assert main[-1]["role"] == "user"
    assert len(sent) == len(main)
    assert [_strip_marker(m) for m in sent[:-1]] == main[:-1]
    last = sent[-1]
    assert last["role"] == "user"
    assert last["content"][:-1] == main[-1]["content"]
    instruction = last["content"][-1]
    assert instruction["type"] == "text"
    assert instruction["text"].startswith(prompts.NO_TOOLS_PREAMBLE)
    assert instruction["text"].endswith(prompts.NO_TOOLS_REMINDER)
    assert sent[-2]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    markers = sum(1 for m in sent for b in m["content"] if "cache_control" in b)
    assert markers == 1

    # The result and what was written.
    boundary, summary = result.boundary, result.summary
    assert boundary["type"] == "system" and boundary["subtype"] == "compact_boundary"
    assert boundary["content"] == "Conversation compacted"
    assert boundary["parentUuid"] is None
    meta = boundary["compactMetadata"]
    assert meta["trigger"] == "manual"
    assert meta["preTokens"] == status_before.tokens == result.pre_compact_tokens
    assert 0 < meta["postTokens"] < meta["preTokens"]
    assert meta["mechanism"] == "full"
    assert meta["compactionId"] == result.compaction_id
    assert meta["messagesSummarized"] > 100
    assert "preservedSegment" not in meta
    assert summary["isCompactSummary"] is True
    assert summary["isVisibleInTranscriptOnly"] is True
    assert summary["parentUuid"] == boundary["uuid"]
    text = summary["message"]["content"]
    assert "Summary:" in text and "<analysis>" not in text and "<summary>" not in text
    assert "without asking" not in text  # manual: no silent-continue instruction
    assert result.summarizer == "cacheShared"
    assert result.usage is not None and result.usage["output_tokens"] > 0
    assert result.kept_entries == []

    lines = transcript_lines(await transcript_path(client, sid))
    at = next(i for i, ln in enumerate(lines) if ln.get("subtype") == "compact_boundary")
    written = lines[at]
    assert written["uuid"] == boundary["uuid"]
    # One group: boundary, summary, then the rehydration attachments, at the end.
    assert written["compactdGroupSize"] == 2 + len(result.attachments) == len(lines) - at
    assert lines[at + 1]["uuid"] == summary["uuid"]
    assert lines[at + 1]["message"]["content"] == text
    assert [ln["uuid"] for ln in lines[at + 2 :]] == [a["uuid"] for a in result.attachments]
    assert boundary["logicalParentUuid"] == lines[at - 1]["uuid"]

    after = await client.messages(sid)
    assert after.boundary_uuid == boundary["uuid"]
    assert after.messages[0]["role"] == "user"
    assert after.messages[0]["content"][0] == {"type": "text", "text": text}
    assert len(after.messages) == 1
    status_after = await client.tokens_status(sid)
    assert status_after.tokens == result.post_compact_tokens
    assert status_after.tokens < status_before.tokens / 3

    # (keep-alives may come in between: the first call also loads the SDK)
    assert [ph for ph in phases(notes) if ph != "keepAlive"] == [
        "started",
        "preCompactHooks",
        "summarizing",
        "rehydrating",
        "sessionStartHooks",
        "completed",
    ]
    assert {n["compactionId"] for n in notes} == {result.compaction_id}
    assert all(n["trigger"] == "manual" and n["sessionId"] == sid for n in notes)


async def test_custom_instructions_and_transcript_path_and_recompaction(
    h: Harness,
) -> None:
    client, emulator = h.client, h.emu
    sid = await open_session(client)
    first = await client.compact_full(sid, custom_instructions="Focus on the parser work.")
    instruction = last_request_body(emulator)["messages"][-1]["content"][-1]["text"]
    heading = instruction.index(prompts.ADDITIONAL_INSTRUCTIONS_HEADING)
    assert heading < instruction.index("Focus on the parser work.")
    assert instruction.index("Focus on the parser work.") < instruction.index(
        prompts.NO_TOOLS_REMINDER
    )
    transcript = await transcript_path(client, sid)
    assert transcript in first.summary["message"]["content"]

    # Too little since the last compaction: nothing to summarize.
    with pytest.raises(RpcError) as info:
        await client.compact_full(sid)
    assert info.value.code == p.ErrorCode.NOT_ENOUGH_MESSAGES

    # More work, then a second compaction re-summarizes the first summary.
    more = session_entries(entries=120, tokens=12_000, seed=11)
    for e in more:
        e["uuid"] = "b-" + e["uuid"]
        if e.get("parentUuid"):
            e["parentUuid"] = "b-" + e["parentUuid"]
    await client.append(sid, more)
    emulator.script(Reply(text="<analysis>x</analysis><summary>second summary</summary>"))
    second = await client.compact_full(sid)
    sent = last_request_body(emulator)["messages"]
    assert first.summary["message"]["content"] in sent[0]["content"][0]["text"]
    assert "second summary" in second.summary["message"]["content"]
    meta = second.boundary["compactMetadata"]
    assert (
        meta["cumulativeDroppedTokens"]
        > first.boundary["compactMetadata"]["cumulativeDroppedTokens"]
    )
    view = await client.messages(sid)
    assert view.boundary_uuid == second.boundary["uuid"]
    assert "second summary" in view.messages[0]["content"][0]["text"]


async def test_offline_summarizer_without_api_key(app_daemon: InProc) -> None:
    async with app_daemon(
        options={"summarizer": {"offline": True}}, env={"ANTHROPIC_API_KEY": ""}
    ) as client:
        sid = await open_session(client)
        result = await client.compact_full(sid)
        assert result.summarizer == "offline"
        text = result.summary["message"]["content"]
        assert "6. All User Messages:" in text
        assert "Built by compactd without a model" in text
        assert result.usage is None
        status = await client.tokens_status(sid)
        assert status.tokens == result.post_compact_tokens < result.pre_compact_tokens


async def test_plain_fallback_without_cache_safe_params(
    h: Harness,
) -> None:
    client, emulator = h.client, h.emu
    sid = await open_session(client, cache_safe=None)
    result = await client.compact_full(sid)
    assert result.summarizer == "plain"
    body = last_request_body(emulator)
    assert body["max_tokens"] == 20_000
    assert body["thinking"] == {"type": "disabled"}
    assert "tools" not in body
    kinds = {b["type"] for m in body["messages"] for b in m["content"]}
    assert kinds == {"text"}  # tool calls and results rendered as text


async def test_bad_input_changes_nothing(h: Harness) -> None:
    client = h.client
    for params, code in [
        ({"sessionId": "nope"}, p.ErrorCode.SESSION_NOT_FOUND),
        ({"sessionId": "x", "bogus": 1}, p.ErrorCode.INVALID_PARAMS),
        ({"sessionId": "../etc"}, p.ErrorCode.INVALID_PARAMS),
        ({"sessionId": 5}, p.ErrorCode.INVALID_PARAMS),
        ({}, p.ErrorCode.INVALID_PARAMS),
    ]:
        with pytest.raises(RpcError) as info:
            await client.request(p.COMPACT_FULL, params)
        assert info.value.code == code, params
    with pytest.raises(RpcError) as info:
        await client.request(p.COMPACT_FULL, {"sessionId": "x", "customInstructions": 3})
    assert info.value.code == p.ErrorCode.INVALID_PARAMS
    # An empty session has nothing to compact.
    sid = await open_session(client, [])
    with pytest.raises(RpcError) as info:
        await client.compact_full(sid)
    assert info.value.code == p.ErrorCode.NOT_ENOUGH_MESSAGES
    assert h.emu.message_requests == []
    # The daemon is still fine.
    status = await client.tokens_status(sid)
    # An empty conversation: the next request carries only the fixed prefix.
    assert status.message_tokens == 0 and status.tokens == status.fixed_prefix_tokens > 0


async def test_betas_and_metadata_of_the_main_loop_are_forwarded(h: Harness) -> None:
    client, emulator = h.client, h.emu
    cache_safe = {
        **CACHE_SAFE,
        "betas": ["context-management-2025-06-27", "interleaved-thinking-2025-05-14"],
        "metadata": {"user_id": "user-123"},
    }
    sid = await open_session(client, cache_safe=cache_safe)
    result = await client.compact_full(sid)
    assert result.summarizer == "cacheShared"
    request = emulator.message_requests[-1]
    assert request.headers["anthropic-beta"] == (
        "context-management-2025-06-27,interleaved-thinking-2025-05-14"
    )
    assert "beta=true" in request.query
    assert request.body["metadata"] == {"user_id": "user-123"}
    assert (
        request.headers["authorization"] == "Bearer test" or request.headers["x-api-key"] == "test"
    )


async def test_a_pending_tool_call_at_the_end_is_left_out_of_the_request(h: Harness) -> None:
    client, emulator = h.client, h.emu
    entries = session_entries()
    last = entries[-1]["uuid"]
    entries += [
        {
            "type": "user",
            "uuid": "p-u",
            "parentUuid": last,
            "message": {"role": "user", "content": "Now run the whole test suite."},
        },
        {
            "type": "assistant",
            "uuid": "p-a",
            "parentUuid": "p-u",
            "message": {
                "id": "msg-pending",
                "role": "assistant",
                "model": MODEL,
                "content": [
                    {"type": "text", "text": "Running the suite."},
                    {"type": "tool_use", "id": "toolu_pending", "name": "Bash", "input": {}},
                ],
            },
        },
    ]
    sid = await open_session(client, entries)
    main = (await client.messages(sid)).messages
    assert main[-1]["content"][-1]["type"] == "tool_use"  # the result is still to come
    await client.compact_full(sid)
    sent = last_request_body(emulator)["messages"]
    # The instruction comes in a user message of its own, after the assistant's text; the
    # unanswered call is dropped (the API would reject a user turn that does not answer it).
    assert sent[-1]["role"] == "user" and len(sent[-1]["content"]) == 1
    assert sent[-2]["role"] == "assistant"
    assert [b["type"] for b in sent[-2]["content"]] == ["text"]
    assert sent[-2]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert len(sent) == len(main) + 1
