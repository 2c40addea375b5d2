"""The summarizer the engine calls: a chain of providers tried in order, each writing the
summary at once when the conversation fits its window and in pieces when it does not
(docs/providers.md).

``Summarizer.summarize`` tries ``initializationOptions.summarizer`` and then each entry of its
``fallback`` list; a provider is passed over when it has no credentials, when its breaker is
open (it failed ``MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES`` times in a row and a later one can
answer), or when it fails (an error, the API unreachable, its ``timeoutMs``). What wrote the
summary, and why each other was passed over, comes back as a ``SummarizerReport``. When every
one fails, ``SummarizerError`` carries the same report and the engine builds the summary
offline (unless ``offlineFallback`` is false). The requests and tokens each provider spent are
kept per session for ``session/stats``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import anyio

from compactd import protocol as p
from compactd.core import constants as c
from compactd.core.pieces import PIECE_OUTPUT_SHARE, WINDOW_MARGIN_SHARE, text_tokens
from compactd.services.summarizers.anthropic import AnthropicProvider, anthropic_settings
from compactd.services.summarizers.base import (
    ContextTooLong,
    Note,
    Provider,
    ProviderFailed,
    ProviderSettings,
    SummarizerError,
    SummaryOutcome,
    SummaryRequest,
    estimate_message,
)
from compactd.services.summarizers.openai_chat import OpenAIProvider, openai_settings
from compactd.services.summarizers.pieces import shrink, summarize_in_pieces

__all__ = ["Summarizer"]

log = logging.getLogger(__name__)

# A provider whose breaker opened is skipped for this long before it is tried again
# (compactd's own choice: long enough to stop paying a dead server's timeout on every
# compaction, short enough to notice it came back).
BREAKER_COOLDOWN_S: Final = 300.0


@dataclass(slots=True)
class _Entry:
    """One summarizer of the chain and what the daemon learned about it."""

    settings: ProviderSettings
    provider: Provider | None
    # Why it can never answer (no credentials); None when it can.
    unusable: str | None = None
    failures: int = 0
    failed_at: float = 0.0

    def passed(self, reason: str) -> p.PassedOver:
        return p.PassedOver(
            provider=self.settings.provider, model=self.settings.model, reason=reason
        )


def _provider_name(options: p.SummarizerOptions) -> p.SummarizerProvider:
    if options.provider is not None:
        return options.provider
    return "offline" if options.offline else "anthropic"


def _entry(options: p.SummarizerOptions, env: Mapping[str, str]) -> _Entry | None:
    """The chain entry of ``options``; None for the offline summarizer (the chain's end)."""
    name = _provider_name(options)
    if name == "offline":
        return None
    if name == "openai":
        settings = openai_settings(options, env)
        # A local server takes no key; OpenAI itself (no base URL) needs one.
        if settings.api_key is None and settings.base_url is None:
            return _Entry(settings, None, unusable="no API key is configured")
        return _Entry(settings, OpenAIProvider(settings))
    settings = anthropic_settings(options, env)
    if settings.api_key is None and settings.auth_token is None:
        return _Entry(settings, None, unusable="no API key is configured")
    return _Entry(settings, AnthropicProvider(settings))


def _chain(options: p.SummarizerOptions, env: Mapping[str, str]) -> list[_Entry]:
    entries: list[_Entry] = []
    for item in [options, *(options.fallback or [])]:
        entry = _entry(item, env)
        if entry is None:
            break  # offline: whatever follows it is never reached
        entries.append(entry)
    return entries


def _request_tokens(request: SummaryRequest) -> int:
    """compactd's estimate of the one-request summary's prompt."""
    total = sum(estimate_message(m) for m in request.messages) + text_tokens(request.instruction)
    cs = request.cache_safe or {}
    for key in ("system", "tools"):
        if cs.get(key):
            total += estimate_message({key: cs[key]})
    return total


@dataclass(slots=True)
class _Usage:
    by_key: dict[tuple[str, str | None], p.ProviderUsage] = field(default_factory=dict)

    def add(
        self,
        settings: ProviderSettings,
        model: str,
        usage: Mapping[str, Any] | None,
        requests: int,
        failed: bool,
    ) -> None:
        key = (settings.provider, model)
        row = self.by_key.get(key)
        if row is None:
            row = self.by_key[key] = p.ProviderUsage(provider=settings.provider, model=model)
        row.requests += requests
        row.failures += 1 if failed else 0
        if usage:
            row.input_tokens += int(usage.get("input_tokens") or 0)
            row.input_tokens += int(usage.get("cache_creation_input_tokens") or 0)
            row.output_tokens += int(usage.get("output_tokens") or 0)
            row.cache_read_input_tokens += int(usage.get("cache_read_input_tokens") or 0)


class Summarizer:
    """The chain of summarizers; ``offline`` when none of them can answer."""

    def __init__(
        self,
        options: p.SummarizerOptions | None,
        env: Mapping[str, str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        opts = options or p.SummarizerOptions()
        self._entries = _chain(opts, env)
        self._offline_fallback = opts.offline_fallback is not False
        self._clock = clock
        self._usage: dict[str, _Usage] = {}

    @property
    def offline(self) -> bool:
        """No summarizer of the chain can answer: summaries are built offline."""
        return all(e.provider is None for e in self._entries)

    @property
    def offline_fallback(self) -> bool:
        return self._offline_fallback

    @property
    def chain(self) -> list[ProviderSettings]:
        return [e.settings for e in self._entries]

    def usage(self, session_id: str) -> list[p.ProviderUsage]:
        """What each summarizer spent on ``session_id`` since the daemon started."""
        found = self._usage.get(session_id)
        return list(found.by_key.values()) if found is not None else []

    async def warm(self) -> None:
        """Load the first usable provider's SDK now, in a worker thread, so that the first
        summary does not wait for it (docs/background.md#preparation)."""
        for entry in self._entries:
            if entry.provider is not None:
                await entry.provider.warm()
                return

    async def aclose(self) -> None:
        for entry in self._entries:
            if entry.provider is not None:
                await entry.provider.aclose()

    def _breaker_open(self, index: int) -> bool:
        entry = self._entries[index]
        later = any(e.provider is not None for e in self._entries[index + 1 :])
        return (
            later
            and entry.failures >= c.MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES
            and self._clock() - entry.failed_at < BREAKER_COOLDOWN_S
        )

    async def summarize(self, request: SummaryRequest, note: Note | None = None) -> SummaryOutcome:
        """The summary from the first summarizer of the chain that writes one (see the module
        docstring); ``SummarizerError`` with the report when none does."""
        say = note or (lambda _msg: None)
        passed: list[p.PassedOver] = []
        api_failure = False
        for index, entry in enumerate(self._entries):
            provider = entry.provider
            if provider is None:
                passed.append(entry.passed(entry.unusable or "unavailable"))
                continue
            if self._breaker_open(index):
                passed.append(entry.passed(f"breaker open after {entry.failures} failures"))
                continue
            model = entry.settings.model or request.model
            try:
                outcome, pieces = await self._try(entry, provider, request, model, say)
            except ProviderFailed as exc:
                reason = str(exc)
                api_failure = api_failure or exc.api_failure
            except TimeoutError:
                reason = f"did not finish within {entry.settings.timeout_s:g} s"
                api_failure = True
            else:
                entry.failures = 0
                self._record(request, entry, model, outcome.usage, pieces, failed=False)
                report = p.SummarizerReport(
                    provider=entry.settings.provider, model=model, pieces=pieces, passed_over=passed
                )
                return dataclasses.replace(outcome, report=report)
            entry.failures += 1
            entry.failed_at = self._clock()
            self._record(request, entry, model, None, 0, failed=True)
            log.warning("summarizer %s failed: %s", entry.settings.label, reason)
            passed.append(entry.passed(reason))
            if index + 1 < len(self._entries):
                say(f"{entry.settings.label} failed ({reason}); trying the next summarizer")
        report = p.SummarizerReport(provider="offline", passed_over=passed)
        reasons = "; ".join(f"{x.provider}: {x.reason}" for x in passed) or "none configured"
        raise SummarizerError(
            p.ErrorCode.SUMMARY_FAILED,
            f"the summarizer failed ({reasons})"
            if len(passed) == 1
            else f"every summarizer failed ({reasons})",
            api_failure=api_failure or not passed,
            report=report,
        )

    async def _try(
        self, entry: _Entry, provider: Provider, request: SummaryRequest, model: str, note: Note
    ) -> tuple[SummaryOutcome, int]:
        try:
            await provider.warm()  # loading the SDK does not count toward the timeout
        except ImportError as exc:
            raise ProviderFailed(f"its SDK cannot be loaded: {exc}") from exc
        with anyio.fail_after(entry.settings.timeout_s):
            window = provider.window(model)
            output = c.COMPACT_MAX_OUTPUT_TOKENS
            if window is not None:
                output = min(output, window // PIECE_OUTPUT_SHARE)
                needed = _request_tokens(request) + output + window // WINDOW_MARGIN_SHARE
                if needed > window:
                    return await summarize_in_pieces(provider, request, model, window, note)
            try:
                return await provider.whole(request, model, output, note), 1
            except ContextTooLong as exc:
                # The window the error names (learned for this compaction; a known window
                # is a setting, contextWindow, docs/providers.md#window).
                window = shrink(window or _request_tokens(request), exc.window)
                note(f"the conversation does not fit {entry.settings.label}'s window; in pieces")
                return await summarize_in_pieces(provider, request, model, window, note)

    def _record(
        self,
        request: SummaryRequest,
        entry: _Entry,
        model: str,
        usage: Mapping[str, Any] | None,
        requests: int,
        *,
        failed: bool,
    ) -> None:
        if request.session_id is None:
            return
        found = self._usage.setdefault(request.session_id, _Usage())
        found.add(entry.settings, model, usage, requests, failed)
