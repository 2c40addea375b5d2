"""Recall: fetch any entry of a transcript by uuid, and the pointers that name entries.

A transcript keeps every original after a compaction or a microcompact, so nothing is really
gone. Searching it by words is the full-text index's work (``services/recall_index.py``, with
its pure half in ``core/recall_words.py`` and ``core/recall_render.py``; docs/recall.md);
``fetch`` returns entries by uuid from a session's records, and ``entry_text`` is the text of
one entry.

A summary names the originals it shortens by recall pointers, ``recall:<uuid>`` (``pointer``);
``pointer_uuids`` finds them in a text, and ``recall/search`` given a pointer as its query
fetches the entry, as if the uuid had been asked for.

Pure: no I/O of its own; released lines of a ``History`` come back through its reader, so the
server runs these in a worker thread.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from compactd.transcript.history import History
from compactd.transcript.model import Block, Record, TextBlock, ToolResultBlock, ToolUseBlock

__all__ = [
    "RECALL_DEFAULT_LIMIT",
    "RECALL_MAX_LIMIT",
    "Hit",
    "entry_text",
    "fetch",
    "pointer",
    "pointer_uuids",
    "snippet_at",
]

# Hits returned when the request names no limit, and the most it may ask for (the protocol's
# recall/search defaults; compactd's own choice).
RECALL_DEFAULT_LIMIT: Final = 20
RECALL_MAX_LIMIT: Final = 200
# Characters of context on each side of a match in a snippet.
SNIPPET_CONTEXT_CHARS: Final = 80

_POINTER_PREFIX: Final = "recall:"
# A uuid as transcripts write them, or any id of letters, digits and dashes.
_POINTER: Final = re.compile(r"recall:([0-9A-Za-z][0-9A-Za-z_-]*)")


def pointer(uuid: str | None) -> str:
    """The recall pointer of an entry: ``recall/search`` returns the entry for it."""
    return f"{_POINTER_PREFIX}{uuid}"


def pointer_uuids(text: str) -> list[str]:
    """The uuids of the recall pointers in ``text``, in order, each once."""
    return list(dict.fromkeys(_POINTER.findall(text)))


@dataclass(frozen=True, slots=True)
class Hit:
    record: Record
    snippet: str
    # The match lies in a tool result cleared by microcompact, or the entry left the view.
    hidden_part: bool


def _block_texts(blocks: Iterable[Block]) -> Iterable[tuple[str, str | None]]:
    """(text, tool_use_id of a tool result or None) for every searchable block."""
    for block in blocks:
        if isinstance(block, TextBlock):
            yield block.text, None
        elif isinstance(block, ToolUseBlock):
            yield f"{block.name} {json.dumps(block.input, ensure_ascii=False)}", None
        elif isinstance(block, ToolResultBlock):
            content = block.content
            if isinstance(content, str):
                yield content, block.tool_use_id
            elif content:
                for text, _ in _block_texts(content):
                    yield text, block.tool_use_id


def _parts(record: Record) -> list[tuple[str, str | None]]:
    entry = record.entry
    parts = list(_block_texts(entry.blocks))
    if isinstance(entry.content, str) and entry.content:
        parts.append((entry.content, None))
    if entry.attachment:
        parts.append((json.dumps(entry.attachment, ensure_ascii=False), None))
    if entry.summary:
        parts.append((entry.summary, None))
    return parts


def entry_text(record: Record) -> str:
    """All searchable text of an entry, joined by newlines."""
    return "\n".join(text for text, _ in _parts(record))


def snippet_at(text: str, at: int, length: int) -> str:
    """The text around ``length`` characters at ``at``, on one line, with ``...`` where cut."""
    start = max(0, at - SNIPPET_CONTEXT_CHARS)
    stop = min(len(text), at + length + SNIPPET_CONTEXT_CHARS)
    core = " ".join(text[start:stop].split())
    return ("..." if start > 0 else "") + core + ("..." if stop < len(text) else "")


def fetch(records: Sequence[Record], uuids: Sequence[str]) -> list[Hit]:
    """The entries with these uuids, in the order asked (unknown uuids are skipped).

    A uuid written on several lines gives its latest. A ``History`` is looked up in its uuid
    index; other sequences are scanned.
    """
    wanted = set(uuids)
    found: dict[str, Record] = {}
    if isinstance(records, History):
        for uid in wanted:
            at = records.index_of(uid)
            if at is not None:
                found[uid] = records[at]
    else:
        for record in records:
            key = record.uuid
            if key is not None and key in wanted:
                found[key] = record
    out: list[Hit] = []
    for uid in dict.fromkeys(uuids):
        hit = found.get(uid)
        if hit is not None:
            out.append(Hit(hit, snippet_at(entry_text(hit), 0, 0), False))
    return out
