"""``compact/preview``: what a compaction would do now, without doing it.

For ``auto`` it is ``compact/auto``'s own decision (``engine.auto.decide_auto``, one decision
for both: the preview only skips the side effects), including the answer that a summary is
being prepared in the background. For an explicit mechanism it is what that compaction would
leave: the microcompact plan, or the plan of a full or partial compaction on a snapshot
(docs/compaction.md#preview).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core import auto_policy
from compactd.engine.auto import decide_auto, preparing_message
from compactd.engine.microcompact import plan_micro
from compactd.engine.partial import plan_cut, selection_of
from compactd.engine.plan import CompactionSpec, Selector, outlook_of, select_whole_context

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session
    from compactd.engine.session_memory import SessionMemory

__all__ = ["preview"]


async def preview(
    runtime: Runtime, notes: SessionMemory, session: Session, params: p.PreviewParams
) -> p.PreviewResult:
    """What ``params.mechanism`` (``auto`` when not given) would do to ``session`` now."""
    requested = params.mechanism or "auto"
    if requested == "auto":
        return await _auto(runtime, notes, session, bool(params.force), params.pending_tokens or 0)
    pre = runtime.status(session).tokens
    if requested == "micro":
        # What compact/micro with the default strategy would clear.
        plan = await plan_micro(runtime, session)
        return _result("micro", bool(plan.cleared), pre, auto_policy.micro_post(pre, plan), session)
    refusal = auto_policy.prefix_refusal(
        runtime.status(session),
        lambda: auto_policy.describe_prefix(session.meta.cache_safe_params),
    )
    if refusal is not None:
        return _result(requested, False, pre, pre, session, refusal, "fixedPrefixTooLarge")
    # What compact/full or compact/partial would leave.
    spec = CompactionSpec(trigger="manual", mechanism=requested, select=_selector(params))
    outlook = await outlook_of(runtime, session, spec)
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


async def _auto(
    runtime: Runtime, notes: SessionMemory, session: Session, force: bool, pending: int
) -> p.PreviewResult:
    """compact/auto's own decision, without carrying it out."""
    planned = await decide_auto(runtime, notes, session, force, pending)
    d = planned.decision
    if planned.preparing_left is not None:
        return _result(
            "none",
            False,
            d.pre_tokens,
            d.pre_tokens,
            session,
            preparing_message(planned.preparing_left),
            "summaryPreparing",
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


def _result(
    mechanism: p.PreviewMechanism,
    would: bool,
    pre: int,
    post: int,
    session: Session,
    reason: str | None = None,
    code: p.DecisionReason | None = None,
) -> p.PreviewResult:
    """A preview that summarizes nothing: every entry of the context stays."""
    return p.PreviewResult(
        mechanism=mechanism,
        would_compact=would,
        pre_tokens=pre,
        estimated_post_tokens=post,
        entries_summarized=0,
        entries_kept=session.context_size,
        reason=reason,
        reason_code=code,
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
