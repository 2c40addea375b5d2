"""fileState/record, fileState/list, attachments/rehydrate and attachments/pending."""

from __future__ import annotations

from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.engine import rehydration
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App


async def record(app: App, params: p.FileRecordParams, ctx: Context) -> p.FileStateResult:
    session = await app.get_session(params.session_id)
    return await app.files.record(session, params)


async def list_files(app: App, params: p.SessionParams, ctx: Context) -> p.FileStateResult:
    session = await app.get_session(params.session_id)
    return await app.files.listing(session)


async def rehydrate(app: App, params: p.RehydrateParams, ctx: Context) -> p.AttachmentsResult:
    session = await app.get_session(params.session_id)
    return p.AttachmentsResult(
        attachments=await rehydration.rehydrate_now(app, session, params.extras)
    )


async def pending(app: App, params: p.SessionParams, ctx: Context) -> p.AttachmentsResult:
    session = await app.get_session(params.session_id)
    return p.AttachmentsResult(attachments=await app.files.pending(session))


HANDLERS: dict[str, Handler] = {
    p.FILESTATE_RECORD: record,
    p.FILESTATE_LIST: list_files,
    p.ATTACHMENTS_REHYDRATE: rehydrate,
    p.ATTACHMENTS_PENDING: pending,
}
