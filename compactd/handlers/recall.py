"""recall/search: find or fetch any entry of the transcript, those compactions hid included
(``core/recall.py``); a query that is a recall pointer (``recall:<uuid>``, as summaries write
them) fetches that entry."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core import recall
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App

log = logging.getLogger(__name__)


async def search(app: App, params: p.RecallParams, ctx: Context) -> p.RecallResult:
    session = await app.get_session(params.session_id)
    limit = recall.RECALL_DEFAULT_LIMIT if params.limit is None else params.limit
    if not 1 <= limit <= recall.RECALL_MAX_LIMIT:
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS,
            f"limit must be between 1 and {recall.RECALL_MAX_LIMIT} (got {limit})",
        )
    query = params.query
    uuids = params.uuids
    if uuids is None and query is not None:
        # A recall pointer copied from a summary fetches the entry it names.
        named = recall.pointer_uuids(query)
        if named and recall.pointer(named[0]) == query.strip():
            uuids = named
    if uuids is None and (query is None or not query.strip()):
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS, "recall/search needs a non-empty query or a list of uuids"
        )

    def find() -> p.RecallResult:
        if uuids is not None:
            hits = recall.fetch(session.records, uuids[:limit])
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
                    entry=h.record.to_builtins() if uuids is not None else None,
                )
                for h in hits
            ]
        )

    # A search may read the whole released history back from the file: in a worker thread,
    # under the lock so that no compaction changes the records meanwhile.
    return await session.read_history(find)


HANDLERS: dict[str, Handler] = {p.RECALL_SEARCH: search}
