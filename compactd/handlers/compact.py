"""compact/*: full, auto, micro, partial, preview and undo, each a thin handler over the engine.

``compact/full`` and ``compact/partial`` are the user's explicit requests: every failure is a
JSON-RPC error with a stable code. ``compact/auto`` carries out ``engine.auto``'s decision and
never fails for a compaction that did not happen; ``compact/preview`` reports the same decision
(or what an explicit mechanism would leave) without changing anything. ``compact/micro``
clears old tool results now; an explicit request while microcompact is switched off is an
error, not a silent no-op. ``compact/undo`` appends an entry that cancels the last compaction.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core import auto_policy
from compactd.core.constants import ENV_DISABLE_COMPACT, ENV_DISABLE_MICROCOMPACT
from compactd.engine.auto import decide_auto, preparing_left, preparing_message, run_auto
from compactd.engine.background import run_full
from compactd.engine.compaction import prefix_parts
from compactd.engine.micro import microcompact, plan_micro
from compactd.engine.partial import plan_cut, run_partial, selection_of
from compactd.engine.plan import CompactionSpec, Selector, outlook_of, select_whole_context
from compactd.engine.undo import undo_last
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App

log = logging.getLogger(__name__)


async def full(app: App, params: p.FullParams, ctx: Context) -> p.CompactResult:
    session = await app.get_session(params.session_id)
    return await run_full(
        app,
        session,
        params.custom_instructions,
        lambda title: ctx.begin_progress(title, "starting"),
    )


async def auto(app: App, params: p.AutoParams, ctx: Context) -> p.AutoResult:
    session = await app.get_session(params.session_id)
    return await run_auto(
        app,
        app.session_memory,
        session,
        bool(params.force),
        lambda title: ctx.begin_progress(title, "starting"),
        params.pending_tokens or 0,
    )


async def micro(app: App, params: p.MicroParams, ctx: Context) -> p.MicroResult:
    session = await app.get_session(params.session_id)
    if not app.flags.microcompact_enabled:
        raise p.CompactdError(
            p.ErrorCode.COMPACTION_DISABLED,
            f"microcompact is disabled ({ENV_DISABLE_MICROCOMPACT} or {ENV_DISABLE_COMPACT} "
            "is set in the daemon's environment)",
        )
    return await microcompact(app, session, params.strategy, "manual")


async def partial(app: App, params: p.PartialParams, ctx: Context) -> p.CompactResult:
    session = await app.get_session(params.session_id)
    return await run_partial(
        app, session, params, lambda title: ctx.begin_progress(title, "starting")
    )


async def preview(app: App, params: p.PreviewParams, ctx: Context) -> p.PreviewResult:
    session = await app.get_session(params.session_id)
    requested = params.mechanism or "auto"
    if requested == "auto":
        # compact/auto's own decision, without carrying it out.
        force, pending = bool(params.force), params.pending_tokens or 0
        d = (await decide_auto(app, app.session_memory, session, force, pending)).decision
        left = preparing_left(app, session, d, bool(params.force))
        if left is not None:
            return p.PreviewResult(
                mechanism="none",
                would_compact=False,
                pre_tokens=d.pre_tokens,
                estimated_post_tokens=d.pre_tokens,
                entries_summarized=0,
                entries_kept=session.context_size,
                reason=preparing_message(left),
                reason_code="summaryPreparing",
            )
        return p.PreviewResult(
            mechanism=d.mechanism,
            would_compact=d.mechanism != "none",
            pre_tokens=d.pre_tokens,
            estimated_post_tokens=d.estimate_post,
            entries_summarized=d.entries_summarized,
            entries_kept=d.entries_kept,
            reason=d.message,
            reason_code=d.reason,
        )
    pre = app.status(session).tokens
    if requested == "micro":
        # What compact/micro with the default strategy would clear.
        plan = await plan_micro(app, session)
        return p.PreviewResult(
            mechanism="micro",
            would_compact=bool(plan.cleared),
            pre_tokens=pre,
            estimated_post_tokens=auto_policy.micro_post(pre, plan),
            entries_summarized=0,
            entries_kept=session.context_size,
            reason=plan.reason,
        )
    refusal = auto_policy.prefix_refusal(app.status(session), lambda: prefix_parts(session))
    if refusal is not None:
        return p.PreviewResult(
            mechanism=requested,
            would_compact=False,
            pre_tokens=pre,
            estimated_post_tokens=pre,
            entries_summarized=0,
            entries_kept=session.context_size,
            reason=refusal,
            reason_code="fixedPrefixTooLarge",
        )
    # What compact/full or compact/partial would leave.
    spec = CompactionSpec(trigger="manual", mechanism=requested, select=_selector(params))
    outlook = await outlook_of(app, session, spec)
    return p.PreviewResult(
        mechanism=requested,
        # A summary the model writes may still fail the thrash guard; one known in advance
        # is checked here.
        would_compact=outlook.summarized > 0 and (outlook.bound or outlook.post_tokens < pre),
        pre_tokens=pre,
        estimated_post_tokens=outlook.post_tokens,
        entries_summarized=outlook.summarized,
        entries_kept=outlook.kept,
        reason=(
            f"{requested} compaction: about {outlook.post_tokens:,} tokens after, the model's "
            "summary estimated from the offline summary of the same entries"
            if outlook.bound
            else f"{requested} compaction: about {outlook.post_tokens:,} tokens after"
        ),
    )


def _selector(params: p.PreviewParams) -> Selector:
    if params.mechanism != "partial":
        return select_whole_context
    if not params.pivot_uuid:
        raise p.CompactdError(p.ErrorCode.INVALID_PARAMS, "a partial preview needs pivotUuid")
    pivot, direction = params.pivot_uuid, params.direction or "upTo"
    # The cut compact/partial would make: a pivot that would split a tool call from its result
    # moves to the nearest safe place, the same way.
    return lambda context: selection_of(plan_cut(context, pivot, direction))


async def undo(app: App, params: p.SessionParams, ctx: Context) -> p.UndoResult:
    session = await app.get_session(params.session_id)
    return await undo_last(app, session)


HANDLERS: dict[str, Handler] = {
    p.COMPACT_FULL: full,
    p.COMPACT_AUTO: auto,
    p.COMPACT_MICRO: micro,
    p.COMPACT_PARTIAL: partial,
    p.COMPACT_PREVIEW: preview,
    p.COMPACT_UNDO: undo,
}
