"""The OpenAI provider: summaries through the Chat Completions API with ``openai.AsyncOpenAI``.

The Chat Completions API is what OpenAI, OpenRouter, Ollama, vLLM, llama-server, LM Studio and
most gateways speak (docs/providers.md#openai). A request is a system message (the summarizer's
system prompt) and the conversation as text messages (tool calls and results rendered as text,
``plain_messages``), the summary instruction last; it streams, and asks for the usage in the
last chunk (``stream_options.include_usage``). A context-length error, in any of the shapes
these servers send it, becomes ``ContextTooLong``; a stream that ends without a finish reason is
retried once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from compactd import protocol as p
from compactd.core import constants as c
from compactd.core.pieces import context_limit, known_window
from compactd.core.prompts import PLAIN_SYSTEM_PROMPT
from compactd.services.summarizers.base import (
    ContextTooLong,
    LazyClient,
    Note,
    ProviderFailed,
    ProviderSettings,
    Reply,
    SummaryOutcome,
    SummaryRequest,
    UpstreamError,
    blocks,
    plain_messages,
    resolve_settings,
    with_instruction,
)

if TYPE_CHECKING:
    import openai

__all__ = ["ENV_OPENAI_API_KEY", "ENV_OPENAI_BASE_URL", "OpenAIProvider", "openai_settings"]

log = logging.getLogger(__name__)

# The variables the ``openai`` SDK reads; compactd reads them from ``App.env`` instead so that
# ``initializationOptions.env`` can override them.
ENV_OPENAI_API_KEY: Final = c.ENV_OPENAI_API_KEY
ENV_OPENAI_BASE_URL: Final = c.ENV_OPENAI_BASE_URL
# Local servers (Ollama, llama-server, LM Studio) take no key, but the SDK insists on one.
LOCAL_SERVER_KEY: Final = "not-needed"
# Newer OpenAI models refuse ``max_tokens`` and ask for ``max_completion_tokens``; local
# servers know only the former (docs/providers.md#openai).
_NEWER_LIMIT_PARAM: Final = "max_completion_tokens"


class _StreamBroken(UpstreamError):
    """The stream ended without a finish reason (retried once)."""


def chat_messages(system: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Plain API messages (text blocks only) as Chat Completions messages after ``system``."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for message in messages:
        text = "\n\n".join(
            str(b.get("text", ""))
            for b in blocks(message.get("content"))
            if b.get("type") == "text"
        )
        role = "assistant" if message.get("role") == "assistant" else "user"
        out.append({"role": role, "content": text})
    return out


class OpenAIProvider:
    """Summaries through ``openai.AsyncOpenAI`` (docs/providers.md#openai)."""

    def __init__(self, settings: ProviderSettings) -> None:
        self.settings = settings
        self._client: LazyClient[openai.AsyncOpenAI] = LazyClient(
            "openai",
            lambda sdk: sdk.AsyncOpenAI(
                api_key=settings.api_key or LOCAL_SERVER_KEY,
                base_url=settings.base_url,
                timeout=settings.timeout_s,
                max_retries=settings.max_retries,
            ),
        )
        self._limit_param = "max_tokens"

    def window(self, model: str) -> int | None:
        return self.settings.context_window or known_window(model)

    async def warm(self) -> None:
        await self._client.get()

    async def aclose(self) -> None:
        await self._client.close()

    async def whole(
        self, request: SummaryRequest, model: str, output_tokens: int, note: Note
    ) -> SummaryOutcome:
        source = request.plain() if request.plain is not None else request.messages
        messages = with_instruction(plain_messages(source), request.instruction, cache_marker=False)
        started = time.perf_counter()
        attempts = 0
        for attempt in range(c.SUMMARIZER_STREAM_RETRIES + 1):
            attempts += 1
            try:
                reply = await self._stream_once(
                    model, chat_messages(PLAIN_SYSTEM_PROMPT, messages), output_tokens
                )
                break
            except _StreamBroken as exc:
                if attempt >= c.SUMMARIZER_STREAM_RETRIES:
                    raise ProviderFailed(f"the stream broke twice: {exc}") from exc
                note(f"the stream broke ({exc}); retrying")
        if not reply.text.strip():
            raise ProviderFailed("the model returned no summary text", api_failure=False)
        return SummaryOutcome(
            text=reply.text,
            mode="plain",
            model=model,
            usage=reply.usage or None,
            stop_reason=reply.stop_reason,
            attempts=attempts,
            ptl_retries=0,
            api_seconds=time.perf_counter() - started,
        )

    async def write(
        self, model: str, system: str, messages: list[dict[str, Any]], max_tokens: int
    ) -> Reply:
        for attempt in range(c.SUMMARIZER_STREAM_RETRIES + 1):
            try:
                return await self._stream_once(model, chat_messages(system, messages), max_tokens)
            except _StreamBroken as exc:
                if attempt >= c.SUMMARIZER_STREAM_RETRIES:
                    raise ProviderFailed(f"the stream broke twice: {exc}") from exc
        raise AssertionError("unreachable")

    async def _stream_once(
        self, model: str, messages: list[dict[str, Any]], max_tokens: int
    ) -> Reply:
        client = await self._client.get()
        import openai  # loaded by ``LazyClient``

        reply = Reply()
        try:
            try:
                stream = await self._create(client, model, messages, max_tokens)
            except openai.BadRequestError as exc:
                if _NEWER_LIMIT_PARAM not in str(exc) or self._limit_param == _NEWER_LIMIT_PARAM:
                    raise
                self._limit_param = _NEWER_LIMIT_PARAM
                stream = await self._create(client, model, messages, max_tokens)
            async with stream:
                async for chunk in stream:
                    if chunk.usage is not None:
                        reply.usage = _usage(chunk.usage)
                    for choice in chunk.choices:
                        if choice.delta is not None and choice.delta.content:
                            reply.parts.append(choice.delta.content)
                        if choice.finish_reason is not None:
                            reply.stop_reason = _stop_reason(choice.finish_reason)
        except openai.APIStatusError as exc:
            body = exc.body if isinstance(exc.body, dict) else None
            found = context_limit(str(exc.message), body)
            if found is not None and exc.status_code in (400, 413, 500):
                raise ContextTooLong(str(exc.message), found.window) from exc
            raise ProviderFailed(f"API error {exc.status_code}: {exc.message}") from exc
        except openai.APIConnectionError as exc:
            raise ProviderFailed(f"cannot reach the API: {exc}") from exc
        except openai.APIError as exc:  # an error event inside the stream
            found = context_limit(str(exc.message), exc.body)
            if found is not None:
                raise ContextTooLong(str(exc.message), found.window) from exc
            raise _StreamBroken(str(exc.message)) from exc
        if reply.stop_reason is None:
            raise _StreamBroken("the stream ended without a finish reason")
        return reply

    async def _create(
        self,
        client: openai.AsyncOpenAI,
        model: str,
        messages: list[dict[str, Any]],
        max_tokens: int,
    ) -> Any:
        params: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            self._limit_param: max_tokens,
        }
        return await client.chat.completions.create(**params)


def _usage(usage: Any) -> dict[str, Any]:
    """Chat Completions usage in the Messages API's names, which the rest of compactd reads."""
    out: dict[str, Any] = {
        "input_tokens": int(usage.prompt_tokens or 0),
        "output_tokens": int(usage.completion_tokens or 0),
    }
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    if cached:
        # OpenAI counts cached tokens inside prompt_tokens; the Messages API apart.
        out["cache_read_input_tokens"] = int(cached)
        out["input_tokens"] -= int(cached)
    return out


def _stop_reason(finish_reason: str) -> str:
    # "length" is Chat Completions' name for the output limit.
    return "max_tokens" if finish_reason == "length" else finish_reason


def openai_settings(options: p.SummarizerOptions, env: Mapping[str, str]) -> ProviderSettings:
    """An OpenAI summarizer's settings: ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` unless the
    options say otherwise."""
    return resolve_settings(
        "openai",
        options,
        env,
        key_variable=ENV_OPENAI_API_KEY,
        base_url_variable=ENV_OPENAI_BASE_URL,
    )
