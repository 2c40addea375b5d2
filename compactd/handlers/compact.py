"""compact/*: full, auto, micro, partial, preview and undo, each a thin handler over the engine.

``compact/full`` and ``compact/partial`` are the user's explicit requests: every failure is a
JSON-RPC error with a stable code. ``compact/auto`` carries out ``engine.auto``'s decision and
never fails for a compaction that did not happen; ``compact/preview`` reports the same decision
(or what an explicit mechanism would leave) without changing anything. ``compact/micro``
clears old tool results now; an explicit request while microcompact is switched off is an
error, not a silent no-op. ``compact/undo`` appends an entry that cancels the last compaction.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core.constants import ENV_DISABLE_COMPACT, ENV_DISABLE_MICROCOMPACT
from compactd.engine.auto import run_auto
from compactd.engine.background import run_full
from compactd.engine.microcompact import microcompact
from compactd.engine.partial import run_partial
from compactd.engine.preview import preview as preview_of
from compactd.engine.undo import undo_last
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App

log = logging.getLogger(__name__)


async def full(app: App, params: p.FullParams, ctx: Context) -> p.CompactResult:
    session = await app.get_session(params.session_id)
    return await run_full(
        app,
        session,
        params.custom_instructions,
        lambda title: ctx.begin_progress(title, "starting"),
    )


async def auto(app: App, params: p.AutoParams, ctx: Context) -> p.AutoResult:
    session = await app.get_session(params.session_id)
    return await run_auto(
        app,
        app.session_memory,
        session,
        bool(params.force),
        lambda title: ctx.begin_progress(title, "starting"),
        params.pending_tokens or 0,
    )


async def micro(app: App, params: p.MicroParams, ctx: Context) -> p.MicroResult:
    session = await app.get_session(params.session_id)
    if not app.flags.microcompact_enabled:
        raise p.CompactdError(
            p.ErrorCode.COMPACTION_DISABLED,
            f"microcompact is disabled ({ENV_DISABLE_MICROCOMPACT} or {ENV_DISABLE_COMPACT} "
            "is set in the daemon's environment)",
        )
    return await microcompact(app, session, params.strategy, "manual")


async def partial(app: App, params: p.PartialParams, ctx: Context) -> p.CompactResult:
    session = await app.get_session(params.session_id)
    return await run_partial(
        app, session, params, lambda title: ctx.begin_progress(title, "starting")
    )


async def preview(app: App, params: p.PreviewParams, ctx: Context) -> p.PreviewResult:
    session = await app.get_session(params.session_id)
    return await preview_of(app, app.session_memory, session, params)


async def undo(app: App, params: p.SessionParams, ctx: Context) -> p.UndoResult:
    session = await app.get_session(params.session_id)
    return await undo_last(app, session)


HANDLERS: dict[str, Handler] = {
    p.COMPACT_FULL: full,
    p.COMPACT_AUTO: auto,
    p.COMPACT_MICRO: micro,
    p.COMPACT_PARTIAL: partial,
    p.COMPACT_PREVIEW: preview,
    p.COMPACT_UNDO: undo,
}
