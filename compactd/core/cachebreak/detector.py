"""The cache-break detector: after each response it compares the cache reads with the previous
response of the same query source (the main thread, each sub-agent) and, when they fell by more
than 5% and more than 2,000 tokens (docs/cache.md#break-rule), explains the drop by what changed
between the two requests, by idle time beyond the cache TTL, or as likely server-side. A
compaction or a cache deletion in between makes the drop expected: the detector starts a new
baseline instead of flagging it. The clock is passed in.

Pure.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from compactd.core.cachebreak.changes import CAUSE_SERVER_SIDE, CAUSE_TTL_EXPIRY, describe_changes
from compactd.core.cachebreak.fingerprint import (
    CACHE_DEFAULT_TTL_SECONDS,
    DEFAULT_TTL_LABEL,
    Fingerprint,
)
from compactd.transcript.model import Record

__all__ = [
    "CACHE_BREAK_MIN_DROP_FRACTION",
    "CACHE_BREAK_MIN_DROP_TOKENS",
    "CacheBreakDetector",
    "CacheBreakFinding",
    "DEFAULT_QUERY_SOURCE",
    "DetectorConfig",
    "MAX_RECORDED_BREAKS",
    "MAX_TRACKED_SOURCES",
    "ResponseOutcome",
    "is_break",
]

# A drop in cache reads is a break only when it exceeds BOTH 5% of the previous reads and
# 2,000 tokens (docs/cache.md#break-rule): small wobbles from the moving message breakpoint
# are normal.
CACHE_BREAK_MIN_DROP_FRACTION: Final = 0.05
CACHE_BREAK_MIN_DROP_TOKENS: Final = 2_000

# The query source of the main conversation thread; sub-agents report their own ids.
DEFAULT_QUERY_SOURCE: Final = "main"

# Bounds on what one session keeps, so that a client reporting endless distinct sources or
# breaks cannot grow the daemon's memory (compactd's own limits, not from the reference).
MAX_TRACKED_SOURCES: Final = 256
MAX_RECORDED_BREAKS: Final = 200


def is_break(previous: int, current: int, config: DetectorConfig | None = None) -> bool:
    """Whether cache reads falling from ``previous`` to ``current`` is a cache break."""
    cfg = config or DetectorConfig()
    drop = previous - current
    return drop > previous * cfg.min_drop_fraction and drop > cfg.min_drop_tokens


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    min_drop_fraction: float = CACHE_BREAK_MIN_DROP_FRACTION
    min_drop_tokens: int = CACHE_BREAK_MIN_DROP_TOKENS
    max_sources: int = MAX_TRACKED_SOURCES
    max_breaks: int = MAX_RECORDED_BREAKS


@dataclass(frozen=True, slots=True)
class CacheBreakFinding:
    """One detected break and its explanation (the wire form is ``protocol.CacheBreak``)."""

    query_source: str
    previous_cache_read: int
    cache_read: int
    dropped_tokens: int
    reasons: tuple[str, ...]
    causes: tuple[str, ...]
    explanation: str
    idle_seconds: float | None
    timestamp: float


@dataclass(frozen=True, slots=True)
class ResponseOutcome:
    """What ``after`` made of a response: a break, a baseline reset, or an ordinary reading."""

    finding: CacheBreakFinding | None = None
    baseline_reset: bool = False


@dataclass(slots=True)
class _Source:
    pending: Fingerprint | None = None
    pending_at: float | None = None
    pending_new_edits: bool = False
    # The inputs of the request whose response set the baseline.
    last: Fingerprint | None = None
    baseline: int | None = None
    last_response_at: float | None = None
    resets_seen: int = 0


@dataclass(slots=True)
class CacheBreakDetector:
    """Per-session state: one baseline per query source, and the breaks found so far.

    ``resets`` counts events that make a drop in cache reads expected (compact and microcompact
    boundaries in the transcript, cache deletions). A source whose previous response predates
    the latest reset starts a new baseline instead of comparing against the old one.
    """

    config: DetectorConfig = field(default_factory=DetectorConfig)
    resets: int = 0
    breaks: list[CacheBreakFinding] = field(default_factory=list)
    _sources: OrderedDict[str, _Source] = field(default_factory=OrderedDict)
    _records_seen: int = 0

    def _source(self, name: str) -> _Source:
        state = self._sources.get(name)
        if state is None:
            state = _Source(resets_seen=self.resets)
            self._sources[name] = state
            while len(self._sources) > self.config.max_sources:
                self._sources.popitem(last=False)
        else:
            self._sources.move_to_end(name)
        return state

    @property
    def sources(self) -> list[str]:
        return list(self._sources)

    def sync(self, records: Sequence[Record]) -> int:
        """Count compactions appended to ``records`` since the last call; returns how many.

        Transcripts are append-only, so only the tail is examined. A shorter list than before
        means history was rewritten: that counts as a reset too.
        """
        found = 0
        if len(records) < self._records_seen:
            self._records_seen = 0
            found += 1
        found += sum(1 for r in _tail(records, self._records_seen) if _is_reset(r))
        self._records_seen = len(records)
        self.resets += found
        return found

    def before(self, source: str, inputs: Fingerprint, now: float) -> None:
        """A request of ``source`` is about to be sent with ``inputs``."""
        state = self._source(source)
        known = state.pending if state.pending is not None else state.last
        new_edits = False
        if inputs.cache_edits:
            seen = known.cache_edits if known is not None and known.cache_edits else frozenset()
            new_edits = bool(inputs.cache_edits - seen)
        state.pending = inputs.inherit(known)
        state.pending_at = now
        # A retried request keeps the unconsumed deletion of the attempt it replaces.
        state.pending_new_edits = state.pending_new_edits or new_edits

    def after(self, source: str, cache_read: int, now: float) -> ResponseOutcome:
        """The response of ``source`` came back having read ``cache_read`` tokens from cache."""
        state = self._source(source)
        current = state.pending if state.pending is not None else state.last
        reset = state.resets_seen != self.resets or state.pending_new_edits
        previous, previous_at, previous_inputs = (
            state.baseline,
            state.last_response_at,
            state.last,
        )
        request_at = state.pending_at if state.pending_at is not None else now
        state.baseline = cache_read
        state.last = current
        state.last_response_at = now
        state.pending = None
        state.pending_at = None
        state.pending_new_edits = False
        state.resets_seen = self.resets
        if previous is None:
            return ResponseOutcome()
        if reset:
            return ResponseOutcome(baseline_reset=True)
        if not is_break(previous, cache_read, self.config):
            return ResponseOutcome()
        idle = request_at - previous_at if previous_at is not None else None
        finding = _explain(
            source, previous, cache_read, previous_inputs, current, idle, timestamp=now
        )
        self.breaks.append(finding)
        if len(self.breaks) > self.config.max_breaks:
            del self.breaks[: len(self.breaks) - self.config.max_breaks]
        return ResponseOutcome(finding=finding)


def _tail(records: Sequence[Record], start: int) -> Iterable[Record]:
    return (records[i] for i in range(start, len(records)))


def _is_reset(record: Record) -> bool:
    entry = record.entry
    return entry.is_compact_boundary or entry.is_microcompact_boundary


def _explain(
    source: str,
    previous: int,
    current: int,
    old: Fingerprint | None,
    new: Fingerprint | None,
    idle: float | None,
    *,
    timestamp: float,
) -> CacheBreakFinding:
    found: list[tuple[str, str]] = []
    if old is not None and new is not None:
        found = describe_changes(old, new)
    limit = old.idle_limit() if old is not None else float(CACHE_DEFAULT_TTL_SECONDS)
    if idle is not None and idle > limit:
        ttl = old.ttl_label() if old is not None else DEFAULT_TTL_LABEL
        found.append(
            (
                CAUSE_TTL_EXPIRY,
                f"possible TTL expiry: {idle / 60:.1f} minutes since the previous response "
                f"(cache TTL {ttl})",
            )
        )
    if not found:
        detail = (
            "no cache-key input changed"
            if old is not None and new is not None
            else "no cache-key inputs were reported to compare"
        )
        if idle is not None:
            detail += f" and the previous response was {idle:.0f} seconds earlier"
        found.append((CAUSE_SERVER_SIDE, f"likely server-side: {detail}"))
    dropped = previous - current
    percent = dropped * 100 / previous if previous else 100.0
    reasons = tuple(reason for _, reason in found)
    causes = tuple(dict.fromkeys(cause for cause, _ in found))
    explanation = (
        f"Prompt cache reads for {source} fell from {previous:,} to {current:,} tokens "
        f"({dropped:,} fewer, {percent:.0f}%): " + "; ".join(reasons) + "."
    )
    return CacheBreakFinding(
        query_source=source,
        previous_cache_read=previous,
        cache_read=current,
        dropped_tokens=dropped,
        reasons=reasons,
        causes=causes,
        explanation=explanation,
        idle_seconds=idle,
        timestamp=timestamp,
    )
