"""fileState/record and fileState/list: the agent's read-file state (``engine/files.py``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App

log = logging.getLogger(__name__)


async def record(app: App, params: p.FileRecordParams, ctx: Context) -> p.FileStateResult:
    session = await app.get_session(params.session_id)
    return await app.files.record(session, params)


async def list_files(app: App, params: p.SessionParams, ctx: Context) -> p.FileStateResult:
    session = await app.get_session(params.session_id)
    return await app.files.listing(session)


HANDLERS: dict[str, Handler] = {
    p.FILESTATE_RECORD: record,
    p.FILESTATE_LIST: list_files,
}
