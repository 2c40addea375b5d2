"""Microcompact of a session: run a strategy, record it durably, report what it did.

``plan_micro`` picks a strategy (or takes the requested one) and asks the pure core which tool
results it would clear; ``compact/auto``'s decision and ``compact/preview`` stop there.
``microcompact`` (``microcompact_session`` under the session's lock), the engine behind
``compact/micro`` and the first stage of ``compact/auto``, commits that plan: it appends a ``microcompact_boundary`` system entry (the
shape Claude Code writes) whose metadata names the cleared tool ids and the tokens saved.
Nothing is deleted: the original results stay in the transcript, and the session derives the
cleared view and the lower token count from the boundary (also after a restart). The cached
strategy edits nothing locally: its state (registered, ordered and deleted tool results, pinned
``cache_edits``) lives in a small per-session state file written atomically.
``messages_extras`` adds what ``session/messages`` returns besides the messages: pinned cache
edits, or for sessions opened with ``apiContextManagement`` the ``context_management`` edits
and their beta header.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec

from compactd import protocol as p
from compactd.core import microcompact as mc
from compactd.core.normalize import to_api_messages
from compactd.core.view import main_thread
from compactd.engine.cancellation import point_of_no_return
from compactd.engine.features import Feature
from compactd.engine.files import file_state_of
from compactd.services.store import atomic_write
from compactd.transcript import entries
from compactd.transcript.model import (
    MicrocompactMetadata,
    Record,
    ToolUseBlock,
    record_from_dict,
)

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session

__all__ = [
    "CachedEdits",
    "MessagesExtras",
    "Planned",
    "forget_cleared_reads",
    "load_cached_state",
    "messages_extras",
    "microcompact",
    "microcompact_session",
    "plan_micro",
    "reset_cached_edits",
]

log = logging.getLogger(__name__)


_STRATEGY_API: Final = "api"

# The strategies a client may ask for by name.
_STRATEGIES: Final[dict[str, mc.Strategy]] = {"count": "count", "time": "time", "cached": "cached"}


# -- the engine ---------------------------------------------------------------------------------


async def plan_micro(
    runtime: Runtime, session: Session, strategy: str | None = None, now: float | None = None
) -> mc.MicroPlan:
    """What a microcompact of ``session`` would clear now; nothing is written.

    ``strategy`` is "count", "time", "cached" or None (the reference's choice: time after an
    idle gap, cached when the client opted in to cache edits, else count). When microcompact
    does not run locally (switched off, or the API clears tool results) the plan clears
    nothing and ``reason`` says why. ``compact/micro``, ``compact/auto`` and
    ``compact/preview`` all plan here.
    """
    requested = _STRATEGIES.get(strategy or "")
    if not runtime.flags.microcompact_enabled:
        return mc.MicroPlan(
            requested or "count", reason="microcompact is disabled by the environment"
        )
    if session.meta.api_context_management:
        return mc.MicroPlan(
            _STRATEGY_API,
            reason="this session lets the API clear tool results (context_management); "
            "nothing is cleared locally",
        )
    config = runtime.micro_config
    now = time.time() if now is None else now
    records = main_thread(session.context())
    entries = [r.entry for r in records]
    cleared = frozenset(session.cleared_tool_ids)
    chosen = requested or mc.choose_strategy(entries, now, config)
    if chosen == "time":
        return mc.plan_time(entries, now, config, cleared)
    if chosen == "cached":
        state = await load_cached_state(runtime, session)
        index = _edit_message_index(records, session)
        return mc.plan_cached(entries, now, state, index, config, cleared)
    return mc.plan_count(entries, config, cleared)


@dataclass(frozen=True, slots=True)
class Planned:
    """A microcompact plan a decision worked out, with the session's length when it did: it is
    carried out as it is while nothing was appended since (docs/engine.md#plan)."""

    plan: mc.MicroPlan
    length: int


async def microcompact(
    runtime: Runtime,
    session: Session,
    strategy: str | None,
    trigger: str,
    planned: Planned | None = None,
) -> p.MicroResult:
    """``compact/micro`` and compact/auto's first stage: ``microcompact_session`` under the
    session's lock (docs/engine.md#locking)."""
    async with session.lock:
        return await microcompact_session(runtime, session, strategy, trigger, planned)


async def microcompact_session(
    runtime: Runtime,
    session: Session,
    strategy: str | None,
    trigger: str,
    planned: Planned | None = None,
) -> p.MicroResult:
    """Run microcompact; the caller holds ``session.lock``.

    Commits ``planned`` when the session has not grown since it was worked out, else plans
    with ``plan_micro``: a ``microcompact_boundary`` entry, and for the cached strategy its
    new state. Nothing happening is not an error: the result then says
    why in ``reason``.
    """
    pre = runtime.status(session).tokens
    now = time.time()
    if planned is not None and planned.length == len(session.records):
        plan = planned.plan
    else:
        plan = await plan_micro(runtime, session, strategy, now)
    if plan.cached_state is not None and plan.cached_state != _held(runtime, session).state:
        # Written before the boundary: a crash in between leaves edits pinned and the count
        # too high (safe), never a lower count with nothing sent to the API.
        await _save_state(runtime, session, plan.cached_state)
    edits = mc.cache_edit_blocks(plan.cached_state) if plan.cached_state is not None else []
    if not plan.cleared:
        return _nothing(plan.strategy, pre, plan.reason, cache_edits=edits or None)
    boundary = _boundary(
        session,
        trigger=trigger,
        strategy=plan.strategy,
        pre_tokens=pre,
        tokens_saved=plan.tokens_saved,
        # Cache edits leave the messages as they are, so no id goes into compactedToolIds
        # (which the session renders as placeholders); they are named in cacheDeletedToolIds.
        compacted=plan.compacted_ids,
        now=now,
        cache_deleted=plan.cleared_ids if plan.strategy == "cached" else None,
    )
    await runtime.commit(session, [boundary])
    if plan.strategy == "cached":
        # No compactedToolIds for the files service to fold in: forget the reads here.
        forget_cleared_reads(session, plan.cleared_ids)
    else:
        # Clearing rewrites messages, so the cached prefix breaks: pinned cache edits refer to
        # a cache that will not be read again. The read-file state forgets the cleared reads
        # by itself: the files service folds the boundary's compactedToolIds in.
        await reset_cached_edits(runtime, session)
    post = runtime.status(session)
    runtime.check_thresholds(session, post)
    log.info(
        "session %s: %s microcompact cleared %d tool results, %d tokens",
        session.session_id,
        plan.strategy,
        len(plan.cleared),
        plan.tokens_saved,
    )
    return p.MicroResult(
        strategy=plan.strategy,
        cleared_tool_ids=plan.cleared_ids,
        tokens_saved=plan.tokens_saved,
        pre_tokens=pre,
        post_tokens=post.tokens,
        boundary=boundary.to_builtins(),
        cache_edits=edits or None,
        cleared_read_paths=list(plan.dropped_paths),
    )


def _edit_message_index(records: Sequence[Record], session: Session) -> int:
    """Where new cache edits ride: the last user message of the view, or the next message."""
    messages = to_api_messages(records, cleared_tool_ids=frozenset(session.cleared_tool_ids))
    if messages and messages[-1].get("role") == "user":
        return len(messages) - 1
    return len(messages)


def _nothing(
    strategy: str,
    pre: int,
    reason: str | None,
    cache_edits: list[dict[str, Any]] | None = None,
) -> p.MicroResult:
    return p.MicroResult(
        strategy=strategy,
        cleared_tool_ids=[],
        tokens_saved=0,
        pre_tokens=pre,
        post_tokens=pre,
        reason=reason,
        cache_edits=cache_edits,
    )


def _boundary(
    session: Session,
    *,
    trigger: str,
    strategy: str,
    pre_tokens: int,
    tokens_saved: int,
    compacted: list[str],
    now: float,
    cache_deleted: list[str] | None = None,
) -> Record:
    """A ``microcompact_boundary`` system entry in Claude Code's shape.

    It hangs off the last entry (it is not a chain break) and adds compactd's own fields to
    the metadata: the strategy, and for cache edits the ids deleted from the cache.
    """
    metadata = MicrocompactMetadata(
        trigger=trigger,
        pre_tokens=pre_tokens,
        tokens_saved=tokens_saved,
        compacted_tool_ids=compacted,
        cleared_attachment_uuids=[],
        strategy=strategy,
        cache_deleted_tool_ids=cache_deleted,
    )
    line = entries.microcompact_boundary(
        metadata,
        session_id=session.session_id,
        cwd=session.meta.cwd,
        parent=session.last_uuid(),
        at=now,
    )
    return record_from_dict(line)


# -- read-file state ----------------------------------------------------------------------------


def forget_cleared_reads(session: Session, tool_ids: Sequence[str]) -> list[str]:
    """Drop files whose latest Read result was just cleared from the read-file state.

    The reference forgets such files so that a later read is not answered with "unchanged"
    while the model no longer sees the content. Count and time microcompacts need no call:
    the files service folds an appended boundary's ``compactedToolIds`` in. The cached
    strategy's deletions leave ``compactedToolIds`` empty, so they come here. Returns the
    paths dropped.
    """
    state = file_state_of(session)
    if not tool_ids or state is None:
        return []
    try:
        return state.drop_tool_ids(tool_ids)
    except Exception:  # the file state must not fail a committed microcompact
        log.exception("could not update the read-file state of %s", session.session_id)
        return []


# -- cached state -------------------------------------------------------------------------------


def _state_path(runtime: Runtime, session: Session) -> Path:
    return runtime.store.micro_state_path(session.session_id)


def _current_boundary(session: Session) -> str | None:
    """Uuid of the session's last compact boundary (the cached state belongs to it)."""
    start = session.context_start
    if start < len(session.records) and session.records[start].entry.is_compact_boundary:
        return session.records[start].entry.uuid
    return None


def _read_state(path: Path) -> mc.CachedState | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot read %s: %s", path, exc.strerror)
        return None
    try:
        return msgspec.json.decode(data, type=mc.CachedState)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        log.warning("ignoring a corrupt microcompact state file %s: %s", path, exc)
        return None


@dataclass(eq=False)
class CachedEdits(Feature["Session"]):
    """The cached strategy's state of one session (registered, ordered and deleted tool
    results, pinned cache edits), loaded lazily from its state file."""

    state: mc.CachedState | None = None


def _held(runtime: Runtime, session: Session) -> CachedEdits:
    """The session's ``CachedEdits``, made on first use (a feature of every session)."""
    return runtime.features.state(session, CachedEdits)


async def load_cached_state(runtime: Runtime, session: Session) -> mc.CachedState:
    """The session's cached-strategy state; void (empty) after a full compaction."""
    held = _held(runtime, session)
    state = held.state
    if state is None:
        state = await anyio.to_thread.run_sync(_read_state, _state_path(runtime, session))
        if state is None:
            state = mc.CachedState(boundary_uuid=_current_boundary(session))
        held.state = state
    boundary = _current_boundary(session)
    if state.boundary_uuid != boundary:
        # A full compaction replaced the prompt: the edits refer to results no longer sent.
        state = mc.CachedState(boundary_uuid=boundary)
        held.state = state
    return state


async def _save_state(runtime: Runtime, session: Session, state: mc.CachedState) -> None:
    session.check_writable()
    data = msgspec.json.encode(state)
    await point_of_no_return()
    await anyio.to_thread.run_sync(atomic_write, _state_path(runtime, session), data)
    _held(runtime, session).state = state


async def reset_cached_edits(runtime: Runtime, session: Session) -> bool:
    """Forget the cached strategy's state and pinned edits; True if there was any.

    Call it when the prompt cache broke (the edits then refer to a cache that is gone) or the
    prompt was rewritten (a full compaction also voids the state by itself). It takes no lock,
    so it can be called with or without ``session.lock`` held.
    """
    state = await load_cached_state(runtime, session)
    if not state.tool_order and not state.pinned_edits:
        return False
    await _save_state(runtime, session, mc.CachedState(boundary_uuid=_current_boundary(session)))
    return True


# -- session/messages ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MessagesExtras:
    """What ``session/messages`` sends besides the messages for microcompact's sake."""

    cache_edits: list[dict[str, Any]] | None = None
    context_management: dict[str, Any] | None = None
    betas: list[str] | None = None


async def messages_extras(runtime: Runtime, session: Session) -> MessagesExtras:
    """Pinned cache edits, or the API-native ``context_management`` edits and beta."""
    if not runtime.flags.microcompact_enabled:
        return MessagesExtras()
    if session.meta.api_context_management:
        return MessagesExtras(
            context_management=_context_management(runtime, session),
            betas=[mc.API_CONTEXT_MANAGEMENT_BETA],
        )
    state = await load_cached_state(runtime, session)
    edits = mc.cache_edit_blocks(state)
    return MessagesExtras(cache_edits=edits or None)


def _context_management(runtime: Runtime, session: Session) -> dict[str, Any]:
    config = runtime.micro_config
    entries = [r.entry for r in main_thread(session.context())]
    params = session.meta.cache_safe_params or {}
    thinking = params.get("thinking")
    tool_names = {
        t["name"]
        for t in params.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("name"), str)
    }
    for entry in entries:
        if entry.type == "assistant":
            tool_names.update(
                b.name for b in entry.blocks if isinstance(b, ToolUseBlock) and b.name
            )
    trigger = config.api_trigger_tokens or runtime.status(session).warning_threshold
    return mc.context_management(
        config,
        thinking=mc.thinking_enabled(thinking if isinstance(thinking, dict) else None),
        idle=mc.is_idle(entries, time.time(), config),
        trigger_tokens=max(1, trigger),
        exclude_tools=tool_names,
    )
