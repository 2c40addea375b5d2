"""Partial compaction: summarize one side of a pivot entry and keep the other side verbatim.

Over ``core.partial.plan_partial`` (where to cut) and the compaction engine
(``engine.compaction.run_compaction``). The pivot is checked against the session's current
context before anything starts, so a pivot that does not exist or leaves nothing to summarize
is refused with ``pivotNotFound`` / ``notEnoughMessages`` and nothing is written or announced.
The selector plans again on the engine's snapshot, which is the context the summary replaces.
When the pivot had to move to a safe cut (never between a tool call and its result, never
inside one response), the result says so in ``partial`` and in ``warnings``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec

from compactd import protocol as p
from compactd.core.partial import Direction, PartialError, PartialPlan, plan_partial
from compactd.core.prompts import PromptKind
from compactd.engine.compaction import run_with_progress
from compactd.engine.plan import CompactionSpec, Selection
from compactd.engine.progress import BeginProgress

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session
    from compactd.transcript.model import Record

log = logging.getLogger(__name__)


def _kind(session: Session, params: p.PartialParams) -> PromptKind:
    # A sub-agent resumes its delegated task from its own continuation summary, whichever
    # side is summarized (docs/partial.md#sub-agent-summaries).
    if session.meta.agent_kind == "subagent":
        return "subagent"
    return "partialUpTo" if params.direction == "upTo" else "partialFrom"


def plan_cut(context: list[Record], pivot_uuid: str, direction: Direction) -> PartialPlan:
    """``plan_partial`` with its refusals as protocol errors (also used by the preview)."""
    try:
        return plan_partial(context, pivot_uuid, direction)
    except PartialError as err:
        raise p.CompactdError(
            err.code, err.message, pivotUuid=pivot_uuid, direction=direction
        ) from err


def selection_of(plan: PartialPlan) -> Selection:
    """The compaction engine's selection for a partial cut (also used by the preview)."""
    return Selection(
        summarize=plan.summarize, kept=plan.kept, request=plan.request, kept_before=plan.kept_before
    )


def _moved_note(plan: PartialPlan, requested: str) -> str:
    side = "kept" if plan.direction == "upTo" else "summarized"
    return (
        f"pivot {requested} is not a safe place to cut (it would split a response or separate "
        f"a tool call from its result); moved {plan.moved} to {plan.pivot_uuid}, the first "
        f"{side} entry"
    )


async def run_partial(
    runtime: Runtime,
    session: Session,
    params: p.PartialParams,
    begin_progress: BeginProgress,
) -> p.CompactResult:
    """Summarize one side of ``params.pivot_uuid`` and keep the other verbatim."""
    # A compaction already running is refused by run_compaction (sessionBusy).
    snap = await runtime.snapshot(session)
    plan_cut(list(snap.context), params.pivot_uuid, params.direction)  # refuse a bad pivot first

    chosen: list[PartialPlan] = []

    def select(context: list[Record]) -> Selection:
        plan = plan_cut(context, params.pivot_uuid, params.direction)
        chosen.append(plan)
        if plan.moved != "none":
            log.info("session %s: %s", session.session_id, _moved_note(plan, params.pivot_uuid))
        return selection_of(plan)

    spec = CompactionSpec(
        trigger="manual",
        kind=_kind(session, params),
        custom_instructions=params.custom_instructions,
        mechanism="partial",
        select=select,
    )
    title = "Compacting conversation (partial)"
    result = await run_with_progress(runtime, session, spec, begin_progress, title)
    plan = chosen[-1]
    warnings = list(result.warnings or [])
    if plan.moved != "none":
        warnings.append(_moved_note(plan, params.pivot_uuid))
    info = p.PartialInfo(
        direction=plan.direction,
        requested_pivot_uuid=params.pivot_uuid,
        pivot_uuid=plan.pivot_uuid,
        moved=plan.moved,
        summarized_entries=len(plan.summarize),
        kept_entries=len(plan.kept) + len(plan.kept_before),
    )
    return msgspec.structs.replace(result, partial=info, warnings=warnings or None)
