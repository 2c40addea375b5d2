"""Loopback emulator of the Anthropic Messages API for tests and benchmarks.

Quick use::

    from tests.emulator import Emulator, Reply, ToolUse, overloaded

    with Emulator() as emu:
        emu.script(overloaded(retry_after_ms=10), Reply(text="hello"))
        client = anthropic.Anthropic(base_url=emu.base_url, api_key="test")
        ...
        emu.requests          # what was received
        emu.cost_summary()    # token totals incl. cache reads/writes

Agents: ``request_kind(body)`` tells compactd's summary requests ("summary") from an
agent's own ("main"); ``emu.set_latency("summary", 0.9)`` makes summaries take their time,
``emu.hold("summary")`` keeps them waiting until ``emu.release("summary")``.

Pytest fixture: ``from tests.emulator.fixtures import emulator``.
Command line: ``python -m tests.emulator --port 8080``, or ``python -m tests.emulator
--replies FILE -- COMMAND`` to run a command (an agent) against it.
Token rule: see ``tests.emulator.tokens``; cache rules: ``tests.emulator.cache``.
"""

from .cache import MAX_BREAKPOINTS, PromptCache
from .script import (
    DEFAULT,
    ApiError,
    Reply,
    ToolUse,
    api_error,
    authentication_error,
    cut_stream,
    default_summary,
    empty_reply,
    mid_stream_error,
    no_message_stop,
    overloaded,
    prompt_too_long,
    rate_limited,
    reply_from_dict,
    request_kind,
    truncated_stream,
    user_texts,
)
from .server import THREAD_PREFIX, CostSummary, Emulator, RecordedRequest, iter_sse
from .tokens import block_tokens, estimate_tokens, output_tokens_for, prompt_blocks, text_tokens

__all__ = [
    "DEFAULT",
    "MAX_BREAKPOINTS",
    "THREAD_PREFIX",
    "ApiError",
    "CostSummary",
    "Emulator",
    "PromptCache",
    "RecordedRequest",
    "Reply",
    "ToolUse",
    "api_error",
    "authentication_error",
    "block_tokens",
    "cut_stream",
    "default_summary",
    "empty_reply",
    "estimate_tokens",
    "iter_sse",
    "mid_stream_error",
    "no_message_stop",
    "output_tokens_for",
    "overloaded",
    "prompt_blocks",
    "prompt_too_long",
    "rate_limited",
    "reply_from_dict",
    "request_kind",
    "text_tokens",
    "truncated_stream",
    "user_texts",
]
