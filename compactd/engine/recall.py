"""recall/search on a compactd session: ranked word search through the session's full-text
index, or entries fetched by uuid (docs/recall.md).

A search goes to the same index the MCP ``recall`` tool uses (``services/recall_index.py``,
kept under the data dir and brought up to date with the transcript's new lines first). A fetch
by uuid reads the session's own records, so that the whole entry comes back as stored. Each hit
says whether the model still sees it (``compacted``: it left the view, or it is a tool result
microcompact cleared). Both run in a worker thread under the session's lock, so no compaction
changes the transcript meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from compactd import protocol as p
from compactd.core import recall
from compactd.core.recall_render import Found, snippet
from compactd.core.recall_words import parse_query
from compactd.engine.session import Session
from compactd.services.recall_index import open_index

__all__ = ["fetch", "search"]


def _hit(
    found: Found, terms: Sequence[str], in_view: set[str], cleared: frozenset[str]
) -> p.RecallHit:
    e = found.entry
    hidden = (e.tool_use_id is not None and e.tool_use_id in cleared) or e.uuid not in in_view
    return p.RecallHit(
        uuid=e.uuid or "",
        type=e.type,
        timestamp=e.timestamp,
        compacted=hidden,
        snippet=snippet(e.text, terms),
        role=e.role,
        match=found.match,
        revisions=[
            p.RecallRevision(
                uuid=r.entry.uuid or "",
                role=r.entry.role,
                timestamp=r.entry.timestamp,
                reason=r.reason,
                snippet=snippet(r.entry.text, terms),
            )
            for r in found.revisions
        ],
    )


async def search(session: Session, data_dir: Path, query: str, limit: int) -> p.RecallResult:
    """The session's entries that match ``query``, best first, at most ``limit``."""
    parsed = parse_query(query)

    def find() -> p.RecallResult:
        with open_index(data_dir, Path(session.transcript_path)) as index:
            outcome = index.search(parsed, limit)
        in_view = {r.uuid for r in session.context() if r.uuid is not None}
        cleared = frozenset(session.cleared_tool_ids)
        hits = [_hit(f, parsed.terms, in_view, cleared) for f in outcome.found]
        return p.RecallResult(hits=hits, total=outcome.total)

    return await session.read_history(find)


async def fetch(session: Session, uuids: Sequence[str]) -> p.RecallResult:
    """The entries with these uuids, whole, in the order asked (unknown ones are skipped)."""

    def find() -> p.RecallResult:
        in_view = {id(r) for r in session.context()}
        return p.RecallResult(
            hits=[
                p.RecallHit(
                    uuid=h.record.entry.uuid or "",
                    type=h.record.entry.type,
                    timestamp=h.record.entry.timestamp,
                    compacted=id(h.record) not in in_view,
                    snippet=h.snippet,
                    entry=h.record.to_builtins(),
                )
                for h in recall.fetch(session.records, uuids)
            ]
        )

    return await session.read_history(find)
