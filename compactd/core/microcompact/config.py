"""Microcompact's numbers, with their sources in docs/microcompact.md, and the ``MicroConfig``
built from ``initializationOptions.microcompact`` over them.

Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, TypeVar

from compactd import protocol as p
from compactd.core.vocabulary import vocabulary

__all__ = [
    "CACHED_KEEP_RECENT",
    "CACHED_TRIGGER",
    "DEFAULT_CONFIG",
    "IDLE_KEEP_RECENT",
    "IDLE_MINUTES",
    "KEEP_RECENT",
    "MIN_SAVINGS",
    "PROTECTED_TOKENS",
    "SECONDS_PER_MINUTE",
    "MicroConfig",
    "micro_config",
]

# Which tools' results may be cleared (output that calling the tool again brings back), and
# which of them take their file out of the read-file state when cleared, are the agents' own
# names: ``core.vocabulary`` (``clearable``, ``file_state``; docs/microcompact.md#clearable-tools).

# Count-based: always keep the 3 most recent clearable results
# (docs/microcompact.md#count-based).
KEEP_RECENT: Final = 3
# Count-based: the newest 40_000 tokens of clearable tool results are never cleared
# (docs/microcompact.md#count-based).
PROTECTED_TOKENS: Final = 40_000
# Count-based: clear only when it frees at least 20_000 tokens; less is not worth breaking the
# prompt cache for (docs/microcompact.md#count-based).
MIN_SAVINGS: Final = 20_000

# Time-based: a gap of more than 60 minutes since the last assistant response means the prompt
# cache has expired (docs/microcompact.md#time-based) ...
IDLE_MINUTES: Final = 60
# ... and then all but the 5 most recent clearable results are cleared
# (docs/microcompact.md#time-based).
IDLE_KEEP_RECENT: Final = 5

# Cached: deletions are queued once 12 registered tool results are still active
# (docs/microcompact.md#cached).
CACHED_TRIGGER: Final = 12
# Cached: how many of the most recent active results survive a round of deletions. The
# reference leaves the number to remote configuration; compactd uses the count-based keep
# (docs/microcompact.md#cached) so both strategies leave the model the same recent work.
CACHED_KEEP_RECENT: Final = KEEP_RECENT

SECONDS_PER_MINUTE: Final = 60


@dataclass(frozen=True, slots=True)
class MicroConfig:
    """Every knob of microcompact, defaulting to the reference's values."""

    clearable_tools: frozenset[str] = field(default_factory=lambda: vocabulary().clearable)
    keep_recent: int = KEEP_RECENT
    protected_tokens: int = PROTECTED_TOKENS
    min_savings: int = MIN_SAVINGS
    idle_minutes: float = IDLE_MINUTES
    idle_keep_recent: int = IDLE_KEEP_RECENT
    cached_trigger: int = CACHED_TRIGGER
    cached_keep_recent: int = CACHED_KEEP_RECENT
    # The client opted in to sending ``cache_edits``: the default strategy becomes "cached"
    # while the prompt cache is warm.
    cache_edits: bool = False
    # API-native mode: input tokens at which the API starts clearing (None: the caller's
    # default, the session's warning level) and whether tool inputs are cleared too.
    api_trigger_tokens: int | None = None
    api_clear_tool_inputs: bool = False

    @property
    def idle_seconds(self) -> float:
        return self.idle_minutes * SECONDS_PER_MINUTE


# The reference's values, the default of every function that takes a ``MicroConfig``.
DEFAULT_CONFIG: Final = MicroConfig()


def micro_config(options: p.MicrocompactOptions | None) -> MicroConfig:
    """The daemon's microcompact settings: ``initializationOptions.microcompact`` over defaults
    (built once, by the runtime)."""
    opts = options or p.MicrocompactOptions()
    base = MicroConfig()
    return MicroConfig(
        clearable_tools=(
            frozenset(opts.clearable_tools)
            if opts.clearable_tools is not None
            else base.clearable_tools
        ),
        keep_recent=_pick(opts.keep_recent, base.keep_recent),
        protected_tokens=_pick(opts.protected_tokens, base.protected_tokens),
        min_savings=_pick(opts.min_savings, base.min_savings),
        idle_minutes=_pick(opts.idle_minutes, base.idle_minutes),
        idle_keep_recent=_pick(opts.idle_keep_recent, base.idle_keep_recent),
        cached_trigger=_pick(opts.cached_trigger, base.cached_trigger),
        cached_keep_recent=_pick(opts.cached_keep_recent, base.cached_keep_recent),
        cache_edits=_pick(opts.cache_edits, base.cache_edits),
        api_trigger_tokens=opts.api_trigger_tokens,
        api_clear_tool_inputs=_pick(opts.api_clear_tool_inputs, base.api_clear_tool_inputs),
    )


_T = TypeVar("_T")


def _pick(value: _T | None, default: _T) -> _T:
    return default if value is None else value
