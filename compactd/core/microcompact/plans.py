"""The microcompact plans: what the count, time and cached strategies would clear, and which
strategy applies by default (docs/microcompact.md).

Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from compactd.core.microcompact.cached import CachedState, advance_cached
from compactd.core.microcompact.config import DEFAULT_CONFIG, SECONDS_PER_MINUTE, MicroConfig
from compactd.core.microcompact.idle import idle_gap_seconds, is_idle
from compactd.core.microcompact.results import (
    ToolResult,
    clearable_results,
    dropped_paths,
    total_saving,
    worth_clearing,
)
from compactd.core.tokens import pad
from compactd.transcript.model import Entry

__all__ = [
    "MicroPlan",
    "PlanStrategy",
    "Strategy",
    "choose_strategy",
    "plan_cached",
    "plan_count",
    "plan_time",
]

Strategy = Literal["count", "time", "cached"]
# A plan's strategy: a local one, or "api" for a session whose tool results the API clears.
PlanStrategy = Literal["count", "time", "cached", "api"]


@dataclass(frozen=True, slots=True)
class MicroPlan:
    """What a strategy would clear; empty ``cleared`` means nothing to do, and ``reason`` why."""

    strategy: PlanStrategy
    cleared: tuple[ToolResult, ...] = ()
    # Tokens the count shrinks by (``tokens/status`` before minus after; see
    # ``results.total_saving``).
    tokens_saved: int = 0
    reason: str | None = None
    # Files that leave the read-file state (see ``dropped_paths``).
    dropped_paths: tuple[str, ...] = ()
    # The cached strategy's state after this round (registrations and queued deletions).
    cached_state: CachedState | None = None

    @property
    def cleared_ids(self) -> list[str]:
        return [r.tool_use_id for r in self.cleared]

    @property
    def compacted_ids(self) -> list[str]:
        """The results the messages show as placeholders once the plan is applied.

        Cache edits delete results from the prompt cache and leave the messages as they are,
        so the cached strategy replaces nothing locally.
        """
        return [] if self.strategy == "cached" else self.cleared_ids


def plan_count(
    entries: Sequence[Entry],
    config: MicroConfig = DEFAULT_CONFIG,
    cleared: frozenset[str] | set[str] = frozenset(),
) -> MicroPlan:
    """Count-based clearing (docs/microcompact.md#count-based).

    Oldest first, a result is cleared while the clearable results still shown add up to more
    than the protected window; the most recent ``keep_recent`` are never cleared. The plan is
    empty unless it frees at least ``min_savings`` tokens. Already cleared results are neither
    cleared nor counted again, so a second call right after the first finds nothing to do.
    """
    results = clearable_results(entries, config, cleared)
    keep = max(0, config.keep_recent)
    if len(results) <= keep:
        return MicroPlan(
            "count",
            reason=f"{len(results)} clearable tool results; the last {keep} are always kept",
        )
    candidates = results[: len(results) - keep]
    remaining = sum(r.raw_tokens for r in results)
    chosen: list[ToolResult] = []
    for result in candidates:
        if pad(remaining) <= config.protected_tokens:
            break
        if not worth_clearing(result):
            continue
        chosen.append(result)
        remaining -= result.raw_tokens
    saved = total_saving(chosen)
    if not chosen or saved < config.min_savings:
        return MicroPlan(
            "count",
            reason=(
                f"clearing would free {saved:,} tokens, below the minimum of "
                f"{config.min_savings:,}; the newest {config.protected_tokens:,} tokens of tool "
                "results are protected"
            ),
        )
    return MicroPlan("count", tuple(chosen), saved, dropped_paths=dropped_paths(results, chosen))


def plan_time(
    entries: Sequence[Entry],
    now: float,
    config: MicroConfig = DEFAULT_CONFIG,
    cleared: frozenset[str] | set[str] = frozenset(),
) -> MicroPlan:
    """Time-based clearing: past the idle gap, all but the most recent few results go.

    No minimum saving applies: the prompt cache has expired, so the next request pays for
    the whole prefix whatever is cleared.
    """
    gap = idle_gap_seconds(entries, now)
    if gap is None:
        return MicroPlan("time", reason="no assistant response with a timestamp yet")
    if gap <= config.idle_seconds:
        return MicroPlan(
            "time",
            reason=(
                f"last assistant response {gap / SECONDS_PER_MINUTE:.1f} min ago; time-based "
                f"clearing starts after {config.idle_minutes:g} min"
            ),
        )
    results = clearable_results(entries, config, cleared)
    keep = max(0, config.idle_keep_recent)
    candidates = results[: max(0, len(results) - keep)]
    chosen = tuple(r for r in candidates if worth_clearing(r))
    if not chosen:
        return MicroPlan(
            "time",
            reason=f"{len(results)} clearable tool results; the last {keep} are kept",
        )
    return MicroPlan(
        "time", chosen, total_saving(chosen), dropped_paths=dropped_paths(results, chosen)
    )


def choose_strategy(
    entries: Sequence[Entry], now: float, config: MicroConfig = DEFAULT_CONFIG
) -> Strategy:
    """The reference's default: time after an idle gap, else cached when opted in, else count.

    The cached strategy needs a warm cache to edit, which is exactly "not idle".
    """
    if is_idle(entries, now, config):
        return "time"
    if config.cache_edits:
        return "cached"
    return "count"


def plan_cached(
    entries: Sequence[Entry],
    now: float,
    state: CachedState,
    message_index: int,
    config: MicroConfig = DEFAULT_CONFIG,
    cleared: frozenset[str] | set[str] = frozenset(),
) -> MicroPlan:
    """One cached round as a plan: nothing while the prompt cache is cold (there is no cache
    to edit), else ``advance_cached`` over the results shown, its new state in ``cached_state``.
    """
    if is_idle(entries, now, config):
        return MicroPlan(
            "cached",
            reason=(
                f"the prompt cache is cold (no response for over {config.idle_minutes:g} min): "
                "cache edits have nothing to edit; use the time strategy"
            ),
        )
    step = advance_cached(state, clearable_results(entries, config, cleared), message_index, config)
    return MicroPlan(
        "cached",
        step.deleted,
        step.tokens_saved,
        step.reason,
        step.dropped_paths,
        cached_state=step.state,
    )
