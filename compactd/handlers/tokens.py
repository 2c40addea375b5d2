"""tokens/status and tokens/breakdown."""

from __future__ import annotations

from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core import tokens
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App


async def status(app: App, params: p.SessionParams, ctx: Context) -> p.TokenStatus:
    session = await app.get_session(params.session_id)
    return app.status(session)


async def breakdown(app: App, params: p.SessionParams, ctx: Context) -> p.BreakdownResult:
    session = await app.get_session(params.session_id)
    return tokens.breakdown(session.context_entries())


HANDLERS: dict[str, Handler] = {
    p.TOKENS_STATUS: status,
    p.TOKENS_BREAKDOWN: breakdown,
}
