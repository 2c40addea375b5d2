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

import anyio

from compactd import protocol as p
from compactd.core import recall
from compactd.core.recall_render import Found, snippet
from compactd.core.recall_words import parse_query
from compactd.engine.session import Session
from compactd.services.recall_index import (
    IndexBusy,
    IndexUnusable,
    RecallIndex,
    SearchOutcome,
    TranscriptUnreadable,
    use_index,
)
from compactd.services.safe_io import Deadline

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


# How long a search brings the index up to date before it takes the session's lock (a cold
# build of a long transcript: no request of the session waits for it), and then under the lock
# (only what was appended meanwhile). compactd's choices.
BUILD_DEADLINE_S = 60.0
SEARCH_DEADLINE_S = 5.0


def _failed(exc: Exception) -> p.CompactdError:
    """A recall index failure as the protocol's error (docs/recall.md#sharing)."""
    if isinstance(exc, TranscriptUnreadable):
        return p.CompactdError(p.ErrorCode.TRANSCRIPT_UNREADABLE, str(exc))
    if isinstance(exc, IndexBusy):
        return p.CompactdError(p.ErrorCode.SESSION_BUSY, str(exc), retryAfterMs=1000)
    assert isinstance(exc, IndexUnusable)
    return p.CompactdError(p.ErrorCode.INTERNAL, str(exc))


async def search(session: Session, data_dir: Path, query: str, limit: int) -> p.RecallResult:
    """The session's entries that match ``query``, best first, at most ``limit``.

    The index is brought up to date first, outside the session's lock; then, under it, with
    what was appended meanwhile, and searched. An index still incomplete then (another process
    holds it, or the build ran out of time) is ``sessionBusy``: a partial answer would look
    whole to the client.
    """
    parsed = parse_query(query)
    transcript = Path(session.transcript_path)

    def build() -> None:
        use_index(data_dir, transcript, lambda _: None, deadline=Deadline(BUILD_DEADLINE_S))

    try:
        await anyio.to_thread.run_sync(build, abandon_on_cancel=True)
    except (IndexBusy, IndexUnusable, TranscriptUnreadable):
        pass  # said again, under the lock, if it still holds

    def find() -> p.RecallResult:
        def work(index: RecallIndex) -> SearchOutcome:
            return index.search(parsed, limit)

        try:
            outcome, coverage = use_index(
                data_dir, transcript, work, deadline=Deadline(SEARCH_DEADLINE_S)
            )
        except (IndexBusy, IndexUnusable, TranscriptUnreadable) as exc:
            raise _failed(exc) from exc
        if not coverage.complete:
            raise p.CompactdError(
                p.ErrorCode.SESSION_BUSY,
                f"the recall index of this session covers {coverage.indexed:,} of its "
                f"{coverage.size:,} bytes so far ("
                + ("another process is updating it" if coverage.busy else "still being built")
                + "); ask again in a moment",
                retryAfterMs=1000,
            )
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
