"""compact/micro: clear old tool results now, without a model call.

The handler validates, takes the session's lock (microcompact appends a boundary, so it is
serialized with appends and compactions) and lets ``engine/micro.py`` do the work. An explicit
request while microcompact is switched off is an error, not a silent no-op, so a user asking for
it learns why nothing happened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core.constants import ENV_DISABLE_COMPACT, ENV_DISABLE_MICROCOMPACT
from compactd.engine.micro import microcompact_session
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App


async def micro(app: App, params: p.MicroParams, ctx: Context) -> p.MicroResult:
    session = await app.get_session(params.session_id)
    if not app.flags.microcompact_enabled:
        raise p.CompactdError(
            p.ErrorCode.COMPACTION_DISABLED,
            f"microcompact is disabled ({ENV_DISABLE_MICROCOMPACT} or {ENV_DISABLE_COMPACT} "
            "is set in the daemon's environment)",
        )
    async with session.lock:
        return await microcompact_session(app, session, params.strategy, "manual")


HANDLERS: dict[str, Handler] = {p.COMPACT_MICRO: micro}
