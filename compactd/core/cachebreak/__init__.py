"""Prompt-cache break detection: fingerprints of a request's cache-key inputs and a detector.

Before each main-loop request the client reports what the API keys its prompt cache on (system
blocks, tools, model, betas, thinking / effort, the cache_control layout); ``fingerprint``
reduces that to hashes and a few small descriptors, so no prompt or tool text is kept. After the
response, the client reports its usage; ``CacheBreakDetector.after`` compares the cache reads
with the previous response of the same query source (the main thread, each sub-agent) and, when
they fell by more than 5% and more than 2,000 tokens (docs/cache.md#break-rule), explains the drop
by what changed between the two requests, by idle time beyond the cache TTL, or as likely
server-side. A compaction or a cache deletion in between makes the drop expected: the detector
starts a new baseline instead of flagging it.

One concept per module: ``fingerprint`` (the cache-key inputs as hashes), ``changes`` (what
differs between two requests) and ``detector`` (baselines, breaks and their explanation); the
names callers use are re-exported here.

Pure; the clock is passed in.
"""

from __future__ import annotations

from compactd.core.cachebreak.changes import (
    CAUSE_BETAS,
    CAUSE_CACHE_CONTROL,
    CAUSE_EFFORT,
    CAUSE_MODEL,
    CAUSE_SERVER_SIDE,
    CAUSE_SYSTEM,
    CAUSE_THINKING,
    CAUSE_TOOLS,
    CAUSE_TTL_EXPIRY,
    describe_changes,
)
from compactd.core.cachebreak.detector import (
    CACHE_BREAK_MIN_DROP_FRACTION,
    CACHE_BREAK_MIN_DROP_TOKENS,
    DEFAULT_QUERY_SOURCE,
    MAX_RECORDED_BREAKS,
    MAX_TRACKED_SOURCES,
    CacheBreakDetector,
    CacheBreakFinding,
    DetectorConfig,
    ResponseOutcome,
    is_break,
)
from compactd.core.cachebreak.fingerprint import (
    CACHE_DEFAULT_TTL_SECONDS,
    CACHE_LONG_TTL_SECONDS,
    Fingerprint,
    Marker,
    SystemPrint,
    fingerprint,
    stable_hash,
)

__all__ = [
    "CACHE_BREAK_MIN_DROP_FRACTION",
    "CACHE_BREAK_MIN_DROP_TOKENS",
    "CACHE_DEFAULT_TTL_SECONDS",
    "CACHE_LONG_TTL_SECONDS",
    "CAUSE_BETAS",
    "CAUSE_CACHE_CONTROL",
    "CAUSE_EFFORT",
    "CAUSE_MODEL",
    "CAUSE_SERVER_SIDE",
    "CAUSE_SYSTEM",
    "CAUSE_THINKING",
    "CAUSE_TOOLS",
    "CAUSE_TTL_EXPIRY",
    "CacheBreakDetector",
    "CacheBreakFinding",
    "DEFAULT_QUERY_SOURCE",
    "DetectorConfig",
    "Fingerprint",
    "MAX_RECORDED_BREAKS",
    "MAX_TRACKED_SOURCES",
    "Marker",
    "ResponseOutcome",
    "SystemPrint",
    "describe_changes",
    "fingerprint",
    "is_break",
    "stable_hash",
]
