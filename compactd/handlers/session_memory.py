"""sessionMemory/get and sessionMemory/extract: thin handlers over the session-memory service.

``get`` reads the session's notes file (path, content, size, when it was last written, whether
an extraction is running). ``extract`` runs an extraction now, waiting for one already under way
first, and answers with the updated notes; a failure is a ``summaryFailed`` error and leaves the
previous notes in place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App


async def get(app: App, params: p.SessionParams, ctx: Context) -> p.SessionMemoryResult:
    session = await app.get_session(params.session_id)
    return await app.session_memory.result(session)


async def extract(app: App, params: p.SessionParams, ctx: Context) -> p.SessionMemoryResult:
    session = await app.get_session(params.session_id)
    svc = app.session_memory
    try:
        await svc.extract(session)
    except p.CompactdError:
        raise
    except OSError as exc:
        raise p.CompactdError(
            p.ErrorCode.INTERNAL, f"cannot write the session notes: {exc.strerror or exc}"
        ) from exc
    return await svc.result(session)


HANDLERS: dict[str, Handler] = {
    p.SESSION_MEMORY_GET: get,
    p.SESSION_MEMORY_EXTRACT: extract,
}
