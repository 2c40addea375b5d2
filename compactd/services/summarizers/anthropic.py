"""The Anthropic provider: summaries through the Messages API with ``anthropic.AsyncAnthropic``.

``whole`` runs the request chain docs/compaction.md#fallback-chain describes:

1. a cache-sharing request: the same model, system blocks, tools, thinking config and message
   prefix as the main loop's last request (``cacheSafeParams``), the instruction added as an
   extra text block on the last user message and the message-level cache marker on the
   second-to-last message, so the request reads the main loop's cached prefix;
2. if that fails (or returns no text), a plain request: a summarizer system prompt, no tools,
   thinking disabled, tool blocks rendered as text;
3. within either, "prompt is too long" drops the oldest API rounds (``split.truncate_head_for_
   ptl``) and retries, at most three times; a stream that broke after it started, or ended
   without ``message_stop``, is retried once.

``write`` sends one plain streaming request (a piece of a summary in pieces). Cancellation (a
cancelled task) passes straight through and closes the HTTP stream.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec

from compactd import protocol as p
from compactd.core import constants as c
from compactd.core import split
from compactd.core.pieces import context_limit
from compactd.core.prompts import PLAIN_SYSTEM_PROMPT
from compactd.core.tokens import model_limits
from compactd.core.tokens.limits import known_model
from compactd.services.summarizers.base import (
    ContextTooLong,
    LazyClient,
    Mode,
    Note,
    ProviderFailed,
    ProviderSettings,
    Reply,
    SummaryOutcome,
    SummaryRequest,
    UpstreamError,
    estimate_message,
    plain_messages,
    resolve_settings,
    with_instruction,
)

if TYPE_CHECKING:
    import anthropic

__all__ = ["ENV_API_KEY", "ENV_AUTH_TOKEN", "ENV_BASE_URL", "AnthropicProvider"]

log = logging.getLogger(__name__)

# The SDK warns about deprecated model names on every call; the model is the user's choice and
# the warning would only clutter the daemon's log.
warnings.filterwarnings(
    "ignore", message=r"The model .* is deprecated", category=DeprecationWarning
)

_MESSAGES_PATH: Final = "/v1/messages"
_json_encoder: Final = msgspec.json.Encoder()

# Environment variables the SDK itself reads; compactd reads them from ``App.env`` instead so
# that ``initializationOptions.env`` can override them.
ENV_API_KEY: Final = c.ENV_API_KEY
ENV_AUTH_TOKEN: Final = c.ENV_AUTH_TOKEN
ENV_BASE_URL: Final = c.ENV_BASE_URL


class _StreamBroken(UpstreamError):
    """The stream started but did not finish cleanly (retried once)."""


class _PromptTooLong(UpstreamError):
    def __init__(self, message: str) -> None:
        self.gap = split.prompt_too_long_gap(message)  # from the whole text, before it is cut
        super().__init__(message)


class _ModeFailed(UpstreamError):
    """This mode cannot produce a summary; the next mode may."""

    def __init__(self, message: str, *, api_failure: bool) -> None:
        super().__init__(message)
        self.api_failure = api_failure


@dataclass(slots=True)
class _ChainState:
    messages: list[dict[str, Any]]
    attempts: int = 0
    ptl_retries: int = 0
    api_seconds: float = 0.0


def _count_markers(value: Any) -> int:
    if isinstance(value, list):
        return sum(1 for b in value if isinstance(b, dict) and "cache_control" in b)
    return 0


class AnthropicProvider:
    """Summaries through ``anthropic.AsyncAnthropic`` (docs/anthropic-api.md)."""

    def __init__(self, settings: ProviderSettings) -> None:
        self.settings = settings
        self._client: LazyClient[anthropic.AsyncAnthropic] = LazyClient(
            "anthropic",
            lambda sdk: sdk.AsyncAnthropic(
                api_key=settings.api_key,
                auth_token=settings.auth_token,
                base_url=settings.base_url,
                timeout=settings.timeout_s,
                max_retries=settings.max_retries,
            ),
        )

    def window(self, model: str) -> int | None:
        if self.settings.context_window:
            return self.settings.context_window
        return model_limits(model).context_window if known_model(model) else None

    async def warm(self) -> None:
        await self._client.get()

    async def aclose(self) -> None:
        await self._client.close()

    async def write(
        self, model: str, system: str, messages: list[dict[str, Any]], max_tokens: int
    ) -> Reply:
        params = {
            "model": model,
            "max_tokens": max_tokens,
            "system": system,
            "thinking": {"type": "disabled"},
            "messages": messages,
        }
        state = _ChainState(messages=messages)
        try:
            return await self._stream_with_retry(params, None, state, lambda _m: None)
        except _PromptTooLong as exc:
            found = context_limit(str(exc))
            raise ContextTooLong(str(exc), found.window if found else None) from exc
        except _ModeFailed as exc:
            raise ProviderFailed(str(exc), api_failure=exc.api_failure) from exc

    async def whole(
        self, request: SummaryRequest, model: str, output_tokens: int, note: Note
    ) -> SummaryOutcome:
        await self._client.get()
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
                return await self._run_mode(mode, model, output_tokens, request, state, note)
            except _ModeFailed as exc:
                failure = exc
                log.warning("summarizer: %s request failed: %s", mode, exc)
                if mode != modes[-1]:
                    note(f"{mode} request failed ({exc}); retrying without cache sharing")
        assert failure is not None
        raise ProviderFailed(str(failure), api_failure=failure.api_failure)

    async def _run_mode(
        self,
        mode: Mode,
        model: str,
        output_tokens: int,
        request: SummaryRequest,
        state: _ChainState,
        note: Note,
    ) -> SummaryOutcome:
        while True:
            params, betas = self._params(mode, model, output_tokens, request, state.messages)
            try:
                message = await self._stream_with_retry(params, betas, state, note)
            except _PromptTooLong as exc:
                truncated = (
                    split.truncate_head_for_ptl(state.messages, exc.gap, estimate_message)
                    if state.ptl_retries < c.COMPACT_MAX_PTL_RETRIES
                    else None
                )
                if truncated is None:
                    # Dropping the oldest rounds is not enough: the conversation is summarized
                    # in pieces that fit the window the error names (docs/providers.md#pieces).
                    found = context_limit(str(exc))
                    raise ContextTooLong(str(exc), found.window if found else None) from exc
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
        self,
        mode: Mode,
        model: str,
        output_tokens: int,
        request: SummaryRequest,
        messages: list[dict[str, Any]],
    ) -> tuple[dict[str, Any], list[str] | None]:
        if mode == "plain":
            return {
                "model": model,
                "max_tokens": output_tokens,
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
            "max_tokens": output_tokens + _thinking_budget(thinking),
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
    ) -> Reply:
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

    async def _stream_once(self, params: dict[str, Any], betas: list[str] | None) -> Reply:
        """One streaming request, read event by event.

        The raw event stream is read rather than through the SDK's stream helper: the helper
        rebuilds a message snapshot at every event, which on a long summary costs more than
        everything else compactd does in a compaction.
        """
        client = await self._client.get()
        import anthropic  # loaded by ``LazyClient``
        import httpx2

        reply = Reply()
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
                        _add_usage(reply, event.message.usage)
                    elif kind == "message_delta":
                        reply.stop_reason = event.delta.stop_reason
                        _add_usage(reply, event.usage)
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


def _add_usage(reply: Reply, usage: Any) -> None:
    # message_delta carries cumulative counts: later non-null values replace earlier ones.
    if usage is not None:
        reply.usage.update(usage.model_dump(exclude_none=True))


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


def anthropic_settings(options: p.SummarizerOptions, env: Mapping[str, str]) -> ProviderSettings:
    """An Anthropic summarizer's settings: ``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_AUTH_TOKEN``)
    and ``ANTHROPIC_BASE_URL`` unless the options say otherwise."""
    return resolve_settings(
        "anthropic",
        options,
        env,
        key_variable=ENV_API_KEY,
        base_url_variable=ENV_BASE_URL,
        token_variable=ENV_AUTH_TOKEN,
    )
