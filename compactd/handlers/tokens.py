"""tokens/status, tokens/breakdown and tokens/history.

The history reads released lines back from the transcript, so it runs in a worker thread, under
the session's lock (``Session.read_history``: the session's views are shared with its
compactions), as session/stats does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core import token_history, tokens
from compactd.core.view import main_thread
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App


async def status(app: App, params: p.SessionParams, ctx: Context) -> p.TokenStatus:
    session = await app.get_session(params.session_id)
    return app.status(session)


async def breakdown(app: App, params: p.SessionParams, ctx: Context) -> p.BreakdownResult:
    session = await app.get_session(params.session_id)
    # Inline sub-agent turns (sidechains) are not part of the main context.
    count = session.counter.current
    return tokens.breakdown([r.entry for r in main_thread(session.context())], count)


async def history(app: App, params: p.SessionParams, ctx: Context) -> p.HistoryResult:
    session = await app.get_session(params.session_id)
    threshold = app.status(session).auto_compact_threshold
    return await session.read_history(
        lambda: token_history.token_history(session.records, threshold, session.views)
    )


HANDLERS: dict[str, Handler] = {
    p.TOKENS_STATUS: status,
    p.TOKENS_BREAKDOWN: breakdown,
    p.TOKENS_HISTORY: history,
}
