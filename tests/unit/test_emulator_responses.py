"""Tests for the emulator's Responses API (tests/emulator/responses.py), driven through the real
openai SDK, and by raw HTTP where the SDK would hide what was sent."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.emulator import Emulator, Reply, ToolUse, cut_stream, iter_sse, rate_limited
from tests.emulator.responses import (
    COMPACTION_PROMPT_OPENING,
    CustomToolCall,
    ToolSearchCall,
    add_file_patch,
    apply_patch,
    codex_request_kind,
    exec_command,
    mcp_call,
    responses_prompt_tokens,
    update_file_patch,
)
from tests.emulator.script import ApiError, mid_stream_error, prompt_too_long, truncated_stream
from tests.emulator.tokens import text_tokens

MODEL = "gpt-emu"


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def _client(emu: Emulator, **kw: Any) -> openai.OpenAI:
    kw.setdefault("max_retries", 0)
    return openai.OpenAI(base_url=f"{emu.base_url}/v1", api_key="test", **kw)


def _raw(emu: Emulator, body: Any, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"{emu.base_url}/v1/responses",
        data=json.dumps(body).encode(),
        headers={"authorization": "Bearer test", "content-type": "application/json",
                 **(headers or {})},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_streamed_text_with_reasoning_through_the_sdk(emu: Emulator) -> None:
    emu.script(Reply(text="the answer is 42", thinking="let me think"))
    with _client(emu).responses.stream(model=MODEL, input="what is it?") as stream:
        names = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output_text == "the answer is 42"
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.output[0].summary[0].text == "let me think"
    assert final.output[0].encrypted_content
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"
    assert (
        "response.output_text.delta" in names and "response.reasoning_summary_text.delta" in names
    )
    usage = final.usage
    assert usage is not None and usage.input_tokens == responses_prompt_tokens(
        {"input": "what is it?"}
    )
    assert usage.output_tokens == text_tokens("the answer is 42") + text_tokens("let me think")
    assert usage.output_tokens_details.reasoning_tokens == text_tokens("let me think")
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    (rec,) = emu.responses_requests
    assert rec.body["input"] == "what is it?" and rec.events[-1] == "response.completed"


def test_tool_calls_as_codex_gets_them(emu: Emulator) -> None:
    patch = add_file_patch("notes.txt", "alpha\nbeta")
    emu.script(
        Reply(
            text=None,
            tool_uses=[
                exec_command("ls -la", workdir="/tmp"),
                apply_patch(patch),
                mcp_call("compactd", "recall", {"query": "kiwi"}),
                ToolUse("view_image", {"path": "a.png"}, id="call_fixed"),
                ToolSearchCall("recall", limit=3),
            ],
        )
    )
    stream = _client(emu).responses.create(model=MODEL, input="go", stream=True)
    events = list(stream)
    final = events[-1].response
    shell, edit, recall, image, search = final.output
    assert (shell.type, shell.name, json.loads(shell.arguments)) == (
        "function_call", "exec_command", {"cmd": "ls -la", "workdir": "/tmp"},
    )  # fmt: skip
    assert (edit.type, edit.name, edit.input) == ("custom_tool_call", "apply_patch", patch)
    assert (recall.name, recall.namespace, json.loads(recall.arguments)) == (
        "recall", "mcp__compactd", {"query": "kiwi"},
    )  # fmt: skip
    assert image.call_id == "call_fixed" and recall.call_id != shell.call_id
    assert search.type == "tool_search_call"
    # Arguments and inputs stream as deltas that add up to the whole.
    args = "".join(
        e.delta for e in events if e.type == "response.function_call_arguments.delta"
        and e.output_index == 0
    )  # fmt: skip
    assert args == shell.arguments
    typed = "".join(e.delta for e in events if e.type == "response.custom_tool_call_input.delta")
    assert typed == patch
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert update_file_patch("a", "x", "y").startswith("*** Begin Patch\n*** Update File: a\n")


def test_raw_stream_names_each_event_and_numbers_it(emu: Emulator) -> None:
    emu.script(Reply(text="hi", tool_uses=[CustomToolCall("apply_patch", "*** Begin Patch\n")]))
    status, raw = _raw(emu, {"model": MODEL, "input": [], "stream": True})
    assert status == 200
    events = list(iter_sse(raw))
    assert all(name == data["type"] for name, data in events)
    added = [d["item"] for n, d in events if n == "response.output_item.added"]
    assert [i["status"] for i in added] == ["in_progress", "in_progress"]
    assert added[0]["content"] == [] and added[1]["input"] == ""
    done = [d["item"] for n, d in events if n == "response.output_item.done"]
    assert done[0]["content"][0]["text"] == "hi" and done[1]["status"] == "completed"
    assert emu.responses_requests[0].headers["content-type"] == "application/json"


def test_non_streaming_response_object(emu: Emulator) -> None:
    emu.script(Reply(text="plain"))
    response = _client(emu).responses.create(model=MODEL, input="hello")
    assert response.status == "completed" and response.output_text == "plain"
    assert emu.responses_requests[0].outcome == "message"


def test_cached_tokens_for_a_shared_prefix(emu: Emulator) -> None:
    history = [{"role": "user", "content": "x" * 6000}]
    client = _client(emu)
    first = client.responses.create(model=MODEL, input=history, prompt_cache_key="k")
    assert first.usage is not None and first.usage.input_tokens_details.cached_tokens == 0
    longer = [*history, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "y"}]
    second = client.responses.create(model=MODEL, input=longer, prompt_cache_key="k")
    assert second.usage is not None
    cached = second.usage.input_tokens_details.cached_tokens
    shared = responses_prompt_tokens({"input": history})
    # In steps of 128 from 1024 on, never more than the shared prefix.
    assert 1024 <= cached <= shared and (cached - 1024) % 128 == 0 and shared - cached < 128
    other = client.responses.create(model=MODEL, input=longer, prompt_cache_key="other")
    assert other.usage is not None and other.usage.input_tokens_details.cached_tokens == 0
    assert emu.cost_summary().cache_read_input_tokens == cached


def test_compaction_requests_are_recognised(emu: Emulator) -> None:
    compaction = {
        "model": MODEL,
        "stream": True,
        "tools": [],
        "input": [
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "<environment_context>cwd</environment_context>"}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "fix the parser in src/parse.py"}]},
            {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "c"},
            {"type": "function_call_output", "call_id": "c", "output": "ok"},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": f"{COMPACTION_PROMPT_OPENING}. Create a summary."}]},
        ],
    }  # fmt: skip
    meta = {"request_kind": "compaction", "compaction": {"implementation": "responses"}}
    _raw(emu, compaction, {"x-codex-turn-metadata": json.dumps(meta)})
    _raw(emu, compaction)  # no header: the body tells
    _raw(emu, {**compaction, "tools": [{"type": "function", "name": "exec_command"}]})
    turn = {"request_kind": "turn"}
    _raw(emu, compaction, {"x-codex-turn-metadata": json.dumps(turn)})
    kinds = [codex_request_kind(r) for r in emu.responses_requests]
    assert kinds == ["compaction", "compaction", "turn", "turn"]
    # The default reply is the derived summary of what the user asked, without Codex's own
    # context messages or its compaction prompt.
    events = list(iter_sse(_raw(emu, compaction)[1]))
    text = events[-1][1]["response"]["output"][0]["content"][0]["text"]
    assert "fix the parser in src/parse.py" in text
    assert "environment_context" not in text and COMPACTION_PROMPT_OPENING not in text


def test_a_held_compaction_waits_for_release(emu: Emulator) -> None:
    emu.hold("summary")
    body = {"model": MODEL, "input": [{"role": "user", "content": COMPACTION_PROMPT_OPENING}]}
    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(_raw(emu, body)[0]))
    worker.start()
    # The held request is recorded when it arrives, before it is held (a guard, not a measure).
    deadline = time.monotonic() + 30
    while not emu.responses_requests and time.monotonic() < deadline:
        time.sleep(0.01)
    _raw(emu, {"model": MODEL, "input": "a turn goes on"})  # a turn is not held
    assert result == [] and len(emu.responses_requests) == 2
    emu.release("summary")
    worker.join(30)
    assert result == [200]


def test_errors_carry_the_api_error_object(emu: Emulator) -> None:
    emu.script(rate_limited(retry_after=1, retry_after_ms=5), ApiError(type="overloaded_error"))
    status, raw = _raw(emu, {"model": MODEL, "input": "x"})
    answer = json.loads(raw)
    assert status == 429 and answer["error"]["code"] == "rate_limit_exceeded"
    assert emu.responses_requests[0].response_headers["retry-after-ms"] == "5"
    with pytest.raises(openai.InternalServerError) as caught:
        _client(emu).responses.create(model=MODEL, input="x")
    assert caught.value.status_code == 529
    status, raw = _raw(emu, {"input": "no model"})
    assert status == 400 and json.loads(raw)["error"]["param"] == "model"


def test_a_request_larger_than_the_window(emu: Emulator) -> None:
    emu.set_context_window(MODEL, 100)
    big = {"model": MODEL, "input": "z" * 2000}
    status, raw = _raw(emu, big)
    assert status == 400 and json.loads(raw)["error"]["code"] == "context_length_exceeded"
    status, raw = _raw(emu, {**big, "stream": True})
    events = list(iter_sse(raw))
    assert status == 200 and events[-1][0] == "response.failed"
    assert events[-1][1]["response"]["error"]["code"] == "context_length_exceeded"
    emu.script(prompt_too_long())
    status, raw = _raw(emu, {"model": MODEL, "input": "small"})
    assert status == 400 and json.loads(raw)["error"]["code"] == "context_length_exceeded"


def test_stream_faults(emu: Emulator) -> None:
    emu.script(
        mid_stream_error(after=1, text="abcdefghijklmnopqrstuvwxyz" * 4),
        truncated_stream(after=1, text="abcdefghijklmnopqrstuvwxyz" * 4),
        cut_stream(after=1, text="abcdefghijklmnopqrstuvwxyz" * 4),
    )
    body = {"model": MODEL, "input": "x", "stream": True}
    events = list(iter_sse(_raw(emu, body)[1]))
    assert events[-1][0] == "response.failed"
    assert events[-1][1]["response"]["error"]["code"] == "server_error"
    events = list(iter_sse(_raw(emu, body)[1]))
    assert events[-1][0] == "response.output_text.delta"
    with pytest.raises(openai.APIConnectionError):
        list(_client(emu).responses.create(model=MODEL, input="x", stream=True))
    assert [r.outcome for r in emu.responses_requests] == [
        "fault:error", "fault:truncate", "fault:cut",
    ]  # fmt: skip


def test_max_output_tokens_makes_it_incomplete(emu: Emulator) -> None:
    emu.script(Reply(text="w" * 400))
    response = _client(emu).responses.create(model=MODEL, input="x", max_output_tokens=20)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "w" * 80
