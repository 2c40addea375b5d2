"""compact/auto's policy: decide once whether and how to compact, then carry the plan out.

``decide_auto`` takes a snapshot of the session and gathers what ``core.auto_policy.decide``
needs, one outlook at a time and only as far as the decision gets, and returns an ``AutoPlan``:
the decision and the compaction plan of the mechanism it chose (docs/engine.md#plan).
``compact/preview`` reports it and ``run_auto`` carries it out, the compaction reusing what the
plan computed (selection, ledger, summary, rehydration) instead of working it out again: the
fallback chain microcompact, session memory, full compaction (docs/compaction.md#fallback-chain),
with the headroom rule of docs/thresholds.md#accounting. Session memory is planned before the
full compaction: when its notes fit, the full compaction is never planned.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core import auto_policy
from compactd.engine.compaction import prefix_parts, run_compaction
from compactd.engine.micro import microcompact, plan_micro
from compactd.engine.plan import CompactionPlan, CompactionSpec, plan_compaction, prompt_kind
from compactd.engine.progress import WorkDone
from compactd.engine.session_memory import SessionMemoryService

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AutoPlan:
    """``compact/auto``'s decision and the plan that carries it out (None for ``none`` and
    ``micro``, whose plan is ``decision.micro``)."""

    decision: auto_policy.Decision
    compaction: CompactionPlan | None = None


async def decide_auto(
    runtime: Runtime, notes: SessionMemoryService, session: Session, force: bool
) -> AutoPlan:
    """What ``compact/auto`` does to ``session`` now (``core.auto_policy.decide``) and its plan;
    nothing changes.

    ``compact/preview`` reports this decision and ``compact/auto`` carries it out. Each
    outlook is gathered only when the decision gets that far: none when the gate stops the
    session, no plan of a summary when microcompact alone is enough, no full compaction
    planned when the session notes fit.
    """
    snap = await runtime.snapshot(session)
    situation = auto_policy.Situation(
        status=snap.status,
        entries=len(snap.context),
        force=force,
        busy=session.busy,
        last_error=session.health.last_error,
        prefix_parts=lambda: prefix_parts(session),
    )
    if auto_policy.gate(situation) is not None:
        return AutoPlan(auto_policy.decide(situation))
    micro = await plan_micro(runtime, session) if runtime.flags.microcompact_enabled else None
    if auto_policy.micro_alone(situation, micro) is not None:
        return AutoPlan(auto_policy.decide(situation, auto_policy.Outlooks(micro)))
    kind = prompt_kind(snap.meta)
    remembered = await notes.plan(session, snap, kind, micro)
    notes_outlook = remembered.outlook if remembered is not None else None
    full: CompactionPlan | None = None
    if not auto_policy.notes_fit(situation, notes_outlook):
        spec = CompactionSpec(trigger="auto", kind=kind)
        full = await plan_compaction(runtime, snap, spec, micro=micro)
    decision = auto_policy.decide(
        situation,
        auto_policy.Outlooks(
            micro=micro,
            full=full.outlook if full is not None else None,
            session_memory=notes_outlook,
        ),
    )
    chosen = {"sessionMemory": remembered, "full": full}.get(decision.mechanism)
    return AutoPlan(decision, chosen)


async def run_auto(
    runtime: Runtime,
    notes: SessionMemoryService,
    session: Session,
    force: bool,
    begin_progress: Callable[[str], Awaitable[WorkDone | None]],
) -> p.AutoResult:
    """Carry out ``decide_auto``'s decision. A compaction that did not happen is no error: the
    answer says ``wasCompacted: false`` and why, and an automatic failure counts toward the
    circuit breaker (docs/compaction.md#circuit-breaker)."""
    planned = await decide_auto(runtime, notes, session, force)
    decision = planned.decision

    def done(
        mechanism: p.Mechanism, micro: p.MicroResult | None, result: p.CompactResult | None = None
    ) -> p.AutoResult:
        return p.AutoResult(
            was_compacted=True,
            mechanism=mechanism,
            result=result,
            micro=micro,
            reason_code=decision.reason,
            status=runtime.status(session),
        )

    def no(reason: str, micro: p.MicroResult | None = None) -> p.AutoResult:
        return p.AutoResult(
            was_compacted=False,
            reason=reason,
            reason_code=decision.reason,
            micro=micro,
            status=runtime.status(session),
        )

    if decision.mechanism == "none":
        return no(decision.message)

    micro: p.MicroResult | None = None
    if decision.micro is not None:
        try:
            micro = await microcompact(runtime, session, decision.micro.strategy, "auto")
        except p.CompactdError as err:
            # Microcompact is only the first stage: when it cannot run, a full compaction can.
            log.warning("session %s: auto microcompact failed: %s", session.session_id, err)
    if decision.mechanism == "micro":
        if micro is None or micro.tokens_saved <= 0:
            # The session changed since the decision: there is nothing left to clear.
            return no(micro.reason if micro and micro.reason else "nothing to clear", micro)
        return done("micro", micro)

    plan = planned.compaction
    if decision.mechanism == "sessionMemory":
        remembered = await notes.compact(session, plan)
        if remembered is not None:
            return done("sessionMemory", micro, remembered)
        plan = None  # the fallback: a full compaction, planned when it runs

    progress = await begin_progress("Compacting conversation (auto)")
    spec = CompactionSpec(trigger="auto", kind=prompt_kind(session.meta))
    try:
        result = await run_compaction(runtime, session, spec, progress=progress, plan=plan)
    except p.CompactdError as err:
        if err.code == p.ErrorCode.SESSION_BUSY:
            return no(err.message, micro)
        if err.code != p.ErrorCode.CANCELLED:
            session.health.consecutive_failures += 1
        return no(f"{err.code}: {err.message}", micro)
    finally:
        if progress is not None:
            progress.end("done")
    return done("full", micro, result)
