"""recall/search: find entries of the transcript by words, those compactions hid included, or
fetch them by uuid (``engine/recall.py``); a query that is a recall pointer (``recall:<uuid>``,
as summaries write them) fetches that entry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core import recall
from compactd.engine import recall as recall_op
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App


async def search(app: App, params: p.RecallParams, ctx: Context) -> p.RecallResult:
    session = await app.get_session(params.session_id)
    limit = recall.RECALL_DEFAULT_LIMIT if params.limit is None else params.limit
    if not 1 <= limit <= recall.RECALL_MAX_LIMIT:
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS,
            f"limit must be between 1 and {recall.RECALL_MAX_LIMIT} (got {limit})",
        )
    query, uuids = params.query, params.uuids
    if uuids is None and query is not None:
        # A recall pointer copied from a summary fetches the entry it names.
        named = recall.pointer_uuids(query)
        if named and recall.pointer(named[0]) == query.strip():
            uuids = named
    if uuids is not None:
        return await recall_op.fetch(session, uuids[:limit])
    if query is None or not query.strip():
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS, "recall/search needs a non-empty query or a list of uuids"
        )
    return await recall_op.search(session, app.store.data_dir, query, limit)


HANDLERS: dict[str, Handler] = {p.RECALL_SEARCH: search}
