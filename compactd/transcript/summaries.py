"""Which lines are the summary of a compaction that a plugin's hook answered.

Claude Code files the first message a plugin's ``session.compact`` hook returns as a user line
with ``rowSource: "hook"``, parented on the compaction's boundary, and without
``isCompactSummary`` (Observed (2.1.332), docs/claude-code.md#what-the-transcript-keeps). compactd
reads such a line as the summary it is: marked in memory where lines are read (a followed file,
a reader of Claude Code's file), and in the bytes of the copy an import keeps
(``Store.create_transcript``), so that every later reader of the copy sees the mark.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from typing import Final

from compactd.transcript.model import Entry, Record, record_from_dict

__all__ = [
    "HOOK_ROW_SOURCE",
    "hook_summaries",
    "is_hook_summary",
    "mark_hook_summaries",
    "marked_summary",
]

#: The ``rowSource`` of the lines Claude Code writes for what a plugin's hook returned
#: (Observed (2.1.332), docs/claude-code.md#what-the-transcript-keeps).
HOOK_ROW_SOURCE: Final = "hook"


def is_hook_summary(entry: Entry, boundaries: Container[str]) -> bool:
    """Whether ``entry`` is the summary of a compaction a plugin's ``session.compact`` hook
    answered: a user line with the hook's ``rowSource``, parented on a boundary (one of
    ``boundaries``), not marked yet. The hook's later messages are parented on the line before
    them: they are the kept tail."""
    return (
        entry.type == "user"
        and entry.row_source == HOOK_ROW_SOURCE
        and entry.is_compact_summary is not True
        and entry.parent_uuid is not None
        and entry.parent_uuid in boundaries
    )


def hook_summaries(records: Sequence[Record], boundaries: Iterable[str] = ()) -> list[int]:
    """The indices of the hook-answered summaries among ``records`` (live records, in file
    order); ``boundaries``: the uuids of boundaries that came before them. A look at two fields
    of each entry, nothing decoded."""
    seen = set(boundaries)
    found = []
    for i, record in enumerate(records):
        entry = record.entry
        if entry.row_source == HOOK_ROW_SOURCE:
            if is_hook_summary(entry, seen):
                found.append(i)
        elif entry.is_compact_boundary and entry.uuid:
            seen.add(entry.uuid)
    return found


def mark_hook_summaries(records: Sequence[Record], boundaries: Iterable[str] = ()) -> None:
    """Mark the summaries of hook-answered compactions among ``records`` (``hook_summaries``)
    as compaction summaries, in memory (``isCompactSummary``), so that every reader takes them
    as it takes Claude Code's own."""
    for i in hook_summaries(records, boundaries):
        records[i].entry.is_compact_summary = True


def marked_summary(record: Record) -> Record:
    """The record of a hook-answered summary's line with ``"isCompactSummary": true`` added
    (every other field kept)."""
    return record_from_dict({**record.to_builtins(), "isCompactSummary": True})
