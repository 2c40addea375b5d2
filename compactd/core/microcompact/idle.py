"""When the model last answered, and whether the prompt cache has expired since
(docs/microcompact.md#time-based). The clock arrives as a parameter.

Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from compactd.core import constants as c
from compactd.core.microcompact.config import DEFAULT_CONFIG, MicroConfig
from compactd.transcript.model import Entry

__all__ = [
    "idle_gap_seconds",
    "is_idle",
    "last_response_time",
    "parse_timestamp",
]


def parse_timestamp(value: str | None) -> float | None:
    """Seconds since the epoch of a transcript timestamp (ISO 8601, usually ending in Z)."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        # Claude Code writes UTC; a naive stamp is read as UTC rather than local time.
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def last_response_time(entries: Sequence[Entry]) -> float | None:
    """When the most recent real assistant response was written (None: no usable one)."""
    for index in range(len(entries) - 1, -1, -1):
        entry = entries[index]
        if entry.type != "assistant" or entry.is_api_error_message:
            continue
        if entry.message is not None and entry.message.model == c.SYNTHETIC_MODEL:
            continue
        stamp = parse_timestamp(entry.timestamp)
        if stamp is not None:
            return stamp
    return None


def idle_gap_seconds(entries: Sequence[Entry], now: float) -> float | None:
    """Seconds from the last assistant response to ``now``; None without a response."""
    last = last_response_time(entries)
    return None if last is None else now - last


def is_idle(entries: Sequence[Entry], now: float, config: MicroConfig = DEFAULT_CONFIG) -> bool:
    """Whether the gap since the last response exceeds the cache lifetime (strictly)."""
    gap = idle_gap_seconds(entries, now)
    return gap is not None and gap > config.idle_seconds
