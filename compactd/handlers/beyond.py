"""compact/preview, compact/undo and recall/search: what compactd offers beyond the reference.

``compact/preview`` is a dry run: it says which mechanism would run and estimates the context
after it, without a model call and without touching the session. ``compact/undo`` appends an
entry that cancels the last compaction (``services/undo.py``). ``recall/search`` finds or
fetches any entry of the transcript, including those compactions hid (``core/recall.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio

from compactd import protocol as p
from compactd.core import microcompact as mc
from compactd.core import recall, tokens
from compactd.core.constants import COMPACT_MAX_OUTPUT_TOKENS
from compactd.core.view import main_thread
from compactd.handlers.base import Context, Handler
from compactd.handlers.partial import plan_cut
from compactd.model import Record, record_from_dict
from compactd.services.rehydration import rehydration_attachments
from compactd.services.undo import undo_last

if TYPE_CHECKING:
    from compactd.app import App
    from compactd.session import Session

# Preview's guess of the summary a model writes: a twentieth of what it summarizes, within
# [2_000, COMPACT_MAX_OUTPUT_TOKENS] tokens (the summary call's output cap, REFERENCE.md §3; the
# ratio and floor are compactd's own estimate from summaries of real sessions).
PREVIEW_SUMMARY_RATIO: Final = 20
PREVIEW_SUMMARY_MIN_TOKENS: Final = 2_000


def _attachments_raw(attachments: Sequence[dict[str, Any]]) -> int:
    # Estimated as the token counter will count them once the compaction appends them.
    return tokens.estimate_entries_raw(record_from_dict(a).entry for a in attachments)


def _split(context: list[Record], params: p.PreviewParams) -> tuple[list[Record], list[Record]]:
    """(summarized, kept) for a full or partial compaction of ``context``."""
    if params.mechanism != "partial":
        return context, []
    if not params.pivot_uuid:
        raise p.CompactdError(p.ErrorCode.INVALID_PARAMS, "a partial preview needs pivotUuid")
    # The cut compact/partial would make: a pivot that would split a tool call from its result
    # moves to the nearest safe place, the same way.
    plan = plan_cut(context, params.pivot_uuid, params.direction or "upTo")
    return plan.summarize, [*plan.kept_before, *plan.kept]


async def _preview_summary(
    app: App, session: Session, params: p.PreviewParams, pre: int, mechanism: str, reason: str
) -> p.PreviewResult:
    context = session.context()
    summarized, kept = _split(context, params)
    raw = tokens.estimate_records_raw(summarized)
    summary = min(
        COMPACT_MAX_OUTPUT_TOKENS,
        max(PREVIEW_SUMMARY_MIN_TOKENS, tokens.pad(raw) // PREVIEW_SUMMARY_RATIO),
    )
    attachments = await rehydration_attachments(app, session, kept)
    post = summary + tokens.pad(tokens.estimate_records_raw(kept) + _attachments_raw(attachments))
    return p.PreviewResult(
        mechanism=mechanism,
        would_compact=bool(summarized) and post < pre,
        pre_tokens=pre,
        estimated_post_tokens=post,
        entries_summarized=len(summarized),
        entries_kept=len(kept),
        reason=reason,
    )


def _micro_plan(app: App, session: Session) -> mc.MicroPlan:
    config = app.micro_config
    entries = [r.entry for r in main_thread(session.context())]
    cleared = frozenset(session.cleared_tool_ids)
    now = time.time()
    if mc.choose_strategy(entries, now, config) == "time":
        return mc.plan_time(entries, now, config, cleared)
    return mc.plan_count(entries, config, cleared)


def _nothing(session: Session, pre: int, reason: str) -> p.PreviewResult:
    return p.PreviewResult(
        mechanism="auto",
        would_compact=False,
        pre_tokens=pre,
        estimated_post_tokens=pre,
        entries_summarized=0,
        entries_kept=len(session.context()),
        reason=reason,
    )


async def preview(app: App, params: p.PreviewParams, ctx: Context) -> p.PreviewResult:
    session = await app.get_session(params.session_id)
    status = app.status(session)
    pre = status.tokens
    flags = app.flags
    requested = params.mechanism or "auto"
    if requested in ("full", "partial"):
        return await _preview_summary(
            app, session, params, pre, requested, f"{requested} compaction (estimate)"
        )
    plan = _micro_plan(app, session) if flags.microcompact_enabled else None
    saving = plan.tokens_saved if plan is not None and plan.cleared else 0
    if requested == "micro":
        return p.PreviewResult(
            mechanism="micro",
            would_compact=saving > 0,
            pre_tokens=pre,
            estimated_post_tokens=max(0, pre - saving),
            entries_summarized=0,
            entries_kept=len(session.context()),
            reason=plan.reason if plan is not None else "microcompact is disabled",
        )
    # auto: the dispatcher's order (REFERENCE.md §5): nothing below the threshold, micro when
    # it brings the count under the threshold, else a full compaction.
    if not flags.compaction_enabled or not flags.auto_compact_enabled:
        return _nothing(session, pre, "automatic compaction is disabled")
    if not status.is_above_auto_compact_threshold:
        return _nothing(
            session,
            pre,
            f"below the auto-compact threshold ({pre} of {status.auto_compact_threshold})",
        )
    if saving > 0 and pre - saving < status.auto_compact_threshold:
        return p.PreviewResult(
            mechanism="micro",
            would_compact=True,
            pre_tokens=pre,
            estimated_post_tokens=pre - saving,
            entries_summarized=0,
            entries_kept=len(session.context()),
            reason="clearing old tool results brings the context under the threshold",
        )
    return await _preview_summary(
        app, session, params, pre, "full", "above the threshold; microcompact is not enough"
    )


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
    query = params.query
    if params.uuids is None and (query is None or not query.strip()):
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS, "recall/search needs a non-empty query or a list of uuids"
        )

    def find() -> p.RecallResult:
        if params.uuids is not None:
            hits = recall.fetch(session.records, params.uuids[:limit])
        else:
            assert query is not None
            cleared = frozenset(session.cleared_tool_ids)
            hits = recall.search(session.records, query, limit=limit, cleared_tool_ids=cleared)
        in_view = {id(r) for r in session.context()}
        return p.RecallResult(
            hits=[
                p.RecallHit(
                    uuid=h.record.entry.uuid or "",
                    type=h.record.entry.type,
                    timestamp=h.record.entry.timestamp,
                    compacted=h.hidden_part or id(h.record) not in in_view,
                    snippet=h.snippet,
                    entry=h.record.to_builtins() if params.uuids is not None else None,
                )
                for h in hits
            ]
        )

    # A search may read the whole released history back from the file: in a worker thread,
    # under the lock so that no compaction changes the records meanwhile.
    async with session.lock:
        return await anyio.to_thread.run_sync(find)


HANDLERS: dict[str, Handler] = {
    p.COMPACT_PREVIEW: preview,
    p.COMPACT_UNDO: undo,
    p.RECALL_SEARCH: search,
}
