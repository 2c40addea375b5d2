"""End-to-end tests of compact/partial through the real daemon and the Messages API emulator.

``upTo`` summarizes the part before a pivot and keeps the rest after the summary; ``from``
keeps the part before the pivot ahead of the summary (so its prompt cache survives) and
summarizes the rest. Both must survive a daemon restart, never cut a tool pair or a response
in two, and refuse a bad pivot without touching the transcript.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from compactd_client import Client, RpcError

from compactd import protocol as p
from compactd.core import prompts
from tests.conftest import FIXTURES
from tests.e2e.test_compact_support import (
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
    transcript_bytes,
    transcript_path,
)
from tests.emulator import Emulator
from tests.helpers import CWD, drain, transcript_lines
from tests.inproc import InProc

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio(loop_scope="module")]

harness = harness_fixture()

FIXTURE = FIXTURES / "d-kimuson__claude-code-viewer__5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"


def _plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """API messages without cache markers (the marker moves; the content must not)."""
    out = []
    for m in messages:
        content = m["content"]
        if isinstance(content, list):
            content = [{k: v for k, v in b.items() if k != "cache_control"} for b in content]
        out.append({"role": m["role"], "content": content})
    return out


def _is_prompt(entry: dict[str, Any]) -> bool:
    """A user entry the user typed (not a tool result, not meta)."""
    if entry.get("type") != "user" or entry.get("isMeta"):
        return False
    content = entry.get("message", {}).get("content")
    if isinstance(content, str):
        return True
    return not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def _tool_result_uuid(entries: list[dict[str, Any]], start: int) -> str:
    for e in entries[start:]:
        if e.get("type") == "user" and not _is_prompt(e):
            return str(e["uuid"])
    raise AssertionError("no tool result entry")


def _prompt_uuid(entries: list[dict[str, Any]], start: int) -> str:
    for e in entries[start:]:
        if _is_prompt(e):
            return str(e["uuid"])
    raise AssertionError("no user prompt")


async def _open_fixture(client: Client, **fields: Any) -> str:
    opened = await client.request(
        p.SESSION_OPEN,
        {"cwd": CWD, "model": MODEL, "transcriptPath": str(FIXTURE), **fields},
    )
    return str(opened["sessionId"])


def _summary_text(message: dict[str, Any]) -> str:
    """The text blocks of a user message, joined (the summary may share it with attachments)."""
    content = message["content"]
    assert isinstance(content, list)
    return "\n".join(str(b.get("text", "")) for b in content)


async def test_both_directions_on_a_fixture_transcript_survive_a_restart(
    app_emulated: InProc,
    emulator: Emulator,
    tmp_path: Path,
) -> None:
    lines = transcript_lines(FIXTURE)
    middle = len(lines) // 2
    data = tmp_path / "restart-data"
    async with app_emulated(data_dir=data) as client:
        up_sid = await _open_fixture(client)
        before = await client.messages(up_sid)
        # A tool result as pivot: the cut cannot go between it and its call, so it moves back.
        asked = _tool_result_uuid(lines, middle)
        async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
            up = await client.compact_partial(up_sid, asked, "upTo")
            notes = drain(queue)
        assert [ph for ph in phases(notes) if ph != "keepAlive"] == [
            "started",
            "preCompactHooks",
            "summarizing",
            "rehydrating",
            "sessionStartHooks",
            "completed",
        ]
        assert {n["compactionId"] for n in notes} == {up.compaction_id}
        assert all(n["trigger"] == "manual" and n["sessionId"] == up_sid for n in notes)
        info = up.partial
        assert info is not None and info.direction == "upTo"
        assert info.requested_pivot_uuid == asked and info.moved == "back"
        assert info.pivot_uuid != asked and up.warnings and "moved back" in up.warnings[-1]
        kept_ids = [e["uuid"] for e in up.kept_entries]
        assert kept_ids[0] == info.pivot_uuid and asked in kept_ids
        order = [e["uuid"] for e in lines]
        pivot_at = order.index(info.pivot_uuid)
        assert kept_ids == order[pivot_at:]
        meta = up.boundary["compactMetadata"]
        assert meta["mechanism"] == "partial"
        assert meta["preservedSegment"] == {
            "headUuid": kept_ids[0],
            "anchorUuid": up.summary["uuid"],
            "tailUuid": kept_ids[-1],
        }
        assert "preservedPrefix" not in meta
        assert 0 < meta["messagesSummarized"] < len(lines)
        instruction = last_request_body(emulator)["messages"][-1]["content"][-1]["text"]
        assert "Work Completed" in instruction and "Context for Continuing Work" in instruction
        assert "follow, unchanged" in up.summary["message"]["content"]
        up_view = await client.messages(up_sid)
        assert up_view.boundary_uuid == up.boundary["uuid"]
        assert up.summary["message"]["content"] in _summary_text(up_view.messages[0])
        # The kept part is sent exactly as before the compaction, between the summary and the
        # rehydration attachments (docs/compaction.md#result-order).
        assert up.attachments and "todo list" in json.dumps(up_view.messages[-1])
        kept_count = len(up_view.messages) - 2
        assert _plain(up_view.messages[1:-1]) == _plain(before.messages[-kept_count:])
        assert up.post_compact_tokens < up.pre_compact_tokens

        from_sid = await _open_fixture(client)
        before_from = await client.messages(from_sid)
        # An assistant entry past the middle: when it continues a response written as several
        # entries, the cut moves back to the response's first entry, which is summarized too.
        asked = next(e["uuid"] for e in lines[middle:] if e["type"] == "assistant")
        fr = await client.compact_partial(from_sid, asked, "from")
        assert fr.partial is not None and fr.partial.moved in ("none", "back")
        effective = fr.partial.pivot_uuid
        assert effective is not None and order.index(effective) <= order.index(asked)
        assert lines[order.index(effective)]["type"] == "assistant"
        prefix_ids = [e["uuid"] for e in fr.kept_entries]
        assert prefix_ids == order[: order.index(effective)]
        meta = fr.boundary["compactMetadata"]
        assert meta["preservedPrefix"] == {"headUuid": prefix_ids[0], "tailUuid": prefix_ids[-1]}
        assert "preservedSegment" not in meta
        instruction = last_request_body(emulator)["messages"][-1]["content"][-1]["text"]
        assert "must not be summarized again" in instruction
        from_view = await client.messages(from_sid)
        # The kept prefix leads the view unchanged; the summary comes last.
        # The prefix ends with tool results: the summary (then the attachments) join that user
        # message after its own blocks, so only the request's tail after them changes.
        n = len(from_view.messages)
        assert _plain(from_view.messages[: n - 1]) == _plain(before_from.messages[: n - 1])
        last_kept = _plain(before_from.messages[n - 1 : n])[0]["content"]
        assert _plain(from_view.messages[-1:])[0]["content"][: len(last_kept)] == last_kept
        assert fr.summary["message"]["content"] in _summary_text(from_view.messages[-1])
        assert fr.post_compact_tokens < fr.pre_compact_tokens
        up_status = await client.tokens_status(up_sid)
        from_status = await client.tokens_status(from_sid)

    async with app_emulated(data_dir=data) as client:
        assert (await client.messages(up_sid)).messages == up_view.messages
        assert (await client.messages(from_sid)).messages == from_view.messages
        assert (await client.tokens_status(up_sid)).tokens == up_status.tokens
        assert (await client.tokens_status(from_sid)).tokens == from_status.tokens


def _main_loop_request(view: list[dict[str, Any]]) -> dict[str, Any]:
    """The request that produced the session's last response (an agent's main loop): every
    message before it, with the cache marker on its last block."""
    last_assistant = max(i for i, m in enumerate(view) if m["role"] == "assistant")
    messages = copy.deepcopy(view[:last_assistant])
    for m in messages:
        for b in m["content"]:
            b.pop("cache_control", None)
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return {
        "model": MODEL,
        "max_tokens": 4096,
        "system": SYSTEM,
        "tools": TOOLS,
        "thinking": THINKING,
        "messages": messages,
    }


@pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")
async def test_from_reads_the_main_loops_cache_for_the_kept_prefix(
    h: Harness,
) -> None:
    client, emu = h.client, h.emu
    entries = session_entries(entries=200, tokens=20_000, seed=5)
    sid = await open_session(client, entries)
    view = (await client.messages(sid)).messages
    sdk = emu.async_client(max_retries=0)
    try:
        main = await sdk.messages.create(**_main_loop_request(view))
    finally:
        await sdk.close()
    cached = main.usage.cache_creation_input_tokens + main.usage.cache_read_input_tokens
    assert cached > 10_000

    pivot = _prompt_uuid(entries, len(entries) // 2)
    result = await client.compact_partial(sid, pivot, "from")
    assert result.summarizer == "cacheShared"
    body = last_request_body(emu)
    sent = _plain(body["messages"])
    # The request carries the whole conversation, the kept prefix first and unchanged.
    prefix_messages = _plain(view)[: len(sent) - 1]
    assert sent[: len(sent) - 1] == prefix_messages
    assert emu.message_requests[-1].usage is not None
    usage = emu.message_requests[-1].usage
    # Everything the main loop cached (which contains the kept prefix) is read, not re-sent.
    assert usage["cache_read_input_tokens"] == cached
    assert result.usage is not None and result.usage["cache_read_input_tokens"] == cached
    # The kept prefix lies inside what was read, and leads the view after the compaction
    # unchanged: the main loop's next request reads it from the cache as well.
    after = _plain((await client.messages(sid)).messages)
    main_messages = _plain(_main_loop_request(view)["messages"])
    k = len(after) - 1  # the messages before the one carrying the summary
    assert 0 < k < len(main_messages)
    assert after[:k] == main_messages[:k]
    assert result.kept_entries and result.kept_entries[-1]["uuid"] != pivot


async def test_subagent_session_uses_the_subagent_prompt(h: Harness) -> None:
    client, emu = h.client, h.emu
    entries = session_entries(entries=120, tokens=12_000, seed=3)
    sid = await open_session(client, entries, agentKind="subagent")
    result = await client.compact_partial(sid, _prompt_uuid(entries, 60), "upTo")
    instruction = last_request_body(emu)["messages"][-1]["content"][-1]["text"]
    assert "sub-agent" in instruction and "Task Overview" in instruction
    assert instruction.startswith(prompts.NO_TOOLS_PREAMBLE)
    assert result.partial is not None and result.kept_entries


async def test_bad_pivots_are_refused_and_change_nothing(h: Harness) -> None:
    client, emu = h.client, h.emu
    entries = session_entries(entries=80, tokens=8_000, seed=9)
    sid = await open_session(client, entries)
    before_bytes = await transcript_bytes(client, sid)
    before_view = await client.messages(sid)
    cases: list[tuple[str, str, str]] = [
        ("no-such-uuid", "upTo", p.ErrorCode.PIVOT_NOT_FOUND),
        ("no-such-uuid", "from", p.ErrorCode.PIVOT_NOT_FOUND),
        # Nothing before the very first entry: nothing to summarize.
        (entries[0]["uuid"], "upTo", p.ErrorCode.NOT_ENOUGH_MESSAGES),
    ]
    for pivot, direction, code in cases:
        with pytest.raises(RpcError) as info:
            await client.compact_partial(sid, pivot, direction)
        assert info.value.code == code, (pivot, direction)
        assert pivot in info.value.message
    with pytest.raises(RpcError) as info:
        await client.request(
            p.COMPACT_PARTIAL, {"sessionId": sid, "pivotUuid": entries[5]["uuid"], "direction": "x"}
        )
    assert info.value.code == p.ErrorCode.INVALID_PARAMS
    with pytest.raises(RpcError) as info:
        await client.compact_partial("no-such-session", entries[5]["uuid"], "upTo")
    assert info.value.code == p.ErrorCode.SESSION_NOT_FOUND
    assert emu.message_requests == []
    assert await transcript_bytes(client, sid) == before_bytes
    assert (await client.messages(sid)).messages == before_view.messages

    # A pivot summarized by an earlier compaction is no longer in the context.
    done = await client.compact_partial(sid, _prompt_uuid(entries, 40), "upTo")
    gone = entries[3]["uuid"]
    assert gone not in [e["uuid"] for e in done.kept_entries]
    after_bytes = await transcript_bytes(client, sid)
    with pytest.raises(RpcError) as info:
        await client.compact_partial(sid, gone, "from")
    assert info.value.code == p.ErrorCode.PIVOT_NOT_FOUND
    assert await transcript_bytes(client, sid) == after_bytes
    lines = transcript_lines(await transcript_path(client, sid))
    assert sum(1 for x in lines if x.get("subtype") == "compact_boundary") == 1
