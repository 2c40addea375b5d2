"""Tests for the Messages API emulator, driven through the real anthropic SDK."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest

from tests.emulator import (
    THREAD_PREFIX,
    ApiError,
    Emulator,
    Reply,
    ToolUse,
    api_error,
    authentication_error,
    block_tokens,
    cut_stream,
    empty_reply,
    estimate_tokens,
    mid_stream_error,
    no_message_stop,
    overloaded,
    prompt_blocks,
    prompt_too_long,
    rate_limited,
    text_tokens,
    truncated_stream,
)

pytestmark = pytest.mark.timeout(15)

MODEL = "claude-emulated-1"
REPO_ROOT = Path(__file__).resolve().parents[2]
PTL_RE = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum")


def words(label: str, n_chars: int) -> str:
    """Deterministic filler text of exactly n_chars characters."""
    base = f"{label} lorem ipsum dolor sit amet "
    return (base * (n_chars // len(base) + 1))[:n_chars]


def user(text: str, cache: dict[str, Any] | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if cache is not None:
        block["cache_control"] = cache
    return {"role": "user", "content": [block]}


def assistant(text: str, cache: dict[str, Any] | None = None) -> dict[str, Any]:
    msg = user(text, cache)
    msg["role"] = "assistant"
    return msg


EPH = {"type": "ephemeral"}
EPH_1H = {"type": "ephemeral", "ttl": "1h"}


def tool(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": words(f"tool {name}", 400),
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }


def tokens_of(body: dict[str, Any], upto: int) -> int:
    """Tokens of the first `upto` prompt blocks of body."""
    return sum(b.tokens for b in prompt_blocks(body)[:upto])


def post(
    url: str, body: Any, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], Any]:
    data = json.dumps(body).encode() if not isinstance(body, bytes) else body
    req = urllib.request.Request(
        url,
        data=data,
        method="POST",
        headers={"content-type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            raw = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, raw
    except urllib.error.HTTPError as err:
        raw = err.read()
        hdrs = {k.lower(): v for k, v in err.headers.items()}
        err.close()
        return err.code, hdrs, json.loads(raw)


def usage_of(msg: Any) -> tuple[int, int, int]:
    u = msg.usage
    return u.cache_read_input_tokens, u.cache_creation_input_tokens, u.input_tokens


# --------------------------------------------------------------- lifecycle


def test_binds_only_loopback_and_reports_base_url() -> None:
    with Emulator() as emu:
        assert emu.host == "127.0.0.1"
        assert emu._server is not None and emu._server.socket.getsockname()[0] == "127.0.0.1"
        assert emu.base_url == f"http://127.0.0.1:{emu.port}"
        assert emu.port > 0


def test_stop_closes_port_and_joins_threads_even_mid_stream() -> None:
    emu = Emulator().start()
    port = emu.port
    client = emu.client(max_retries=0)
    try:
        # One idle keep-alive connection ...
        client.messages.create(model=MODEL, max_tokens=50, messages=[user("hi")])
        # ... and one stream stalled between events.
        emu.script(Reply(text=words("slow", 300), chunk_delay=5))
        with client.messages.stream(model=MODEL, max_tokens=500, messages=[user("go")]) as stream:
            first = next(iter(stream))
            assert first.type == "message_start"
            # Returns without waiting for the stalled stream (5 s a chunk, 300 words): the
            # test's timeout would stop a stop that waited.
            emu.stop()
            with pytest.raises(httpx2.TransportError):
                for _ in stream:
                    pass
    finally:
        client.close()
        emu.stop()
    assert emu.live_threads() == []
    assert not [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_fixture_provides_running_emulator(emulator: Emulator) -> None:
    assert emulator.running
    with emulator.client() as client:
        msg = client.messages.create(model=MODEL, max_tokens=100, messages=[user("ping")])
    assert msg.type == "message"
    assert len(emulator.requests) == 1


def test_command_line_server_and_control_endpoints() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.emulator", "--port", str(port)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        base_url = proc.stdout.readline().strip()
        assert base_url == f"http://127.0.0.1:{port}"
        status, _, _ = post(
            f"{base_url}/_emulator/script",
            {"replies": [{"error": {"type": "overloaded_error"}}, {"text": "from cli"}]},
        )
        assert status == 200
        with anthropic.Anthropic(base_url=base_url, api_key="k", max_retries=0) as client:
            with pytest.raises(anthropic.APIStatusError) as info:
                client.messages.create(model=MODEL, max_tokens=50, messages=[user("a")])
            assert info.value.status_code == 529
            msg = client.messages.create(model=MODEL, max_tokens=50, messages=[user("b")])
        assert msg.content[0].text == "from cli"
        with urllib.request.urlopen(f"{base_url}/_emulator/cost", timeout=5) as resp:
            assert json.loads(resp.read())["requests"] == 1
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=5)
        assert proc.returncode == 0
        assert json.loads(err.strip().splitlines()[-1])["requests"] == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


# ---------------------------------------------------------- basic replies


def test_non_streaming_default_reply_reflects_user_messages(emulator: Emulator) -> None:
    messages = [
        user("Please refactor the framing module"),
        assistant("Sure, reading it now."),
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "file body"}],
        },
        user("Also keep the <summary> tags out of logs"),
    ]
    with emulator.client() as client:
        first = client.messages.create(model=MODEL, max_tokens=4000, messages=messages)
        second = client.messages.create(model=MODEL, max_tokens=4000, messages=messages)
    text = first.content[0].text
    assert re.fullmatch(r"<analysis>\n.*\n</analysis>\n\n<summary>\n.*\n</summary>", text, re.S)
    assert '"Please refactor the framing module"' in text
    assert '"Also keep the tags out of logs"' in text  # nested tags are neutralised
    assert "file body" not in text  # tool results are not user messages
    assert text.count("<summary>") == 1
    assert second.content[0].text == text  # deterministic
    assert first.stop_reason == "end_turn"
    assert first.model == MODEL and first.role == "assistant" and first.id.startswith("msg_")
    assert first._request_id == emulator.requests[0].request_id
    body = {"model": MODEL, "max_tokens": 4000, "messages": messages}
    assert first.usage.input_tokens == estimate_tokens(body)
    assert first.usage.output_tokens == text_tokens(text)
    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.cache_creation_input_tokens == 0


def test_request_log_records_method_path_headers_body(emulator: Emulator) -> None:
    before = time.time()
    with emulator.client() as client:
        client.messages.create(model=MODEL, max_tokens=10, messages=[user("logged")], system="sys")
    (rec,) = emulator.requests
    assert rec.method == "POST" and rec.path == "/v1/messages"
    assert rec.headers["authorization"] == "Bearer test"
    assert "anthropic-version" in rec.headers
    assert rec.body["system"] == "sys" and rec.body["messages"][0]["content"][0]["text"] == "logged"
    assert before <= rec.timestamp <= time.time()
    assert rec.status == 200 and rec.response_headers["request-id"] == rec.request_id
    emulator.reset()
    assert emulator.requests == [] and emulator.cost_summary().requests == 0


@pytest.mark.asyncio
async def test_async_stream_helper_text_and_usage(emulator: Emulator) -> None:
    emulator.script(Reply(text="Hello from the emulator, streamed in small pieces.", chunk_chars=5))
    async with emulator.async_client() as client:
        async with client.messages.stream(
            model=MODEL, max_tokens=100, messages=[user("hi")]
        ) as stream:
            pieces = [t async for t in stream.text_stream]
            final = await stream.get_final_message()
    assert len(pieces) == 10
    assert (
        "".join(pieces)
        == final.content[0].text
        == "Hello from the emulator, streamed in small pieces."
    )
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == text_tokens(final.content[0].text)
    assert final.usage.cache_read_input_tokens == 0 and final.usage.cache_creation_input_tokens == 0
    events = emulator.requests[0].events
    assert events[:3] == ["message_start", "ping", "content_block_start"]
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert events.count("ping") >= 2  # interleaved between deltas too


def test_sync_create_stream_true_event_sequence(emulator: Emulator) -> None:
    emulator.script(
        Reply(
            text="Final answer.",
            thinking="Considering the options carefully.",
            tool_uses=[
                ToolUse("read_file", {"path": "compactd/app.py", "lines": [1, 2, 3]}, id="toolu_x")
            ],
            chunk_chars=8,
        )
    )
    with emulator.client() as client:
        stream = client.messages.create(
            model=MODEL, max_tokens=500, messages=[user("go")], stream=True
        )
        events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    start = events[0].message
    assert start.usage.cache_read_input_tokens == 0 and start.usage.cache_creation_input_tokens == 0
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"} == set(deltas)
    blocks = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert blocks == ["thinking", "text", "tool_use"]
    json_parts = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert len(json_parts) > 3
    assert json.loads("".join(json_parts)) == {"path": "compactd/app.py", "lines": [1, 2, 3]}
    assert events[-2].delta.stop_reason == "tool_use"


def test_thinking_and_tool_use_via_stream_helper_and_non_streaming(emulator: Emulator) -> None:
    reply = Reply(
        thinking="Think first.",
        text=None,
        tool_uses=[ToolUse("grep", {"pattern": "TODO", "glob": "**/*.py"})],
        chunk_chars=4,
    )
    emulator.script(reply, reply)
    with emulator.client() as client:
        with client.messages.stream(
            model=MODEL, max_tokens=500, messages=[user("search")]
        ) as stream:
            streamed = stream.get_final_message()
        plain = client.messages.create(model=MODEL, max_tokens=500, messages=[user("search")])
    for msg in (streamed, plain):
        assert [b.type for b in msg.content] == ["thinking", "tool_use"]
        assert msg.content[0].thinking == "Think first."
        assert msg.content[0].signature.startswith("EmuSig")
        assert msg.content[1].name == "grep"
        assert msg.content[1].input == {"pattern": "TODO", "glob": "**/*.py"}
        assert msg.content[1].id.startswith("toolu_")
        assert msg.stop_reason == "tool_use"
    assert streamed.content[0].signature == plain.content[0].signature


def test_empty_reply_and_empty_text(emulator: Emulator) -> None:
    emulator.script(empty_reply(), empty_reply(), Reply(text=""))
    with emulator.client() as client:
        plain = client.messages.create(model=MODEL, max_tokens=50, messages=[user("x")])
        with client.messages.stream(model=MODEL, max_tokens=50, messages=[user("x")]) as stream:
            streamed = stream.get_final_message()
        blank = client.messages.create(model=MODEL, max_tokens=50, messages=[user("x")])
    assert plain.content == [] and streamed.content == []
    assert plain.usage.output_tokens == 0 and streamed.usage.output_tokens == 0
    assert plain.stop_reason == streamed.stop_reason == "end_turn"
    assert [b.text for b in blank.content] == [""]


def test_max_tokens_truncates_text(emulator: Emulator) -> None:
    emulator.script(Reply(text="a" * 400))
    with emulator.client() as client:
        msg = client.messages.create(model=MODEL, max_tokens=10, messages=[user("x")])
    assert msg.content[0].text == "a" * 40
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 10


def test_delays_and_client_timeout(emulator: Emulator) -> None:
    emulator.script(
        Reply(text="late", delay=0.3),
        Reply(text="x" * 40, chunk_chars=10, chunk_delay=0.02),
        Reply(delay=1.0),
    )
    with emulator.client(max_retries=0) as client:
        client.messages.create(model=MODEL, max_tokens=50, messages=[user("x")])
        assert emulator.waits == [0.3]  # served before the reply
        with client.messages.stream(model=MODEL, max_tokens=50, messages=[user("x")]) as stream:
            stream.until_done()
        # The 40 characters came in chunks of 10, each after its pause (the client saw them all).
        chunks = emulator.waits[1:]
        assert len(chunks) >= 4 and set(chunks) == {0.02}
        assert stream.get_final_message().content[0].text == "x" * 40
        with pytest.raises(anthropic.APITimeoutError):
            client.messages.create(model=MODEL, max_tokens=50, messages=[user("x")], timeout=0.2)


# ------------------------------------------------------------ auth, routes


def test_authentication_headers_and_query_string(emulator: Emulator) -> None:
    url = f"{emulator.base_url}/v1/messages"
    body = {"model": MODEL, "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
    status, headers, _ = post(
        url + "?beta=true", body, {"x-api-key": "k1", "anthropic-version": "2023-06-01"}
    )
    assert status == 200 and headers["request-id"].startswith("req_")
    status, _, _ = post(
        url, body, {"authorization": "Bearer k2", "anthropic-version": "1999-01-01"}
    )
    assert status == 200
    status, headers, err = post(url, body)
    assert status == 401
    assert err == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "x-api-key header is required"},
        "request_id": headers["request-id"],
    }
    status, _, err = post(f"{emulator.base_url}/v1/nothing", body, {"x-api-key": "k"})
    assert status == 404 and err["error"]["type"] == "not_found_error"
    status, _, err = post(url, b"{not json", {"x-api-key": "k"})
    assert status == 400 and err["error"]["type"] == "invalid_request_error"
    status, _, err = post(url, {"model": MODEL, "messages": []}, {"x-api-key": "k"})
    assert status == 400 and "max_tokens" in err["error"]["message"]
    with emulator.client() as client:
        beta = client.beta.messages.create(model=MODEL, max_tokens=20, messages=[user("beta")])
        query = client.messages.create(
            model=MODEL, max_tokens=20, messages=[user("q")], extra_query={"beta": "true"}
        )
    assert beta.type == query.type == "message"
    assert emulator.requests[-1].query == "beta=true"
    assert emulator.requests[-1].path == "/v1/messages"


def test_configured_api_key_and_scripted_401() -> None:
    with Emulator(api_key="secret") as emu:
        with emu.client(api_key="wrong") as bad, emu.client(api_key="secret") as good:
            with pytest.raises(anthropic.AuthenticationError):
                bad.messages.create(model=MODEL, max_tokens=20, messages=[user("x")])
            good.messages.create(model=MODEL, max_tokens=20, messages=[user("x")])
            emu.script(authentication_error())
            with pytest.raises(anthropic.AuthenticationError) as info:
                good.messages.create(model=MODEL, max_tokens=20, messages=[user("x")])
        assert info.value.type == "authentication_error"
        assert len(emu.requests) == 3  # 401 is not retried


def test_count_tokens_matches_estimate(emulator: Emulator) -> None:
    body = {
        "model": MODEL,
        "system": [{"type": "text", "text": words("system", 900), "cache_control": EPH}],
        "tools": [tool("read")],
        "messages": [user(words("question", 333)), assistant("ok"), user("next")],
    }
    with emulator.client() as client:
        counted = client.messages.count_tokens(**body)
    expected = estimate_tokens(body)
    assert counted.input_tokens == expected
    assert expected == sum(
        block_tokens(b)
        for b in [*body["tools"], *body["system"]] + [m["content"][0] for m in body["messages"]]
    )
    assert emulator.requests[0].path == "/v1/messages/count_tokens"
    assert emulator.pending == 0 and emulator.cost_summary().requests == 0


# --------------------------------------------------------- errors, retries


def test_sdk_retries_529_then_succeeds(emulator: Emulator) -> None:
    emulator.script(overloaded(retry_after_ms=10), Reply(text="recovered"))
    with emulator.client(max_retries=2) as client:
        msg = client.messages.create(model=MODEL, max_tokens=50, messages=[user("x")])
    assert msg.content[0].text == "recovered"
    first, second = emulator.requests
    assert (first.status, second.status) == (529, 200)
    assert first.outcome == "error:overloaded_error"
    assert (
        first.headers["x-stainless-retry-count"],
        second.headers["x-stainless-retry-count"],
    ) == ("0", "1")


@pytest.mark.asyncio
async def test_async_stream_retries_429_with_retry_after(emulator: Emulator) -> None:
    emulator.script(rate_limited(retry_after=0, retry_after_ms=10), Reply(text="after limit"))
    async with emulator.async_client(max_retries=2) as client:
        async with client.messages.stream(
            model=MODEL, max_tokens=50, messages=[user("x")]
        ) as stream:
            text = await stream.get_final_text()
    assert text == "after limit"
    first, second = emulator.requests
    assert first.status == 429 and second.status == 200
    assert first.response_headers["retry-after"] == "0"
    assert first.response_headers["retry-after-ms"] == "10"


def test_500_retried_until_exhausted(emulator: Emulator) -> None:
    emulator.script(api_error(retry_after_ms=5), times=3)
    with emulator.client(max_retries=2) as client:
        with pytest.raises(anthropic.InternalServerError) as info:
            client.messages.create(model=MODEL, max_tokens=50, messages=[user("x")])
    assert info.value.status_code == 500 and info.value.type == "api_error"
    assert info.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": "Internal server error"},
        "request_id": emulator.requests[-1].request_id,
    }
    assert len(emulator.requests) == 3


@pytest.mark.asyncio
async def test_mid_stream_error_is_not_retried(emulator: Emulator) -> None:
    emulator.script(mid_stream_error(after=3), Reply(text="never reached"))
    async with emulator.async_client(max_retries=2) as client:
        with pytest.raises(anthropic.APIStatusError) as info:
            async with client.messages.stream(
                model=MODEL, max_tokens=500, messages=[user("x")]
            ) as stream:
                await stream.get_final_message()
    assert info.value.status_code == 200
    assert info.value.type == "overloaded_error"
    assert len(emulator.requests) == 1
    assert emulator.requests[0].events.count("content_block_delta") == 3
    assert emulator.requests[0].events[-1] == "error"


def test_mid_stream_error_create_stream_true(emulator: Emulator) -> None:
    emulator.script(mid_stream_error(after=1, error=ApiError(type="api_error", message="boom")))
    seen: list[str] = []
    with emulator.client(max_retries=2) as client:
        with pytest.raises(anthropic.APIStatusError) as info:
            for event in client.messages.create(
                model=MODEL, max_tokens=500, messages=[user("x")], stream=True
            ):
                seen.append(event.type)
    assert info.value.api_message == "boom"
    assert seen.count("content_block_delta") == 1
    assert len(emulator.requests) == 1


@pytest.mark.asyncio
async def test_cut_stream_raises_in_sdk(emulator: Emulator) -> None:
    emulator.script(cut_stream(after=2))
    async with emulator.async_client(max_retries=2) as client:
        # The SDK does not wrap errors raised while iterating a stream body: the
        # transport's RemoteProtocolError ("incomplete chunked read") surfaces as is.
        with pytest.raises(httpx2.RemoteProtocolError):
            async with client.messages.stream(
                model=MODEL, max_tokens=500, messages=[user("x")]
            ) as stream:
                await stream.get_final_message()
    assert len(emulator.requests) == 1


def test_cut_non_streaming_body_is_retried_as_connection_error(emulator: Emulator) -> None:
    emulator.script(cut_stream(), cut_stream())
    with emulator.client(max_retries=1) as client:
        with pytest.raises(anthropic.APIConnectionError):
            client.messages.create(model=MODEL, max_tokens=500, messages=[user("x")])
    assert len(emulator.requests) == 2


def test_stream_without_message_stop(emulator: Emulator) -> None:
    emulator.script(truncated_stream(after=2), no_message_stop())
    with emulator.client() as client:
        with client.messages.stream(model=MODEL, max_tokens=500, messages=[user("x")]) as stream:
            truncated = stream.get_final_message()  # no exception
        with client.messages.stream(model=MODEL, max_tokens=500, messages=[user("x")]) as stream:
            unstopped = stream.get_final_message()
    assert truncated.stop_reason is None
    assert len(truncated.content[0].text) == 2 * 24
    assert "message_stop" not in emulator.requests[0].events
    assert "message_delta" not in emulator.requests[0].events
    # Without message_stop but with message_delta the SDK still reports the stop reason.
    assert unstopped.stop_reason == "end_turn"
    assert emulator.requests[1].events[-1] == "message_delta"
    assert len(emulator.requests) == 2


def test_prompt_too_long_from_context_window(emulator: Emulator) -> None:
    emulator.set_context_window(MODEL, 1000)
    emulator.script(Reply(text="kept for the next request"))
    body = {"model": MODEL, "max_tokens": 100, "messages": [user(words("long", 8000))]}
    with emulator.client(max_retries=2) as client:
        with pytest.raises(anthropic.BadRequestError) as info:
            client.messages.create(**body)
        match = PTL_RE.search(info.value.api_message or "")
        assert match, info.value.api_message
        assert int(match.group(1)) == estimate_tokens(body) > 1000
        assert int(match.group(2)) == 1000
        assert info.value.type == "invalid_request_error"
        assert len(emulator.requests) == 1  # 400 is not retried
        # Other models keep the default window; the scripted reply was not consumed.
        ok = client.messages.create(model="other-model", max_tokens=100, messages=body["messages"])
    assert ok.content[0].text == "kept for the next request"


def test_scripted_prompt_too_long(emulator: Emulator) -> None:
    body = {"model": MODEL, "max_tokens": 100, "messages": [user(words("q", 4000))]}
    n = estimate_tokens(body)
    emulator.script(prompt_too_long(), prompt_too_long(tokens=219898, maximum=200000))
    with emulator.client() as client:
        with pytest.raises(anthropic.BadRequestError) as first:
            client.messages.create(**body)
        with pytest.raises(anthropic.BadRequestError) as second:
            client.messages.create(**body)
    assert first.value.api_message == f"prompt is too long: {n} tokens > {n - n // 10} maximum"
    assert second.value.api_message == "prompt is too long: 219898 tokens > 200000 maximum"


def test_too_many_cache_breakpoints_rejected(emulator: Emulator) -> None:
    messages = [user(f"m{i}", EPH) if i % 2 == 0 else assistant(f"m{i}", EPH) for i in range(5)]
    with emulator.client() as client:
        with pytest.raises(anthropic.BadRequestError) as info:
            client.messages.create(model=MODEL, max_tokens=10, messages=messages)
    assert "A maximum of 4 blocks with cache_control may be provided. Found 5." in str(
        info.value.api_message
    )


# ------------------------------------------------------------ prompt cache


SYSTEM = [{"type": "text", "text": words("system prompt", 6000), "cache_control": EPH}]


def test_repeated_prefix_reads_from_cache(emulator: Emulator) -> None:
    body = {"model": MODEL, "max_tokens": 50, "system": SYSTEM, "messages": [user("what next?")]}
    sys_tokens = tokens_of(body, 1)
    rest = estimate_tokens(body) - sys_tokens
    with emulator.client() as client:
        first = client.messages.create(**body)
        with client.messages.stream(**body) as stream:
            second = stream.get_final_message()
    assert usage_of(first) == (0, sys_tokens, rest)
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == sys_tokens
    assert usage_of(second) == (sys_tokens, 0, rest)
    assert emulator.cache_entries() == 1


def test_changed_tools_invalidate_everything_changed_system_keeps_tools(emulator: Emulator) -> None:
    emulator.set_min_cacheable_tokens(MODEL, 50)
    tools = [tool("read"), {**tool("write"), "cache_control": EPH}]
    body = {
        "model": MODEL,
        "max_tokens": 50,
        "tools": tools,
        "system": SYSTEM,
        "messages": [user("go")],
    }
    prefix = tokens_of(body, 3)
    tools_prefix = tokens_of(body, 2)
    with emulator.client() as client:
        assert usage_of(client.messages.create(**body))[:2] == (0, prefix)
        assert usage_of(client.messages.create(**body))[:2] == (prefix, 0)
        # A different tool list: nothing matches any more.
        more_tools = {**body, "tools": [tool("extra"), *tools]}
        assert usage_of(client.messages.create(**more_tools))[:2] == (0, tokens_of(more_tools, 4))
        # A different system prompt: the tools prefix still hits, system is rewritten.
        new_system = {**body, "system": [{**SYSTEM[0], "text": words("other system", 6000)}]}
        read, written, _ = usage_of(client.messages.create(**new_system))
    assert read == tools_prefix
    assert written == tokens_of(new_system, 3) - tools_prefix


def test_changed_last_message_only_invalidates_what_follows(emulator: Emulator) -> None:
    history = [user(words("first question", 2000), EPH), assistant(words("first answer", 2000))]
    body = {
        "model": MODEL,
        "max_tokens": 50,
        "system": SYSTEM,
        "messages": [*history, user("second question")],
    }
    upto_bp = tokens_of(body, 2)
    with emulator.client() as client:
        assert usage_of(client.messages.create(**body))[:2] == (0, upto_bp)
        changed = {**body, "messages": [*history, user("a different second question")]}
        read, written, inp = usage_of(client.messages.create(**changed))
        assert (read, written) == (upto_bp, 0)
        assert inp == estimate_tokens(changed) - upto_bp
        # Changing the block that holds the breakpoint keeps only the system prefix.
        edited = {
            **body,
            "messages": [user(words("edited question", 2000), EPH), *body["messages"][1:]],
        }
        read, written, _ = usage_of(client.messages.create(**edited))
    assert read == tokens_of(edited, 1)
    assert written == tokens_of(edited, 2) - tokens_of(edited, 1)


def test_lookback_finds_previous_breakpoint_within_20_blocks(emulator: Emulator) -> None:
    turn1 = [user(words("u1", 5000)), assistant("a1"), user("u2", EPH)]
    body1 = {"model": MODEL, "max_tokens": 50, "messages": turn1}
    turn2 = [user(words("u1", 5000)), assistant("a1"), user("u2"), assistant("a2"), user("u3", EPH)]
    body2 = {"model": MODEL, "max_tokens": 50, "messages": turn2}
    far = [*turn2[:-1], user("u3")]
    for i in range(11):
        far += [assistant(f"x{i}"), user(f"y{i}")]
    far[-1] = user("y10", EPH)
    body3 = {"model": MODEL, "max_tokens": 50, "messages": far}
    with emulator.client() as client:
        assert usage_of(client.messages.create(**body1)) == (0, estimate_tokens(body1), 0)
        assert usage_of(client.messages.create(**body2)) == (
            estimate_tokens(body1),
            tokens_of(body2, 5) - estimate_tokens(body1),
            0,
        )
        # 22 blocks after the last cached point: beyond the lookback, so a miss.
        assert usage_of(client.messages.create(**body3))[:2] == (0, estimate_tokens(body3))


def test_below_minimum_length_nothing_is_cached(emulator: Emulator) -> None:
    small = [{"type": "text", "text": words("short", 2000), "cache_control": EPH}]  # ~500 tokens
    body = {"model": MODEL, "max_tokens": 50, "system": small, "messages": [user("hi")]}
    with emulator.client() as client:
        assert usage_of(client.messages.create(**body)) == (0, 0, estimate_tokens(body))
        assert usage_of(client.messages.create(**body)) == (0, 0, estimate_tokens(body))
        assert emulator.cache_entries() == 0
        emulator.set_min_cacheable_tokens(MODEL, 256)
        assert usage_of(client.messages.create(**body))[:2] == (0, tokens_of(body, 1))


def test_ttl_expiry_with_advanced_clock(emulator: Emulator) -> None:
    body = {"model": MODEL, "max_tokens": 50, "system": SYSTEM, "messages": [user("hi")]}
    long_body = {**body, "system": [{**SYSTEM[0], "cache_control": EPH_1H}]}
    n = tokens_of(body, 1)
    with emulator.client() as client:
        assert usage_of(client.messages.create(**body))[:2] == (0, n)
        emulator.advance_time(299)
        assert usage_of(client.messages.create(**body))[:2] == (n, 0)  # a hit refreshes the TTL
        emulator.advance_time(299)
        assert usage_of(client.messages.create(**body))[:2] == (n, 0)
        emulator.advance_time(301)
        assert usage_of(client.messages.create(**body))[:2] == (0, n)

        emulator.clear_cache()
        first = client.messages.create(**long_body)
        assert first.usage.cache_creation.ephemeral_1h_input_tokens == n
        assert first.usage.cache_creation.ephemeral_5m_input_tokens == 0
        emulator.advance_time(3000)
        assert usage_of(client.messages.create(**long_body))[:2] == (n, 0)
        emulator.advance_time(3601)
        assert usage_of(client.messages.create(**long_body))[:2] == (0, n)


def test_injected_clock_and_cost_summary() -> None:
    now = [1000.0]
    with Emulator(clock=lambda: now[0]) as emu:
        body = {"model": MODEL, "max_tokens": 50, "system": SYSTEM, "messages": [user("hi")]}
        long_body = {**body, "system": [{**SYSTEM[0], "cache_control": EPH_1H}], "model": "m2"}
        n = tokens_of(body, 1)
        rest = estimate_tokens(body) - n
        emu.script(Reply(text="a" * 40), Reply(text="b" * 80), Reply(text="c" * 4))
        with emu.client() as client:
            client.messages.create(**body)  # 5m write
            client.messages.create(**body)  # read
            now[0] += 301
            client.messages.create(**long_body)  # 1h write (other model: own cache)
            emu.script(api_error(), times=1)
            with pytest.raises(anthropic.InternalServerError):
                client.with_options(max_retries=0).messages.create(**body)
        cost = emu.cost_summary()
    assert cost.requests == 3  # errors are not billed
    assert cost.cache_creation_5m_input_tokens == n
    assert cost.cache_creation_1h_input_tokens == n
    assert cost.cache_read_input_tokens == n
    assert cost.input_tokens == 3 * rest
    assert cost.output_tokens == 10 + 20 + 1
    assert cost.billed_equivalent_input_tokens == pytest.approx(
        3 * rest + 0.1 * n + 1.25 * n + 2 * n
    )
    assert cost.as_dict()["cache_creation_input_tokens"] == 2 * n


def test_set_default_callable(emulator: Emulator) -> None:
    emulator.set_default(lambda rec: Reply(text=f"echo {len(rec.body['messages'])}"))
    with emulator.client() as client:
        msg = client.messages.create(
            model=MODEL, max_tokens=50, messages=[user("a"), assistant("b"), user("c")]
        )
    assert msg.content[0].text == "echo 3"


def test_request_kind_tells_a_summary_from_an_agent_turn() -> None:
    from compactd.core.prompts import compact_prompt
    from tests.emulator import request_kind

    turn = [user("fix the parser"), assistant("looking")]
    # compactd's instruction rides as the last text block of the last user message.
    summary = [*turn, {"role": "user", "content": [{"type": "text", "text": "more"}]}]
    summary[-1]["content"].append({"type": "text", "text": compact_prompt("full")})
    results = [
        *turn,
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
        },
    ]
    assert request_kind({"messages": summary}) == "summary"
    assert request_kind(
        {"messages": [{"role": "user", "content": compact_prompt("subagent")}]}
    ) == ("summary")
    assert request_kind({"messages": [*turn, user("and the lexer")]}) == "main"
    assert request_kind({"messages": results}) == "main"
    assert request_kind({"messages": []}) == "main"


def test_latency_delays_only_its_kind(emulator: Emulator) -> None:
    from compactd.core.prompts import compact_prompt

    with pytest.raises(ValueError):
        emulator.set_latency("extraction", 1.0)
    emulator.set_latency("summary", 0.3)
    with emulator.client() as client:
        client.messages.create(model=MODEL, max_tokens=50, messages=[user("hello")])
        assert emulator.waits == []  # the agent's own request: no latency
        client.messages.create(
            model=MODEL, max_tokens=50, messages=[user("hello\n\n" + compact_prompt("full"))]
        )
        assert emulator.waits == [0.3]  # the summary request waited its latency
    assert emulator.latency("summary") == 0.3 and emulator.latency("main") == 0.0
    emulator.reset()
    assert emulator.latency("summary") == 0.0


def test_hold_keeps_only_its_kind_waiting_until_released(emulator: Emulator) -> None:
    from compactd.core.prompts import compact_prompt

    with pytest.raises(ValueError):
        emulator.hold("extraction")
    emulator.hold("summary")
    assert emulator.held("summary") and not emulator.held("main")
    summary = [user("hello\n\n" + compact_prompt("full"))]
    done = threading.Event()
    with emulator.client() as client:
        client.messages.create(model=MODEL, max_tokens=50, messages=[user("hello")])

        def ask() -> None:
            client.messages.create(model=MODEL, max_tokens=50, messages=summary)
            done.set()

        asker = threading.Thread(target=ask)
        asker.start()
        # The summary request is received and recorded at once; its reply waits.
        deadline = time.monotonic() + 20
        while len(emulator.message_requests) < 2:
            assert time.monotonic() < deadline, "the held request never arrived"
            time.sleep(0.01)
        assert not done.is_set()
        emulator.release("summary")
        asker.join(20)
        assert done.is_set() and not emulator.held("summary")
        # Released, later summaries are answered at once; a reset lets held replies go too.
        client.messages.create(model=MODEL, max_tokens=50, messages=summary)
    emulator.hold("summary")
    emulator.reset()
    assert not emulator.held("summary")
