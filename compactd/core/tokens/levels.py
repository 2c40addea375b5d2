"""The warning, error, auto-compact and blocking levels, a session's status and their crossings.

``thresholds`` derives the levels from a session's limits and the environment
(docs/thresholds.md); ``token_status`` reports a count against them; ``ThresholdTracker``
notices each upward crossing once, so that a client is told when the session passes a level.
Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from compactd.core import constants as c
from compactd.core.tokens.count import TokenCount
from compactd.core.tokens.env import NO_ENV, CompactFlags, env_percent, env_positive_int
from compactd.core.tokens.limits import Limits
from compactd.protocol import (
    AutoCompactSource,
    ThresholdLevel,
    TokenStatus,
)


@dataclass(frozen=True, slots=True)
class Thresholds:
    effective_window: int
    auto_compact_threshold: int
    warning_threshold: int
    error_threshold: int
    blocking_limit: int
    # Which level set ``auto_compact_threshold`` (docs/thresholds.md#absolute-level).
    auto_compact_source: AutoCompactSource = "window"


def thresholds(
    limits: Limits, env: Mapping[str, str] = NO_ENV, auto_compact_enabled: bool = True
) -> Thresholds:
    """The levels derived from a session's limits (docs/thresholds.md).

    Warning and error are measured from the auto-compact threshold when auto-compact is on,
    from the effective window otherwise (there is then no threshold to warn about). The
    threshold is the lowest of the share of the window, the environment's overrides and the
    absolute level (``limits.auto_compact_tokens``); ``auto_compact_source`` names it.
    """
    window = limits.context_window
    source: AutoCompactSource = "window"
    window_override = env_positive_int(env, c.ENV_AUTO_COMPACT_WINDOW)
    if window_override is not None and window_override < window:
        window = window_override
        source = "env"
    effective = window - min(limits.max_output_tokens, c.OUTPUT_RESERVE_CAP)
    auto_threshold = effective - c.AUTO_COMPACT_BUFFER
    pct = env_percent(env, c.ENV_AUTOCOMPACT_PCT_OVERRIDE)
    if pct is not None and math.floor(effective * pct / 100) < auto_threshold:
        auto_threshold = math.floor(effective * pct / 100)
        source = "env"
    level = limits.auto_compact_tokens
    if level is not None and level < auto_threshold:
        auto_threshold = level
        source = "tokens"
    base = auto_threshold if auto_compact_enabled else effective
    blocking = env_positive_int(env, c.ENV_BLOCKING_LIMIT_OVERRIDE)
    # The reference's fixed buffers assume large windows; on a tiny one a level would go
    # negative, which no client can display sensibly. Levels never go below zero.
    return Thresholds(
        effective_window=max(0, effective),
        auto_compact_threshold=max(0, auto_threshold),
        warning_threshold=max(0, base - c.WARNING_BUFFER),
        error_threshold=max(0, base - c.ERROR_BUFFER),
        blocking_limit=blocking if blocking is not None else max(0, effective - c.BLOCKING_BUFFER),
        auto_compact_source=source,
    )


def token_status(
    count: TokenCount,
    limits: Limits,
    thresholds: Thresholds,
    flags: CompactFlags,
    circuit_open: bool = False,
    consecutive_failures: int = 0,
) -> TokenStatus:
    """The ``tokens/status`` view of a count.

    ``isAboveAutoCompactThreshold`` is only set while auto-compaction is enabled: it means "an
    automatic compaction is due", which cannot be true when it is switched off.
    """
    used = count.tokens
    levels = thresholds
    auto_on = flags.auto_compact_enabled
    limit = levels.auto_compact_threshold if auto_on else levels.effective_window
    percent_left = max(0, math.floor((limit - used) / limit * 100 + 0.5)) if limit > 0 else 0
    return TokenStatus(
        tokens=used,
        exact_tokens=count.exact,
        estimated_tokens=count.estimated,
        context_window=limits.context_window,
        max_output_tokens=limits.max_output_tokens,
        effective_window=levels.effective_window,
        auto_compact_threshold=levels.auto_compact_threshold,
        warning_threshold=levels.warning_threshold,
        error_threshold=levels.error_threshold,
        blocking_limit=levels.blocking_limit,
        percent_left=percent_left,
        is_above_warning_threshold=used >= levels.warning_threshold,
        is_above_error_threshold=used >= levels.error_threshold,
        is_above_auto_compact_threshold=auto_on and used >= levels.auto_compact_threshold,
        is_at_blocking_limit=used >= levels.blocking_limit,
        auto_compact_enabled=auto_on,
        compaction_enabled=flags.compaction_enabled,
        circuit_open=circuit_open,
        consecutive_failures=consecutive_failures,
        fixed_prefix_tokens=count.fixed_prefix,
        fixed_prefix_source=count.prefix_source,
        message_tokens=count.messages,
        attachment_tokens=count.attachments,
        cleared_tokens=count.saved,
        auto_compact_source=levels.auto_compact_source,
    )


_LEVEL_ORDER: Final[tuple[ThresholdLevel, ...]] = ("warning", "error", "autoCompact", "blocking")


def _levels_above(status: TokenStatus) -> dict[ThresholdLevel, bool]:
    return {
        "warning": status.is_above_warning_threshold,
        "error": status.is_above_error_threshold,
        "autoCompact": status.is_above_auto_compact_threshold,
        "blocking": status.is_at_blocking_limit,
    }


class ThresholdTracker:
    """Reports each level once when the count rises to it; it re-arms once the count drops below.

    Warning and error share a value, so one crossing reports both.
    """

    __slots__ = ("_above",)

    def __init__(self) -> None:
        self._above: set[ThresholdLevel] = set()

    def update(self, status: TokenStatus) -> list[ThresholdLevel]:
        """Levels crossed upward since the previous update, lowest first."""
        fired: list[ThresholdLevel] = []
        above = _levels_above(status)
        for level in _LEVEL_ORDER:
            if above[level]:
                if level not in self._above:
                    self._above.add(level)
                    fired.append(level)
            else:
                self._above.discard(level)
        return fired

    def reset(self) -> None:
        """Re-arm every level (e.g. when the session's limits change)."""
        self._above.clear()
