"""attachments/rehydrate and attachments/pending: what is re-injected after a compaction, and
the nested-memory and changed-file attachments the watchers queued."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.engine.rehydrate import rehydrate_now
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App

log = logging.getLogger(__name__)


async def rehydrate(app: App, params: p.RehydrateParams, ctx: Context) -> p.AttachmentsResult:
    session = await app.get_session(params.session_id)
    return p.AttachmentsResult(attachments=await rehydrate_now(app, session, params.extras))


async def pending(app: App, params: p.SessionParams, ctx: Context) -> p.AttachmentsResult:
    session = await app.get_session(params.session_id)
    return p.AttachmentsResult(attachments=await app.files.pending(session))


HANDLERS: dict[str, Handler] = {
    p.ATTACHMENTS_REHYDRATE: rehydrate,
    p.ATTACHMENTS_PENDING: pending,
}
