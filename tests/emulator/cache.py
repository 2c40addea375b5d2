"""Prompt-cache bookkeeping modelled on the Messages API.

Rules implemented (see ``PromptCache.process``):

* Breakpoints are the prompt blocks carrying ``cache_control`` (tools, system
  blocks, message content blocks), at most ``MAX_BREAKPOINTS`` of them.
* Every block position has a key: a hash chain over the model name and all
  blocks up to and including that one, in the order tools -> system ->
  messages.  The ``tool_choice`` and ``thinking`` settings are folded in just
  before the first message block, so changing them invalidates only messages.
  Consequently a changed tool list changes every key, a changed system prompt
  changes system and message keys, and a changed message changes only the keys
  from that message on.
* Read: for each breakpoint the cache is probed at the breakpoint and up to
  ``lookback`` (20) block positions before it; the longest unexpired hit over all
  breakpoints is the read point.  A hit refreshes the entry's expiry.
* Write: every breakpoint after the read point whose prefix is at least the
  model's minimum cacheable length is stored with its TTL (5 minutes, or one
  hour for ``{"ttl": "1h"}``).  The tokens between the previous cached point and
  a written breakpoint are billed as cache creation at that breakpoint's TTL.
* Usage: ``cache_read_input_tokens`` = prefix length at the read point,
  ``cache_creation_input_tokens`` = newly written tokens, ``input_tokens`` = the
  rest (the tail after the last cached/written point).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .tokens import PromptBlock, canonical_json

MAX_BREAKPOINTS = 4
DEFAULT_LOOKBACK = 20
TTL_5M = 300.0
TTL_1H = 3600.0


class CacheControlError(ValueError):
    """Raised for requests the real API rejects because of cache_control."""


@dataclass
class CacheEntry:
    expires_at: float
    ttl: float
    prefix_tokens: int


@dataclass
class CacheOutcome:
    total_tokens: int
    read_tokens: int = 0
    write_5m_tokens: int = 0
    write_1h_tokens: int = 0
    read_position: int | None = None
    written_positions: list[int] = field(default_factory=list)

    @property
    def write_tokens(self) -> int:
        return self.write_5m_tokens + self.write_1h_tokens

    @property
    def input_tokens(self) -> int:
        return self.total_tokens - self.read_tokens - self.write_tokens


def ttl_seconds(cache_control: dict[str, Any]) -> float:
    if cache_control.get("type", "ephemeral") != "ephemeral":
        raise CacheControlError(
            f"cache_control.type: Input should be 'ephemeral' (got {cache_control.get('type')!r})"
        )
    ttl = cache_control.get("ttl", "5m")
    if ttl == "5m":
        return TTL_5M
    if ttl == "1h":
        return TTL_1H
    raise CacheControlError(f"cache_control.ttl: Input should be '5m' or '1h' (got {ttl!r})")


def block_keys(
    model: str, blocks: Sequence[PromptBlock], message_settings: Any = None
) -> list[str]:
    """Hash-chain keys, one per block position (see module docstring)."""
    chain = hashlib.sha256(b"model\x00" + model.encode()).digest()
    keys: list[str] = []
    entered_messages = False
    for blk in blocks:
        h = hashlib.sha256(chain)
        if blk.level == "messages" and not entered_messages:
            entered_messages = True
            h.update(b"\x00settings\x00" + canonical_json(message_settings).encode())
        h.update(b"\x00" + blk.level.encode() + b"\x00")
        if blk.first_in_message:
            h.update(f"message:{blk.role}\x00".encode())
        h.update(canonical_json(blk.block).encode())
        chain = h.digest()
        keys.append(chain.hex())
    return keys


class PromptCache:
    """Thread-safe store of cached prefixes."""

    def __init__(self, lookback: int = DEFAULT_LOOKBACK) -> None:
        self.lookback = lookback
        self._entries: dict[str, CacheEntry] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def live_entries(self, now: float) -> int:
        with self._lock:
            return sum(1 for e in self._entries.values() if e.expires_at > now)

    @staticmethod
    def validate(blocks: Sequence[PromptBlock]) -> None:
        marked = [b for b in blocks if b.cache_control is not None]
        if len(marked) > MAX_BREAKPOINTS:
            raise CacheControlError(
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                f"Found {len(marked)}."
            )
        for b in marked:
            ttl_seconds(b.cache_control or {})

    def process(
        self,
        model: str,
        blocks: Sequence[PromptBlock],
        *,
        now: float,
        min_tokens: int,
        message_settings: Any = None,
        write: bool = True,
    ) -> CacheOutcome:
        self.validate(blocks)
        total = sum(b.tokens for b in blocks)
        outcome = CacheOutcome(total_tokens=total)
        breakpoints = [b.position for b in blocks if b.cache_control is not None]
        if not breakpoints:
            return outcome

        keys = block_keys(model, blocks, message_settings)
        prefix: list[int] = []
        running = 0
        for b in blocks:
            running += b.tokens
            prefix.append(running)

        with self._lock:
            # Drop expired entries so the store does not grow without bound.
            for k in [k for k, e in self._entries.items() if e.expires_at <= now]:
                del self._entries[k]

            read_pos = -1
            for bp in breakpoints:
                lowest = max(0, bp - self.lookback)
                for pos in range(bp, lowest - 1, -1):
                    if pos <= read_pos:
                        break
                    if keys[pos] in self._entries:
                        read_pos = pos
                        break
            if read_pos >= 0:
                hit = self._entries[keys[read_pos]]
                hit.expires_at = now + hit.ttl
                outcome.read_position = read_pos
                outcome.read_tokens = prefix[read_pos]

            if not write:
                return outcome
            covered = outcome.read_tokens
            for bp in breakpoints:
                if bp <= read_pos or prefix[bp] < min_tokens:
                    continue
                ttl = ttl_seconds(blocks[bp].cache_control or {})
                segment = prefix[bp] - covered
                if ttl == TTL_1H:
                    outcome.write_1h_tokens += segment
                else:
                    outcome.write_5m_tokens += segment
                covered = prefix[bp]
                self._entries[keys[bp]] = CacheEntry(
                    expires_at=now + ttl, ttl=ttl, prefix_tokens=prefix[bp]
                )
                outcome.written_positions.append(bp)
        return outcome
