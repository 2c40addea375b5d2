"""Deterministic token arithmetic used by the emulator.

The real tokenizer is not available offline, so the emulator uses a fixed rule
that tests can reproduce exactly:

* A request prompt is split into *blocks*, in the order the API processes them:
  every tool definition (one block each), then the system prompt (a plain
  string counts as one ``{"type": "text", "text": ...}`` block, a list gives one
  block per element), then each message's content blocks (a plain string
  content counts as one text block).
* The cost of one block is ``ceil(len(canonical_json(block)) / 4)`` where
  ``canonical_json`` is ``json.dumps(block, sort_keys=True,
  separators=(",", ":"), ensure_ascii=False)`` of the block with its top-level
  ``cache_control`` key removed (so moving a cache marker never changes counts
  or cache keys).
* ``estimate_tokens(body)`` is the sum over all blocks.  There is no per-message
  or per-request overhead.
* Output tokens of a reply are ``ceil(len(text) / 4)`` for a text or thinking
  block and ``ceil(len(json.dumps(input)) / 4)`` for a tool_use block (see
  ``output_tokens_for``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

CHARS_PER_TOKEN = 4

__all__ = [
    "CHARS_PER_TOKEN",
    "PromptBlock",
    "block_tokens",
    "canonical_json",
    "estimate_tokens",
    "output_tokens_for",
    "prompt_blocks",
    "text_tokens",
]


def canonical_json(value: Any) -> str:
    """Stable JSON text used both for counting and for cache keys."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def text_tokens(text: str) -> int:
    """Token estimate of a raw string: one token per 4 characters, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _without_cache_control(block: Any) -> Any:
    if isinstance(block, Mapping) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def block_tokens(block: Any) -> int:
    """Token estimate of one prompt block (tool, system block or content block)."""
    return text_tokens(canonical_json(_without_cache_control(block)))


@dataclass(frozen=True)
class PromptBlock:
    """One cacheable unit of a request prompt."""

    position: int
    level: str  # "tools" | "system" | "messages"
    block: Any  # the block without its cache_control key
    cache_control: dict[str, Any] | None
    tokens: int
    message_index: int | None = None
    role: str | None = None
    first_in_message: bool = False


def _as_text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def prompt_blocks(body: Mapping[str, Any]) -> list[PromptBlock]:
    """Split a Messages API request body into blocks (tools -> system -> messages)."""
    out: list[PromptBlock] = []

    def add(level: str, raw: Any, **extra: Any) -> None:
        cc = raw.get("cache_control") if isinstance(raw, Mapping) else None
        stripped = _without_cache_control(raw)
        out.append(
            PromptBlock(
                position=len(out),
                level=level,
                block=stripped,
                cache_control=dict(cc) if isinstance(cc, Mapping) else None,
                tokens=text_tokens(canonical_json(stripped)),
                **extra,
            )
        )

    for tool in body.get("tools") or []:
        add("tools", tool)

    system = body.get("system")
    if isinstance(system, str):
        if system:
            add("system", _as_text_block(system))
    elif isinstance(system, list):
        for blk in system:
            add("system", blk)

    for m_index, message in enumerate(body.get("messages") or []):
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        content = message.get("content")
        blocks: Iterable[Any]
        if isinstance(content, str):
            blocks = [_as_text_block(content)]
        elif isinstance(content, list):
            blocks = content
        else:
            blocks = []
        for i, blk in enumerate(blocks):
            add("messages", blk, message_index=m_index, role=role, first_in_message=(i == 0))
    return out


def estimate_tokens(body: Mapping[str, Any]) -> int:
    """Estimated input tokens of a request body (sum of ``block_tokens`` over all blocks).

    This is the figure the emulator reports from ``count_tokens``, uses for the
    context-window check and puts in "prompt is too long: N tokens > M maximum".
    """
    return sum(b.tokens for b in prompt_blocks(body))


def output_tokens_for(block: Mapping[str, Any]) -> int:
    """Output tokens of one reply content block."""
    kind = block.get("type")
    if kind == "text":
        return text_tokens(block.get("text", ""))
    if kind == "thinking":
        return text_tokens(block.get("thinking", ""))
    if kind == "tool_use":
        return text_tokens(json.dumps(block.get("input", {})))
    return text_tokens(canonical_json(block))
