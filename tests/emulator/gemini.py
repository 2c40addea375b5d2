"""The emulator's Gemini API (``generativelanguage`` v1beta), as Gemini CLI 0.61.0 uses it.

Routes, under ``/v1beta/models`` (the generate and count methods under ``/v1/models`` too; the
bare ``/v1/models`` is left to OpenAI's clients):

* ``POST <model>:streamGenerateContent?alt=sse``: the agent's turns, streamed as ``data:`` lines,
  each a whole ``GenerateContentResponse`` (text in pieces, each function call in one piece, the
  ``finishReason`` and the final ``usageMetadata`` on the last one).
* ``POST <model>:generateContent``: one JSON response; Gemini CLI uses it for its side requests
  (the model router's classifier, the next-speaker check) and for a compression, which is two
  such calls with no tools: the ``<state_snapshot>`` and then its verification.
* ``POST <model>:countTokens``: ``{"totalTokens"}`` by the emulator's token rule.
* ``GET /v1beta/models`` and ``GET /v1beta/models/<model>``: a small model list.

Authentication: the ``x-goog-api-key`` header or a ``key`` query parameter (``Emulator.api_key``
limits it to one key). Errors come in Google's shape ``{"error": {"code", "message", "status",
"details"}}``; a request larger than the model's context window (``Emulator.set_context_window``)
gets Google's 400 "The input token count (N) exceeds the maximum number of tokens allowed (M)."

Every request is classified (``gemini_request_kind``): ``"compression"`` (the snapshot call,
recognised by the ``<state_snapshot>`` system instruction), ``"verification"`` (the call after
it, whose last user text asks the model to evaluate its snapshot), ``"utility"`` (a call that
asks for JSON by a response schema) and ``"main"`` (the rest). Each kind has its own script
queue and default behaviour (``GeminiApi.script``, ``GeminiApi.set_default``), so a side request
never takes a reply scripted for the agent. The same ``Reply``/``ApiError``/``ToolUse`` objects
as the Messages API drive it: a ``ToolUse`` becomes a ``functionCall`` part (``input`` as its
``args``; its ``id`` only when given, as the real API sends none), ``thinking`` a
``{"thought": true}`` part. ``text=DEFAULT`` means: a derived ``<state_snapshot>`` for a
compression (``default_snapshot``: it counts what it summarises and quotes nothing, as a model's
paraphrase would not repeat the user's words), the snapshot being checked for a verification, a
JSON object that fits the request's schema for a utility call, and a one-line answer for the
main kind.

Token rule (``gemini_prompt_tokens``): each function declaration, each part of the system
instruction and each part of each content costs ``ceil(len(canonical_json(x)) / 4)``, as in
``tests.emulator.tokens``. Output: a text or thought part costs ``text_tokens(text)``, a function
call ``text_tokens(json.dumps(args))``; thoughts are counted apart (``thoughtsTokenCount``).
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from .script import DEFAULT, ApiError, Reply
from .tokens import canonical_json, text_tokens

if TYPE_CHECKING:
    from .server import Emulator, RecordedRequest, _Exchange

__all__ = [
    "GEMINI_KINDS",
    "GeminiApi",
    "contents_text",
    "default_snapshot",
    "function_calls",
    "function_responses",
    "gemini_output_tokens",
    "gemini_prompt_tokens",
    "gemini_request_kind",
    "json_for_schema",
    "parse_gemini_path",
]

GEMINI_KINDS = ("main", "compression", "verification", "utility")
# The model list ``GET /v1beta/models`` answers, beside any model a request has named.
KNOWN_MODELS = (
    "gemini-2.5-pro",
    "gemini-2.5-flash",
    "gemini-2.5-flash-lite",
    "gemini-3-pro-preview",
    "gemini-3.1-pro-preview",
    "gemini-3-flash-preview",
    "gemini-3.5-flash-lite",
)
_PATH_RE = re.compile(r"^/(v1beta|v1)/models(?:/([^/:]+)(?::([A-Za-z]+))?)?$")
# The part fields that carry data; a part holds exactly one of them (the API's oneof).
_DATA_FIELDS = (
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
)
# Google's status name for each HTTP status the emulator answers with.
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
# The HTTP status each ``ApiError.type`` gets here (the Gemini API has no 529).
_STATUS_FOR_TYPE = {
    "invalid_request_error": 400,
    "authentication_error": 400,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 400,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 503,
}
_MESSAGES = {
    "authentication_error": "API key not valid. Please pass a valid API key.",
    "rate_limit_error": "Resource has been exhausted (e.g. check quota).",
    "overloaded_error": "The model is overloaded. Please try again later.",
    "api_error": "An internal error has occurred. Please retry or report in "
    "https://developers.generativeai.google/guide/troubleshooting",
}
# The instruction Gemini CLI 0.61.0 ends its verification call with (seen in its requests).
VERIFY_OPENING = "Critically evaluate the <state_snapshot>"


def _message(err: ApiError) -> str:
    """An error's message as the Gemini API words it (the scripted one when there is one)."""
    if err.message is not None:
        return err.message
    return _MESSAGES.get(err.type) or err.text()


# ----------------------------------------------------------------- reading request bodies


def parse_gemini_path(path: str) -> tuple[str | None, str | None] | None:
    """``(model, method)`` of a Gemini API path (``(None, None)`` for the model list), or None
    when the path is not one."""
    match = _PATH_RE.match(path.rstrip("/"))
    if match is None:
        return None
    if match.group(1) == "v1" and match.group(3) is None:
        return None  # /v1/models is OpenAI's model list (tests.emulator.responses' clients)
    return match.group(2), match.group(3)


def _parts(content: Any) -> list[Mapping[str, Any]]:
    if not isinstance(content, Mapping):
        return []
    parts = content.get("parts")
    return [p for p in parts if isinstance(p, Mapping)] if isinstance(parts, list) else []


def _contents(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    contents = body.get("contents")
    if isinstance(contents, Mapping):
        return [contents]
    return [c for c in contents if isinstance(c, Mapping)] if isinstance(contents, list) else []


def _system_parts(body: Mapping[str, Any]) -> list[Any]:
    system = body.get("systemInstruction") or body.get("system_instruction")
    if isinstance(system, str):
        return [{"text": system}]
    if isinstance(system, Mapping):
        return list(_parts(system))
    return []


def _declarations(body: Mapping[str, Any]) -> list[Any]:
    out: list[Any] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, Mapping):
            decls = tool.get("functionDeclarations") or tool.get("function_declarations") or []
            out.extend(decls if decls else [tool])
    return out


def contents_text(body: Mapping[str, Any], role: str | None = None) -> list[str]:
    """The text of each content of the request (of ``role`` only, when given), thoughts left
    out; a content with no text gives no entry."""
    out: list[str] = []
    for content in _contents(body):
        if role is not None and content.get("role", "user") != role:
            continue
        text = "".join(
            str(p["text"]) for p in _parts(content) if "text" in p and not p.get("thought")
        )
        if text:
            out.append(text)
    return out


def _fields(body: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    return [
        dict(p[key]) for c in _contents(body) for p in _parts(c) if isinstance(p.get(key), Mapping)
    ]


def function_calls(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every ``functionCall`` the request's history holds, in order."""
    return _fields(body, "functionCall")


def function_responses(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every ``functionResponse`` the request's history holds, in order."""
    return _fields(body, "functionResponse")


def _answers(parts: list[Any]) -> int:
    """How many calls a content's ``functionResponse`` parts answer: responses that share an id
    count once (Gemini CLI 0.61.0 sends each earlier tool result twice after ``--resume``,
    docs/gemini.md#resume; the emulator takes it), responses without an id count each."""
    responses = [p["functionResponse"] for p in parts if "functionResponse" in p]
    named = {r["id"] for r in responses if isinstance(r, Mapping) and r.get("id")}
    return len(named) + sum(1 for r in responses if not (isinstance(r, Mapping) and r.get("id")))


def _system_text(body: Mapping[str, Any]) -> str:
    return "".join(str(p.get("text", "")) for p in _system_parts(body) if isinstance(p, Mapping))


def _schema(body: Mapping[str, Any]) -> Any:
    config = body.get("generationConfig") or body.get("generation_config") or {}
    if not isinstance(config, Mapping):
        return None
    for key in ("responseJsonSchema", "responseSchema", "response_json_schema", "response_schema"):
        if isinstance(config.get(key), Mapping):
            return config[key]
    return {} if config.get("responseMimeType") == "application/json" else None


def gemini_request_kind(body: Mapping[str, Any]) -> str:
    """``"compression"``, ``"verification"``, ``"utility"`` or ``"main"`` (module docstring)."""
    if "<state_snapshot>" in _system_text(body):
        users = contents_text(body, "user")
        if users and users[-1].lstrip().startswith(VERIFY_OPENING):
            return "verification"
        return "compression"
    if _schema(body) is not None:
        return "utility"
    return "main"


# ---------------------------------------------------------------------------- token rule


def gemini_prompt_tokens(body: Mapping[str, Any]) -> int:
    """Input tokens of a request by the emulator's rule (module docstring)."""
    total = sum(text_tokens(canonical_json(d)) for d in _declarations(body))
    total += sum(text_tokens(canonical_json(p)) for p in _system_parts(body))
    for content in _contents(body):
        total += sum(text_tokens(canonical_json(p)) for p in _parts(content))
    return total


def gemini_output_tokens(part: Mapping[str, Any]) -> int:
    """Output tokens of one reply part."""
    if isinstance(part.get("functionCall"), Mapping):
        return text_tokens(json.dumps(part["functionCall"].get("args", {})))
    return text_tokens(str(part.get("text", "")))


# ------------------------------------------------------------------------ derived replies


_WORD_RE = re.compile(r"\S+")


def default_snapshot(body: Mapping[str, Any], serial: int = 1) -> str:
    """A deterministic ``<state_snapshot>`` of what a compression request summarises.

    It has the sections Gemini CLI asks for and says how much it stands for (contents, user
    prompts, tool calls by name, words), and quotes none of it: a test can then tell what came
    through the snapshot from what something else (compactd's hook) put back. ``serial`` numbers
    the snapshots of one emulator.
    """
    contents = _contents(body)[:-1]  # the last content is the CLI's instruction
    prompts = [
        c
        for c in contents
        if c.get("role", "user") == "user"
        and not any("functionResponse" in p for p in _parts(c))
        and any("text" in p for p in _parts(c))
    ]
    calls: dict[str, int] = {}
    for c in contents:
        for p in _parts(c):
            if isinstance(p.get("functionCall"), Mapping):
                name = str(p["functionCall"].get("name"))
                calls[name] = calls.get(name, 0) + 1
    words = sum(len(_WORD_RE.findall(t)) for t in contents_text({"contents": contents}))
    previous = any("<state_snapshot>" in t for t in contents_text({"contents": contents}))
    tools = ", ".join(f"{n} x{k}" for n, k in sorted(calls.items())) or "none"
    return "\n".join(
        [
            "<state_snapshot>",
            f"    <overall_goal>Emulated snapshot {serial}: carry on with the user's task."
            "</overall_goal>",
            "    <active_constraints>(emulated model: none extracted)</active_constraints>",
            f"    <key_knowledge>{len(contents)} contents summarised, {len(prompts)} of them "
            f"user prompts, about {words} words"
            + ("; an earlier snapshot among them" if previous else "")
            + ".</key_knowledge>",
            "    <artifact_trail>(emulated model: none extracted)</artifact_trail>",
            "    <file_system_state>(emulated model: none extracted)</file_system_state>",
            f"    <recent_actions>Tool calls: {tools}.</recent_actions>",
            "    <task_state>1. [IN PROGRESS] The latest request.</task_state>",
            "</state_snapshot>",
        ]
    )


def _checked_snapshot(body: Mapping[str, Any]) -> str:
    """What a verification call answers by default: the snapshot it is asked to check (the
    model's text just before the instruction), unchanged."""
    models = contents_text(body, "model")
    return models[-1] if models else default_snapshot(body)


def json_for_schema(schema: Any, name: str = "") -> Any:
    """A value that fits a (Gemini or JSON) schema: the first enum value, 1 for numbers, an
    object of all its properties. ``next_speaker`` is always ``"user"``, so Gemini CLI's
    next-speaker check never sends a "Please continue." of its own."""
    if not isinstance(schema, Mapping):
        return {}
    if name == "next_speaker":
        return "user"
    kind = str(schema.get("type", "object")).lower()
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: json_for_schema(v, k) for k, v in props.items()} if props else {}
    if kind == "array":
        items = schema.get("items")
        return [json_for_schema(items)] if isinstance(items, Mapping) and items else []
    if kind in ("integer", "number"):
        low = schema.get("minimum")
        return int(low) if isinstance(low, (int, float)) and low > 1 else 1
    if kind == "boolean":
        return False
    return f"emulated {name}".strip() if name else "emulated"


def _default_answer(body: Mapping[str, Any]) -> str:
    """ "Emulated answer to: <the latest text part a user wrote>" (the CLI's own context parts,
    ``<session_context>`` and ``<hook_context>``, skipped)."""
    texts = [
        str(p["text"])
        for c in _contents(body)
        if c.get("role", "user") == "user"
        for p in _parts(c)
        if "text" in p and not p.get("thought")
    ]
    users = [t for t in texts if not t.lstrip().startswith(("<session_context>", "<hook_context>"))]
    last = " ".join(users[-1].split()) if users else ""
    last = last if len(last) <= 80 else last[:77] + "..."
    return f"Emulated answer to: {last}" if last else "Emulated answer."


# ---------------------------------------------------------------------------- the service


class GeminiApi:
    """The Gemini API of one ``Emulator`` (``emu.gemini``): scripts, defaults, records."""

    def __init__(self, emu: Emulator) -> None:
        self.emu = emu
        self._lock = threading.RLock()
        self._queues: dict[str, deque[Reply | ApiError]] = {k: deque() for k in GEMINI_KINDS}
        self._defaults: dict[str, Any] = {k: Reply() for k in GEMINI_KINDS}
        self._snapshots = 0
        self.strict = True

    # ---- scripting

    def script(self, *items: Reply | ApiError, kind: str = "main", times: int = 1) -> GeminiApi:
        """Queue replies for the next requests of ``kind`` (each item ``times`` times)."""
        self._check_kind(kind)
        for item in items:
            if not isinstance(item, (Reply, ApiError)):
                raise TypeError(f"script items must be Reply or ApiError, got {item!r}")
        with self._lock:
            for item in items:
                self._queues[kind].extend([item] * times)
        return self

    def set_default(self, behaviour: Any, kind: str = "main") -> None:
        """What a request of ``kind`` gets when its queue is empty: a ``Reply``, an ``ApiError``
        or ``f(RecordedRequest)`` returning one of them."""
        self._check_kind(kind)
        with self._lock:
            self._defaults[kind] = behaviour

    def set_snapshot(self, snapshot: str | Callable[[RecordedRequest], str]) -> None:
        """The ``<state_snapshot>`` every compression answers with (and its verification
        repeats): a text, or ``f(RecordedRequest)`` giving one."""

        def answer(rec: RecordedRequest) -> Reply:
            return Reply(text=snapshot(rec) if callable(snapshot) else snapshot)

        self.set_default(answer, "compression")

    def pending(self, kind: str = "main") -> int:
        with self._lock:
            return len(self._queues[kind])

    def reset(self) -> None:
        with self._lock:
            for kind in GEMINI_KINDS:
                self._queues[kind].clear()
                self._defaults[kind] = Reply()
            self._snapshots = 0

    @staticmethod
    def _check_kind(kind: str) -> None:
        if kind not in GEMINI_KINDS:
            raise ValueError(
                f"unknown Gemini request kind {kind!r}; expected one of {GEMINI_KINDS}"
            )

    # ---- inspection

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request to the Gemini API, in order."""
        return [r for r in self.emu.requests if parse_gemini_path(r.path) is not None]

    def calls(self, kind: str | None = None) -> list[RecordedRequest]:
        """The ``generateContent``/``streamGenerateContent`` requests (of ``kind`` only)."""
        out = []
        for rec in self.requests:
            parsed = parse_gemini_path(rec.path)
            if parsed is None or parsed[1] not in ("generateContent", "streamGenerateContent"):
                continue
            if kind is None or (
                isinstance(rec.body, Mapping) and gemini_request_kind(rec.body) == kind
            ):
                out.append(rec)
        return out

    # ---- handling

    def handle(self, x: _Exchange, seq: int, parse_error: str | None) -> None:
        parsed = parse_gemini_path(x.rec.path)
        assert parsed is not None
        model, method = parsed
        verb = x.handler.command
        if not self._authenticate(x):
            return
        if model is None or method is None:
            if verb != "GET":
                self._error(x, 404, f"Method not found: {verb} {x.rec.path}")
            elif model is None:
                self._send(x, 200, {"models": [self._model_info(m) for m in self._models()]})
            else:
                self._send(x, 200, self._model_info(model))
            return
        if verb != "POST" or method not in (
            "generateContent",
            "streamGenerateContent",
            "countTokens",
        ):
            self._error(x, 404, f"Method not found: {verb} {x.rec.path}")
            return
        body = x.rec.body
        if parse_error is not None or not isinstance(body, dict):
            self._error(x, 400, f"Invalid JSON payload received. {parse_error or 'Not an object'}")
            return
        if method == "countTokens":
            inner = body.get("generateContentRequest")
            counted = inner if isinstance(inner, Mapping) else body
            x.rec.outcome = "count_tokens"
            self._send(x, 200, {"totalTokens": gemini_prompt_tokens(counted)})
            return
        problem = self.validate(body)
        if problem is not None:
            self._error(x, 400, problem)
            return
        self._generate(x, seq, model, body, stream=method == "streamGenerateContent")

    def _authenticate(self, x: _Exchange) -> bool:
        key = x.rec.headers.get("x-goog-api-key")
        if key is None:
            key = (parse_qs(x.rec.query).get("key") or [None])[0]
        if not key:
            self._error(
                x,
                403,
                "Method doesn't allow unregistered callers (callers without established "
                "identity). Please use API Key or other form of API consumer identity to call "
                "this API.",
            )
            return False
        if self.emu.api_key is not None and key != self.emu.api_key:
            self._error(x, 400, _MESSAGES["authentication_error"], reason="API_KEY_INVALID")
            return False
        return True

    def validate(self, body: Mapping[str, Any]) -> str | None:
        """Why the API would refuse ``body`` as a generate request, or None.

        Beyond the shape, the checks the real API makes on a history: a model turn's function
        calls are answered by the next content, a user turn with one ``functionResponse`` part
        for each call; a function response follows a turn of calls. ``strict = False`` keeps
        only the shape checks.
        """
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            return "* GenerateContentRequest.contents: contents is not specified"
        for i, content in enumerate(contents):
            if not isinstance(content, Mapping):
                return f"* GenerateContentRequest.contents[{i}]: not an object"
            if content.get("role", "user") not in ("user", "model"):
                return (
                    f"Please use a valid role: user, model. (contents[{i}].role is "
                    f"{content.get('role')!r})"
                )
            parts = content.get("parts")
            if not isinstance(parts, list) or not parts:
                return f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
            for j, part in enumerate(parts):
                fields = [f for f in _DATA_FIELDS if isinstance(part, Mapping) and f in part]
                if len(fields) != 1:
                    return (
                        f"* GenerateContentRequest.contents[{i}].parts[{j}].data: required "
                        "oneof field 'data' must have one initialized field"
                    )
        if not self.strict:
            return None
        for i, content in enumerate(contents):
            calls = sum(1 for p in content["parts"] if "functionCall" in p)
            answers = sum(1 for p in content["parts"] if "functionResponse" in p)
            if answers:
                before = contents[i - 1] if i else None
                if before is None or not any("functionCall" in p for p in before["parts"]):
                    return (
                        "Please ensure that function response turn comes immediately after a "
                        f"function call turn. (contents[{i}])"
                    )
            if calls and i + 1 < len(contents):
                given = _answers(contents[i + 1]["parts"])
                if given != calls:
                    return (
                        "Please ensure that the number of function response parts is equal to "
                        f"the number of function call parts of the function call turn. "
                        f"(contents[{i}] has {calls}, the next content {given})"
                    )
        return None

    def _models(self) -> list[str]:
        seen = [
            m
            for r in self.requests
            if (m := (parse_gemini_path(r.path) or (None, None))[0]) is not None
        ]
        return list(dict.fromkeys([*KNOWN_MODELS, *seen]))

    def _model_info(self, model: str) -> dict[str, Any]:
        return {
            "name": f"models/{model}",
            "baseModelId": model,
            "version": "emulated",
            "displayName": model,
            "inputTokenLimit": self.emu.context_window(model),
            "outputTokenLimit": 65536,
            "supportedGenerationMethods": ["generateContent", "countTokens"],
        }

    # ---- replies

    def _next(self, kind: str, tokens: int, window: int, rec: RecordedRequest) -> Any:
        with self._lock:
            queue = self._queues[kind]
            if queue and isinstance(queue[0], ApiError):
                return queue.popleft()
            if tokens > window:
                return ApiError(type="invalid_request_error", prompt_too_long=True, tokens=tokens)
            item = queue.popleft() if queue else self._defaults[kind]
        if callable(item) and not isinstance(item, (Reply, ApiError)):
            item = item(rec)
        if not isinstance(item, (Reply, ApiError)):
            raise TypeError(f"a Gemini default behaviour returned {item!r}")
        return item

    def _generate(
        self, x: _Exchange, seq: int, model: str, body: dict[str, Any], *, stream: bool
    ) -> None:
        kind = gemini_request_kind(body)
        tokens = gemini_prompt_tokens(body)
        window = self.emu.context_window(model)
        item = self._next(kind, tokens, window, x.rec)
        if isinstance(item, ApiError):
            self._api_error(x, item, body, window)
            return
        parts, finish, usage = self._build(item, body, kind, tokens)
        x.rec.usage = usage
        if item.delay:
            self.emu._wait(item.delay)
        response_id = f"emu{seq:08d}"
        if stream:
            x.rec.outcome = f"fault:{item.fault}" if item.fault else "stream"
            self._stream(x, model, response_id, parts, finish, usage, item)
            return
        if item.fault == "error":
            self._api_error(x, item.fault_error or ApiError(type="overloaded_error"), body, window)
            return
        response = self._response(model, response_id, parts, finish, usage)
        if item.fault == "cut":
            from .server import _Abort

            data = json.dumps(response).encode()
            x.rec.outcome = "fault:cut"
            self.emu._start(
                x, 200, {"content-type": "application/json", "content-length": str(len(data))}
            )
            x.handler.wfile.write(data[: len(data) // 2])
            raise _Abort()
        x.rec.outcome = "message"
        self._send(x, 200, response)

    def _text_for(self, reply: Reply, body: Mapping[str, Any], kind: str) -> str | None:
        text = reply.text
        if text is not DEFAULT:
            return None if text is None else str(text)
        if reply.tool_uses:
            return None
        if kind == "compression":
            with self._lock:
                self._snapshots += 1
                serial = self._snapshots
            return default_snapshot(body, serial)
        if kind == "verification":
            return _checked_snapshot(body)
        if kind == "utility":
            return json.dumps(json_for_schema(_schema(body)))
        return _default_answer(body)

    def _build(
        self, reply: Reply, body: Mapping[str, Any], kind: str, prompt: int
    ) -> tuple[list[dict[str, Any]], str, dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        if not reply.empty:
            if reply.thinking is not None:
                parts.append({"text": reply.thinking, "thought": True})
            text = self._text_for(reply, body, kind)
            if text is not None:
                parts.append({"text": text})
            for tool in reply.tool_uses:
                call: dict[str, Any] = {"name": tool.name, "args": tool.input}
                if tool.id is not None:
                    call["id"] = tool.id
                parts.append({"functionCall": call})
            if reply.thinking is not None:
                first = next((p for p in parts if not p.get("thought")), None)
                if first is not None:
                    first["thoughtSignature"] = reply.signature or "RW11bGF0ZWRTaWduYXR1cmU="
        config = body.get("generationConfig") or {}
        limit = config.get("maxOutputTokens") if isinstance(config, Mapping) else None
        kept: list[dict[str, Any]] = []
        used = thoughts = 0
        hit_limit = False
        for part in parts:
            cost = gemini_output_tokens(part)
            if isinstance(limit, int) and used + thoughts + cost > limit:
                hit_limit = True
                if "text" in part:
                    room = max(0, limit - used - thoughts)
                    part = {**part, "text": part["text"][: room * 4]}
                    cost = gemini_output_tokens(part)
                    kept.append(part)
                    if part.get("thought"):
                        thoughts += cost
                    else:
                        used += cost
                break
            kept.append(part)
            if part.get("thought"):
                thoughts += cost
            else:
                used += cost
        finish = reply.stop_reason or ("MAX_TOKENS" if hit_limit else "STOP")
        output = reply.output_tokens if reply.output_tokens is not None else used
        usage: dict[str, Any] = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": output,
            "totalTokenCount": prompt + output + thoughts,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
        }
        if thoughts:
            usage["thoughtsTokenCount"] = thoughts
        return kept, finish, usage

    @staticmethod
    def _response(
        model: str,
        response_id: str,
        parts: list[dict[str, Any]],
        finish: str | None,
        usage: Mapping[str, Any],
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish is not None:
            candidate["finishReason"] = finish
        return {
            "candidates": [candidate],
            "usageMetadata": dict(usage),
            "modelVersion": model,
            "responseId": response_id,
        }

    @staticmethod
    def _pieces(parts: list[dict[str, Any]], size: int) -> Iterator[dict[str, Any]]:
        """The parts as the stream sends them: text in pieces of ``size`` characters (a
        thought's signature on its last piece), each function call whole."""
        from .server import _chunks

        for part in parts:
            if "text" in part and part["text"]:
                pieces = _chunks(part["text"], size)
                for i, piece in enumerate(pieces):
                    out = {**part, "text": piece}
                    if i + 1 < len(pieces):
                        out.pop("thoughtSignature", None)
                    yield out
            else:
                yield part

    def _stream(
        self,
        x: _Exchange,
        model: str,
        response_id: str,
        parts: list[dict[str, Any]],
        finish: str,
        usage: dict[str, Any],
        reply: Reply,
    ) -> None:
        from .server import _Abort

        h = x.handler
        self.emu._start(
            x,
            200,
            {
                "content-type": "text/event-stream",
                "cache-control": "no-cache",
                "transfer-encoding": "chunked",
            },
        )

        def emit(payload: Mapping[str, Any], name: str = "chunk") -> None:
            data = f"data: {json.dumps(payload)}\r\n\r\n".encode()
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            x.rec.events.append(name)

        def end() -> None:
            h.wfile.write(b"0\r\n\r\n")

        pieces = list(self._pieces(parts, reply.chunk_chars or self.emu.chunk_chars))
        if not pieces and not reply.empty:
            pieces = [{"text": ""}]
        running = {
            "promptTokenCount": usage["promptTokenCount"],
            "totalTokenCount": usage["promptTokenCount"],
            "promptTokensDetails": usage["promptTokensDetails"],
        }
        stop_at = len(pieces)
        if reply.fault in ("error", "cut", "truncate"):
            stop_at = min(max(0, reply.fault_after), len(pieces))
        for i, piece in enumerate(pieces[:stop_at]):
            if i and reply.chunk_delay:
                self.emu._wait(reply.chunk_delay)
            elif self.emu._stopping.is_set():
                raise _Abort()
            last = i + 1 == len(pieces)
            finished = finish if last and reply.fault is None else None
            emit(self._response(model, response_id, [piece], finished, usage if last else running))
        if not pieces:  # an empty reply: one chunk with no parts
            emit(self._response(model, response_id, [], finish, usage))
        if reply.fault == "cut":
            raise _Abort()
        if reply.fault == "error":
            err = reply.fault_error or ApiError(type="overloaded_error")
            status = err.status or _STATUS_FOR_TYPE.get(err.type, 500)
            emit({"error": self._error_object(status, _message(err))}, "error")
        end()

    # ---- errors

    @staticmethod
    def _error_object(
        status: int, message: str, reason: str | None = None, retry_after: float | None = None
    ) -> dict[str, Any]:
        error: dict[str, Any] = {
            "code": status,
            "message": message,
            "status": _STATUS_NAMES.get(status, "UNKNOWN"),
        }
        details: list[dict[str, Any]] = []
        if reason is not None:
            details.append(
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": reason,
                    "domain": "googleapis.com",
                }
            )
        if retry_after is not None:
            details.append(
                {
                    "@type": "type.googleapis.com/google.rpc.RetryInfo",
                    "retryDelay": f"{retry_after:g}s",
                }
            )
        if details:
            error["details"] = details
        return error

    def _error(
        self,
        x: _Exchange,
        status: int,
        message: str,
        *,
        reason: str | None = None,
        retry_after: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        x.rec.outcome = f"error:{_STATUS_NAMES.get(status, status)}"
        error = self._error_object(status, message, reason, retry_after)
        self._send(x, status, {"error": error}, headers)

    def _api_error(self, x: _Exchange, err: ApiError, body: Mapping[str, Any], window: int) -> None:
        if err.delay:
            self.emu._wait(err.delay)
        status = err.status or _STATUS_FOR_TYPE.get(err.type, 500)
        if err.prompt_too_long:
            tokens = err.tokens if err.tokens is not None else gemini_prompt_tokens(body)
            maximum = err.maximum
            if maximum is None:
                over = err.over_by if err.over_by is not None else max(1, tokens // 10)
                maximum = window if tokens > window else max(0, tokens - over)
            message = (
                f"The input token count ({tokens}) exceeds the maximum number of tokens "
                f"allowed ({maximum})."
            )
        else:
            message = _message(err)
        retry = err.retry_after
        if retry is None and err.retry_after_ms is not None:
            retry = err.retry_after_ms / 1000
        headers = dict(err.headers)
        if err.retry_after is not None:
            headers.setdefault("retry-after", f"{err.retry_after:g}")
        reason = "API_KEY_INVALID" if err.type == "authentication_error" else None
        self._error(x, status, message, reason=reason, retry_after=retry, headers=headers)

    def _send(
        self, x: _Exchange, status: int, obj: Any, headers: Mapping[str, str] | None = None
    ) -> None:
        self.emu._send_json(x, status, obj, headers)
