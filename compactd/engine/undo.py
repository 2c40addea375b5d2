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
import uuid
from typing import TYPE_CHECKING, Any

from compactd import protocol as p
from compactd.core.view import compaction_key
from compactd.engine.compaction import _common
from compactd.transcript.model import (
    COMPACT_BOUNDARY,
    MICROCOMPACT_BOUNDARY,
    Record,
    record_from_dict,
)

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session

__all__ = ["UNDO_BOUNDARY_CONTENT", "undo_last"]

log = logging.getLogger(__name__)

# What a person sees for the undo entry in a transcript viewer.
UNDO_BOUNDARY_CONTENT = "Compaction undone"
_UNDO_MICRO_CONTENT = "Microcompact undone"


def _fields(session: Session) -> dict[str, Any]:
    # The same common fields as the compaction engine's entries, plus a system entry's own.
    return {
        **_common(session),
        "uuid": str(uuid.uuid4()),
        "isMeta": False,
        "level": "info",
        "type": "system",
    }


def _undo_entry(session: Session, target: Record, pre_tokens: int) -> tuple[str, dict[str, Any]]:
    last = session.last_uuid()
    entry = target.entry
    if entry.is_compact_boundary:
        key = compaction_key(target) or ""
        return key, {
            **_fields(session),
            "subtype": COMPACT_BOUNDARY,
            "content": UNDO_BOUNDARY_CONTENT,
            "parentUuid": None,
            "logicalParentUuid": last,
            "compactMetadata": {
                "trigger": "manual",
                "preTokens": pre_tokens,
                "undoes": key,
                "mechanism": "undo",
                "compactionId": str(uuid.uuid4()),
            },
        }
    meta = entry.microcompact_metadata or {}
    ids = meta.get("compactedToolIds")
    restored = [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []
    key = entry.uuid or ""
    return key, {
        **_fields(session),
        "subtype": MICROCOMPACT_BOUNDARY,
        "content": _UNDO_MICRO_CONTENT,
        "parentUuid": last,
        "microcompactMetadata": {
            "trigger": "manual",
            "preTokens": pre_tokens,
            "tokensSaved": 0,
            "compactedToolIds": [],
            "clearedAttachmentUUIDs": [],
            "strategy": "undo",
            "undoes": key,
            "restoredToolIds": restored,
        },
    }


async def undo_last(runtime: Runtime, session: Session) -> p.UndoResult:
    """Undo the most recent compaction still in effect. Raises ``nothingToUndo`` or
    ``sessionBusy``; on error nothing is written."""
    async with session.lock:
        if session.compacting:
            raise p.CompactdError(
                p.ErrorCode.SESSION_BUSY,
                f"session {session.session_id!r} is being compacted; undo when it ends",
                sessionId=session.session_id,
            )
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
