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
    "BULK_SHARE",
    "CATCH_UP_LEAD",
    "DEFAULT_IDLE_MINUTES",
    "DEFAULT_START_AT",
    "GROWTH_MARGIN",
    "IDLE_LEVEL",
    "REFRESH_MARGIN",
    "REFRESH_PAYBACK",
    "REFRESH_SHARE",
    "RESTART_FALL",
    "RETRY_GROWTH",
    "TAIL_SHARE",
    "Refresh",
    "Trigger",
    "bulk_step",
    "catch_up_cheaper",
    "growth_rate",
    "idle_due",
    "lowest_start",
    "refresh_level",
    "retry_due",
    "should_refresh",
    "should_start",
    "start_level",
    "tail_due",
    "tail_limit",
]

# ``backgroundCompaction.startAt``'s default: a fraction of the auto-compact threshold (GitHub
# Copilot's agents start summarizing at about 80% of theirs, docs/background.md#options).
DEFAULT_START_AT = 0.8
# ``backgroundCompaction.idleMinutes``'s default: before a one-hour prompt cache expires, so
# the preparation reads the cached prefix (docs/cache.md).
DEFAULT_IDLE_MINUTES = 55.0
# The threshold must not arrive sooner than this many times the summarizer's last duration
# after a preparation starts: room for a slower answer than the last one.
GROWTH_MARGIN = 2.0
# Idle preparation only pays above this fraction of the threshold.
IDLE_LEVEL = 0.5
# A failed preparation is tried again once the session has grown by this share of the threshold
# since the failure, doubled for each failure in a row (a count, not a clock: it is the growth
# that brings the threshold nearer).
RETRY_GROWTH = 0.05
# A fall of the count by more than this share restarts the growth rate's window.
RESTART_FALL = 0.1
# A refresh pays when it would keep at most this share of what the ready summary keeps verbatim.
REFRESH_SHARE = 0.75
# The most a compaction applying a prepared summary keeps verbatim after it, as a share of the
# auto-compact threshold; more is brought into the summary first (docs/background.md#bound).
TAIL_SHARE = 0.3
# One append growing the count by more than this share of the threshold is a bulk append (an
# import, a follow catch-up): no growth rate is measured across it (docs/background.md#preparation).
BULK_SHARE = 0.1
# A refresh is asked only when what it saves later requests is worth this many times what its
# own request costs (docs/background.md#refreshing).
REFRESH_PAYBACK = 1.5
# Billed-equivalent weights of the input kinds (docs/cache.md): what a later request pays for
# each token a compaction leaves, written to the cache once, then read from it.
_CACHE_WRITE = 1.25
_CACHE_READ = 0.1
# A refresh starts this many times the summarizer's last duration (at the growth rate) before
# the blocking limit, at the latest: room for a slower answer; the ready summary covers a
# refresh that is later still.
REFRESH_MARGIN = 1.25
# Without a measured growth rate, the growth expected while a ready summary's tail is brought
# into it in the background, as a share of the threshold (docs/background.md#bound).
CATCH_UP_LEAD = 0.05


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
    at the session's growth rate (never below half the threshold, a burst being no trend, unless
    ``startAt`` itself is lower)."""
    level = int(t.threshold * t.start_at)
    if t.rate is None or t.rate <= 0 or t.last_duration_s is None or t.last_duration_s <= 0:
        return level
    lead = int(t.rate * t.last_duration_s * GROWTH_MARGIN)
    return max(min(level, t.threshold - lead), lowest_start(t.threshold, t.start_at))


def lowest_start(threshold: int, start_at: float) -> int:
    """The lowest count any preparation starts at: ``startAt`` of the threshold, or half of it
    when the growth rule moves a higher ``startAt`` earlier (an idle session's level too)."""
    return int(threshold * min(start_at, IDLE_LEVEL))


def should_start(t: Trigger) -> bool:
    """Whether a preparation starts at this count (below the threshold or above it: a session
    that crossed it with no preparation prepares too, for the next ``compact/auto``)."""
    return t.threshold > 0 and t.tokens >= start_level(t)


@dataclass(frozen=True, slots=True)
class Refresh:
    """What decides whether a ready summary is refreshed: summarized again up to a later entry,
    in the background, so that the compaction keeps fewer entries verbatim
    (docs/background.md#refreshing)."""

    trigger: Trigger
    blocking_limit: int
    # The count when the ready summary's snapshot was taken.
    covered_tokens: int
    # Billed-equivalent input of the ready summary's own request (what a refresh costs about
    # again); None: not known, counted as its whole context uncached.
    request_cost: float | None = None
    # Main-loop requests expected until the next compaction (the appends since the last one).
    requests_ahead: int = 0


def _lead(t: Trigger, margin: float) -> float | None:
    """Tokens the session grows by in ``margin`` times the summarizer's last duration; None
    when the rate or the duration is not known."""
    if t.rate is None or t.rate <= 0 or t.last_duration_s is None or t.last_duration_s <= 0:
        return None
    return t.rate * t.last_duration_s * margin


def refresh_level(r: Refresh) -> int | None:
    """The count at which the ready summary is refreshed: the threshold, where a synchronous
    compaction would ask the model, or earlier when the refresh would not be ready
    ``REFRESH_MARGIN`` times before the blocking limit at the session's growth rate (the agent
    goes on until then, and the ready summary is applied there if the refresh is not). None
    without a measured rate: there is no telling whether it would be ready in time."""
    lead = _lead(r.trigger, REFRESH_MARGIN)
    if lead is None:
        return None
    return min(r.trigger.threshold, r.blocking_limit - int(lead))


def should_refresh(r: Refresh) -> bool:
    """Whether to refresh now: at the refresh level, when what the refresh would keep verbatim
    (what arrives while it is written, with the margin) is at most ``REFRESH_SHARE`` of what
    the ready summary keeps at the threshold, and what that saves every later request (written
    to the cache once, then read by each) is worth ``REFRESH_PAYBACK`` times the refresh's own
    request. A ready summary whose tail would pass the bound where it is applied (at the
    threshold, ``tail_limit``) is refreshed whatever the price: applying it would make the
    agent wait for the tail to be brought into it."""
    t = r.trigger
    level = refresh_level(r)
    keep = _lead(t, REFRESH_MARGIN)
    if level is None or keep is None or t.threshold <= 0 or t.tokens < level:
        return False
    ready_keeps = t.threshold - r.covered_tokens
    if keep > ready_keeps * REFRESH_SHARE:
        return False
    if max(t.tokens, t.threshold) - r.covered_tokens > tail_limit(t.threshold):
        return True
    saved = ready_keeps - keep
    cost = r.request_cost if r.request_cost is not None else float(r.covered_tokens)
    worth = saved * (_CACHE_WRITE + _CACHE_READ * max(0, r.requests_ahead - 1))
    return worth >= cost * REFRESH_PAYBACK


def tail_limit(threshold: int) -> int:
    """The most a compaction applying a prepared summary keeps verbatim after it:
    ``TAIL_SHARE`` of the auto-compact threshold (docs/background.md#bound)."""
    return int(threshold * TAIL_SHARE)


def tail_due(tail: int, t: Trigger) -> bool:
    """Whether the ``tail`` tokens appended after a ready summary's snapshot are brought into a
    summary now, in the background, so that the compaction applying it does not wait for that
    (docs/background.md#bound): when the tail where it would be applied (at the threshold, or
    now when the count is past it) passes the bound, and the tail now plus what the session is
    expected to grow by meanwhile (``REFRESH_MARGIN`` times the summarizer's last duration at
    the growth rate, or ``CATCH_UP_LEAD`` of the threshold without one) passes it too."""
    if t.threshold <= 0:
        return False
    limit = tail_limit(t.threshold)
    if tail + max(0, t.threshold - t.tokens) <= limit:
        return False
    lead = _lead(t, REFRESH_MARGIN)
    expected = t.threshold * CATCH_UP_LEAD if lead is None else lead
    return tail + expected > limit


def catch_up_cheaper(summary_tokens: int, tail_tokens: int, refresh_cost: float) -> bool:
    """Whether a catch-up (the ready summary followed by its tail, read uncached) costs less
    than a refresh, whose billed-equivalent input is ``refresh_cost`` (the whole context again,
    mostly read from the cache when the main loop keeps it warm)."""
    return summary_tokens + tail_tokens < refresh_cost


def growth_rate(
    samples: Sequence[tuple[float, int]], min_span: float = 0.0, bulk: int | None = None
) -> float | None:
    """Tokens per second over ``samples`` of (monotonic time, count), oldest first; None when
    there are fewer than two or no time passed. A fall by more than ``RESTART_FALL`` of the
    count (a microcompact) restarts the window; a smaller one is an estimate corrected by the
    usage a response measured, and the trend goes on through it.
    ``min_span``: None too when the samples cover less than this many seconds: a burst of
    appends (a tool call and its result a moment apart) is no trend to predict the threshold
    from (the engine passes the summarizer's last duration, the horizon's half).
    ``bulk``: a rise by more than this many tokens in one step (one bulk append: an import, a
    follow catch-up) restarts the window after it: it says nothing of the pace."""
    start = 0
    for i in range(1, len(samples)):
        before, now = samples[i - 1][1], samples[i][1]
        if now < before * (1 - RESTART_FALL) or (bulk is not None and now - before > bulk):
            start = i
    window = samples[start:]
    if len(window) < 2:
        return None
    (t0, n0), (t1, n1) = window[0], window[-1]
    if t1 <= t0 or t1 - t0 < min_span:
        return None
    return (n1 - n0) / (t1 - t0)


def bulk_step(threshold: int) -> int:
    """The rise in one append past which it is a bulk append (``BULK_SHARE`` of the threshold)."""
    return int(threshold * BULK_SHARE)


def idle_due(tokens: int, threshold: int) -> bool:
    """Whether an idle session is worth preparing: above ``IDLE_LEVEL`` of its threshold."""
    return threshold > 0 and tokens >= threshold * IDLE_LEVEL


def retry_due(tokens: int, failed_at: int, threshold: int, failures: int) -> bool:
    """Whether a preparation that failed at count ``failed_at`` (the ``failures``-th in a row)
    is tried again at ``tokens``: after ``RETRY_GROWTH`` of the threshold, doubled per failure."""
    need = threshold * RETRY_GROWTH * (1 << max(0, failures - 1))
    return tokens - failed_at >= need
