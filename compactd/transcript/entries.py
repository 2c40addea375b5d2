"""The lines compactd writes into a transcript, built in one place from typed fields.

Every line compactd adds (compaction boundaries and their undo, microcompact boundaries and
their undo, the continuation summary, attachments, file-state lines) is shaped here, in Claude
Code's line format where one exists, with compactd's own additions kept to their metadata.
Bookkeeping fields are never taken from a client's input (``model.without_bookkeeping``).
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any, Final

import msgspec

from compactd.transcript.model import (
    COMPACT_BOUNDARY,
    MICROCOMPACT_BOUNDARY,
    MicrocompactMetadata,
    transcript_timestamp,
)

__all__ = [
    "COMPACTION_CONTENT",
    "FILE_READ_ENTRY",
    "MICROCOMPACT_CONTENT",
    "UNDO_COMPACTION_CONTENT",
    "UNDO_MICROCOMPACT_CONTENT",
    "common",
    "compact_undo",
    "file_read_line",
    "microcompact_boundary",
    "new_uuid",
    "system_line",
]

# What a person sees for each line in a transcript viewer.
COMPACTION_CONTENT: Final = "Conversation compacted"
MICROCOMPACT_CONTENT: Final = "Old tool results cleared by microcompact"
UNDO_COMPACTION_CONTENT: Final = "Compaction undone"
UNDO_MICROCOMPACT_CONTENT: Final = "Microcompact undone"
# The line ``fileState/record`` appends. Like Claude Code's own bookkeeping lines
# (``file-history-snapshot``, ``queue-operation``) it is not part of the model's view.
FILE_READ_ENTRY: Final = "compactd-file-read"


def new_uuid() -> str:
    return str(uuidlib.uuid4())


def common(session_id: str, cwd: str, at: float | None = None) -> dict[str, Any]:
    """The fields every line compactd writes into a session carries, as Claude Code's do."""
    return {
        "isSidechain": False,
        "userType": "external",
        "cwd": cwd,
        "sessionId": session_id,
        "timestamp": transcript_timestamp(at),
    }


def system_line(
    subtype: str,
    content: str,
    *,
    session_id: str,
    cwd: str,
    parent: str | None,
    at: float | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A system line (a boundary or an undo entry) with a new uuid."""
    return {
        **common(session_id, cwd, at),
        "type": "system",
        "subtype": subtype,
        "content": content,
        "isMeta": False,
        "level": "info",
        "parentUuid": parent,
        "uuid": new_uuid(),
        **fields,
    }


def microcompact_boundary(
    metadata: MicrocompactMetadata,
    *,
    session_id: str,
    cwd: str,
    parent: str | None,
    content: str = MICROCOMPACT_CONTENT,
    at: float | None = None,
) -> dict[str, Any]:
    """A ``microcompact_boundary`` in Claude Code's shape; it hangs off the last entry (it is no
    chain break). Its undo is one too, with ``undoes`` and ``restoredToolIds`` set."""
    return system_line(
        MICROCOMPACT_BOUNDARY,
        content,
        session_id=session_id,
        cwd=cwd,
        parent=parent,
        at=at,
        microcompactMetadata=msgspec.to_builtins(metadata),
    )


def compact_undo(
    *, session_id: str, cwd: str, last: str | None, undoes: str, pre_tokens: int
) -> dict[str, Any]:
    """The entry that cancels a compaction: a compact boundary that restores the view before
    the one it names (``compactMetadata.undoes``)."""
    return system_line(
        COMPACT_BOUNDARY,
        UNDO_COMPACTION_CONTENT,
        session_id=session_id,
        cwd=cwd,
        parent=None,
        logicalParentUuid=last,
        compactMetadata={
            "trigger": "manual",
            "preTokens": pre_tokens,
            "undoes": undoes,
            "mechanism": "undo",
            "compactionId": new_uuid(),
        },
    )


def file_read_line(
    *,
    session_id: str,
    path: str,
    at: float,
    offset: int | None = None,
    limit: int | None = None,
    content_hash: str | None = None,
) -> dict[str, Any]:
    """The line ``fileState/record`` appends: a read the agent made, outside the model's view."""
    line: dict[str, Any] = {
        "type": FILE_READ_ENTRY,
        "timestamp": transcript_timestamp(at),
        "readAt": at,
        "sessionId": session_id,
        "path": path,
    }
    if offset is not None:
        line["offset"] = offset
    if limit is not None:
        line["limit"] = limit
    if content_hash is not None:
        line["contentHash"] = content_hash
    return line
