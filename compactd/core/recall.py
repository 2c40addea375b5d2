"""Recall: search and fetch any entry of a transcript, including what compactions hid.

A transcript keeps every original after a compaction or a microcompact, so nothing is really
gone: ``search`` finds entries whose message text, tool inputs or tool results contain a
string (case-insensitive), most recent first, with a snippet around the match; ``fetch``
returns entries by uuid. Each hit says whether the entry is still in the current view.

A summary names the originals it shortens by recall pointers, ``recall:<uuid>`` (``pointer``);
``pointer_uuids`` finds them in a text, and ``recall/search`` given a pointer as its query
fetches the entry, as if the uuid had been asked for.

Speed: on a long transcript most entries do not match, so a query made only of characters that
JSON writes unescaped is first looked for in the raw line bytes (lower-cased), and only the
lines that pass are turned into text. Pure: no I/O of its own; released lines of a ``History``
come back through its reader, so the server runs these in a worker thread.
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
    "search",
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


def _raw_prefilter(query: str) -> bytes | None:
    """The lower-cased bytes to look for in raw lines, or None when JSON may escape them."""
    if not query.isascii() or any(ch in query for ch in '"\\') or not query.isprintable():
        return None
    return query.lower().encode()


def search(
    records: Sequence[Record],
    query: str,
    *,
    limit: int = RECALL_DEFAULT_LIMIT,
    cleared_tool_ids: frozenset[str] = frozenset(),
) -> list[Hit]:
    """Entries containing ``query`` (case-insensitive), most recent first, at most ``limit``."""
    needle = query.casefold()
    raw_needle = _raw_prefilter(query)
    hits: list[Hit] = []
    # The prefilter reads a released line's bytes without making a record of it.
    raw_line = records.raw_line if isinstance(records, History) else lambda i: records[i].raw
    for i in range(len(records) - 1, -1, -1):
        if raw_needle is not None and raw_needle not in raw_line(i).lower():
            continue
        record = records[i]
        for text, tool_id in _parts(record):
            at = text.casefold().find(needle)
            if at >= 0:
                cleared = tool_id is not None and tool_id in cleared_tool_ids
                hits.append(Hit(record, snippet_at(text, at, len(query)), cleared))
                break
        if len(hits) >= limit:
            break
    return hits


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
