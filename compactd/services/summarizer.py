"""The summarizer: one streaming Messages API call (with its retries) that writes a summary.

``Summarizer.summarize`` takes the conversation as API messages and the instruction, and runs
the chain docs/compaction.md#fallback-chain describes:

1. a cache-sharing request: the same model, system blocks, tools, thinking config and message
   prefix as the main loop's last request (``cacheSafeParams``), the instruction added as an
   extra text block on the last user message and the message-level cache marker on the
   second-to-last message, so the request reads the main loop's cached prefix;
2. if that fails (or returns no text), a plain request: a summarizer system prompt, no tools,
   thinking disabled, ``max_tokens`` 20,000, tool blocks rendered as text;
3. within either, "prompt is too long" drops the oldest API rounds (``split.truncate_head_for_
   ptl``) and retries, at most three times; a stream that broke after it started, or ended
   without ``message_stop``, is retried once.

The whole chain runs under a wall-clock timeout. Errors come out as ``SummarizerError`` (a
``CompactdError``) whose ``api_failure`` flag says whether the API itself kept failing, which is
when the engine may fall back to the offline summary. Cancellation (a cancelled task) passes
straight through and closes the HTTP stream.
"""

from __future__ import annotations

import importlib
import json
import logging
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

import anyio
import msgspec

from compactd import protocol as p
from compactd.core import constants as c
from compactd.core import split
from compactd.core.prompts import PLAIN_SYSTEM_PROMPT
from compactd.core.tokens import chars_to_tokens, pad

if TYPE_CHECKING:
    import anthropic


__all__ = [
    "Mode",
    "SummarizerError",
    "Summarizer",
    "SummaryOutcome",
    "SummaryRequest",
    "plain_messages",
    "with_instruction",
]

log = logging.getLogger(__name__)

# The SDK warns about deprecated model names on every call; the model is the user's choice and
# the warning would only clutter the daemon's log.
warnings.filterwarnings(
    "ignore", message=r"The model .* is deprecated", category=DeprecationWarning
)

Mode = Literal["cacheShared", "plain"]

_EPHEMERAL: Final = {"type": "ephemeral"}
_MESSAGES_PATH: Final = "/v1/messages"
_json_encoder: Final = msgspec.json.Encoder()
_THINKING_KINDS: Final = frozenset({"thinking", "redacted_thinking"})

# Environment variables the SDK itself reads; compactd reads them from ``App.env`` instead so
# that ``initializationOptions.env`` can override them.
ENV_API_KEY: Final = c.ENV_API_KEY
ENV_AUTH_TOKEN: Final = "ANTHROPIC_AUTH_TOKEN"
ENV_BASE_URL: Final = "ANTHROPIC_BASE_URL"


class SummarizerError(p.CompactdError):
    """A summary could not be produced. ``api_failure``: the API kept failing (not the content)."""

    def __init__(self, code: str, message: str, *, api_failure: bool = False, **data: Any) -> None:
        super().__init__(code, message, **data)
        self.api_failure = api_failure


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What to summarize and how.

    ``messages`` is the conversation exactly as the main loop sends it (needed for the cache
    to be shared); ``plain`` builds the same conversation normalized for the fallback request
    (media replaced by markers, the skill listing dropped).
    """

    messages: list[dict[str, Any]]
    instruction: str
    model: str
    cache_safe: Mapping[str, Any] | None = None
    # Built only when the fallback request is needed (normalizing a long session takes ms).
    plain: Callable[[], list[dict[str, Any]]] | None = None


@dataclass(frozen=True, slots=True)
class SummaryOutcome:
    text: str
    mode: Mode
    model: str
    usage: dict[str, Any] | None
    stop_reason: str | None
    attempts: int
    ptl_retries: int
    api_seconds: float


class _StreamBroken(Exception):
    """The stream started but did not finish cleanly (retried once)."""


class _PromptTooLong(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.gap = split.prompt_too_long_gap(message)


class _ModeFailed(Exception):
    """This mode cannot produce a summary; the next mode may."""

    def __init__(self, message: str, *, api_failure: bool) -> None:
        super().__init__(message)
        self.api_failure = api_failure


@dataclass(frozen=True, slots=True)
class _Settings:
    api_key: str | None
    auth_token: str | None
    base_url: str | None
    model: str | None
    timeout_s: float
    max_retries: int
    offline: bool
    offline_fallback: bool


def _settings(options: p.SummarizerOptions | None, env: Mapping[str, str]) -> _Settings:
    opts = options or p.SummarizerOptions()
    api_key = opts.api_key or env.get(ENV_API_KEY) or None
    auth_token = None if api_key else (env.get(ENV_AUTH_TOKEN) or None)
    timeout_ms = opts.timeout_ms if opts.timeout_ms and opts.timeout_ms > 0 else None
    return _Settings(
        api_key=api_key,
        auth_token=auth_token,
        base_url=opts.base_url or env.get(ENV_BASE_URL) or None,
        model=opts.model,
        timeout_s=(timeout_ms or c.SUMMARIZER_TIMEOUT_MS) / 1000,
        max_retries=opts.max_retries if opts.max_retries is not None else c.SUMMARIZER_MAX_RETRIES,
        offline=bool(opts.offline) or not (api_key or auth_token),
        offline_fallback=opts.offline_fallback is not False,
    )


def _estimate_message(message: dict[str, Any]) -> int:
    chars = len(json.dumps(message, ensure_ascii=False, separators=(",", ":")))
    return pad(chars_to_tokens(chars))


def _count_markers(value: Any) -> int:
    if isinstance(value, list):
        return sum(1 for b in value if isinstance(b, dict) and "cache_control" in b)
    return 0


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def with_instruction(
    messages: Sequence[dict[str, Any]], instruction: str, *, cache_marker: bool
) -> list[dict[str, Any]]:
    """``messages`` plus the instruction as a text block on the last user message.

    The input is not modified. A trailing assistant message gets a new user message after it;
    tool calls it makes that never got a result are removed first (the API rejects a user
    message that does not answer them). With ``cache_marker`` the second-to-last message's
    last cacheable block carries ``cache_control``, the read point of the shared prefix.
    """
    out = [dict(m) for m in messages]
    if out and out[-1].get("role") == "assistant":
        kept = [b for b in _blocks(out[-1].get("content")) if b.get("type") != "tool_use"]
        if any(b.get("type") not in _THINKING_KINDS for b in kept):
            out[-1]["content"] = kept
        else:
            out.pop()
    instruction_block = {"type": "text", "text": instruction}
    if out and out[-1].get("role") == "user":
        out[-1]["content"] = [*_blocks(out[-1].get("content")), instruction_block]
    else:
        out.append({"role": "user", "content": [instruction_block]})
    if cache_marker and len(out) >= 2:
        target = out[-2]
        blocks = list(_blocks(target.get("content")))
        # Thinking blocks cannot carry a cache marker: use the last block that can.
        for i in range(len(blocks) - 1, -1, -1):
            if blocks[i].get("type") not in _THINKING_KINDS:
                blocks[i] = {**blocks[i], "cache_control": dict(_EPHEMERAL)}
                target["content"] = blocks
                break
    return out


def _tool_result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for inner in _blocks(content):
        kind = inner.get("type")
        if kind == "text":
            parts.append(str(inner.get("text", "")))
        elif kind in ("image", "document"):
            parts.append(f"[{kind}]")
    return "\n".join(parts)


def plain_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation for a request without tools: tool blocks as text, no thinking, no media.

    The API refuses ``tool_use`` / ``tool_result`` blocks in a request that defines no tools,
    and thinking blocks need thinking enabled; rendering them as text keeps the information.
    """
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for message in messages:
        blocks: list[dict[str, Any]] = []
        for block in _blocks(message.get("content")):
            kind = block.get("type")
            if kind in _THINKING_KINDS:
                continue
            if kind == "tool_use":
                name = str(block.get("name", "tool"))
                names[str(block.get("id"))] = name
                args = json.dumps(block.get("input"), ensure_ascii=False)
                blocks.append({"type": "text", "text": f"[called {name} with {args}]"})
            elif kind == "tool_result":
                name = names.get(str(block.get("tool_use_id")), "tool")
                status = " (error)" if block.get("is_error") else ""
                text = _tool_result_text(block)
                blocks.append({"type": "text", "text": f"[{name} result{status}]\n{text}"})
            elif kind in ("image", "document"):
                blocks.append({"type": "text", "text": f"[{kind}]"})
            elif kind == "text":
                blocks.append({k: v for k, v in block.items() if k != "cache_control"})
            else:
                blocks.append({"type": "text", "text": json.dumps(block, ensure_ascii=False)})
        if not blocks:
            # A message made only of thinking: keep the turn so roles still alternate.
            blocks = [{"type": "text", "text": "[no visible content]"}]
        out.append({"role": message.get("role"), "content": blocks})
    return out


Note = Callable[[str], None]


class Summarizer:
    """Summaries through ``anthropic.AsyncAnthropic``; ``offline`` when no credentials exist."""

    def __init__(self, options: p.SummarizerOptions | None, env: Mapping[str, str]) -> None:
        self.settings = _settings(options, env)
        self._client: anthropic.AsyncAnthropic | None = None
        self._loading = anyio.Lock()

    @property
    def offline(self) -> bool:
        return self.settings.offline

    @property
    def offline_fallback(self) -> bool:
        return self.settings.offline_fallback

    async def warm(self) -> None:
        """Load the SDK now, in a worker thread, so that the first summary does not wait for it
        (docs/background.md#preparation); nothing for the offline summarizer."""
        if not self.offline:
            await self._sdk()

    async def _sdk(self) -> anthropic.AsyncAnthropic:
        async with self._loading:
            return await self._load()

    async def _load(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            # The SDK takes seconds to import: load it on first use, off the event loop, so
            # that the daemon starts fast and keeps answering meanwhile.
            sdk = await anyio.to_thread.run_sync(importlib.import_module, "anthropic")
            s = self.settings
            self._client = sdk.AsyncAnthropic(
                api_key=s.api_key,
                auth_token=s.auth_token,
                base_url=s.base_url,
                timeout=s.timeout_s,
                max_retries=s.max_retries,
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def summarize(self, request: SummaryRequest, note: Note | None = None) -> SummaryOutcome:
        """Run the request chain under the wall-clock timeout (see the module docstring)."""
        if self.offline:
            raise SummarizerError(
                p.ErrorCode.SUMMARY_FAILED, "no API key is configured for the summarizer"
            )
        await self._sdk()  # loading the SDK does not count toward the timeout
        timeout = self.settings.timeout_s
        try:
            with anyio.fail_after(timeout):
                return await self._chain(request, note or (lambda _msg: None))
        except TimeoutError as exc:
            raise SummarizerError(
                p.ErrorCode.SUMMARY_FAILED,
                f"the summarizer did not finish within {timeout:g} s",
                api_failure=True,
            ) from exc

    async def _chain(self, request: SummaryRequest, note: Note) -> SummaryOutcome:
        model = self.settings.model or request.model
        cache_safe = request.cache_safe
        modes: list[Mode] = ["plain"]
        # Sharing the cache needs the main loop's model and its request parameters.
        if cache_safe is not None and model == request.model:
            modes.insert(0, "cacheShared")
        state = _ChainState(messages=list(request.messages))
        failure: _ModeFailed | None = None
        for mode in modes:
            if mode == "plain":
                fresh = request.plain is not None and state.ptl_retries == 0
                source = request.plain() if request.plain is not None and fresh else None
                state.messages = plain_messages(source or state.messages)
            try:
                return await self._run_mode(mode, model, request, state, note)
            except _ModeFailed as exc:
                failure = exc
                log.warning("summarizer: %s request failed: %s", mode, exc)
                if mode != modes[-1]:
                    note(f"{mode} request failed ({exc}); retrying without cache sharing")
        assert failure is not None
        raise SummarizerError(
            p.ErrorCode.SUMMARY_FAILED,
            f"the summarizer failed: {failure}",
            api_failure=failure.api_failure,
        )

    async def _run_mode(
        self, mode: Mode, model: str, request: SummaryRequest, state: _ChainState, note: Note
    ) -> SummaryOutcome:
        while True:
            params, betas = self._params(mode, model, request, state.messages)
            try:
                message = await self._stream_with_retry(params, betas, state, note)
            except _PromptTooLong as exc:
                if state.ptl_retries >= c.COMPACT_MAX_PTL_RETRIES:
                    raise SummarizerError(
                        p.ErrorCode.CONTEXT_TOO_LARGE,
                        "the conversation is too large to compact: the prompt was still too "
                        f"long after {state.ptl_retries} retries ({exc})",
                    ) from exc
                truncated = split.truncate_head_for_ptl(state.messages, exc.gap, _estimate_message)
                if truncated is None:
                    raise SummarizerError(
                        p.ErrorCode.CONTEXT_TOO_LARGE,
                        "the conversation is too large to compact: nothing would be left after "
                        f"dropping the oldest rounds ({exc})",
                    ) from exc
                state.ptl_retries += 1
                dropped = len(state.messages) - len(truncated)
                note(f"prompt too long; retrying without the oldest messages ({dropped} fewer)")
                state.messages = truncated
                continue
            text = message.text
            if not text.strip():
                raise _ModeFailed("the model returned no summary text", api_failure=False)
            if message.stop_reason == "max_tokens":
                log.warning("summarizer: the summary hit the output limit and may be cut short")
            return SummaryOutcome(
                text=text,
                mode=mode,
                model=model,
                usage=message.usage or None,
                stop_reason=message.stop_reason,
                attempts=state.attempts,
                ptl_retries=state.ptl_retries,
                api_seconds=state.api_seconds,
            )

    def _params(
        self, mode: Mode, model: str, request: SummaryRequest, messages: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], list[str] | None]:
        if mode == "plain":
            return {
                "model": model,
                "max_tokens": c.COMPACT_MAX_OUTPUT_TOKENS,
                "system": PLAIN_SYSTEM_PROMPT,
                "thinking": {"type": "disabled"},
                "messages": with_instruction(messages, request.instruction, cache_marker=False),
            }, None
        cs = request.cache_safe or {}
        system = cs.get("system")
        tools = cs.get("tools")
        thinking = cs.get("thinking")
        # The API allows four cache breakpoints; the main loop's own markers in the system
        # prompt and tools come first.
        room = _count_markers(system) + _count_markers(tools) < c.MAX_CACHE_BREAKPOINTS
        params: dict[str, Any] = {
            "model": model,
            "max_tokens": c.COMPACT_MAX_OUTPUT_TOKENS + _thinking_budget(thinking),
            "messages": with_instruction(messages, request.instruction, cache_marker=room),
        }
        if system:
            params["system"] = system
        if tools:
            params["tools"] = tools
        if thinking:
            params["thinking"] = thinking
        metadata = cs.get("metadata")
        if metadata:
            params["metadata"] = metadata
        betas = cs.get("betas")
        return params, (list(betas) if betas else None)

    async def _stream_with_retry(
        self,
        params: dict[str, Any],
        betas: list[str] | None,
        state: _ChainState,
        note: Note,
    ) -> _Reply:
        for attempt in range(c.SUMMARIZER_STREAM_RETRIES + 1):
            state.attempts += 1
            started = time.perf_counter()
            try:
                return await self._stream_once(params, betas)
            except _StreamBroken as exc:
                if attempt < c.SUMMARIZER_STREAM_RETRIES:
                    log.warning("summarizer: stream broke (%s); retrying", exc)
                    note(f"the stream broke ({exc}); retrying")
                    continue
                raise _ModeFailed(f"the stream broke twice: {exc}", api_failure=True) from exc
            finally:
                state.api_seconds += time.perf_counter() - started
        raise AssertionError("unreachable")

    async def _stream_once(self, params: dict[str, Any], betas: list[str] | None) -> _Reply:
        """One streaming request, read event by event.

        The raw event stream is read rather than through the SDK's stream helper: the helper
        rebuilds a message snapshot at every event, which on a long summary costs more than
        everything else compactd does in a compaction.
        """
        client = await self._sdk()
        import anthropic  # loaded by ``_sdk``
        import httpx2

        reply = _Reply()
        begun = False
        finished = False
        # The body is encoded here and handed over as bytes through the SDK's request method
        # (its documented way to send a custom request): its own path deep-copies and
        # re-encodes a body of several hundred kilobytes, which costs more than compactd's work.
        # Authentication, retries, error mapping and SSE decoding stay the SDK's.
        headers = {"content-type": "application/json"}
        path = _MESSAGES_PATH
        if betas:
            headers["anthropic-beta"] = ",".join(betas)
            path += "?beta=true"
        body = _json_encoder.encode({**params, "stream": True})
        try:
            stream = await client.post(
                path,
                cast_to=anthropic.types.Message,
                content=body,
                options={"headers": headers},
                stream=True,
                stream_cls=anthropic.AsyncStream[anthropic.types.RawMessageStreamEvent],
            )
            async with stream:
                async for item in stream:
                    event: Any = item  # a union the checks below tell apart by ``type``
                    kind = event.type
                    if kind == "content_block_delta":
                        if event.delta.type == "text_delta":
                            reply.parts.append(event.delta.text)
                    elif kind == "content_block_start":
                        if event.content_block.type == "text" and event.content_block.text:
                            reply.parts.append(event.content_block.text)
                    elif kind == "message_start":
                        begun = True
                        reply.add_usage(event.message.usage)
                    elif kind == "message_delta":
                        reply.stop_reason = event.delta.stop_reason
                        reply.add_usage(event.usage)
                    elif kind == "message_stop":
                        finished = True
        except anthropic.APIStatusError as exc:
            text = _error_text(exc)
            if exc.status_code == 413 or "prompt is too long" in text.lower():
                raise _PromptTooLong(text) from exc
            if begun or exc.status_code == 200:
                # An ``event: error`` inside the stream: the SDK does not retry it.
                raise _StreamBroken(text) from exc
            raise _ModeFailed(f"API error {exc.status_code}: {text}", api_failure=True) from exc
        except (anthropic.APIConnectionError, httpx2.TransportError) as exc:
            if begun:
                raise _StreamBroken(f"connection lost: {exc}") from exc
            raise _ModeFailed(f"cannot reach the API: {exc}", api_failure=True) from exc
        if not finished or reply.stop_reason is None:
            # A stream closed before message_stop raises nothing in the SDK.
            raise _StreamBroken("the stream ended without message_stop")
        return reply


@dataclass(slots=True)
class _Reply:
    """What a stream delivered: the text blocks' text, the stop reason and the usage."""

    parts: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def add_usage(self, usage: Any) -> None:
        # message_delta carries cumulative counts: later non-null values replace earlier ones.
        if usage is not None:
            self.usage.update(usage.model_dump(exclude_none=True))


@dataclass(slots=True)
class _ChainState:
    messages: list[dict[str, Any]]
    attempts: int = 0
    ptl_retries: int = 0
    api_seconds: float = 0.0


def _thinking_budget(thinking: Any) -> int:
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if isinstance(budget, int) and budget > 0:
            return budget
    return 0


def _error_text(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
    return exc.message
