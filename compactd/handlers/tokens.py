"""tokens/status and tokens/breakdown."""

from __future__ import annotations

from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core import tokens
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


HANDLERS: dict[str, Handler] = {
    p.TOKENS_STATUS: status,
    p.TOKENS_BREAKDOWN: breakdown,
}
