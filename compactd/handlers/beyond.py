"""compact/preview, compact/undo and recall/search: what compactd offers beyond the reference.

``compact/preview`` is a dry run, without a model call and without touching the session: with
mechanism "auto" it reports ``compact/auto``'s own decision (``handlers/compact.decide_auto``);
with "micro", "full" or "partial" what that operation would leave, predicted by the functions
the operations plan with (``services/micro.plan_micro``, ``services/compaction.predict``).
``compact/undo`` appends an entry that cancels the last compaction (``services/undo.py``).
``recall/search`` finds or fetches any entry of the transcript, including those compactions hid
(``core/recall.py``); a query that is a recall pointer (``recall:<uuid>``, as summaries write
them) fetches that entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core import dispatch, recall
from compactd.handlers.base import Context, Handler
from compactd.handlers.compact import decide_auto
from compactd.handlers.partial import plan_cut, selection_of
from compactd.services.compaction import CompactionSpec, Selector, predict, select_whole_context
from compactd.services.micro import plan_micro
from compactd.services.undo import undo_last

if TYPE_CHECKING:
    from compactd.app import App


async def preview(app: App, params: p.PreviewParams, ctx: Context) -> p.PreviewResult:
    session = await app.get_session(params.session_id)
    requested = params.mechanism or "auto"
    if requested == "auto":
        # compact/auto's own decision, without carrying it out.
        d = await decide_auto(app, session, bool(params.force))
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
            estimated_post_tokens=dispatch.micro_post(pre, plan),
            entries_summarized=0,
            entries_kept=len(session.context()),
            reason=plan.reason,
        )
    # What compact/full or compact/partial would leave.
    spec = CompactionSpec(trigger="manual", mechanism=requested, select=_selector(params))
    outlook = await predict(app, session, spec)
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
            f"{requested} compaction: at most {outlook.post_tokens} tokens after, the summary "
            "taken at its budget"
            if outlook.bound
            else f"{requested} compaction: about {outlook.post_tokens} tokens after"
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


async def search(app: App, params: p.RecallParams, ctx: Context) -> p.RecallResult:
    session = await app.get_session(params.session_id)
    limit = recall.RECALL_DEFAULT_LIMIT if params.limit is None else params.limit
    if not 1 <= limit <= recall.RECALL_MAX_LIMIT:
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS,
            f"limit must be between 1 and {recall.RECALL_MAX_LIMIT} (got {limit})",
        )
    uuids = params.uuids
    if uuids is None and params.query is not None:
        # A recall pointer copied from a summary fetches the entry it names.
        named = recall.pointer_uuids(params.query)
        if named and recall.pointer(named[0]) == params.query.strip():
            uuids = named
    if uuids is not None:
        hits = recall.fetch(session.records, uuids[:limit])
    elif params.query is not None and params.query.strip():
        hits = recall.search(
            session.records,
            params.query,
            limit=limit,
            cleared_tool_ids=frozenset(session.cleared_tool_ids),
        )
    else:
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS, "recall/search needs a non-empty query or a list of uuids"
        )
    in_view = {id(r) for r in session.context()}
    return p.RecallResult(
        hits=[
            p.RecallHit(
                uuid=h.record.entry.uuid or "",
                type=h.record.entry.type,
                timestamp=h.record.entry.timestamp,
                compacted=h.hidden_part or id(h.record) not in in_view,
                snippet=h.snippet,
                entry=h.record.to_builtins() if uuids is not None else None,
            )
            for h in hits
        ]
    )


HANDLERS: dict[str, Handler] = {
    p.COMPACT_PREVIEW: preview,
    p.COMPACT_UNDO: undo,
    p.RECALL_SEARCH: search,
}
