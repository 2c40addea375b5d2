"""When to prepare a summary in the background: the start level, the growth rule and idleness.

Zero-wait compaction (docs/background.md) prepares the summary of a snapshot before the
auto-compact threshold arrives, so that ``compact/auto`` applies it at once. A preparation
starts when the count reaches ``startAt`` times the threshold, or earlier when the session
grows so fast that the threshold would arrive before twice the summarizer's last measured
duration has passed (docs/background.md#preparation); a session above half its threshold that
has been idle for ``idleMinutes`` prepares then, while the prompt cache is still warm
(docs/background.md#idle). Pure: the engine measures, this module decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "DEFAULT_IDLE_MINUTES",
    "DEFAULT_START_AT",
    "GROWTH_MARGIN",
    "IDLE_LEVEL",
    "Trigger",
    "growth_rate",
    "idle_due",
    "start_level",
]

# ``backgroundCompaction.startAt``'s default: a fraction of the auto-compact threshold (issue
# 28; GitHub Copilot's agents start summarizing at about 80% of theirs).
DEFAULT_START_AT = 0.8
# ``backgroundCompaction.idleMinutes``'s default: before a one-hour prompt cache expires, so
# the preparation reads the cached prefix (docs/cache.md).
DEFAULT_IDLE_MINUTES = 55.0
# The threshold must not arrive sooner than this many times the summarizer's last duration
# after a preparation starts: room for a slower answer than the last one.
GROWTH_MARGIN = 2.0
# Idle preparation only pays above this fraction of the threshold.
IDLE_LEVEL = 0.5


@dataclass(frozen=True, slots=True)
class Trigger:
    """What decides whether a preparation starts now."""

    tokens: int
    threshold: int
    start_at: float = DEFAULT_START_AT
    # Tokens per second the session grew by lately (``growth_rate``); None: not known yet.
    rate: float | None = None
    # Seconds the summarizer took last time; None: no summary measured yet.
    last_duration_s: float | None = None


def start_level(t: Trigger) -> int:
    """The count at which a preparation starts: ``startAt`` of the threshold, or earlier so that
    the threshold arrives no sooner than ``GROWTH_MARGIN`` times the summarizer's last duration
    at the session's growth rate (never below half the threshold: a burst is not a trend)."""
    level = int(t.threshold * t.start_at)
    if t.rate is None or t.rate <= 0 or t.last_duration_s is None or t.last_duration_s <= 0:
        return level
    lead = int(t.rate * t.last_duration_s * GROWTH_MARGIN)
    return max(min(level, t.threshold - lead), int(t.threshold * IDLE_LEVEL))


def should_start(t: Trigger) -> bool:
    """Whether a preparation starts at this count (below the threshold or above it: a session
    that crossed it with no preparation prepares too, for the next ``compact/auto``)."""
    return t.threshold > 0 and t.tokens >= start_level(t)


def growth_rate(samples: Sequence[tuple[float, int]], min_span: float = 0.0) -> float | None:
    """Tokens per second over ``samples`` of (monotonic time, count), oldest first; None when
    there are fewer than two or no time passed. A fall (a microcompact) restarts the window.
    ``min_span``: None too when the samples cover less than this many seconds: a burst of
    appends (a tool call and its result a moment apart) is no trend to predict the threshold
    from (the engine passes the summarizer's last duration, the horizon's half)."""
    start = 0
    for i in range(1, len(samples)):
        if samples[i][1] < samples[i - 1][1]:
            start = i
    window = samples[start:]
    if len(window) < 2:
        return None
    (t0, n0), (t1, n1) = window[0], window[-1]
    if t1 <= t0 or t1 - t0 < min_span:
        return None
    return (n1 - n0) / (t1 - t0)


def idle_due(tokens: int, threshold: int) -> bool:
    """Whether an idle session is worth preparing: above ``IDLE_LEVEL`` of its threshold."""
    return threshold > 0 and tokens >= threshold * IDLE_LEVEL
