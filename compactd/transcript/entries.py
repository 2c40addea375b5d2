"""The lines compactd writes into a transcript, built in one place from typed fields.

Every line compactd adds (compaction boundaries and their undo, microcompact boundaries and
their undo, the continuation summary, attachments, file-state lines) is shaped here, in Claude
Code's line format where one exists, with compactd's own additions kept to their metadata.
Bookkeeping fields are never taken from a client's input (``model.without_bookkeeping``).
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable
from typing import Any, Final

import msgspec

from compactd.transcript.model import (
    COMPACT_BOUNDARY,
    GROUP_SIZE_FIELD,
    LEDGER_FIELD,
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
    "compact_boundary",
    "compact_summary",
    "compact_undo",
    "context_attachments",
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


def compact_boundary(
    metadata: dict[str, Any],
    *,
    session_id: str,
    cwd: str,
    logical_parent: str | None,
    group_size: int,
    uuid: str,
) -> dict[str, Any]:
    """A compaction's boundary: a chain break (no parent) that points back logically, with the
    number of lines written with it in one write, so that the store can drop a group a crash
    cut short (docs/durability.md)."""
    return {
        "parentUuid": None,
        "logicalParentUuid": logical_parent,
        "type": "system",
        "subtype": COMPACT_BOUNDARY,
        "content": COMPACTION_CONTENT,
        "isMeta": False,
        "level": "info",
        "uuid": uuid,
        "compactMetadata": metadata,
        GROUP_SIZE_FIELD: group_size,
        **common(session_id, cwd),
    }


def compact_summary(
    continuation: str,
    *,
    session_id: str,
    cwd: str,
    boundary_uuid: str,
    uuid: str,
    carry: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The user entry that carries the summary after a boundary; ``carry``: the survival ledger
    the next compaction folds (``compactdLedger``)."""
    summary = {
        "parentUuid": boundary_uuid,
        "type": "user",
        "message": {"role": "user", "content": continuation},
        "isVisibleInTranscriptOnly": True,
        "isCompactSummary": True,
        "uuid": uuid,
        **common(session_id, cwd),
    }
    if carry:
        summary[LEDGER_FIELD] = carry
    return summary


def context_attachments(
    attachments: list[dict[str, Any]],
    hook_context: list[str],
    *,
    session_id: str,
    cwd: str,
    parent: str,
    render: Callable[[str], str],
) -> list[dict[str, Any]]:
    """The attachment lines written after a summary, chained: the rehydration ``attachments``,
    then what SessionStart hooks asked to add (``render`` marks it as a hook's output)."""
    out: list[dict[str, Any]] = []
    for att in attachments:
        entry = {**common(session_id, cwd), **att}
        entry.setdefault("type", "attachment")
        if not entry.get("uuid"):
            entry["uuid"] = new_uuid()
        entry["parentUuid"] = parent
        parent = entry["uuid"]
        out.append(entry)
    for text in hook_context:
        entry = {
            "type": "attachment",
            "uuid": new_uuid(),
            "attachment": {
                "type": "hook_additional_context",
                "content": [text],
                "hookName": "SessionStart:compact",
                "hookEvent": "SessionStart",
                "toolUseID": "SessionStart",
            },
            # What the model is shown: the text the hook asked to add, marked as a hook's output.
            "rendered": [
                {
                    "content": render(
                        f"SessionStart hook (after compaction) added this context:\n{text}"
                    )
                }
            ],
            **common(session_id, cwd),
            "parentUuid": parent,
        }
        parent = entry["uuid"]
        out.append(entry)
    return out
