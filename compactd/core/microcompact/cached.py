"""Cache-edit ("cached") clearing: the registered / ordered / deleted state machine and the
``cache_edits`` deletions it pins (docs/microcompact.md#cached). Messages are never rewritten.

Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from compactd.core.microcompact.config import DEFAULT_CONFIG, MicroConfig
from compactd.core.microcompact.results import ToolResult, dropped_paths, total_saving

__all__ = [
    "CachedState",
    "CachedStep",
    "PinnedEdit",
    "advance_cached",
    "cache_edit_blocks",
]


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
    config: MicroConfig = DEFAULT_CONFIG,
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
        new_state, deleted, total_saving(deleted), dropped_paths=dropped_paths(results, deleted)
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
