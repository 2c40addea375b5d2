"""session/open, append, messages, list, close."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from compactd import protocol as p
from compactd.core.normalize import to_api_messages
from compactd.engine import microcompact
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App


async def open_session(app: App, params: p.OpenParams, ctx: Context) -> p.OpenResult:
    return await app.open_session(params)


async def append(app: App, params: p.AppendParams, ctx: Context) -> p.AppendResult:
    session = await app.get_session(params.session_id)
    return await app.append(session, params.entries)


async def messages(app: App, params: p.SessionParams, ctx: Context) -> p.MessagesResult:
    session = await app.get_session(params.session_id)
    ctx_records = session.context()
    boundary = next((r.entry.uuid for r in ctx_records if r.entry.is_compact_boundary), None)
    extras = await microcompact.messages_extras(app, session)
    cleared = frozenset(session.cleared_tool_ids)
    # In a worker thread: a long context takes a while, and other sessions' requests go on.
    messages = await anyio.to_thread.run_sync(
        lambda: to_api_messages(ctx_records, cleared_tool_ids=cleared)
    )
    return p.MessagesResult(
        messages=messages,
        boundary_uuid=boundary,
        cache_edits=extras.cache_edits,
        context_management=extras.context_management,
        betas=extras.betas,
    )


async def list_sessions(app: App, params: object, ctx: Context) -> p.ListResult:
    return p.ListResult(sessions=app.list_sessions())


async def close(app: App, params: p.SessionParams, ctx: Context) -> p.CloseResult:
    # Not loaded first: closing a session this daemon does not have open answers false, even
    # when another process owns it.
    return p.CloseResult(closed=await app.close_session(params.session_id))


HANDLERS: dict[str, Handler] = {
    p.SESSION_OPEN: open_session,
    p.SESSION_APPEND: append,
    p.SESSION_MESSAGES: messages,
    p.SESSION_LIST: list_sessions,
    p.SESSION_CLOSE: close,
}
