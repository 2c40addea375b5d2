"""compact/full and compact/auto: thin handlers over the compaction engine.

``compact/full`` is the user's explicit request: every failure is a JSON-RPC error with a
stable code. ``compact/auto`` is the dispatcher the agent calls before each turn: it decides
whether to compact and how (docs/compaction.md#fallback-chain: microcompact, then session memory,
then a full compaction) and never fails for a compaction that did not happen: it answers
``wasCompacted: false`` with the reason, and counts the failure toward the circuit breaker
(three consecutive failures stop automatic compaction until one succeeds,
docs/compaction.md#circuit-breaker).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core.constants import ENV_DISABLE_AUTO_COMPACT, ENV_DISABLE_COMPACT
from compactd.core.prompts import PromptKind
from compactd.handlers.base import Context, Handler
from compactd.services.compaction import CompactionSpec, run_compaction
from compactd.services.micro import microcompact_session

if TYPE_CHECKING:
    from compactd.app import App
    from compactd.session import Session

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


async def _session_memory(
    app: App, session: Session, micro: p.MicroResult | None
) -> p.AutoResult | None:
    """Session-memory compaction: compacts from the notes file without a model call, or
    returns None to fall through to a full compaction
    (docs/session-memory.md#compaction-from-the-notes)."""
    return await app.session_memory.compact(session, _kind(session), micro)


async def auto(app: App, params: p.AutoParams, ctx: Context) -> p.AutoResult:
    session = await app.get_session(params.session_id)
    force = bool(params.force)
    flags = app.flags

    def no(reason: str, micro: p.MicroResult | None = None) -> p.AutoResult:
        return p.AutoResult(
            was_compacted=False, reason=reason, micro=micro, status=app.status(session)
        )

    if not flags.compaction_enabled:
        return no(f"compaction is disabled ({ENV_DISABLE_COMPACT} is set)")
    if not flags.auto_compact_enabled:
        return no(f"automatic compaction is disabled ({ENV_DISABLE_AUTO_COMPACT} is set)")
    if session.compacting:
        # Recursion guard: never start a compaction from inside (or beside) another one.
        return no("a compaction of this session is already running")
    failures = session.health.consecutive_failures
    if failures >= app.breaker_limit:
        return no(
            f"automatic compaction is paused after {failures} consecutive failures "
            f"(last: {session.health.last_error}); a successful compaction resets it"
        )
    status = app.status(session)
    if not force and not status.is_above_auto_compact_threshold:
        return no(
            f"below the auto-compact threshold ({status.tokens} of "
            f"{status.auto_compact_threshold} tokens)"
        )

    micro: p.MicroResult | None = None
    if flags.microcompact_enabled:
        try:
            async with session.lock:
                micro = await microcompact_session(app, session, None, "auto")
        except p.CompactdError as err:
            # Microcompact is only the first stage: when it cannot run, a full compaction can.
            log.warning("session %s: auto microcompact failed: %s", session.session_id, err)
        status = app.status(session)
        if (
            micro is not None
            and micro.tokens_saved > 0
            and not force
            and not status.is_above_auto_compact_threshold
        ):
            return p.AutoResult(was_compacted=True, mechanism="micro", micro=micro, status=status)

    remembered = await _session_memory(app, session, micro)
    if remembered is not None:
        return remembered

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
    return p.AutoResult(
        was_compacted=True,
        mechanism="full",
        result=result,
        micro=micro,
        status=app.status(session),
    )


HANDLERS: dict[str, Handler] = {
    p.COMPACT_FULL: full,
    p.COMPACT_AUTO: auto,
}
