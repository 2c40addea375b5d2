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

Pure: entries in, plans and new state out. The clock arrives as a parameter.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, TypeVar

import msgspec

from compactd import protocol as p
from compactd.core import constants as c
from compactd.core.normalize import CLEARED_TOOL_RESULT_PLACEHOLDER
from compactd.core.tokens import estimate_block_raw, pad
from compactd.core.tools import file_path
from compactd.transcript.model import Entry, ToolResultBlock, ToolUseBlock

__all__ = [
    "API_CONTEXT_MANAGEMENT_BETA",
    "CACHED_KEEP_RECENT",
    "CACHED_TRIGGER",
    "CLEARABLE_TOOLS",
    "CLEAR_THINKING_EDIT",
    "CLEAR_TOOL_USES_EDIT",
    "IDLE_KEEP_RECENT",
    "IDLE_MINUTES",
    "KEEP_RECENT",
    "MIN_SAVINGS",
    "PROTECTED_TOKENS",
    "CachedState",
    "CachedStep",
    "MicroConfig",
    "MicroPlan",
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
    "parse_timestamp",
    "plan_cached",
    "plan_count",
    "plan_time",
    "result_saving",
    "thinking_enabled",
]

Strategy = Literal["count", "time", "cached"]
# A plan's strategy: a local one, or "api" for a session whose tool results the API clears.
PlanStrategy = Literal["count", "time", "cached", "api"]

# -- constants (docs/microcompact.md) ----------------------------------------------------------

# Tools whose output can be produced again by calling them again: reading a file, running a
# shell command, grep, glob, fetching or searching the web, and the confirmations of edits and
# writes (docs/microcompact.md#clearable-tools). Claude Code's names; MultiEdit is an edit.
# Everything else -- questions to the user, task and todo management, notebooks, sub-agents --
# is never cleared.
CLEARABLE_TOOLS: Final = frozenset(
    {"Read", "Bash", "Grep", "Glob", "WebFetch", "WebSearch", "Edit", "Write", "MultiEdit"}
)

# Tools that put a file into the read-file state, and the input field naming the file. When
# the latest of them for a file is cleared, the file leaves that state
# (docs/microcompact.md#read-file-state; edits and writes record the file too, so a later edit
# keeps it).
FILE_STATE_TOOLS: Final = frozenset({"Read", "Edit", "Write", "MultiEdit"})

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

# API-native context management (docs/microcompact.md#api-context-management): the
# edit types, listed thinking first, and the beta header that enables them.
CLEAR_THINKING_EDIT: Final = "clear_thinking_20251015"
CLEAR_TOOL_USES_EDIT: Final = "clear_tool_uses_20250919"
API_CONTEXT_MANAGEMENT_BETA: Final = "context-management-2025-06-27"

# Thinking configurations under which the API produces thinking blocks; clear_thinking is only
# accepted with thinking on (Anthropic's context-editing docs).
_THINKING_ON: Final = frozenset({"enabled", "adaptive"})

_SECONDS_PER_MINUTE: Final = 60

# Raw (unpadded) estimate of the placeholder a cleared result shows instead of its content:
# clearing a result smaller than this would make the context bigger, so such results stay.
_PLACEHOLDER_RAW: Final = estimate_block_raw(
    ToolResultBlock(tool_use_id="", content=CLEARED_TOOL_RESULT_PLACEHOLDER)
)


# -- configuration ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MicroConfig:
    """Every knob of microcompact, defaulting to the reference's values."""

    clearable_tools: frozenset[str] = CLEARABLE_TOOLS
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
        return self.idle_minutes * _SECONDS_PER_MINUTE


# -- tool results -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A clearable tool result still shown in full, in conversation order."""

    tool_use_id: str
    tool_name: str
    # Unpadded token estimate of the result's content (images and documents 2_000 each).
    raw_tokens: int
    # The file a Read / Edit / Write call touched (they feed the read-file state).
    file_path: str | None = None


def clearable_results(
    entries: Iterable[Entry],
    config: MicroConfig = MicroConfig(),
    cleared: frozenset[str] | set[str] = frozenset(),
) -> list[ToolResult]:
    """The tool results of allowlisted tools that are not cleared yet, oldest first.

    A result counts once, under the first tool_result block answering its tool_use; results
    whose tool_use is not in ``entries`` (e.g. before a compact boundary) are not clearable.
    """
    calls: dict[str, ToolUseBlock] = {}
    seen: set[str] = set()
    out: list[ToolResult] = []
    allow = config.clearable_tools
    for entry in entries:
        message = entry.message
        if message is None or isinstance(message.content, str):
            continue
        if entry.type == "assistant":
            for block in message.content:
                if isinstance(block, ToolUseBlock) and block.name in allow and block.id:
                    calls[block.id] = block
        elif entry.type == "user":
            for block in message.content:
                if not isinstance(block, ToolResultBlock):
                    continue
                tid = block.tool_use_id
                call = calls.get(tid)
                if call is None or tid in seen or tid in cleared:
                    continue
                seen.add(tid)
                path = file_path(call.name, call.input)
                out.append(
                    ToolResult(
                        tool_use_id=tid,
                        tool_name=call.name,
                        raw_tokens=estimate_block_raw(block),
                        file_path=path
                        if call.name in FILE_STATE_TOOLS and isinstance(path, str)
                        else None,
                    )
                )
    return out


def result_saving(result: ToolResult) -> int:
    """Raw tokens freed by replacing the result's content with the placeholder (never < 0)."""
    return max(0, result.raw_tokens - _PLACEHOLDER_RAW)


def _worth_clearing(result: ToolResult) -> bool:
    return result.raw_tokens > _PLACEHOLDER_RAW


# -- plans --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MicroPlan:
    """What a strategy would clear; empty ``cleared`` means nothing to do, and ``reason`` why."""

    strategy: PlanStrategy
    cleared: tuple[ToolResult, ...] = ()
    # Tokens the count shrinks by (``tokens/status`` before minus after; see ``_saved``).
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


def _saved(results: Iterable[ToolResult]) -> int:
    """What clearing ``results`` takes off the count (docs/microcompact.md#what-a-clearing-saves).

    Unpadded: a cleared result is usually covered by the latest usage, which measured it
    exactly, and the plain estimate is the best guess of what the API counted for it. Padding
    it, as the count pads what it adds, would take more off than the request loses.
    """
    return sum(result_saving(r) for r in results)


def dropped_paths(results: Sequence[ToolResult], cleared: Iterable[ToolResult]) -> tuple[str, ...]:
    """Files whose latest Read / Edit / Write result among ``results`` is being cleared.

    Those leave the read-file state; a file read again (or edited) later stays in it.
    """
    latest: dict[str, str] = {}
    for r in results:
        if r.file_path:
            latest[r.file_path] = r.tool_use_id
    ids = {r.tool_use_id for r in cleared}
    return tuple(path for path, tid in latest.items() if tid in ids)


def plan_count(
    entries: Sequence[Entry],
    config: MicroConfig = MicroConfig(),
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
        if not _worth_clearing(result):
            continue
        chosen.append(result)
        remaining -= result.raw_tokens
    saved = _saved(chosen)
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


def is_idle(entries: Sequence[Entry], now: float, config: MicroConfig = MicroConfig()) -> bool:
    """Whether the gap since the last response exceeds the cache lifetime (strictly)."""
    gap = idle_gap_seconds(entries, now)
    return gap is not None and gap > config.idle_seconds


def plan_time(
    entries: Sequence[Entry],
    now: float,
    config: MicroConfig = MicroConfig(),
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
                f"last assistant response {gap / _SECONDS_PER_MINUTE:.1f} min ago; time-based "
                f"clearing starts after {config.idle_minutes:g} min"
            ),
        )
    results = clearable_results(entries, config, cleared)
    keep = max(0, config.idle_keep_recent)
    candidates = results[: max(0, len(results) - keep)]
    chosen = tuple(r for r in candidates if _worth_clearing(r))
    if not chosen:
        return MicroPlan(
            "time",
            reason=f"{len(results)} clearable tool results; the last {keep} are kept",
        )
    return MicroPlan("time", chosen, _saved(chosen), dropped_paths=dropped_paths(results, chosen))


def choose_strategy(
    entries: Sequence[Entry], now: float, config: MicroConfig = MicroConfig()
) -> Strategy:
    """The reference's default: time after an idle gap, else cached when opted in, else count.

    The cached strategy needs a warm cache to edit, which is exactly "not idle".
    """
    if is_idle(entries, now, config):
        return "time"
    if config.cache_edits:
        return "cached"
    return "count"


# -- cached (cache_edits) state machine ---------------------------------------------------------


class PinnedEdit(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    """Deletions queued together; they ride in the same user message on every request."""

    # Index, in ``session/messages``, of the user message that carries the edit block.
    message_index: int
    tool_use_ids: tuple[str, ...]


class CachedState(msgspec.Struct, rename="camel", frozen=True, kw_only=True, omit_defaults=True):
    """registeredTools / toolOrder / deletedRefs plus the pinned edits
    (docs/microcompact.md#cached).

    ``tool_order`` lists registered results in the order they were seen (the registered set is
    the same ids); ``deleted_refs`` are the ones a queued edit deletes. ``boundary_uuid`` names
    the compact boundary the state belongs to: after a full compaction the state is void.
    """

    boundary_uuid: str | None = None
    tool_order: tuple[str, ...] = ()
    deleted_refs: frozenset[str] = frozenset()
    pinned_edits: tuple[PinnedEdit, ...] = ()

    @property
    def registered_tools(self) -> frozenset[str]:
        return frozenset(self.tool_order)

    @property
    def active(self) -> list[str]:
        """Registered results not deleted yet, oldest first."""
        return [t for t in self.tool_order if t not in self.deleted_refs]


@dataclass(frozen=True, slots=True)
class CachedStep:
    """The outcome of one cached round: the new state and what it queued for deletion."""

    state: CachedState
    deleted: tuple[ToolResult, ...] = ()
    tokens_saved: int = 0
    reason: str | None = None
    dropped_paths: tuple[str, ...] = ()

    @property
    def deleted_ids(self) -> list[str]:
        return [r.tool_use_id for r in self.deleted]


def advance_cached(
    state: CachedState,
    results: Sequence[ToolResult],
    message_index: int,
    config: MicroConfig = MicroConfig(),
) -> CachedStep:
    """Register new results; once ``cached_trigger`` are active, delete all but the newest few.

    ``results`` are the clearable results currently shown (``clearable_results``); ones not
    registered yet are added in order. The deletions are pinned at ``message_index``.
    """
    registered = state.registered_tools
    new_ids = [r.tool_use_id for r in results if r.tool_use_id not in registered]
    registered_state = msgspec.structs.replace(state, tool_order=state.tool_order + tuple(new_ids))
    active = registered_state.active
    if len(active) < config.cached_trigger:
        return CachedStep(
            registered_state,
            reason=(
                f"{len(active)} active tool results; cache edits start at {config.cached_trigger}"
            ),
        )
    keep = max(0, config.cached_keep_recent)
    to_delete = active[: max(0, len(active) - keep)]
    if not to_delete:
        return CachedStep(registered_state, reason=f"all {len(active)} active results are kept")
    by_id = {r.tool_use_id: r for r in results}
    deleted = tuple(by_id[t] for t in to_delete if t in by_id)
    new_state = msgspec.structs.replace(
        registered_state,
        deleted_refs=registered_state.deleted_refs | frozenset(to_delete),
        pinned_edits=registered_state.pinned_edits
        + (PinnedEdit(message_index=message_index, tool_use_ids=tuple(to_delete)),),
    )
    return CachedStep(
        new_state, deleted, _saved(deleted), dropped_paths=dropped_paths(results, deleted)
    )


def plan_cached(
    entries: Sequence[Entry],
    now: float,
    state: CachedState,
    message_index: int,
    config: MicroConfig = MicroConfig(),
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


def cache_edit_blocks(state: CachedState) -> list[dict[str, Any]]:
    """The pinned edits as the client sends them: where each goes and the API block itself.

    Each item is ``{"messageIndex": i, "block": {"type": "cache_edits", "edits": [{"type":
    "delete", "cache_reference": tool_use_id}, ...]}}``: the block is added to the content of
    user message ``i`` of ``session/messages`` on every request until the state is reset
    (a cache break or a full compaction), which keeps the cached prefix stable.
    """
    return [
        {
            "messageIndex": pin.message_index,
            "block": {
                "type": "cache_edits",
                "edits": [{"type": "delete", "cache_reference": t} for t in pin.tool_use_ids],
            },
        }
        for pin in state.pinned_edits
    ]


# -- API-native context management --------------------------------------------------------------


def thinking_enabled(thinking: dict[str, Any] | None) -> bool:
    """Whether a request's ``thinking`` config turns thinking on."""
    return isinstance(thinking, dict) and thinking.get("type") in _THINKING_ON


def context_management(
    config: MicroConfig,
    *,
    thinking: bool,
    idle: bool,
    trigger_tokens: int,
    exclude_tools: Iterable[str],
) -> dict[str, Any]:
    """The ``context_management`` request field that makes the API clear old tool results.

    Thinking clearing comes first (the API applies edits in order). While the cache is warm it
    keeps every thinking block, so the cached prefix survives; after an idle gap the cache is
    gone and only the last turn's thinking is kept. Tool-use clearing mirrors the count-based
    rules: keep the last ``keep_recent`` uses, free at least ``min_savings`` tokens, and never
    touch the tools outside the clearable allowlist (``exclude_tools``).
    """
    edits: list[dict[str, Any]] = []
    if thinking:
        keep: Any = {"type": "thinking_turns", "value": 1} if idle else "all"
        edits.append({"type": CLEAR_THINKING_EDIT, "keep": keep})
    edits.append(
        {
            "type": CLEAR_TOOL_USES_EDIT,
            "trigger": {"type": "input_tokens", "value": trigger_tokens},
            "keep": {"type": "tool_uses", "value": max(0, config.keep_recent)},
            "clear_at_least": {"type": "input_tokens", "value": config.min_savings},
            "exclude_tools": sorted(set(exclude_tools) - config.clearable_tools),
            "clear_tool_inputs": config.api_clear_tool_inputs,
        }
    )
    return {"edits": edits}


# -- configuration ------------------------------------------------------------------------------


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
