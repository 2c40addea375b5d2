"""Compaction health of a session, derived from its transcript alone.

Every compaction leaves a ``compact_boundary`` entry whose ``compactMetadata`` records its
trigger, the context size before and after, and its duration; compactd adds the mechanism and a
compaction id. ``session_stats`` reads those boundaries (so it works on imported Claude Code
transcripts and after a restart), counts the user prompts between them to find re-compactions,
sums what microcompact saved, and walks the entries after each compaction to find thrash: a
compaction whose result refills past the auto-compact threshold within a few turns, named with
the largest contributors to the refill. Pure: no I/O, the threshold is passed in; released lines
of a ``History`` come back through its reader, so the server runs this in a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from compactd import protocol as p
from compactd.core import tokens
from compactd.core.view import ViewIndex
from compactd.transcript.history import boundary_indices
from compactd.transcript.model import (
    MICROCOMPACT_BOUNDARY,
    CompactMetadata,
    Entry,
    Record,
    TextBlock,
    ToolResultBlock,
    is_compact_boundary_line,
)

__all__ = [
    "DEFAULT_MECHANISM",
    "THRASH_REFILL_TURNS",
    "THRASH_TOP_CONTRIBUTORS",
    "compaction_stats",
    "is_user_prompt",
    "microcompact_savings",
    "session_stats",
]

# A compaction that refills past the auto-compact threshold within 3 turns is thrash: Claude
# Code's own "rapid refill" breaker also counts 3
# (docs/compaction.md#fixed-prefix-and-rapid-refill). A turn is a user prompt: the refill
# counts as rapid while at most this many prompts followed the compaction.
THRASH_REFILL_TURNS: Final = 3

# How many contributors to a refill the stats name.
THRASH_TOP_CONTRIBUTORS: Final = 3

# Boundaries without compactd's ``mechanism`` (all of Claude Code's) were full compactions.
DEFAULT_MECHANISM: Final = "full"
_UNKNOWN_TRIGGER: Final = "unknown"

# Text a user entry starts with when it is an echo of a local slash command or its output
# rather than a prompt to the model (Claude Code writes these around ``/compact`` and others).
_COMMAND_PREFIXES: Final = (
    "<command-name>",
    "<command-message>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
)


def is_user_prompt(entry: Entry) -> bool:
    """Whether the entry starts a turn: a person's message to the main thread.

    Tool results, meta entries, compaction summaries, sidechain (sub-agent) entries and echoes
    of local commands are not prompts.
    """
    if entry.type != "user" or entry.is_meta or entry.is_compact_summary or entry.is_sidechain:
        return False
    if entry.is_visible_in_transcript_only:
        return False
    blocks = entry.blocks
    if not blocks or any(isinstance(b, ToolResultBlock) for b in blocks):
        return False
    first = next((b.text.lstrip() for b in blocks if isinstance(b, TextBlock)), None)
    return not (first is not None and first.startswith(_COMMAND_PREFIXES))


def microcompact_savings(records: Sequence[Record]) -> tuple[int, int]:
    """(tokens saved, count) summed over every ``microcompact_boundary`` of the transcript."""
    saved = 0
    count = 0
    for i in boundary_indices(records):
        record = records[i]
        if record.subtype != MICROCOMPACT_BOUNDARY:
            continue
        count += 1
        saved += _saved_by(record.entry)
    return saved, count


def _saved_by(entry: Entry) -> int:
    meta = entry.microcompact_metadata
    return max(0, meta.tokens_saved or 0) if meta is not None else 0


def _countable(entry: Entry) -> bool:
    return tokens.counts_toward_context(entry)


@dataclass(frozen=True, slots=True)
class _Refill:
    turns: int
    contributors: list[str]


def _prompts(records: Sequence[Record], start: int, stop: int) -> int:
    # Only user lines can be prompts: the kind is known without reading a released line.
    return sum(
        1
        for i in range(start, stop)
        if records[i].kind == "user" and is_user_prompt(records[i].entry)
    )


def _entries_summarized(views: ViewIndex, b: int, meta: CompactMetadata) -> int:
    if meta.messages_summarized is not None:
        return meta.messages_summarized
    before = [r for r in views.context(b) if _countable(r.entry)]
    kept = {r.entry.uuid for r in views.preserved(b) if r.entry.uuid}
    return sum(1 for r in before if r.entry.uuid is None or r.entry.uuid not in kept)


def _post_estimate(views: ViewIndex, b: int, stop: int) -> int:
    """Estimated size right after the compaction: its view up to the first new turn."""
    records = views.records
    end = b + 1
    while end < stop:
        entry = records[end].entry
        if entry.type == "assistant" or is_user_prompt(entry):
            break
        end += 1
    view = views.context(end)
    estimate = tokens.estimate_entries(r.entry for r in view if _countable(r.entry))
    # The estimate counts messages only. The first response after the boundary measured its
    # request exactly, system prompt and tools included: the nearest true figure there is, a
    # first prompt larger than the estimate (docs/thresholds.md#history).
    for i in range(end, stop):
        if records[i].kind != "assistant":
            continue
        entry = records[i].entry
        if entry.is_sidechain or not tokens.has_usable_usage(entry):
            continue
        usage = entry.message.usage if entry.message is not None else None
        if usage is not None:
            return max(estimate, usage.total() - (usage.output_tokens or 0))
        break
    return estimate


def _contributors(entries: Sequence[Entry]) -> list[str]:
    bd = tokens.breakdown(entries)
    rows: list[tuple[str, int, float]] = []
    rows += [(f"{c.name} tool results", c.tokens, c.percent) for c in bd.tool_results]
    rows += [(f"{c.name} tool calls", c.tokens, c.percent) for c in bd.tool_requests]
    rows += [(f"{c.name} attachments", c.tokens, c.percent) for c in bd.attachments]
    split = {tokens.CATEGORY_TOOL_RESULTS, tokens.CATEGORY_TOOL_REQUESTS}
    split.add(tokens.CATEGORY_ATTACHMENTS)
    rows += [
        (f"{c.name} messages", c.tokens, c.percent) for c in bd.categories if c.name not in split
    ]
    rows = [row for row in rows if row[1] > 0]
    rows.sort(key=lambda row: (-row[1], row[0]))
    return [
        f"{name}: {tok:,} tokens ({pct:.0f}%)" for name, tok, pct in rows[:THRASH_TOP_CONTRIBUTORS]
    ]


def _refill(
    records: Sequence[Record],
    b: int,
    stop: int,
    post_tokens: int,
    threshold: int,
    next_meta: CompactMetadata | None,
) -> _Refill | None:
    """Whether the context after the boundary at ``b`` passed ``threshold`` within few turns.

    The size is the usage of the latest response after the compaction plus an estimate of what
    followed it; before any response it is the compaction's post size plus an estimate of what
    was appended. Microcompact savings after the compaction are subtracted.
    """
    added: list[Entry] = []
    if post_tokens >= threshold:
        return _Refill(
            turns=0,
            contributors=[
                f"the compaction result itself: {post_tokens:,} tokens, at or above the "
                f"auto-compact threshold of {threshold:,}"
            ],
        )
    counter = tokens.TokenCounter()
    prompts = 0
    for i in range(b + 1, stop):
        entry = records[i].entry
        if is_user_prompt(entry):
            prompts += 1
            if prompts > THRASH_REFILL_TURNS:
                return None
        if entry.is_microcompact_boundary:
            counter.apply_saving(_saved_by(entry))
        if not _countable(entry) or entry.is_compact_summary:
            continue
        added.append(entry)
        counter.extend([entry])
        count = counter.current
        size = count.tokens if count.exact > 0 else post_tokens + count.tokens
        if size >= threshold:
            return _Refill(turns=prompts, contributors=_contributors(added))
    # The transcript may hold no usage for the refill (boundaries written by a client); the next
    # compaction's own pre-compaction size then tells how full the context got.
    if next_meta is not None and next_meta.pre_tokens is not None:
        if next_meta.pre_tokens >= threshold:
            return _Refill(turns=prompts, contributors=_contributors(added))
    return None


def compaction_stats(
    records: Sequence[Record], auto_compact_threshold: int, views: ViewIndex | None = None
) -> list[p.CompactionStat]:
    """One ``CompactionStat`` per compaction in the transcript, oldest first.

    An undo entry is a boundary too, but no compaction: it is not listed, and the compaction it
    cancelled is marked ``undone``. ``views`` is the transcript's ``ViewIndex`` when the caller
    keeps one (a session does): the views before each boundary are then not worked out again.
    """
    if views is None or views.records is not records:
        views = ViewIndex(records)
    # Finding boundaries decodes no other line (see ``history.boundary_indices``).
    found = [
        i
        for i in boundary_indices(records)
        if is_compact_boundary_line(records[i].kind, records[i].subtype)
    ]
    undone: set[str] = set()
    boundaries: list[int] = []
    for i in found:
        meta_i = records[i].entry.compact_metadata
        if meta_i is not None and meta_i.undoes:
            undone.add(meta_i.undoes)
        else:
            boundaries.append(i)
    out: list[p.CompactionStat] = []
    for k, b in enumerate(boundaries):
        entry = records[b].entry
        meta = entry.compact_metadata or CompactMetadata()
        stop = boundaries[k + 1] if k + 1 < len(boundaries) else len(records)
        pre = meta.pre_tokens or 0
        post_estimated = meta.post_tokens is None
        post = meta.post_tokens if meta.post_tokens is not None else _post_estimate(views, b, stop)
        if meta.pre_tokens is not None and meta.post_tokens is not None:
            dropped = max(0, meta.pre_tokens - meta.post_tokens)
        elif meta.cumulative_dropped_tokens is not None:
            dropped = meta.cumulative_dropped_tokens
        else:
            dropped = max(0, pre - post)
        turns = _prompts(records, boundaries[k - 1] + 1, b) if k > 0 else None
        next_meta = records[stop].entry.compact_metadata if stop < len(records) else None
        refill = _refill(records, b, stop, post, auto_compact_threshold, next_meta)
        out.append(
            p.CompactionStat(
                compaction_id=meta.compaction_id or entry.uuid or f"boundary-{b}",
                trigger=meta.trigger or _UNKNOWN_TRIGGER,
                mechanism=meta.mechanism or DEFAULT_MECHANISM,
                pre_tokens=pre,
                post_tokens=post,
                duration_ms=meta.duration_ms or 0,
                entries_summarized=_entries_summarized(views, b, meta),
                dropped_tokens=dropped,
                recompaction=k > 0,
                turns_since_previous=turns,
                timestamp=entry.timestamp,
                thrash=refill is not None,
                refill_contributors=refill.contributors if refill is not None else None,
                post_tokens_estimated=post_estimated,
                refill_turns=refill.turns if refill is not None else None,
                boundary_uuid=entry.uuid,
                # Without a prepared summary the agent waited for the whole compaction.
                wait_ms=meta.wait_ms if meta.wait_ms is not None else meta.duration_ms,
                prepared=bool(meta.prepared),
            )
        )
    for stat in out:
        if stat.compaction_id in undone or stat.boundary_uuid in undone:
            stat.undone = True
    return out


def session_stats(
    records: Sequence[Record],
    auto_compact_threshold: int,
    cache_breaks: Sequence[p.CacheBreak] = (),
    views: ViewIndex | None = None,
) -> p.StatsResult:
    """The ``session/stats`` result for a transcript (``views`` as for ``compaction_stats``)."""
    saved, count = microcompact_savings(records)
    return p.StatsResult(
        compactions=compaction_stats(records, auto_compact_threshold, views),
        microcompact_tokens_saved=saved,
        microcompactions=count,
        cache_breaks=list(cache_breaks),
    )
