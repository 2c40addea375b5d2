"""session/stats: compaction health derived from the transcript (``core/stats.py``).

It reads released history back from the file, so it runs in a worker thread, under the
session's lock (``Session.read_history``: the session's views are shared with its compactions).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec

from compactd import protocol as p
from compactd.core import stats
from compactd.engine import cachebreak
from compactd.engine.background import preparation_of
from compactd.handlers.base import Context, Handler
from compactd.handlers.cache import to_wire

if TYPE_CHECKING:
    from compactd.app import App

log = logging.getLogger(__name__)


async def session_stats(app: App, params: p.SessionParams, ctx: Context) -> p.StatsResult:
    session = await app.get_session(params.session_id)
    threshold = app.status(session).auto_compact_threshold
    breaks = [to_wire(session.session_id, f) for f in cachebreak.detector(app, session).breaks]
    result = await session.read_history(
        lambda: stats.session_stats(session.records, threshold, breaks, session.views)
    )
    background = preparation_of(session)
    if background is not None:
        # In memory: what the daemon spent since it loaded the session (docs/background.md).
        result = msgspec.structs.replace(
            result,
            preparation_tokens_unused=background.unused_tokens,
            preparation_failures=background.failures,
        )
    return msgspec.structs.replace(
        result, summarizer_usage=app.summarizer.usage(session.session_id)
    )


HANDLERS: dict[str, Handler] = {p.SESSION_STATS: session_stats}
