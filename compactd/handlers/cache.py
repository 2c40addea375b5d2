"""cache/beforeRequest and cache/afterResponse: prompt-cache break detection.

The client reports each request's cache-key inputs before sending it and the usage that came
back; the session's ``CacheBreakDetector`` (``compactd.core.cachebreak``, kept by the
``engine.cachebreak`` feature) keeps only hashes and decides whether cache reads broke. A break is sent as a ``cache/break`` notification and also
returned in the ``cache/afterResponse`` result. These reports do not take the session lock: they
touch only detector state, synchronously, and must not wait behind a running compaction.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Final

from compactd import protocol as p
from compactd.core.cachebreak import DEFAULT_QUERY_SOURCE, CacheBreakFinding, fingerprint
from compactd.engine import cachebreak
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App

# Longest query source name accepted (a sub-agent id or "main"); longer ones are a client bug.
MAX_QUERY_SOURCE_CHARS: Final = 200

_CACHE_READ_KEY: Final = "cache_read_input_tokens"


def _invalid(message: str) -> p.CompactdError:
    return p.CompactdError(p.ErrorCode.INVALID_PARAMS, message)


def _query_source(value: str | None) -> str:
    if value is None:
        return DEFAULT_QUERY_SOURCE
    if not value.strip():
        raise _invalid("querySource must be a non-empty string")
    if len(value) > MAX_QUERY_SOURCE_CHARS:
        raise _invalid(f"querySource is longer than {MAX_QUERY_SOURCE_CHARS} characters")
    return value


def _clock(timestamp: float | None) -> float:
    """The report's time in seconds since the epoch; the daemon's clock when not given."""
    if timestamp is None:
        return time.time()
    if not math.isfinite(timestamp) or timestamp < 0:
        raise _invalid("timestamp must be a finite, non-negative number of seconds")
    return timestamp


def _cache_read(usage: dict[str, Any]) -> int | None:
    value = usage.get(_CACHE_READ_KEY)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _invalid(f"usage.{_CACHE_READ_KEY} must be a non-negative integer")
    return value


def to_wire(session_id: str, finding: CacheBreakFinding) -> p.CacheBreak:
    return p.CacheBreak(
        session_id=session_id,
        query_source=finding.query_source,
        previous_cache_read=finding.previous_cache_read,
        cache_read=finding.cache_read,
        dropped_tokens=finding.dropped_tokens,
        reasons=list(finding.reasons),
        explanation=finding.explanation,
        causes=list(finding.causes),
        idle_seconds=finding.idle_seconds,
        timestamp=finding.timestamp,
    )


async def before_request(app: App, params: p.CacheBeforeParams, ctx: Context) -> p.CacheAck:
    session = await app.get_session(params.session_id)
    source = _query_source(params.query_source)
    now = _clock(params.timestamp)
    try:
        inputs = fingerprint(
            model=params.model,
            system=params.system,
            tools=params.tools,
            betas=params.betas,
            thinking=params.thinking,
            effort=params.effort,
            cache_control=params.cache_control,
            cache_edits=params.cache_edits,
        )
    except ValueError as exc:
        raise _invalid(f"invalid params for {p.CACHE_BEFORE_REQUEST}: {exc}") from exc
    cachebreak.detector(app, session).before(source, inputs, now)
    return p.CacheAck(recorded=True)


async def after_response(app: App, params: p.CacheAfterParams, ctx: Context) -> p.CacheAck:
    session = await app.get_session(params.session_id)
    source = _query_source(params.query_source)
    now = _clock(params.timestamp)
    cache_read = _cache_read(params.usage)
    if cache_read is None:
        # A backend without prompt caching (or a usage block without the field): there is
        # nothing to compare, and treating it as zero would report a false break.
        return p.CacheAck(recorded=False)
    detector = cachebreak.detector(app, session)
    # Compactions appended since the last report make the coming drop expected.
    detector.sync(session.records)
    outcome = detector.after(source, cache_read, now)
    if outcome.finding is None:
        return p.CacheAck(recorded=True, baseline_reset=outcome.baseline_reset)
    wire = to_wire(session.session_id, outcome.finding)
    app.notify(p.NOTIFY_CACHE_BREAK, wire)
    return p.CacheAck(recorded=True, cache_break=wire)


HANDLERS: dict[str, Handler] = {
    p.CACHE_BEFORE_REQUEST: before_request,
    p.CACHE_AFTER_RESPONSE: after_response,
}
