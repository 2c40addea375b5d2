"""Tests for the emulator's Chat Completions API, driven through the real openai SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.emulator import (
    Emulator,
    Reply,
    api_error,
    cut_stream,
    mid_stream_error,
    overloaded,
    prompt_too_long,
    rate_limited,
)
from tests.emulator.chat import MESSAGE_OVERHEAD, chat_prompt_tokens
from tests.emulator.tokens import text_tokens

MODEL = "local-model"


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def _client(emu: Emulator, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{emu.base_url}/v1", api_key="test", **kw)


def _ask(text: str = "hello") -> list[dict[str, Any]]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


def _stream(client: openai.OpenAI, **kw: Any) -> tuple[str, str | None, Any]:
    stream = client.chat.completions.create(
        model=MODEL, messages=kw.pop("messages", _ask()), stream=True, **kw
    )
    parts: list[str] = []
    finish = usage = None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    return "".join(parts), finish, usage


def test_non_streaming_reply_with_usage(emu: Emulator) -> None:
    emu.script(Reply(text="a short answer"))
    done = _client(emu).chat.completions.create(model=MODEL, messages=_ask(), max_tokens=50)
    assert done.choices[0].message.content == "a short answer"
    assert done.choices[0].finish_reason == "stop"
    assert done.usage is not None
    assert done.usage.prompt_tokens == text_tokens("be brief") + text_tokens("hello") + (
        2 * MESSAGE_OVERHEAD
    )
    assert done.usage.completion_tokens == text_tokens("a short answer")
    (rec,) = emu.chat_requests
    assert rec.body["max_tokens"] == 50 and rec.headers["authorization"] == "Bearer test"


def test_streaming_reply_and_usage_chunk(emu: Emulator) -> None:
    emu.script(Reply(text="x" * 200))
    text, finish, usage = _stream(
        _client(emu), max_tokens=500, stream_options={"include_usage": True}
    )
    assert (text, finish) == ("x" * 200, "stop")
    assert usage is not None and usage.completion_tokens == 50
    assert emu.chat_requests[0].events[-1] == "done"


def test_streaming_without_include_usage_sends_no_usage(emu: Emulator) -> None:
    _, finish, usage = _stream(_client(emu), max_tokens=5_000)
    assert finish == "stop" and usage is None


def test_the_default_reply_is_a_summary_quoting_the_user(emu: Emulator) -> None:
    text, _, _ = _stream(_client(emu), messages=_ask("please fix the parser"), max_tokens=5_000)
    assert "<summary>" in text and "please fix the parser" in text


def test_max_tokens_cuts_the_reply(emu: Emulator) -> None:
    emu.script(Reply(text="y" * 400))
    text, finish, _ = _stream(_client(emu), max_completion_tokens=10)
    assert (len(text), finish) == (40, "length")


@pytest.mark.parametrize(
    ("server", "code", "fragment"),
    [
        ("openai", "context_length_exceeded", "maximum context length is 1000 tokens"),
        ("llama", "400", "exceeds the available context size (1000 tokens)"),
        ("ollama", None, "the input length exceeds the context length"),
    ],
)
def test_context_length_errors_as_each_server_sends_them(
    emu: Emulator, server: str, code: Any, fragment: str
) -> None:
    emu.chat_server = server
    emu.set_context_window(MODEL, 1_000)
    with pytest.raises(openai.BadRequestError) as info:
        _client(emu).chat.completions.create(model=MODEL, messages=_ask("z" * 8_000), max_tokens=10)
    assert info.value.status_code == 400 and info.value.code == code
    assert fragment in info.value.message
    if server == "llama":
        assert isinstance(info.value.body, dict) and info.value.body["n_ctx"] == 1_000


def test_openai_counts_the_completion_against_the_window(emu: Emulator) -> None:
    emu.set_context_window(MODEL, 1_000)
    prompt = chat_prompt_tokens({"messages": _ask()})
    client = _client(emu)
    client.chat.completions.create(model=MODEL, messages=_ask(), max_tokens=1_000 - prompt)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=_ask(), max_tokens=1_001 - prompt)
    emu.chat_server = "llama"  # llama-server checks the prompt only
    client.chat.completions.create(model=MODEL, messages=_ask(), max_tokens=5_000)


def test_scripted_context_error_names_the_maximum(emu: Emulator) -> None:
    emu.script(prompt_too_long(maximum=77))
    with pytest.raises(openai.BadRequestError) as info:
        _client(emu).chat.completions.create(model=MODEL, messages=_ask(), max_tokens=10)
    assert "maximum context length is 77 tokens" in info.value.message


@pytest.mark.parametrize(
    "fault",
    [rate_limited(retry_after_ms=5), api_error(retry_after_ms=5), overloaded(retry_after_ms=5)],
)
def test_429_and_5xx_are_retried_by_the_sdk(emu: Emulator, fault: Any) -> None:
    emu.script(fault)
    done = _client(emu, max_retries=2).chat.completions.create(
        model=MODEL, messages=_ask(), max_tokens=5_000
    )
    assert done.choices[0].finish_reason == "stop"
    first, second = emu.chat_requests
    assert first.status == fault.http_status and second.status == 200


def test_errors_without_retries_surface_with_their_status(emu: Emulator) -> None:
    emu.set_default(api_error())
    with pytest.raises(openai.InternalServerError) as info:
        _client(emu, max_retries=0).chat.completions.create(
            model=MODEL, messages=_ask(), max_tokens=10
        )
    assert info.value.status_code == 500 and info.value.code == "server_error"


def test_mid_stream_error_and_cut_stream(emu: Emulator) -> None:
    emu.script(mid_stream_error(after=1))
    with pytest.raises(openai.APIError):
        _stream(_client(emu), max_tokens=5_000)
    emu.script(cut_stream(after=1))
    with pytest.raises(openai.APIConnectionError):
        _stream(_client(emu, max_retries=0), max_tokens=5_000)


def test_bad_requests_are_refused(emu: Emulator) -> None:
    with pytest.raises(openai.BadRequestError):
        _client(emu).chat.completions.create(
            model=MODEL, messages=[{"role": "tool", "content": "x"}], max_tokens=10
        )
    assert emu.chat_requests[0].status == 400
