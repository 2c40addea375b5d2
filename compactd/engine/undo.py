"""Undo of the last compaction: append an entry that brings the previous view back.

``undo_last`` finds the most recent compaction (full, partial, session memory) or microcompact
that is still in effect and appends, durably, an entry that cancels it -- nothing is deleted.
For a compaction that is a ``compact_boundary`` whose ``compactMetadata.undoes`` names it;
``core.view`` then shows the context as it was just before it, plus what came after. For a
microcompact it is a ``microcompact_boundary`` whose metadata names it in ``undoes`` and lists
the tool results shown again in ``restoredToolIds``; the session stops applying the undone
one. Both survive a restart because the view is derived from the transcript.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from compactd import protocol as p
from compactd.core.view import compaction_key
from compactd.transcript import entries
from compactd.transcript.model import (
    MicrocompactMetadata,
    Record,
    record_from_dict,
)

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session

__all__ = ["undo_last"]

log = logging.getLogger(__name__)


def _undo_entry(session: Session, target: Record, pre_tokens: int) -> tuple[str, dict[str, Any]]:
    last = session.last_uuid()
    entry = target.entry
    sid, cwd = session.session_id, session.meta.cwd
    if entry.is_compact_boundary:
        key = compaction_key(target) or ""
        undo_compaction = entries.compact_undo(
            session_id=sid, cwd=cwd, last=last, undoes=key, pre_tokens=pre_tokens
        )
        return key, undo_compaction
    meta = entry.microcompact_metadata
    key = entry.uuid or ""
    undo = MicrocompactMetadata(
        trigger="manual",
        pre_tokens=pre_tokens,
        tokens_saved=0,
        compacted_tool_ids=[],
        cleared_attachment_uuids=[],
        strategy="undo",
        undoes=key,
        restored_tool_ids=list(meta.compacted_tool_ids or []) if meta is not None else [],
    )
    boundary = entries.microcompact_boundary(
        undo, session_id=sid, cwd=cwd, parent=last, content=entries.UNDO_MICROCOMPACT_CONTENT
    )
    return key, boundary


async def undo_last(runtime: Runtime, session: Session) -> p.UndoResult:
    """Undo the most recent compaction still in effect. Raises ``nothingToUndo`` or
    ``sessionBusy``; on error nothing is written."""
    async with session.lock:
        if session.busy:
            raise session.busy_error()
        at = session.views.last_undoable()
        if at is None:
            raise p.CompactdError(
                p.ErrorCode.NOTHING_TO_UNDO,
                f"session {session.session_id!r} has no compaction left to undo",
                sessionId=session.session_id,
            )
        pre = runtime.status(session).tokens
        key, entry = _undo_entry(session, session.records[at], pre)
        await runtime.commit(session, [record_from_dict(entry)])
        status = runtime.status(session)
    runtime.check_thresholds(session, status)
    log.info("session %s: undid compaction %s", session.session_id, key)
    return p.UndoResult(undone_compaction_id=key, boundary=entry, status=status)
