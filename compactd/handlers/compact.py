"""compact/full and compact/auto: thin handlers over the compaction engine.

``compact/full`` is the user's explicit request: every failure is a JSON-RPC error with a
stable code. ``compact/auto`` is what the agent calls before each turn: ``decide_auto`` gathers
what ``core.dispatch.decide`` needs and gets the decision (whether to compact and how: the
fallback chain microcompact, session memory, full compaction of
docs/compaction.md#fallback-chain), which
``compact/preview`` reports and ``compact/auto`` carries out. Auto never fails for a compaction
that did not happen: it answers ``wasCompacted: false`` with the reason, and counts the failure
toward the circuit breaker (three consecutive failures stop automatic compaction until one
succeeds, docs/compaction.md#circuit-breaker).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core import dispatch
from compactd.core.prompts import PromptKind
from compactd.engine.compaction import CompactionSpec, predict, prefix_parts, run_compaction
from compactd.engine.micro import microcompact_session, plan_micro
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App
    from compactd.engine.session import Session

log = logging.getLogger(__name__)


def _kind(session: Session) -> PromptKind:
    # A sub-agent resumes its delegated task from a continuation summary
    # (docs/partial.md#sub-agent-summaries).
    return "subagent" if session.meta.agent_kind == "subagent" else "full"


async def full(app: App, params: p.FullParams, ctx: Context) -> p.CompactResult:
    session = await app.get_session(params.session_id)
    if session.compacting:
        raise p.CompactdError(
            p.ErrorCode.SESSION_BUSY,
            f"session {session.session_id!r} is already being compacted; try again when it ends",
            sessionId=session.session_id,
        )
    progress = await ctx.begin_progress("Compacting conversation", "starting")
    spec = CompactionSpec(
        trigger="manual", kind=_kind(session), custom_instructions=params.custom_instructions
    )
    try:
        return await run_compaction(app, session, spec, progress=progress)
    finally:
        if progress is not None:
            progress.end("done")


async def decide_auto(app: App, session: Session, force: bool) -> dispatch.Decision:
    """What ``compact/auto`` does to ``session`` now (``core.dispatch.decide``); nothing changes.

    ``compact/preview`` reports this decision and ``compact/auto`` carries it out. Each
    outlook is gathered only when the decision gets that far: none when the gate stops the
    session, no prediction of a summary when microcompact alone is enough.
    """
    situation = dispatch.Situation(
        status=app.status(session),
        entries=len(session.context()),
        force=force,
        compacting=session.compacting,
        last_error=session.health.last_error,
        prefix_parts=prefix_parts(session),
    )
    if dispatch.gate(situation) is not None:
        return dispatch.decide(situation)
    micro = await plan_micro(app, session) if app.flags.microcompact_enabled else None
    if dispatch.micro_alone(situation, micro) is not None:
        return dispatch.decide(situation, dispatch.Outlooks(micro))
    kind = _kind(session)
    full = await predict(app, session, CompactionSpec(trigger="auto", kind=kind), micro=micro)
    notes = await app.session_memory.outlook(session, kind, micro)
    return dispatch.decide(
        situation, dispatch.Outlooks(micro=micro, full=full, session_memory=notes)
    )


async def auto(app: App, params: p.AutoParams, ctx: Context) -> p.AutoResult:
    session = await app.get_session(params.session_id)
    decision = await decide_auto(app, session, bool(params.force))

    def done(
        mechanism: p.Mechanism, micro: p.MicroResult | None, result: p.CompactResult | None = None
    ) -> p.AutoResult:
        return p.AutoResult(
            was_compacted=True,
            mechanism=mechanism,
            result=result,
            micro=micro,
            reason_code=decision.reason,
            status=app.status(session),
        )

    def no(reason: str, micro: p.MicroResult | None = None) -> p.AutoResult:
        return p.AutoResult(
            was_compacted=False,
            reason=reason,
            reason_code=decision.reason,
            micro=micro,
            status=app.status(session),
        )

    if decision.mechanism == "none":
        return no(decision.message)

    micro: p.MicroResult | None = None
    if decision.micro is not None:
        try:
            async with session.lock:
                micro = await microcompact_session(app, session, decision.micro.strategy, "auto")
        except p.CompactdError as err:
            # Microcompact is only the first stage: when it cannot run, a full compaction can.
            log.warning("session %s: auto microcompact failed: %s", session.session_id, err)
    if decision.mechanism == "micro":
        if micro is None or micro.tokens_saved <= 0:
            # The session changed since the decision: there is nothing left to clear.
            return no(micro.reason if micro and micro.reason else "nothing to clear", micro)
        return done("micro", micro)

    if decision.mechanism == "sessionMemory":
        remembered = await app.session_memory.compact(session, _kind(session))
        if remembered is not None:
            return done("sessionMemory", micro, remembered)

    progress = await ctx.begin_progress("Compacting conversation (auto)", "starting")
    spec = CompactionSpec(trigger="auto", kind=_kind(session))
    try:
        result = await run_compaction(app, session, spec, progress=progress)
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


HANDLERS: dict[str, Handler] = {
    p.COMPACT_FULL: full,
    p.COMPACT_AUTO: auto,
}
