"""Tests for the emulator's Gemini API, driven through Google's own SDK (google-genai) and raw
HTTP where the SDK would hide what is checked."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from google import genai
from google.genai import errors, types

from tests.emulator import Emulator, Reply, ToolUse, api_error, cut_stream, prompt_too_long
from tests.emulator.gemini import (
    VERIFY_OPENING,
    contents_text,
    default_snapshot,
    function_calls,
    gemini_prompt_tokens,
    gemini_request_kind,
    json_for_schema,
    parse_gemini_path,
)
from tests.emulator.script import ApiError
from tests.emulator.tokens import canonical_json, text_tokens

MODEL = "gemini-2.5-flash"
SNAPSHOT_SYSTEM = "You distil the history into a structured XML <state_snapshot>."


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator
    _CLIENTS.clear()


# The clients made, kept alive for the test: a genai.Client closes its HTTP client when it is
# collected, even while its ``models`` is still in use.
_CLIENTS: list[genai.Client] = []


def _client(emu: Emulator, key: str = "test-key") -> genai.Client:
    options = types.HttpOptions(
        base_url=emu.base_url,
        api_version="v1beta",
        retry_options=types.HttpRetryOptions(attempts=1),
    )
    client = genai.Client(api_key=key, http_options=options)
    _CLIENTS.append(client)
    return client


def _post(
    emu: Emulator, path: str, body: Any, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(emu.host, emu.port, timeout=10)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, data, {"content-type": "application/json", **(headers or {})})
    response = conn.getresponse()
    out = response.status, response.read()
    conn.close()
    return out


def _sse(raw: bytes) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data: ") :])
        for line in raw.decode().replace("\r\n", "\n").split("\n")
        if line.startswith("data: ")
    ]


KEY = {"x-goog-api-key": "k"}


def test_generate_content_with_usage_metadata(emu: Emulator) -> None:
    emu.gemini.script(Reply(text="a short answer"))
    response = _client(emu).models.generate_content(
        model=MODEL,
        contents="hello",
        config=types.GenerateContentConfig(system_instruction="be brief"),
    )
    assert response.text == "a short answer"
    assert response.candidates and response.candidates[0].finish_reason == types.FinishReason.STOP
    usage = response.usage_metadata
    assert usage is not None
    prompt = text_tokens(canonical_json({"text": "be brief"})) + text_tokens(
        canonical_json({"text": "hello"})
    )
    assert usage.prompt_token_count == prompt
    assert usage.candidates_token_count == text_tokens("a short answer")
    assert usage.total_token_count == prompt + text_tokens("a short answer")
    (rec,) = emu.gemini.calls()
    assert rec.path == f"/v1beta/models/{MODEL}:generateContent"
    assert rec.headers["x-goog-api-key"] == "test-key" and rec.usage == usage.model_dump(
        by_alias=True, exclude_none=True, mode="json"
    ) | {"promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}


def test_streaming_sends_text_in_pieces_and_usage_last(emu: Emulator) -> None:
    emu.gemini.script(Reply(text="x" * 100, chunk_chars=30))
    chunks = list(_client(emu).models.generate_content_stream(model=MODEL, contents="go"))
    assert "".join(c.text or "" for c in chunks) == "x" * 100
    assert len(chunks) == 4
    assert [c.candidates[0].finish_reason for c in chunks if c.candidates][-1] == "STOP"
    assert all(c.candidates[0].finish_reason is None for c in chunks[:-1] if c.candidates)
    last = chunks[-1].usage_metadata
    assert last is not None and last.candidates_token_count == 25
    assert chunks[0].usage_metadata and chunks[0].usage_metadata.candidates_token_count is None
    (rec,) = emu.gemini.calls("main")
    assert rec.query == "alt=sse" and rec.outcome == "stream"
    assert rec.response_headers["content-type"] == "text/event-stream"


def test_function_calls_and_responses(emu: Emulator) -> None:
    emu.gemini.script(
        Reply(
            text="Running it.",
            tool_uses=[
                ToolUse("run_shell_command", {"command": "ls -la", "description": "list"}),
                ToolUse("mcp_compactd_recall", {"query": "the build"}, id="call-7"),
            ],
        ),
        Reply(text="Done."),
    )
    client = _client(emu)
    tools = [
        types.Tool(
            function_declarations=[
                types.FunctionDeclaration(name="run_shell_command", description="run"),
                types.FunctionDeclaration(name="mcp_compactd_recall", description="recall"),
            ]
        )
    ]
    config = types.GenerateContentConfig(tools=tools)
    chunks = list(
        client.models.generate_content_stream(model=MODEL, contents="list it", config=config)
    )
    calls = [fc for c in chunks for fc in (c.function_calls or [])]
    assert [(c.name, c.args, c.id) for c in calls] == [
        ("run_shell_command", {"command": "ls -la", "description": "list"}, None),
        ("mcp_compactd_recall", {"query": "the build"}, "call-7"),
    ]
    # Each call comes in a chunk of its own, after the text.
    assert [bool(c.function_calls) for c in chunks][-2:] == [True, True]
    history = [
        types.Content(role="user", parts=[types.Part(text="list it")]),
        chunks[0].candidates[0].content,  # the text
        types.Content(role="model", parts=[types.Part(function_call=c) for c in calls]),
        types.Content(
            role="user",
            parts=[
                types.Part.from_function_response(name=c.name, response={"output": "ok"})
                for c in calls
            ],
        ),
    ]
    done = client.models.generate_content(model=MODEL, contents=history, config=config)
    assert done.text == "Done."
    body = emu.gemini.calls()[-1].body
    assert [c["name"] for c in function_calls(body)] == ["run_shell_command", "mcp_compactd_recall"]
    assert body["tools"][0]["functionDeclarations"][0]["name"] == "run_shell_command"


def test_thoughts_are_counted_apart(emu: Emulator) -> None:
    emu.gemini.script(Reply(text="answer", thinking="pondering it"))
    response = _client(emu).models.generate_content(model=MODEL, contents="q")
    parts = response.candidates[0].content.parts  # type: ignore[index,union-attr]
    assert parts is not None and parts[0].thought is True and parts[0].text == "pondering it"
    assert parts[1].text == "answer" and parts[1].thought_signature
    usage = response.usage_metadata
    assert usage is not None and usage.thoughts_token_count == text_tokens("pondering it")
    assert usage.candidates_token_count == text_tokens("answer")


def test_count_tokens_and_model_list(emu: Emulator) -> None:
    client = _client(emu)
    counted = client.models.count_tokens(model=MODEL, contents="some words to count")
    assert counted.total_tokens == text_tokens(canonical_json({"text": "some words to count"}))
    emu.set_context_window("gemini-2.5-pro", 1_048_576)
    model = client.models.get(model="gemini-2.5-pro")
    assert model.input_token_limit == 1_048_576
    names = [m.name for m in client.models.list()]
    assert "models/gemini-2.5-flash" in names


def test_kinds_have_their_own_queues(emu: Emulator) -> None:
    """A side request (here a compression) never takes a reply scripted for the agent."""
    emu.gemini.script(Reply(text="for the agent"))
    emu.gemini.script(Reply(text="<state_snapshot>scripted</state_snapshot>"), kind="compression")
    client = _client(emu)
    snap_config = types.GenerateContentConfig(system_instruction=SNAPSHOT_SYSTEM)
    snap = client.models.generate_content(model=MODEL, contents="summarise", config=snap_config)
    assert snap.text == "<state_snapshot>scripted</state_snapshot>"
    assert client.models.generate_content(model=MODEL, contents="hi").text == "for the agent"
    assert [gemini_request_kind(r.body) for r in emu.gemini.calls()] == ["compression", "main"]


def test_compression_and_verification_get_a_snapshot_by_default(emu: Emulator) -> None:
    client = _client(emu)
    config = types.GenerateContentConfig(system_instruction=SNAPSHOT_SYSTEM)
    history = [
        types.Content(role="user", parts=[types.Part(text="please fix the flaky test in ci")]),
        types.Content(
            role="model",
            parts=[
                types.Part(
                    function_call=types.FunctionCall(
                        name="run_shell_command", args={"command": "pytest -x"}
                    )
                )
            ],
        ),
        types.Content(
            role="user",
            parts=[
                types.Part.from_function_response(
                    name="run_shell_command", response={"output": "1 failed"}
                )
            ],
        ),
        types.Content(role="user", parts=[types.Part(text="Generate a new <state_snapshot>.")]),
    ]
    snap = client.models.generate_content(model=MODEL, contents=history, config=config).text
    assert (
        snap is not None and snap.startswith("<state_snapshot>") and "Emulated snapshot 1" in snap
    )
    assert "run_shell_command x1" in snap and "1 of them user prompts" in snap
    # It quotes none of what it summarises.
    assert "flaky" not in snap and "pytest" not in snap
    verify = [
        *history[:-1],
        types.Content(role="model", parts=[types.Part(text=snap)]),
        types.Content(role="user", parts=[types.Part(text=f"{VERIFY_OPENING} you just made.")]),
    ]
    again = client.models.generate_content(model=MODEL, contents=verify, config=config).text
    assert again == snap
    assert [gemini_request_kind(r.body) for r in emu.gemini.calls()] == [
        "compression",
        "verification",
    ]
    emu.gemini.set_snapshot("<state_snapshot>mine</state_snapshot>")
    assert client.models.generate_content(model=MODEL, contents=history, config=config).text == (
        "<state_snapshot>mine</state_snapshot>"
    )


def test_utility_requests_get_json_that_fits_their_schema(emu: Emulator) -> None:
    """Gemini CLI's router and next-speaker check ask for JSON by a response schema."""
    schema = {
        "type": "OBJECT",
        "properties": {
            "reasoning": {"type": "STRING"},
            "next_speaker": {"type": "STRING", "enum": ["model", "user"]},
            "complexity_score": {"type": "INTEGER", "minimum": 1, "maximum": 100},
        },
    }
    config = types.GenerateContentConfig(
        response_mime_type="application/json", response_json_schema=schema
    )
    got = _client(emu).models.generate_content(model=MODEL, contents="who speaks?", config=config)
    assert json.loads(got.text or "") == {
        "reasoning": "emulated reasoning",
        "next_speaker": "user",
        "complexity_score": 1,
    }
    assert json_for_schema({"type": "ARRAY", "items": {"type": "BOOLEAN"}}) == [False]
    assert json_for_schema({"type": "STRING", "enum": ["flash", "pro"]}, "model_choice") == "flash"


def test_max_output_tokens_cuts_the_reply(emu: Emulator) -> None:
    emu.gemini.script(Reply(text="y" * 400))
    config = types.GenerateContentConfig(max_output_tokens=10)
    got = _client(emu).models.generate_content(model=MODEL, contents="long", config=config)
    assert got.text == "y" * 40
    assert got.candidates and got.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS


def test_errors_in_googles_shape(emu: Emulator) -> None:
    client = _client(emu)
    emu.gemini.script(ApiError(type="rate_limit_error", retry_after=3))
    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(model=MODEL, contents="q")
    assert caught.value.code == 429 and caught.value.status == "RESOURCE_EXHAUSTED"
    details = caught.value.details["error"]["details"]
    assert {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3s"} in details
    emu.gemini.script(api_error())
    with pytest.raises(errors.ServerError) as server:
        client.models.generate_content(model=MODEL, contents="q")
    assert server.value.code == 500 and server.value.status == "INTERNAL"
    emu.gemini.script(prompt_too_long(tokens=2_000_000, maximum=1_048_576))
    with pytest.raises(errors.ClientError) as too_long:
        client.models.generate_content(model=MODEL, contents="q")
    assert too_long.value.message == (
        "The input token count (2000000) exceeds the maximum number of tokens allowed (1048576)."
    )


def test_a_request_over_the_window_is_refused(emu: Emulator) -> None:
    emu.set_context_window(MODEL, 10)
    with pytest.raises(errors.ClientError) as caught:
        _client(emu).models.generate_content(model=MODEL, contents="w " * 100)
    tokens = text_tokens(canonical_json({"text": "w " * 100}))
    assert caught.value.message == (
        f"The input token count ({tokens}) exceeds the maximum number of tokens allowed (10)."
    )


def test_keys(emu: Emulator) -> None:
    status, raw = _post(
        emu, f"/v1beta/models/{MODEL}:generateContent", {"contents": [{"parts": [{"text": "q"}]}]}
    )
    assert status == 403 and json.loads(raw)["error"]["status"] == "PERMISSION_DENIED"
    status, _ = _post(
        emu,
        f"/v1beta/models/{MODEL}:generateContent?key=abc",
        {"contents": [{"parts": [{"text": "q"}]}]},
    )
    assert status == 200
    emu.api_key = "right"
    with pytest.raises(errors.ClientError) as caught:
        _client(emu, key="wrong").models.generate_content(model=MODEL, contents="q")
    assert caught.value.code == 400 and "API key not valid" in (caught.value.message or "")
    assert _client(emu, key="right").models.generate_content(model=MODEL, contents="q").text


def test_history_checks_the_real_api_makes(emu: Emulator) -> None:
    path = f"/v1beta/models/{MODEL}:generateContent"
    call = {"functionCall": {"name": "read_file", "args": {}, "id": "c1"}}
    answer = {"functionResponse": {"name": "read_file", "response": {"output": "x"}, "id": "c1"}}
    cases = {
        "no contents": ({"contents": []}, "contents is not specified"),
        "bad role": ({"contents": [{"role": "system", "parts": [{"text": "q"}]}]}, "valid role"),
        "empty part": ({"contents": [{"role": "user", "parts": [{}]}]}, "oneof field 'data'"),
        "response without a call": (
            {
                "contents": [
                    {"role": "user", "parts": [{"text": "q"}]},
                    {"role": "user", "parts": [answer]},
                ]
            },
            "immediately after a function call turn",
        ),
        "call left unanswered": (
            {
                "contents": [
                    {"role": "user", "parts": [{"text": "q"}]},
                    {
                        "role": "model",
                        "parts": [
                            call,
                            {**call, "functionCall": {**call["functionCall"], "id": "c2"}},
                        ],
                    },
                    {"role": "user", "parts": [answer]},
                ]
            },
            "number of function response parts is equal",
        ),
    }
    for name, (body, message) in cases.items():
        status, raw = _post(emu, path, body, KEY)
        assert status == 400, name
        assert message in json.loads(raw)["error"]["message"], name
    # The same result twice (Gemini CLI 0.61.0 after --resume) answers one call.
    twice = {
        "contents": [
            {"role": "user", "parts": [{"text": "q"}]},
            {"role": "model", "parts": [call]},
            {"role": "user", "parts": [answer, answer]},
        ]
    }
    assert _post(emu, path, twice, KEY)[0] == 200
    assert _post(emu, path, b"{not json", KEY)[0] == 400
    emu.gemini.strict = False
    assert _post(emu, path, cases["call left unanswered"][0], KEY)[0] == 200


def test_stream_faults(emu: Emulator) -> None:
    path = f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    body = {"contents": [{"role": "user", "parts": [{"text": "q"}]}]}
    emu.gemini.script(Reply(text="z" * 96, chunk_chars=24, fault="no_message_stop"))
    status, raw = _post(emu, path, body, KEY)
    chunks = _sse(raw)
    assert status == 200 and len(chunks) == 4
    assert all("finishReason" not in c["candidates"][0] for c in chunks)
    emu.gemini.script(Reply(text="z" * 96, chunk_chars=24, fault="error", fault_after=1))
    chunks = _sse(_post(emu, path, body, KEY)[1])
    assert len(chunks) == 2 and chunks[-1]["error"]["status"] == "UNAVAILABLE"
    emu.gemini.script(cut_stream(after=1, text="z" * 96, chunk_chars=24))
    with pytest.raises(http.client.IncompleteRead):
        _post(emu, path, body, KEY)
    assert emu.gemini.calls()[-1].outcome == "fault:cut"


def test_reset_forgets_gemini_scripts(emu: Emulator) -> None:
    emu.gemini.script(Reply(text="old"))
    emu.gemini.set_snapshot("<state_snapshot>old</state_snapshot>")
    emu.reset()
    assert emu.gemini.pending() == 0
    assert _client(emu).models.generate_content(model=MODEL, contents="new q").text == (
        "Emulated answer to: new q"
    )


def test_reading_helpers() -> None:
    body = {
        "systemInstruction": {"parts": [{"text": "sys"}]},
        "tools": [{"functionDeclarations": [{"name": "f"}]}],
        "contents": [
            {"role": "user", "parts": [{"text": "a"}, {"text": "b"}]},
            {"role": "model", "parts": [{"text": "t", "thought": True}, {"text": "c"}]},
        ],
    }
    assert contents_text(body) == ["ab", "c"] and contents_text(body, "model") == ["c"]
    assert gemini_prompt_tokens(body) == sum(
        text_tokens(canonical_json(x))
        for x in [
            {"name": "f"},
            {"text": "sys"},
            {"text": "a"},
            {"text": "b"},
            body["contents"][1]["parts"][0],
            {"text": "c"},
        ]
    )
    assert parse_gemini_path("/v1beta/models/gemini-2.5-pro:streamGenerateContent") == (
        "gemini-2.5-pro",
        "streamGenerateContent",
    )
    assert parse_gemini_path("/v1beta/models") == (None, None)
    assert parse_gemini_path("/v1/messages") is None
    assert parse_gemini_path("/v1/models") is None  # OpenAI's model list
    assert parse_gemini_path("/v1/models/m:generateContent") == ("m", "generateContent")
    snapshot = default_snapshot({"contents": [{"role": "user", "parts": [{"text": "x"}]}]}, 3)
    assert "Emulated snapshot 3" in snapshot and "0 contents summarised" in snapshot
