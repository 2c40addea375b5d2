"""What compactd's system lines record: the metadata of compact and microcompact boundaries,
the subtypes that mark a boundary, and the bookkeeping fields only compactd writes.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = [
    "BOUNDARY_SUBTYPES",
    "COMPACT_BOUNDARY",
    "CompactMetadata",
    "GROUP_SIZE_FIELD",
    "LEDGER_FIELD",
    "MICROCOMPACT_BOUNDARY",
    "MicrocompactMetadata",
    "PreservedSegment",
    "is_boundary_line",
    "is_compact_boundary_line",
    "without_bookkeeping",
]


class PreservedSegment(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True, gc=False):
    head_uuid: str | None = None
    anchor_uuid: str | None = None
    tail_uuid: str | None = None


class CompactMetadata(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True, gc=False):
    trigger: str | None = None
    pre_tokens: int | None = None
    post_tokens: int | None = None
    duration_ms: int | None = None
    messages_summarized: int | None = None
    pre_compact_discovered_tools: list[str] | None = None
    preserved_segment: PreservedSegment | None = None
    cumulative_dropped_tokens: int | None = None
    # compactd's addition for partial compaction ``from`` a pivot: the leading part of the
    # previous view kept verbatim BEFORE the summary (head / tail uuids; anchor unused).
    preserved_prefix: PreservedSegment | None = None
    # compactd's own additions (ignored by Claude Code): which mechanism produced this
    # boundary, a stable compaction id, and whether it undoes an earlier one.
    mechanism: str | None = None
    compaction_id: str | None = None
    undoes: str | None = None
    # The fixed prefix (system prompt, tools) when the boundary was written, carried to the
    # compacted context until a response reports usage (docs/thresholds.md#accounting).
    fixed_prefix_tokens: int | None = None
    # A summary prepared in the background (docs/background.md): the agent's wait, beside
    # ``durationMs`` (the model's time then).
    wait_ms: int | None = None
    prepared: bool | None = None


class MicrocompactMetadata(
    msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True, gc=False
):
    """What a ``microcompact_boundary`` records: Claude Code's fields, then compactd's own."""

    trigger: str | None = None
    pre_tokens: int | None = None
    tokens_saved: int | None = None
    compacted_tool_ids: list[str] | None = None
    cleared_attachment_uuids: list[str] | None = msgspec.field(
        default=None, name="clearedAttachmentUUIDs"
    )
    # compactd's additions: the strategy, the ids deleted from the prompt cache (cached
    # strategy), and for an undo entry what it undoes and the results it shows again.
    strategy: str | None = None
    cache_deleted_tool_ids: list[str] | None = None
    undoes: str | None = None
    restored_tool_ids: list[str] | None = None


# The system entries that start a new view of the conversation: a compaction (or its undo) and
# a microcompact (or its undo). The one place their subtypes are named.
COMPACT_BOUNDARY: Final = "compact_boundary"
MICROCOMPACT_BOUNDARY: Final = "microcompact_boundary"


# System lines that start or undo a compaction: the lines scans over history look for.
BOUNDARY_SUBTYPES: Final = frozenset({COMPACT_BOUNDARY, MICROCOMPACT_BOUNDARY})


def is_boundary_line(kind: str, subtype: str | None) -> bool:
    """Whether a line of this type and subtype is a compact or microcompact boundary."""
    return kind == "system" and subtype in BOUNDARY_SUBTYPES


def is_compact_boundary_line(kind: str, subtype: str | None) -> bool:
    """Whether a line of this type and subtype is a compact boundary (a released record's kind
    and subtype are known without decoding its line)."""
    return kind == "system" and subtype == COMPACT_BOUNDARY


# Fields of transcript lines that only compactd writes, for its own bookkeeping. Taken from a
# client they could change what compactd does with acknowledged lines, so they are removed
# from appended entries.
GROUP_SIZE_FIELD = "compactdGroupSize"  # lines written in one write, counted at the boundary
# The survival ledger a summary carries to the next compaction (core/ledger.CARRY_FIELD).
LEDGER_FIELD = "compactdLedger"
_BOOKKEEPING_METADATA = {
    # An undo entry names what it undoes; microcompact undo lists the results it restores.
    "compactMetadata": ("undoes",),
    "microcompactMetadata": ("undoes", "restoredToolIds"),
}


def without_bookkeeping(obj: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``obj`` without compactd's bookkeeping fields, and the names of those it had."""
    dropped: list[str] = []
    out = obj
    for own in (GROUP_SIZE_FIELD, LEDGER_FIELD):
        if own in out:
            out = {k: v for k, v in out.items() if k != own}
            dropped.append(own)
    for field, keys in _BOOKKEEPING_METADATA.items():
        meta = out.get(field)
        if isinstance(meta, dict) and any(k in meta for k in keys):
            out = {**out, field: {k: v for k, v in meta.items() if k not in keys}}
            dropped.extend(f"{field}.{k}" for k in keys if k in meta)
    return out, dropped
