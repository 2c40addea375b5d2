"""compact/auto's policy: decide whether and how to compact, then do it.

``decide_auto`` gathers what ``core.auto_policy.decide`` needs, one outlook at a time and only as
far as the decision gets, and returns the decision that ``compact/preview`` reports and
``run_auto`` carries out: the fallback chain microcompact, session memory, full compaction
(docs/compaction.md#fallback-chain), with the headroom rule of docs/thresholds.md#accounting.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core import auto_policy
from compactd.core.prompts import PromptKind
from compactd.engine.compaction import CompactionSpec, predict, prefix_parts, run_compaction
from compactd.engine.micro import microcompact_session, plan_micro
from compactd.engine.progress import WorkDone
from compactd.engine.session_memory import SessionMemoryService

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session

log = logging.getLogger(__name__)


def prompt_kind(session: Session) -> PromptKind:
    """The summary prompt of a whole-context compaction: a sub-agent resumes its delegated
    task from a continuation summary (docs/partial.md#sub-agent-summaries)."""
    return "subagent" if session.meta.agent_kind == "subagent" else "full"


async def decide_auto(
    runtime: Runtime, notes: SessionMemoryService, session: Session, force: bool
) -> auto_policy.Decision:
    """What ``compact/auto`` does to ``session`` now (``core.auto_policy.decide``); nothing changes.

    ``compact/preview`` reports this decision and ``compact/auto`` carries it out. Each
    outlook is gathered only when the decision gets that far: none when the gate stops the
    session, no prediction of a summary when microcompact alone is enough.
    """
    situation = auto_policy.Situation(
        status=runtime.status(session),
        entries=len(session.context()),
        force=force,
        compacting=session.compacting,
        last_error=session.health.last_error,
        prefix_parts=lambda: prefix_parts(session),
    )
    if auto_policy.gate(situation) is not None:
        return auto_policy.decide(situation)
    micro = await plan_micro(runtime, session) if runtime.flags.microcompact_enabled else None
    if auto_policy.micro_alone(situation, micro) is not None:
        return auto_policy.decide(situation, auto_policy.Outlooks(micro))
    kind = prompt_kind(session)
    full = await predict(runtime, session, CompactionSpec(trigger="auto", kind=kind), micro=micro)
    remembered = await notes.outlook(session, kind, micro)
    return auto_policy.decide(
        situation, auto_policy.Outlooks(micro=micro, full=full, session_memory=remembered)
    )


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
    decision = await decide_auto(runtime, notes, session, force)

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
            async with session.lock:
                micro = await microcompact_session(
                    runtime, session, decision.micro.strategy, "auto"
                )
        except p.CompactdError as err:
            # Microcompact is only the first stage: when it cannot run, a full compaction can.
            log.warning("session %s: auto microcompact failed: %s", session.session_id, err)
    if decision.mechanism == "micro":
        if micro is None or micro.tokens_saved <= 0:
            # The session changed since the decision: there is nothing left to clear.
            return no(micro.reason if micro and micro.reason else "nothing to clear", micro)
        return done("micro", micro)

    if decision.mechanism == "sessionMemory":
        remembered = await notes.compact(session, prompt_kind(session))
        if remembered is not None:
            return done("sessionMemory", micro, remembered)

    progress = await begin_progress("Compacting conversation (auto)")
    spec = CompactionSpec(trigger="auto", kind=prompt_kind(session))
    try:
        result = await run_compaction(runtime, session, spec, progress=progress)
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
