"""The emulator's OpenAI Responses API: ``POST /v1/responses`` as Codex CLI 0.171.0 uses it.

The same script drives it as the Messages API (``Emulator.script``, ``Emulator.set_default``):

* a ``Reply`` becomes a response whose output is, in order, a ``reasoning`` item when
  ``thinking`` is set (its summary text, with an opaque ``encrypted_content``), a ``message``
  with one ``output_text`` part, then one item per tool call. ``Reply.tool_uses`` takes
  ``ToolUse`` (a ``function_call`` with ``input`` as its JSON ``arguments``), ``FunctionCall``
  (the same with an optional ``namespace``: an MCP tool is called as ``{"type":
  "function_call", "name": "recall", "namespace": "mcp__compactd"}``) and ``CustomToolCall``
  (a freeform tool such as ``apply_patch``: a ``custom_tool_call`` whose ``input`` is the raw
  text). ``exec_command``, ``apply_patch`` and ``mcp_call`` build the calls Codex's tools take.
  ``text=DEFAULT`` gives the derived summary when there is no tool call, no message when there
  are.
* an ``ApiError`` becomes an HTTP error ``{"error": {"message", "type", "param", "code"}}``
  with its ``retry-after`` headers.

A stream is the event sequence the API sends (each event named in its ``event:`` line and its
``type``, numbered by ``sequence_number``): ``response.created``, ``response.in_progress``,
then per output item ``response.output_item.added``, its deltas (``response.output_text.delta``
inside ``response.content_part.added``/``.done``, ``response.function_call_arguments.delta``,
``response.custom_tool_call_input.delta``, ``response.reasoning_summary_text.delta``), their
``.done`` events and ``response.output_item.done``; last ``response.completed`` with the whole
response and its usage (``input_tokens`` with ``input_tokens_details.cached_tokens``,
``output_tokens`` with ``output_tokens_details.reasoning_tokens``, ``total_tokens``), or
``response.incomplete`` when ``max_output_tokens`` cut the output. Without ``"stream": true``
the response object is the body.

Faults (``Reply.fault``, after ``fault_after`` deltas): ``"error"`` sends ``response.failed``
with the error's code (``fault_error``; a ``prompt_too_long`` error is
``context_length_exceeded``), ``"cut"`` closes the socket, ``"truncate"`` ends the body there,
``"no_message_stop"`` sends everything but the final ``response.completed``. A request larger
than the model's context window (``Emulator.set_context_window``) fails the same way as
``"error"`` with ``context_length_exceeded`` (HTTP 400 when not streaming).

Token rule (``responses_prompt_tokens``): ``instructions``, each tool and each input item (a
string ``input`` is one item) costs ``ceil(len(canonical_json(x)) / 4)``. Caching is the API's
automatic prefix cache: a request whose leading blocks (same model and ``prompt_cache_key``)
match an earlier request's reads that prefix, in steps of 128 tokens from 1024 on
(``cached_tokens``); nothing is billed for writing.

Codex's requests (``codex_request_kind``): its ``x-codex-turn-metadata`` header is JSON whose
``request_kind`` is ``"turn"`` for the agent's own sampling and ``"compaction"`` for its
summary request (a plain request with no tools ending with Codex's compaction prompt as a user
message); without the header, a request with no tools whose last user message opens with
``COMPACTION_PROMPT_OPENING`` is taken for a compaction. ``request_kind`` in
``Emulator.set_latency``/``hold`` terms is ``"summary"`` for a compaction, ``"main"`` for the
rest. docs/codex.md says what Codex sends and does.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .script import DEFAULT, ApiError, Reply, ToolUse, default_summary
from .tokens import canonical_json, text_tokens

if TYPE_CHECKING:
    from .server import Emulator, RecordedRequest, _Exchange

__all__ = [
    "COMPACTION_PROMPT_OPENING",
    "RESPONSES_PATH",
    "CustomToolCall",
    "FunctionCall",
    "ToolSearchCall",
    "add_file_patch",
    "apply_patch",
    "codex_request_kind",
    "exec_command",
    "handle_responses",
    "input_texts",
    "mcp_call",
    "responses_prompt_tokens",
    "responses_summary",
    "update_file_patch",
]

RESPONSES_PATH = "/v1/responses"
# The opening of the prompt Codex 0.171.0 sends as the last user message of its compaction
# request (seen in its requests; docs/codex.md#the-compaction).
COMPACTION_PROMPT_OPENING = "You are performing a CONTEXT CHECKPOINT COMPACTION"
# The API's automatic prompt cache: nothing under this many tokens, then steps of CACHE_STEP.
CACHE_MIN_TOKENS = 1024
CACHE_STEP = 128

_ERROR_CODES = {
    "rate_limit_error": ("rate_limit_exceeded", "requests"),
    "authentication_error": ("invalid_api_key", "invalid_request_error"),
    "overloaded_error": ("server_is_overloaded", "server_error"),
    "api_error": ("server_error", "server_error"),
    "invalid_request_error": (None, "invalid_request_error"),
}
CONTEXT_MESSAGE = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)


@dataclass
class FunctionCall:
    """A ``function_call`` output item: ``arguments`` (a mapping, sent as JSON, or the raw
    string), with ``namespace`` for a tool offered inside a namespace (Codex's MCP tools)."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    namespace: str | None = None
    call_id: str | None = None

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments))


@dataclass
class CustomToolCall:
    """A ``custom_tool_call`` output item: a freeform tool (Codex's ``apply_patch``) called
    with raw text."""

    name: str
    input: str
    call_id: str | None = None


@dataclass
class ToolSearchCall:
    """A ``tool_search_call`` output item (``execution: "client"``): the model asks Codex for
    deferred tools (its MCP tools) matching ``query``; Codex answers with a
    ``tool_search_output`` item and offers what it found in the next request."""

    query: str
    limit: int | None = None
    call_id: str | None = None


def exec_command(cmd: str, **arguments: Any) -> FunctionCall:
    """A call to Codex's ``exec_command`` tool (``cmd``, optional ``workdir``,
    ``yield_time_ms``, ...)."""
    return FunctionCall("exec_command", {"cmd": cmd, **arguments})


def apply_patch(patch: str) -> CustomToolCall:
    """A call to Codex's freeform ``apply_patch`` tool with ``patch`` (``*** Begin Patch`` ...
    ``*** End Patch``; ``add_file_patch`` and ``update_file_patch`` write simple ones)."""
    return CustomToolCall("apply_patch", patch)


def add_file_patch(path: str, text: str) -> str:
    """A patch that creates ``path`` holding ``text`` (lines; a final newline is implied)."""
    body = "".join(f"+{line}\n" for line in text.splitlines())
    return f"*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch\n"


def update_file_patch(path: str, old: str, new: str) -> str:
    """A patch that replaces the line ``old`` of ``path`` with ``new``."""
    return f"*** Begin Patch\n*** Update File: {path}\n@@\n-{old}\n+{new}\n*** End Patch\n"


def mcp_call(server: str, tool: str, arguments: Mapping[str, Any] | None = None) -> FunctionCall:
    """A call to the tool ``tool`` of the MCP server Codex names ``server`` (its namespace
    ``mcp__<server>``)."""
    return FunctionCall(tool, dict(arguments or {}), namespace=f"mcp__{server}")


# ------------------------------------------------------------------- reading a request


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, Mapping) and isinstance(p.get("text"), str)
        )
    return ""


def _items(body: Mapping[str, Any]) -> list[Any]:
    value = body.get("input")
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def input_texts(body: Mapping[str, Any], role: str = "user") -> list[str]:
    """The text of each ``message`` input item of ``role`` (tool outputs are not messages)."""
    return [
        _content_text(item.get("content"))
        for item in _items(body)
        if isinstance(item, Mapping)
        and item.get("type", "message") == "message"
        and item.get("role") == role
    ]


def codex_request_kind(rec: RecordedRequest) -> str:
    """Codex's ``request_kind`` for the request (``"turn"``, ``"compaction"``, ...) from its
    ``x-codex-turn-metadata`` header; from the body when there is none: ``"compaction"`` for a
    request with no tools ending with Codex's compaction prompt, else ``"turn"``."""
    raw = rec.headers.get("x-codex-turn-metadata")
    if raw:
        try:
            meta = json.loads(raw)
        except ValueError:
            meta = None
        if isinstance(meta, Mapping) and isinstance(meta.get("request_kind"), str):
            return str(meta["request_kind"])
    body = rec.body if isinstance(rec.body, Mapping) else {}
    users = input_texts(body)
    if not body.get("tools") and users and COMPACTION_PROMPT_OPENING in users[-1]:
        return "compaction"
    return "turn"


def _latency_kind(rec: RecordedRequest) -> str:
    return "summary" if codex_request_kind(rec) == "compaction" else "main"


def responses_summary(body: Mapping[str, Any], *, max_quotes: int = 40) -> str:
    """The derived summary of a Responses request: ``script.default_summary`` over its user
    and assistant messages (Codex's own context messages, the environment and the AGENTS.md
    text it sends as user messages, are left out, and so is its compaction prompt)."""
    messages: list[dict[str, Any]] = []
    for item in _items(body):
        if not isinstance(item, Mapping) or item.get("type", "message") != "message":
            continue
        role = item.get("role")
        text = _content_text(item.get("content"))
        if role not in ("user", "assistant") or not text:
            continue
        if role == "user" and (
            text.lstrip().startswith(
                ("<environment_context>", "# AGENTS.md", "<user_instructions>")
            )
            or COMPACTION_PROMPT_OPENING in text
        ):
            continue
        messages.append({"role": role, "content": text})
    return default_summary({"messages": messages}, max_quotes=max_quotes)


# ------------------------------------------------------------------------- tokens


def _blocks(body: Mapping[str, Any]) -> list[Any]:
    blocks: list[Any] = []
    if body.get("instructions"):
        blocks.append({"instructions": body["instructions"]})
    blocks.extend(body.get("tools") or [])
    value = body.get("input")
    blocks.extend([value] if isinstance(value, str) else _items(body))
    return blocks


def responses_prompt_tokens(body: Mapping[str, Any]) -> int:
    """The request's input tokens by the emulator's rule (see the module's docstring)."""
    return sum(text_tokens(canonical_json(b)) for b in _blocks(body))


class _PrefixCache:
    """The automatic prompt cache: the block hashes of every request seen, per model and
    ``prompt_cache_key``; a request reads the longest prefix it shares with one of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], list[list[tuple[str, int]]]] = {}

    def cached_tokens(self, body: Mapping[str, Any]) -> int:
        blocks = [
            (hashlib.sha256(canonical_json(b).encode()).hexdigest(), text_tokens(canonical_json(b)))
            for b in _blocks(body)
        ]
        key = (str(body.get("model")), str(body.get("prompt_cache_key") or ""))
        best = 0
        with self._lock:
            earlier = self._seen.setdefault(key, [])
            for other in earlier:
                shared = 0
                for mine, theirs in zip(blocks, other, strict=False):
                    if mine[0] != theirs[0]:
                        break
                    shared += mine[1]
                best = max(best, shared)
            earlier.append(blocks)
        total = sum(t for _, t in blocks)
        best = min(best, total - 1) if total else 0
        if best < CACHE_MIN_TOKENS:
            return 0
        return CACHE_MIN_TOKENS + (best - CACHE_MIN_TOKENS) // CACHE_STEP * CACHE_STEP


_CACHE_LOCK = threading.Lock()


def _cache_for(emu: Emulator) -> _PrefixCache:
    """The emulator's prefix cache for this API (kept on it, beside its Messages API cache)."""
    with _CACHE_LOCK:
        cache = getattr(emu, "_responses_cache", None)
        if cache is None:
            cache = _PrefixCache()
            emu._responses_cache = cache  # type: ignore[attr-defined]
        return cache


# ------------------------------------------------------------------------- errors


def _error_object(err: ApiError) -> tuple[int, dict[str, Any]]:
    if err.prompt_too_long:
        return 400, {
            "message": err.message or CONTEXT_MESSAGE,
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded",
        }
    code, kind = _ERROR_CODES.get(err.type, (err.type, err.type))
    return err.http_status, {"message": err.text(), "type": kind, "param": None, "code": code}


def _send_error(emu: Emulator, x: _Exchange, err: ApiError) -> None:
    if err.delay:
        emu._wait(err.delay)
    headers: dict[str, str] = {}
    if err.retry_after is not None:
        headers["retry-after"] = f"{err.retry_after:g}"
    if err.retry_after_ms is not None:
        headers["retry-after-ms"] = f"{err.retry_after_ms:g}"
    headers.update(err.headers)
    status, error = _error_object(err)
    x.rec.outcome = f"error:{error['type']}"
    emu._send_json(x, status, {"error": error}, headers)


def _invalid(emu: Emulator, x: _Exchange, message: str, param: str | None = None) -> None:
    x.rec.outcome = "error:invalid_request_error"
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    emu._send_json(x, 400, {"error": error})


def _validate(body: Any) -> tuple[str, str | None] | None:
    if not isinstance(body, dict):
        return "The request body is not a JSON object.", None
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "Missing required parameter: 'model'.", "model"
    value = body.get("input")
    if value is not None and not isinstance(value, (str, list)):
        return "Invalid type for 'input': expected a string or an array.", "input"
    for i, item in enumerate(value if isinstance(value, list) else []):
        if not isinstance(item, Mapping):
            return f"Invalid type for 'input[{i}]': expected an object.", f"input[{i}]"
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        return "Invalid type for 'tools': expected an array.", "tools"
    limit = body.get("max_output_tokens")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 16):
        return "Invalid 'max_output_tokens': integer below minimum value 16.", "max_output_tokens"
    return None


# ------------------------------------------------------------------------- replies


def handle_responses(emu: Emulator, x: _Exchange, seq: int) -> None:
    """Answer one ``POST /v1/responses``."""
    body = x.rec.body
    problem = _validate(body)
    if problem is not None:
        _invalid(emu, x, *problem)
        return
    item: Any
    too_large = False
    with emu._lock:
        if emu._queue and isinstance(emu._queue[0], ApiError):
            item = emu._queue.popleft()
        elif responses_prompt_tokens(body) > emu.context_window(body["model"]):
            too_large = True
            item = ApiError(type="invalid_request_error", prompt_too_long=True)
        else:
            item = emu._queue.popleft() if emu._queue else emu._default
    if callable(item) and not isinstance(item, (Reply, ApiError)):
        item = item(x.rec)
    if isinstance(item, ApiError):
        if too_large and body.get("stream"):
            _stream(emu, x, seq, body, Reply(text=None, fault="error", fault_error=item))
            return
        _send_error(emu, x, item)
        return
    if not isinstance(item, Reply):
        raise TypeError(f"default behaviour returned {item!r}")
    emu._pass_hold(_latency_kind(x.rec))
    delay = item.delay + emu.latency(_latency_kind(x.rec))
    if delay:
        emu._wait(delay)
    if body.get("stream"):
        _stream(emu, x, seq, body, item)
        return
    if item.fault == "error":
        _send_error(emu, x, item.fault_error or ApiError(type="api_error"))
        return
    response, _ = _build(emu, seq, body, item)
    data = json.dumps(response).encode()
    if item.fault == "cut":
        from .server import _Abort

        x.rec.outcome = "fault:cut"
        emu._start(x, 200, {"content-type": "application/json", "content-length": str(len(data))})
        x.handler.wfile.write(data[: len(data) // 2])
        raise _Abort()
    x.rec.outcome = "message"
    emu._start(x, 200, {"content-type": "application/json", "content-length": str(len(data))})
    x.handler.wfile.write(data)


def _encrypted(text: str) -> str:
    digest = hashlib.sha256(text.encode()).digest()
    return "gAAAAEmu" + base64.b64encode(digest + text.encode()).decode()


def _output_items(emu: Emulator, seq: int, body: Mapping[str, Any], reply: Reply) -> list[Any]:
    if reply.empty:
        return []
    items: list[dict[str, Any]] = []
    if reply.thinking is not None:
        items.append(
            {
                "id": f"rs_emu{seq:08d}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": reply.thinking}],
                "encrypted_content": reply.signature or _encrypted(reply.thinking),
            }
        )
    text = reply.text
    if text is DEFAULT:
        text = (
            None if reply.tool_uses else responses_summary(body, max_quotes=emu.summary_max_quotes)
        )
    if text is not None:
        items.append(
            {
                "id": f"msg_emu{seq:08d}",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": str(text), "annotations": [], "logprobs": []}
                ],
            }
        )
    for i, call in enumerate(reply.tool_uses):
        call_id = f"call_emu{seq:08d}_{i}"
        if isinstance(call, CustomToolCall):
            items.append(
                {
                    "id": f"ctc_emu{seq:08d}_{i}",
                    "type": "custom_tool_call",
                    "status": "completed",
                    "call_id": call.call_id or call_id,
                    "name": call.name,
                    "input": call.input,
                }
            )
            continue
        if isinstance(call, ToolSearchCall):
            arguments: dict[str, Any] = {"query": call.query}
            if call.limit is not None:
                arguments["limit"] = call.limit
            items.append(
                {
                    "id": f"tsc_emu{seq:08d}_{i}",
                    "type": "tool_search_call",
                    "status": "completed",
                    "call_id": call.call_id or call_id,
                    "execution": "client",
                    "arguments": arguments,
                }
            )
            continue
        if isinstance(call, ToolUse):
            call = FunctionCall(call.name, call.input, call_id=call.id)
        if not isinstance(call, FunctionCall):
            raise TypeError(f"a Responses reply cannot call {call!r}")
        item = {
            "id": f"fc_emu{seq:08d}_{i}",
            "type": "function_call",
            "status": "completed",
            "arguments": call.arguments_text(),
            "call_id": call.call_id or call_id,
            "name": call.name,
        }
        if call.namespace is not None:
            item["namespace"] = call.namespace
        items.append(item)
    return items


def _item_tokens(item: Mapping[str, Any]) -> tuple[int, int]:
    """(output tokens, of which reasoning) of one output item."""
    kind = item.get("type")
    if kind == "reasoning":
        n = sum(text_tokens(str(s.get("text", ""))) for s in item.get("summary") or [])
        return n, n
    if kind == "message":
        return sum(text_tokens(str(p.get("text", ""))) for p in item["content"]), 0
    if kind == "function_call":
        return text_tokens(str(item["arguments"])), 0
    if kind == "custom_tool_call":
        return text_tokens(str(item["input"])), 0
    if kind == "tool_search_call":
        return text_tokens(json.dumps(item["arguments"])), 0
    return text_tokens(canonical_json(item)), 0


def _cut(item: dict[str, Any], room: int) -> dict[str, Any]:
    """``item`` with its text cut to ``room`` tokens (a message; other items are kept whole
    or dropped by the caller)."""
    part = item["content"][0]
    return {
        **item,
        "status": "incomplete",
        "content": [{**part, "text": str(part["text"])[: max(0, room) * 4]}],
    }


def _build(
    emu: Emulator, seq: int, body: Mapping[str, Any], reply: Reply
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The response object (as ``response.completed`` carries it) and its output items."""
    items = _output_items(emu, seq, body, reply)
    limit = body.get("max_output_tokens")
    kept: list[dict[str, Any]] = []
    used = reasoning = 0
    incomplete = False
    for item in items:
        cost, thought = _item_tokens(item)
        if isinstance(limit, int) and used + cost > limit:
            incomplete = True
            if item["type"] == "message":
                item = _cut(item, limit - used)
                cost, thought = _item_tokens(item)
                kept.append(item)
                used += cost
            break
        kept.append(item)
        used += cost
        reasoning += thought
    prompt = responses_prompt_tokens(body)
    cached = _cache_for(emu).cached_tokens(body)
    out = reply.output_tokens if reply.output_tokens is not None else used
    usage = {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + out,
    }
    with emu._lock:
        emu._totals = emu._totals.add(
            {
                "input_tokens": prompt - cached,
                "cache_read_input_tokens": cached,
                "output_tokens": out,
            }
        )
    response = {
        "id": f"resp_emu{seq:08d}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if incomplete else "completed",
        "background": False,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": limit,
        "model": body["model"],
        "output": kept,
        "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": {
            "effort": (body.get("reasoning") or {}).get("effort"),
            "summary": (body.get("reasoning") or {}).get("summary"),
        },
        "service_tier": "default",
        "store": bool(body.get("store", True)),
        "temperature": 1.0,
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "metadata": {},
    }
    return response, kept


def _item_events(item: dict[str, Any], index: int, chunk: int) -> list[tuple[dict[str, Any], bool]]:
    """The events of one output item, each with whether it is a delta (faults count them)."""
    from .server import _chunks

    out: list[tuple[dict[str, Any], bool]] = []
    head = {"item_id": item["id"], "output_index": index}

    def add(kind: str, is_delta: bool = False, /, **fields: Any) -> None:
        out.append(({"type": f"response.{kind}", **fields}, is_delta))

    def pieces(text: str) -> list[str]:
        return _chunks(text, chunk) if text else []

    kind = item["type"]
    if kind == "message":
        add("output_item.added", output_index=index, item={**item, "status": "in_progress",
                                                            "content": []})  # fmt: skip
        for c, part in enumerate(item["content"]):
            at = {**head, "content_index": c}
            add("content_part.added", **at, part={**part, "text": ""})
            for piece in pieces(str(part["text"])):
                add("output_text.delta", True, **at, delta=piece, logprobs=[])
            add("output_text.done", **at, text=part["text"], logprobs=[])
            add("content_part.done", **at, part=part)
    elif kind == "reasoning":
        add("output_item.added", output_index=index, item={**item, "summary": []})
        for s, part in enumerate(item["summary"]):
            at = {**head, "summary_index": s}
            add("reasoning_summary_part.added", **at, part={**part, "text": ""})
            for piece in pieces(str(part["text"])):
                add("reasoning_summary_text.delta", True, **at, delta=piece)
            add("reasoning_summary_text.done", **at, text=part["text"])
            add("reasoning_summary_part.done", **at, part=part)
    elif kind == "function_call":
        opened = {**item, "status": "in_progress", "arguments": ""}
        add("output_item.added", output_index=index, item=opened)
        for piece in pieces(item["arguments"]):
            add("function_call_arguments.delta", True, **head, delta=piece)
        add("function_call_arguments.done", **head, arguments=item["arguments"])
    elif kind == "custom_tool_call":
        add("output_item.added", output_index=index, item={**item, "status": "in_progress",
                                                            "input": ""})  # fmt: skip
        for piece in pieces(item["input"]):
            add("custom_tool_call_input.delta", True, **head, delta=piece)
        add("custom_tool_call_input.done", **head, input=item["input"])
    else:
        add("output_item.added", output_index=index, item=item)
    add("output_item.done", output_index=index, item=item)
    return out


def _failure_code(err: ApiError) -> tuple[str, str]:
    _, error = _error_object(err)
    return str(error.get("code") or error["type"]), str(error["message"])


def _stream(emu: Emulator, x: _Exchange, seq: int, body: Mapping[str, Any], reply: Reply) -> None:
    from .server import _Abort

    response, items = _build(emu, seq, body, reply)
    x.rec.usage = response["usage"]
    h = x.handler
    emu._start(
        x,
        200,
        {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache",
            "transfer-encoding": "chunked",
        },
    )
    number = 0

    def emit(payload: dict[str, Any]) -> None:
        nonlocal number
        event = {"type": payload["type"], "sequence_number": number, **payload}
        number += 1
        data = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
        h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        x.rec.events.append(str(event["type"]))

    def finish() -> None:
        h.wfile.write(b"0\r\n\r\n")

    chunk = reply.chunk_chars or emu.chunk_chars
    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    opening["incomplete_details"] = None
    events: list[tuple[dict[str, Any], bool]] = [
        ({"type": "response.created", "response": opening}, False),
        ({"type": "response.in_progress", "response": opening}, False),
    ]
    for index, item in enumerate(items):
        events.extend(_item_events(item, index, chunk))
    closing = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    events.append(({"type": closing, "response": response}, False))

    fault = reply.fault
    deltas = sum(1 for _, d in events if d)
    fault_at = (
        min(max(0, reply.fault_after), deltas) if fault in ("error", "cut", "truncate") else None
    )
    x.rec.outcome = f"fault:{fault}" if fault else "stream"
    sent = 0
    for position, (payload, is_delta) in enumerate(events):
        at_point = is_delta or payload["type"] in ("response.completed", "response.incomplete")
        if fault_at is not None and sent == fault_at and at_point:
            if fault == "error":
                code, message = _failure_code(reply.fault_error or ApiError(type="api_error"))
                failed = {
                    **opening,
                    "status": "failed",
                    "error": {"code": code, "message": message},
                }
                emit({"type": "response.failed", "response": failed})
                finish()
            elif fault == "truncate":
                finish()
            else:
                raise _Abort()
            return
        if fault == "no_message_stop" and payload["type"] == closing:
            finish()
            return
        if position and reply.chunk_delay:
            emu._wait(reply.chunk_delay)
        elif emu._stopping.is_set():
            raise _Abort()
        emit(payload)
        if is_delta:
            sent += 1
    finish()


def responses_output(events: Sequence[tuple[str, Any]]) -> list[Any]:
    """The output items of a parsed stream (``server.iter_sse``), from its last
    ``response.completed`` (helper for raw-HTTP tests)."""
    for name, data in reversed(list(events)):
        if name in ("response.completed", "response.incomplete"):
            return list(data["response"]["output"])
    return []
