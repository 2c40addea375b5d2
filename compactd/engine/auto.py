"""compact/auto's policy: decide once whether and how to compact, then carry the plan out.

``decide_auto`` takes a snapshot of the session and gathers what ``core.auto_policy.decide``
needs, one outlook at a time and only as far as the decision gets, and returns an ``AutoPlan``:
the decision and the compaction plan of the mechanism it chose (docs/engine.md#plan).
``compact/preview`` reports it and ``run_auto`` carries it out, the compaction reusing what the
plan computed (selection, ledger, summary, rehydration) instead of working it out again: the
fallback chain microcompact, session memory, full compaction (docs/compaction.md#fallback-chain),
with the headroom rule of docs/thresholds.md#accounting. Session memory is planned before the
full compaction: when its notes fit, the full compaction is never planned. A full compaction
applies the summary prepared in the background when one is ready and leaves the headroom, and
while one is still being written the agent goes on until the blocking limit
(docs/background.md#applying).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core import auto_policy
from compactd.engine.background import BackgroundPreparation, Job
from compactd.engine.compaction import PreparedSummary, prefix_parts, run_with_progress
from compactd.engine.micro import microcompact, plan_micro
from compactd.engine.plan import CompactionPlan, CompactionSpec, plan_compaction, prompt_kind
from compactd.engine.progress import BeginProgress
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
    # The summary prepared in the background whose outlook the decision took: checked to
    # leave the headroom already (docs/background.md#applying).
    prepared: Job | None = None


async def decide_auto(
    runtime: Runtime, notes: SessionMemoryService, session: Session, force: bool, pending: int = 0
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
        status=auto_policy.with_pending(snap.status, pending),
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
    full_outlook: auto_policy.SummaryOutlook | None = None
    prepared: Job | None = None
    if not auto_policy.notes_fit(situation, notes_outlook):
        # A summary prepared in the background that fits is what the full compaction applies
        # (run_auto): its outlook, without planning the compaction again.
        found = _prepared_outlook(runtime, session)
        if found is not None:
            prepared, full_outlook = found
        else:
            spec = CompactionSpec(trigger="auto", kind=kind)
            full = await plan_compaction(runtime, snap, spec, micro=micro)
            full_outlook = full.outlook
    decision = auto_policy.decide(
        situation,
        auto_policy.Outlooks(micro=micro, full=full_outlook, session_memory=notes_outlook),
    )
    chosen = {"sessionMemory": remembered, "full": full}.get(decision.mechanism)
    return AutoPlan(decision, chosen, prepared if decision.mechanism == "full" else None)


def _prepared_outlook(
    runtime: Runtime, session: Session
) -> tuple[Job, auto_policy.SummaryOutlook] | None:
    """The summary prepared in the background and what applying it would leave, when one is
    ready and leaves the headroom (docs/background.md#applying); None to plan the compaction."""
    background = session.features.get(BackgroundPreparation)
    if not isinstance(background, BackgroundPreparation):
        return None
    job = background.ready(session)
    if job is None:
        return None
    found = background.outlook(session, job)
    if found.post_tokens > auto_policy.headroom(runtime.status(session)):
        return None
    return job, found


def preparing_left(
    runtime: Runtime, session: Session, decision: auto_policy.Decision, force: bool
) -> int | None:
    """The tokens left before the blocking limit when ``compact/auto`` lets the agent go on
    because a summary is being prepared in the background (``summaryPreparing``); None when
    it compacts (docs/background.md#applying)."""
    background = session.features.get(BackgroundPreparation)
    if decision.mechanism != "full" or force or not isinstance(background, BackgroundPreparation):
        return None
    if background.running() is None:
        return None
    status = runtime.status(session)
    left = status.blocking_limit - status.tokens
    return left if left > 0 else None


def preparing_message(left: int) -> str:
    return (
        "a summary is being prepared in the background; it is applied when ready "
        f"({left:,} tokens left before the blocking limit)"
    )


async def run_auto(
    runtime: Runtime,
    notes: SessionMemoryService,
    session: Session,
    force: bool,
    begin_progress: BeginProgress,
    pending: int = 0,
) -> p.AutoResult:
    """Carry out ``decide_auto``'s decision. A compaction that did not happen is no error: the
    answer says ``wasCompacted: false`` and why, and an automatic failure counts toward the
    circuit breaker (docs/compaction.md#circuit-breaker)."""
    asked_at = time.monotonic()  # the agent's wait starts now
    planned = await decide_auto(runtime, notes, session, force, pending)
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

    async def compact(
        spec: CompactionSpec, plan: CompactionPlan | None, prepared: PreparedSummary | None
    ) -> p.CompactResult | str:
        """The compaction's result, or why it did not happen."""
        title = "Compacting conversation (auto)"
        try:
            return await run_with_progress(
                runtime, session, spec, begin_progress, title, plan=plan, prepared=prepared
            )
        except p.CompactdError as err:
            if err.code == p.ErrorCode.SESSION_BUSY:
                return err.message
            if err.code != p.ErrorCode.CANCELLED:
                session.health.consecutive_failures += 1
            return f"{err.code}: {err.message}"

    background = session.features.get(BackgroundPreparation)
    if decision.mechanism == "full" and isinstance(background, BackgroundPreparation):
        running = background.running()
        left = preparing_left(runtime, session, decision, force)
        if left is not None:
            return p.AutoResult(
                was_compacted=False,
                reason=preparing_message(left),
                reason_code="summaryPreparing",
                status=runtime.status(session),
                tokens_left=left,
            )
        if running is not None:
            if background.ready(session) is None and not force:
                await running.done.wait()  # at the blocking limit: only what is left of it
            # else a refresh is still running: the summary it refreshes is applied at once.
        job = background.ready(session)
        if job is not None and (job is planned.prepared or background.fits(session, job)):
            assert job.plan is not None
            background.take(session, job)
            outcome = await compact(job.plan.spec, job.plan, background.prepared(job, asked_at))
            if isinstance(outcome, str):
                background.unused(job)
                return no(outcome)
            if not outcome.prepared:
                background.unused(job)
            return done("full", None, outcome)

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

    spec = CompactionSpec(trigger="auto", kind=prompt_kind(session.meta))
    result = await compact(spec, plan, None)
    if isinstance(result, str):
        return no(result, micro)
    return done("full", micro, result)
