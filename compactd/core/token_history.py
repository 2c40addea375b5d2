"""The session's context size over time, for ``tokens/history``: one point per API response.

Every assistant response Claude Code (or a client) records carries the API's ``usage``, which is
the exact size of the request that produced it plus the response itself; a response split over
several lines (one per content block) is one point, at its last line. Compactions are read from
their ``compact_boundary`` lines through ``stats.compaction_stats`` (the same figures
``session/stats`` reports), placed at the boundary's line, so a chart shows each one as a drop.
Sidechain (sub-agent) responses are not the main context and give no point. Pure: released lines
come back through their reader, so the server runs this in a worker thread
(docs/thresholds.md#history).
"""

from __future__ import annotations

from collections.abc import Sequence

from compactd import protocol as p
from compactd.core import stats, tokens
from compactd.core.view import ViewIndex
from compactd.transcript.history import boundary_indices
from compactd.transcript.model import Record, is_compact_boundary_line

__all__ = ["token_history"]


def _points(records: Sequence[Record]) -> list[p.HistoryPoint]:
    points: list[p.HistoryPoint] = []
    last_id: str | None = None
    for i, record in enumerate(records):
        # The kind is known without decoding a released line: only assistant lines are read.
        if record.kind != "assistant":
            continue
        entry = record.entry
        if entry.is_sidechain or not tokens.has_usable_usage(entry):
            continue
        message = entry.message
        assert message is not None and message.usage is not None
        point = p.HistoryPoint(
            entry_index=i, timestamp=entry.timestamp, tokens=message.usage.total()
        )
        message_id = entry.message_id
        if message_id is not None and message_id == last_id and points:
            points[-1] = point  # the same response's next block: one point, at its last line
        else:
            points.append(point)
        last_id = message_id
    return points


def token_history(
    records: Sequence[Record], auto_compact_threshold: int, views: ViewIndex | None = None
) -> p.HistoryResult:
    """The ``tokens/history`` result of a transcript (``views`` as for ``compaction_stats``)."""
    # compaction_stats lists the compaction boundaries in file order, leaving out undo entries.
    boundaries = [
        i
        for i in boundary_indices(records)
        if is_compact_boundary_line(records[i].kind, records[i].subtype)
    ]
    undoes = {
        i
        for i in boundaries
        if (meta := records[i].entry.compact_metadata) is not None and meta.undoes
    }
    positions = [i for i in boundaries if i not in undoes]
    compactions = [
        p.HistoryCompaction(
            entry_index=index,
            timestamp=stat.timestamp,
            compaction_id=stat.compaction_id,
            trigger=stat.trigger,
            mechanism=stat.mechanism,
            pre_tokens=stat.pre_tokens,
            post_tokens=stat.post_tokens,
            undone=stat.undone,
        )
        for index, stat in zip(
            positions, stats.compaction_stats(records, auto_compact_threshold, views), strict=True
        )
    ]
    return p.HistoryResult(
        points=_points(records), compactions=compactions, entry_count=len(records)
    )
