"""The emulator's Chat Completions API: ``POST /v1/chat/completions`` as OpenAI and the servers
that imitate it (Ollama, vLLM, llama-server, LM Studio) answer it.

The same script drives it as the Messages API: a ``Reply`` becomes a completion (streamed as
``chat.completion.chunk`` events ending in ``data: [DONE]``, with the usage in a last chunk
when ``stream_options.include_usage`` asks for it), an ``ApiError`` an error object
``{"error": {"message", "type", "param", "code"}}``. A request larger than the model's context
window (``Emulator.set_context_window``) is refused with the context-length error of the
server ``Emulator.chat_server`` names:

* ``"openai"``: 400, code ``context_length_exceeded``, "This model's maximum context length is
  N tokens. However, you requested M tokens (P in the messages, O in the completion)...";
  the prompt and ``max_tokens`` together must fit.
* ``"llama"``: llama-server's 400 ``exceed_context_size_error`` with ``n_prompt_tokens`` and
  ``n_ctx``; only the prompt must fit.
* ``"ollama"``: 400 "the input length exceeds the context length"; only the prompt must fit.

Token rule: a message costs ``text_tokens(content)`` plus ``MESSAGE_OVERHEAD``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .script import DEFAULT, ApiError, Reply, default_summary, request_kind
from .tokens import text_tokens

if TYPE_CHECKING:
    from .server import Emulator, _Exchange

__all__ = ["CHAT_PATH", "CHAT_SERVERS", "MESSAGE_OVERHEAD", "chat_prompt_tokens", "context_error"]

CHAT_PATH = "/v1/chat/completions"
CHAT_SERVERS = ("openai", "llama", "ollama")
# Tokens a message costs beside its text (the role and the chat template's markers).
MESSAGE_OVERHEAD = 4

_ERROR_TYPES = {
    "rate_limit_error": ("rate_limit_exceeded", "requests"),
    "authentication_error": ("invalid_api_key", "invalid_request_error"),
    "overloaded_error": ("server_overloaded", "server_error"),
    "api_error": ("server_error", "server_error"),
}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def chat_prompt_tokens(body: Mapping[str, Any]) -> int:
    """The prompt's tokens by the emulator's rule."""
    return sum(
        text_tokens(_text(m.get("content"))) + MESSAGE_OVERHEAD
        for m in body.get("messages") or []
        if isinstance(m, Mapping)
    )


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def context_error(server: str, prompt: int, output: int, window: int) -> tuple[int, dict[str, Any]]:
    """The status and error object ``server`` answers a request too large for ``window``."""
    if server == "llama":
        return 400, {
            "code": 400,
            "message": f"request ({prompt} tokens) exceeds the available context size "
            f"({window} tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": prompt,
            "n_ctx": window,
        }
    if server == "ollama":
        return 400, {
            "message": "the input length exceeds the context length",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    return 400, {
        "message": f"This model's maximum context length is {window} tokens. However, you "
        f"requested {prompt + output} tokens ({prompt} in the messages, {output} in the "
        "completion). Please reduce the length of the messages or completion.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }


def _too_large(emu: Emulator, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]] | None:
    prompt = chat_prompt_tokens(body)
    output = _max_tokens(body) or 0
    window = emu.context_window(str(body.get("model")))
    counted = prompt + output if emu.chat_server == "openai" else prompt
    if counted <= window:
        return None
    return context_error(emu.chat_server, prompt, output, window)


def _error_object(err: ApiError, body: Mapping[str, Any], emu: Emulator) -> tuple[int, Any]:
    if err.prompt_too_long:
        prompt = err.tokens if err.tokens is not None else chat_prompt_tokens(body)
        window = err.maximum if err.maximum is not None else max(1, prompt - (err.over_by or 1))
        return context_error(emu.chat_server, prompt, _max_tokens(body) or 0, window)
    code, kind = _ERROR_TYPES.get(err.type, (err.type, err.type))
    return err.http_status, {"message": err.text(), "type": kind, "param": None, "code": code}


def _validate(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty array"
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or m.get("role") not in ("system", "user", "assistant"):
            return f"messages[{i}].role must be 'system', 'user' or 'assistant'"
    mt = _max_tokens(body)
    if mt is not None and mt < 1:
        return "max_tokens must be at least 1"
    return None


def _send_error(
    emu: Emulator, x: _Exchange, status: int, error: Mapping[str, Any], err: ApiError | None = None
) -> None:
    headers: dict[str, str] = {}
    if err is not None:
        if err.delay:
            emu._wait(err.delay)
        if err.retry_after is not None:
            headers["retry-after"] = f"{err.retry_after:g}"
        if err.retry_after_ms is not None:
            headers["retry-after-ms"] = f"{err.retry_after_ms:g}"
        headers.update(err.headers)
    x.rec.outcome = f"error:{error.get('type')}"
    emu._send_json(x, status, {"error": dict(error)}, headers)


def handle_chat(emu: Emulator, x: _Exchange, seq: int) -> None:
    """Answer one ``POST /v1/chat/completions``."""
    body = x.rec.body
    problem = _validate(body)
    if problem is not None:
        _send_error(
            emu,
            x,
            400,
            {"message": problem, "type": "invalid_request_error", "param": None, "code": None},
        )
        return
    item: Any
    with emu._lock:
        too_large = (
            None if emu._queue and isinstance(emu._queue[0], ApiError) else _too_large(emu, body)
        )
        if too_large is None:
            item = emu._queue.popleft() if emu._queue else emu._default
    if too_large is not None:
        _send_error(emu, x, *too_large)
        return
    if callable(item) and not isinstance(item, (Reply, ApiError)):
        item = item(x.rec)
    if isinstance(item, ApiError):
        status, error = _error_object(item, body, emu)
        _send_error(emu, x, status, error, item)
        return
    _reply(emu, x, seq, body, item)


def _reply(emu: Emulator, x: _Exchange, seq: int, body: dict[str, Any], reply: Reply) -> None:
    text = reply.text
    if text is DEFAULT:
        text = default_summary(body, max_quotes=emu.summary_max_quotes)
    text = "" if text is None or reply.empty else str(text)
    limit = _max_tokens(body)
    finish = reply.stop_reason or "stop"
    if limit is not None and text_tokens(text) > limit:
        text, finish = text[: limit * 4], "length"
    usage = {
        "prompt_tokens": chat_prompt_tokens(body),
        "completion_tokens": reply.output_tokens
        if reply.output_tokens is not None
        else text_tokens(text),
    }
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    x.rec.usage = usage
    kind = request_kind(body)
    emu._pass_hold(kind)
    delay = reply.delay + emu.latency(kind)
    if delay:
        emu._wait(delay)
    ident = f"chatcmpl-emu{seq:08d}"
    created = int(time.time())
    if body.get("stream"):
        _stream(emu, x, ident, created, body, text, finish, usage, reply)
        return
    if reply.fault == "error":
        status, error = _error_object(reply.fault_error or ApiError(type="api_error"), body, emu)
        _send_error(emu, x, status, error)
        return
    completion = {
        "id": ident,
        "object": "chat.completion",
        "created": created,
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
        ],
        "usage": usage,
    }
    x.rec.outcome = "message"
    emu._send_json(x, 200, completion)


def _stream(
    emu: Emulator,
    x: _Exchange,
    ident: str,
    created: int,
    body: Mapping[str, Any],
    text: str,
    finish: str,
    usage: dict[str, Any],
    reply: Reply,
) -> None:
    from .server import _Abort, _chunks

    h = x.handler
    emu._start(x, 200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"})

    def emit(payload: Any) -> None:
        data = f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode()
        h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        x.rec.events.append("done" if payload == "[DONE]" else "chunk")

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": body["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    x.rec.outcome = f"fault:{reply.fault}" if reply.fault else "stream"
    emit(chunk({"role": "assistant", "content": ""}))
    for sent, part in enumerate(_chunks(text, reply.chunk_chars or emu.chunk_chars)):
        if reply.fault in ("error", "cut", "truncate") and sent == reply.fault_after:
            if reply.fault == "cut":
                raise _Abort()
            if reply.fault == "error":
                _, error = _error_object(reply.fault_error or ApiError(type="api_error"), body, emu)
                emit({"error": error})
            h.wfile.write(b"0\r\n\r\n")
            return
        if reply.chunk_delay:
            emu._wait(reply.chunk_delay)
        emit(chunk({"content": part}))
    if reply.fault != "no_message_stop":
        emit(chunk({}, finish))
    options = body.get("stream_options")
    if isinstance(options, Mapping) and options.get("include_usage"):
        emit({**chunk({}), "choices": [], "usage": usage})
    emit("[DONE]")
    h.wfile.write(b"0\r\n\r\n")
