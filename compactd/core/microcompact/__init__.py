"""Microcompact: deciding which old tool results to clear, without calling a model.

Three local strategies share one idea: the output of a tool that can simply be run again (a
file read, a shell command, a search, a fetch, an edit or write confirmation) is worth little
once the agent has moved on, so its content can be swapped for a short placeholder.
Count-based clearing keeps the most recent results and a protected window of the newest
tool-result tokens and only acts when enough is freed to be worth a prompt-cache break.
Time-based clearing runs when the session sat idle past the cache lifetime: the cache is gone
anyway, so all but a few results go. Cache-edit ("cached") clearing never rewrites messages;
it keeps the registered / ordered / deleted tool state machine and pins ``cache_edits``
deletions that the client sends with its requests. Sessions that let the API manage context
get ``context_management`` edits instead. The numbers and their sources: docs/microcompact.md.

One stage per module: ``config`` (the numbers and settings), ``results`` (the clearable tool
results and what clearing them frees), ``idle`` (the gap since the last response), ``cached``
(the cache-edit state machine), ``plans`` (the count, time and cached plans and the default
strategy) and ``api`` (the ``context_management`` field); the names callers use are
re-exported here.

Pure: entries in, plans and new state out. The clock arrives as a parameter.
"""

from __future__ import annotations

from compactd.core.microcompact.api import (
    API_CONTEXT_MANAGEMENT_BETA,
    CLEAR_THINKING_EDIT,
    CLEAR_TOOL_USES_EDIT,
    context_management,
    thinking_enabled,
)
from compactd.core.microcompact.cached import (
    CachedState,
    CachedStep,
    PinnedEdit,
    advance_cached,
    cache_edit_blocks,
)
from compactd.core.microcompact.config import (
    CACHED_KEEP_RECENT,
    CACHED_TRIGGER,
    IDLE_KEEP_RECENT,
    IDLE_MINUTES,
    KEEP_RECENT,
    MIN_SAVINGS,
    PROTECTED_TOKENS,
    MicroConfig,
    micro_config,
)
from compactd.core.microcompact.idle import (
    idle_gap_seconds,
    is_idle,
    last_response_time,
    parse_timestamp,
)
from compactd.core.microcompact.plans import (
    MicroPlan,
    PlanStrategy,
    Strategy,
    choose_strategy,
    plan_cached,
    plan_count,
    plan_time,
)
from compactd.core.microcompact.results import (
    ToolResult,
    clearable_results,
    dropped_paths,
    result_saving,
)

__all__ = [
    "API_CONTEXT_MANAGEMENT_BETA",
    "CACHED_KEEP_RECENT",
    "CACHED_TRIGGER",
    "CLEAR_THINKING_EDIT",
    "CLEAR_TOOL_USES_EDIT",
    "CachedState",
    "CachedStep",
    "IDLE_KEEP_RECENT",
    "IDLE_MINUTES",
    "KEEP_RECENT",
    "MIN_SAVINGS",
    "MicroConfig",
    "MicroPlan",
    "PROTECTED_TOKENS",
    "PinnedEdit",
    "PlanStrategy",
    "Strategy",
    "ToolResult",
    "advance_cached",
    "cache_edit_blocks",
    "choose_strategy",
    "clearable_results",
    "context_management",
    "dropped_paths",
    "idle_gap_seconds",
    "is_idle",
    "last_response_time",
    "micro_config",
    "parse_timestamp",
    "plan_cached",
    "plan_count",
    "plan_time",
    "result_saving",
    "thinking_enabled",
]
