"""What every summarizer provider shares: the request, the outcome, the errors, the settings,
and the conversation in the shapes a request needs (docs/providers.md).

A provider (``anthropic.py``, ``openai_chat.py``) implements ``Provider``: ``whole`` writes the
summary of a conversation in one request (its own retries inside), ``write`` sends one plain
request (a system prompt and messages of text) and returns its reply, which is what a summary
in pieces is made of (``pieces.py``). Both raise ``ContextTooLong`` when the provider says the
request does not fit its window, and ``ProviderFailed`` when it cannot answer.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, Protocol, TypeVar

import anyio

from compactd import protocol as p
from compactd.core import constants as c
from compactd.core.outbound import remember_secret, upstream
from compactd.core.tokens import chars_to_tokens, pad

__all__ = [
    "ContextTooLong",
    "Mode",
    "Note",
    "Provider",
    "ProviderFailed",
    "ProviderSettings",
    "Reply",
    "SummarizerError",
    "SummaryOutcome",
    "SummaryRequest",
    "UpstreamError",
    "estimate_message",
    "plain_messages",
    "with_instruction",
]

Mode = Literal["cacheShared", "plain", "pieces"]
Note = Callable[[str], None]

_EPHEMERAL: Final = {"type": "ephemeral"}
THINKING_KINDS: Final = frozenset({"thinking", "redacted_thinking"})


class SummarizerError(p.CompactdError):
    """A summary could not be produced. ``api_failure``: the summarizers kept failing (not the
    content), which is when the engine may fall back to the offline summary; ``report`` says
    which summarizers were passed over and why."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        api_failure: bool = False,
        report: p.SummarizerReport | None = None,
        **data: Any,
    ) -> None:
        super().__init__(code, message, **data)
        self.api_failure = api_failure
        self.report = report


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What to summarize and how.

    ``messages`` is the conversation exactly as the main loop sends it (needed for the cache
    to be shared); ``plain`` builds the same conversation normalized for the fallback request
    (media replaced by markers, the skill listing dropped). ``session_id``: whose summary it
    is, for the usage ``session/stats`` shows per provider.
    """

    messages: list[dict[str, Any]]
    instruction: str
    model: str
    cache_safe: Mapping[str, Any] | None = None
    # Built only when the fallback request is needed (normalizing a long session takes ms).
    plain: Callable[[], list[dict[str, Any]]] | None = None
    session_id: str | None = None


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
    # Which summarizer wrote it (None: a summary built before providers were reported).
    report: p.SummarizerReport | None = None


@dataclass(slots=True)
class Reply:
    """What one request delivered: the text, the stop reason and the usage."""

    parts: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(self.parts)


class UpstreamError(Exception):
    """A failure whose message may quote the upstream (its error body): the message is
    redacted and bounded here, once, before anything passes it on (core/outbound.py). Every
    provider's failures derive from it."""

    def __init__(self, message: str) -> None:
        super().__init__(upstream(message))


class ProviderFailed(UpstreamError):
    """The provider could not write the summary (an error, the API unreachable, no text)."""

    def __init__(self, message: str, *, api_failure: bool = True) -> None:
        super().__init__(message)
        self.api_failure = api_failure


class ContextTooLong(UpstreamError):
    """The provider says the request does not fit its window; ``window``: the window the error
    names, when it names one."""

    def __init__(self, message: str, window: int | None = None) -> None:
        super().__init__(message)
        self.window = window


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """One summarizer of the chain, its options resolved against the environment."""

    provider: p.SummarizerProvider
    api_key: str | None
    auth_token: str | None
    base_url: str | None
    model: str | None
    context_window: int | None
    timeout_s: float
    max_retries: int

    @property
    def label(self) -> str:
        return f"{self.provider}:{self.model}" if self.model else self.provider


class Provider(Protocol):
    """A summarizer behind one API (docs/providers.md)."""

    settings: ProviderSettings

    def window(self, model: str) -> int | None:
        """The tokens a request to ``model`` may take (prompt and reply), when known."""
        ...

    async def warm(self) -> None: ...

    async def aclose(self) -> None: ...

    async def whole(
        self, request: SummaryRequest, model: str, output_tokens: int, note: Note
    ) -> SummaryOutcome:
        """The summary of the whole conversation in one request (with its retries)."""
        ...

    async def write(
        self, model: str, system: str, messages: list[dict[str, Any]], max_tokens: int
    ) -> Reply:
        """One plain request: ``system``, ``messages`` (text only), a reply of ``max_tokens``."""
        ...


def estimate_message(message: dict[str, Any]) -> int:
    chars = len(json.dumps(message, ensure_ascii=False, separators=(",", ":")))
    return pad(chars_to_tokens(chars))


def blocks(content: Any) -> list[dict[str, Any]]:
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
        kept = [b for b in blocks(out[-1].get("content")) if b.get("type") != "tool_use"]
        if any(b.get("type") not in THINKING_KINDS for b in kept):
            out[-1]["content"] = kept
        else:
            out.pop()
    instruction_block = {"type": "text", "text": instruction}
    if out and out[-1].get("role") == "user":
        out[-1]["content"] = [*blocks(out[-1].get("content")), instruction_block]
    else:
        out.append({"role": "user", "content": [instruction_block]})
    if cache_marker and len(out) >= 2:
        target = out[-2]
        found = list(blocks(target.get("content")))
        # Thinking blocks cannot carry a cache marker: use the last block that can.
        for i in range(len(found) - 1, -1, -1):
            if found[i].get("type") not in THINKING_KINDS:
                found[i] = {**found[i], "cache_control": dict(_EPHEMERAL)}
                target["content"] = found
                break
    return out


def _tool_result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for inner in blocks(content):
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
        rendered: list[dict[str, Any]] = []
        for block in blocks(message.get("content")):
            kind = block.get("type")
            if kind in THINKING_KINDS:
                continue
            if kind == "tool_use":
                name = str(block.get("name", "tool"))
                names[str(block.get("id"))] = name
                args = json.dumps(block.get("input"), ensure_ascii=False)
                rendered.append({"type": "text", "text": f"[called {name} with {args}]"})
            elif kind == "tool_result":
                name = names.get(str(block.get("tool_use_id")), "tool")
                status = " (error)" if block.get("is_error") else ""
                text = _tool_result_text(block)
                rendered.append({"type": "text", "text": f"[{name} result{status}]\n{text}"})
            elif kind in ("image", "document"):
                rendered.append({"type": "text", "text": f"[{kind}]"})
            elif kind == "text":
                rendered.append({k: v for k, v in block.items() if k != "cache_control"})
            else:
                rendered.append({"type": "text", "text": json.dumps(block, ensure_ascii=False)})
        if not rendered:
            # A message made only of thinking: keep the turn so roles still alternate.
            rendered = [{"type": "text", "text": "[no visible content]"}]
        out.append({"role": message.get("role"), "content": rendered})
    return out


def timeout_seconds(options: p.SummarizerOptions) -> float:
    timeout_ms = options.timeout_ms if options.timeout_ms and options.timeout_ms > 0 else None
    return (timeout_ms or c.SUMMARIZER_TIMEOUT_MS) / 1000


def resolve_settings(
    provider: p.SummarizerProvider,
    options: p.SummarizerOptions,
    env: Mapping[str, str],
    *,
    key_variable: str,
    base_url_variable: str,
    token_variable: str | None = None,
) -> ProviderSettings:
    """A summarizer's settings: the key from the options, else the variable ``apiKeyEnv``
    names, else the provider's own variable (then its auth token variable, if it has one);
    the base URL from the options, else the provider's variable."""
    named = env.get(options.api_key_env) if options.api_key_env else None
    api_key = options.api_key or named or env.get(key_variable) or None
    token = env.get(token_variable) if token_variable and not api_key else None
    # Whatever an upstream echoes, these never leave compactd (core/outbound.py).
    remember_secret(api_key)
    remember_secret(token)
    retries = options.max_retries
    return ProviderSettings(
        provider=provider,
        api_key=api_key,
        auth_token=token or None,
        base_url=options.base_url or env.get(base_url_variable) or None,
        model=options.model,
        context_window=options.context_window,
        timeout_s=timeout_seconds(options),
        max_retries=retries if retries is not None else c.SUMMARIZER_MAX_RETRIES,
    )


class _Closable(Protocol):
    async def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=_Closable)


class LazyClient(Generic[ClientT]):
    """An SDK client built on first use: the SDK takes seconds to import, so it is loaded off
    the event loop, once, and the daemon starts fast and keeps answering meanwhile."""

    def __init__(self, module: str, build: Callable[[Any], ClientT]) -> None:
        self._module = module
        self._build = build
        self._client: ClientT | None = None
        self._loading = anyio.Lock()

    async def get(self) -> ClientT:
        async with self._loading:
            if self._client is None:
                sdk = await anyio.to_thread.run_sync(importlib.import_module, self._module)
                self._client = self._build(sdk)
            return self._client

    async def close(self) -> None:
        """Close the client's HTTP connections, if it was built; the next use builds another."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()
