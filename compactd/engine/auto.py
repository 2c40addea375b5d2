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
from compactd.engine.background import carry_out, preparation_of
from compactd.engine.microcompact import Planned, microcompact, plan_micro
from compactd.engine.plan import CompactionPlan, CompactionSpec, plan_compaction, prompt_kind
from compactd.engine.progress import BeginProgress, mark, timing
from compactd.engine.session_memory import SessionMemory

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
    # The tokens left before the blocking limit while a summary is being prepared in the
    # background: compact/auto lets the agent go on (``summaryPreparing``); None otherwise.
    preparing_left: int | None = None
    # ``decision.micro`` with the session's length when it was planned: committed as it is.
    micro: Planned | None = None


async def decide_auto(
    runtime: Runtime, notes: SessionMemory, session: Session, force: bool, pending: int = 0
) -> AutoPlan:
    """What ``compact/auto`` does to ``session`` now (``core.auto_policy.decide``) and its plan;
    nothing changes.

    ``compact/preview`` reports this decision and ``compact/auto`` carries it out. Each
    outlook is gathered only when the decision gets that far: none when the gate stops the
    session, no plan of a summary when microcompact alone is enough, no full compaction
    planned when the session notes fit.
    """
    snap = await runtime.snapshot(session)
    mark("snapshot")
    situation = auto_policy.Situation(
        status=auto_policy.with_pending(snap.status, pending),
        entries=len(snap.context),
        force=force,
        busy=session.busy,
        last_error=session.health.last_error,
        prefix_parts=lambda: auto_policy.describe_prefix(session.meta.cache_safe_params),
    )
    if auto_policy.gate(situation) is not None:
        return AutoPlan(auto_policy.decide(situation))
    length = len(session.records)
    micro = await plan_micro(runtime, session) if runtime.flags.microcompact_enabled else None
    planned = Planned(micro, length) if micro is not None else None
    mark("microPlan")
    if auto_policy.micro_alone(situation, micro) is not None:
        return AutoPlan(auto_policy.decide(situation, auto_policy.Outlooks(micro)), micro=planned)
    kind = prompt_kind(snap.meta)
    remembered = await notes.plan(session, snap, kind, micro)
    notes_outlook = remembered.outlook if remembered is not None else None
    mark("notesPlan")
    full: CompactionPlan | None = None
    full_outlook: auto_policy.SummaryOutlook | None = None
    if not auto_policy.notes_fit(situation, notes_outlook):
        # A summary prepared in the background is what the full compaction applies (run_auto):
        # its outlook, without planning the compaction again.
        full_outlook = _prepared_outlook(session)
        if full_outlook is None:
            spec = CompactionSpec(trigger="auto", kind=kind)
            full = await plan_compaction(runtime, snap, spec, micro=micro)
            full_outlook = full.outlook
    decision = auto_policy.decide(
        situation,
        auto_policy.Outlooks(micro=micro, full=full_outlook, session_memory=notes_outlook),
    )
    mark("outlook")
    chosen = {"sessionMemory": remembered, "full": full}.get(decision.mechanism)
    left = preparing_left(runtime, session, decision, force)
    return AutoPlan(decision, chosen, left, planned)


def _prepared_outlook(session: Session) -> auto_policy.SummaryOutlook | None:
    """What applying the summary prepared in the background would leave, when one is ready
    (docs/background.md#applying); None to plan the compaction."""
    background = preparation_of(session)
    job = background.ready(session) if background is not None else None
    return background.outlook(session, job) if background is not None and job else None


def preparing_left(
    runtime: Runtime, session: Session, decision: auto_policy.Decision, force: bool
) -> int | None:
    """The tokens left before the blocking limit when ``compact/auto`` lets the agent go on
    because a summary is being prepared in the background (``summaryPreparing``); None when
    it compacts (docs/background.md#applying)."""
    background = preparation_of(session)
    if decision.mechanism != "full" or force or background is None:
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
    notes: SessionMemory,
    session: Session,
    force: bool,
    begin_progress: BeginProgress,
    pending: int = 0,
) -> p.AutoResult:
    """Carry out ``decide_auto``'s decision. A compaction that did not happen is no error: the
    answer says ``wasCompacted: false`` and why, and an automatic failure counts toward the
    circuit breaker (docs/compaction.md#circuit-breaker)."""
    asked_at = time.monotonic()  # the agent's wait starts now
    with timing(asked_at):
        return await _run_auto(runtime, notes, session, force, begin_progress, pending, asked_at)


async def _run_auto(
    runtime: Runtime,
    notes: SessionMemory,
    session: Session,
    force: bool,
    begin_progress: BeginProgress,
    pending: int,
    asked_at: float,
) -> p.AutoResult:
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

    async def compact(plan: CompactionPlan | None) -> p.CompactResult | str:
        """The compaction's result, or why it did not happen."""
        spec = CompactionSpec(trigger="auto", kind=prompt_kind(session.meta))
        title = "Compacting conversation (auto)"
        try:
            return await carry_out(
                runtime, session, spec, begin_progress, title, plan=plan, asked_at=asked_at
            )
        except p.CompactdError as err:
            if err.code == p.ErrorCode.SESSION_BUSY:
                return err.message
            if err.code != p.ErrorCode.CANCELLED:
                session.health.consecutive_failures += 1
            return f"{err.code}: {err.message}"

    background = preparation_of(session)
    if decision.mechanism == "full" and background is not None:
        left = planned.preparing_left
        if left is not None:
            return p.AutoResult(
                was_compacted=False,
                reason=preparing_message(left),
                reason_code="summaryPreparing",
                status=runtime.status(session),
                tokens_left=left,
            )
        running = background.running()
        if running is not None and background.ready(session) is None and not force:
            await running.done.wait()  # at the blocking limit: only what is left of it
        # else a refresh may still run: the summary it refreshes is applied at once.
        if background.ready(session) is not None:
            # The summary replaces what a microcompact would clear: none runs first.
            outcome = await compact(None)
            return no(outcome) if isinstance(outcome, str) else done("full", None, outcome)

    micro: p.MicroResult | None = None
    if decision.micro is not None:
        try:
            micro = await microcompact(
                runtime, session, decision.micro.strategy, "auto", planned.micro
            )
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

    result = await compact(plan)
    if isinstance(result, str):
        return no(result, micro)
    return done("full", micro, result)
