"""The context breakdown: a conversation's estimate split into categories for tokens/breakdown.

Each entry and block is put in one category (the person's messages, the assistant's, local
command output, meta entries, tool requests, tool results, attachments, the fixed prefix, what
microcompact cleared), and the estimate is apportioned to the count so that the categories add
up to the total the status reports. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from compactd.core.tokens.count import TokenCount
from compactd.core.tokens.estimate import (
    counts_toward_context,
    estimate_block_raw,
    estimate_entry_raw,
    pad,
)
from compactd.core.tools import call_file
from compactd.core.vocabulary import vocabulary
from compactd.protocol import (
    BreakdownCategory,
    BreakdownResult,
    DuplicateRead,
)
from compactd.transcript.model import (
    Block,
    Entry,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

CATEGORY_HUMAN: Final = "human"
CATEGORY_ASSISTANT: Final = "assistant"
CATEGORY_LOCAL_COMMAND_OUTPUT: Final = "localCommandOutput"
CATEGORY_META: Final = "meta"
CATEGORY_TOOL_REQUESTS: Final = "toolRequests"
CATEGORY_TOOL_RESULTS: Final = "toolResults"
CATEGORY_ATTACHMENTS: Final = "attachments"
# The parts of the accounting that are not conversation: what every request carries besides the
# messages, and what microcompact cleared since the last usage (a negative row).
CATEGORY_FIXED_PREFIX: Final = "fixedPrefix"
CATEGORY_CLEARED: Final = "clearedByMicrocompact"

_CATEGORY_ORDER: Final = (
    CATEGORY_HUMAN,
    CATEGORY_ASSISTANT,
    CATEGORY_LOCAL_COMMAND_OUTPUT,
    CATEGORY_META,
    CATEGORY_TOOL_REQUESTS,
    CATEGORY_TOOL_RESULTS,
    CATEGORY_ATTACHMENTS,
)

# Tags Claude Code wraps around the output of local slash commands and `!` shell commands.
_LOCAL_OUTPUT_TAGS: Final = (
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-stdout>",
    "<bash-stderr>",
)

_UNKNOWN: Final = "unknown"


class _Tally:
    """Raw token sums and item counts per name, in first-seen order."""

    __slots__ = ("raw", "count")

    def __init__(self) -> None:
        self.raw: dict[str, int] = {}
        self.count: dict[str, int] = {}

    def add(self, name: str, raw: int) -> None:
        self.raw[name] = self.raw.get(name, 0) + raw
        self.count[name] = self.count.get(name, 0) + 1

    def categories(
        self, total: int, *, sort: bool, scale: float = 1.0, adds_up_to: int | None = None
    ) -> list[BreakdownCategory]:
        shares = apportion([pad(raw) * scale for raw in self.raw.values()], adds_up_to)
        rows = [
            BreakdownCategory(
                name=name,
                tokens=tokens,
                percent=_percent_of(tokens, total),
                count=self.count[name],
            )
            for name, tokens in zip(self.raw, shares, strict=True)
        ]
        if sort:
            rows.sort(key=lambda row: (-row.tokens, row.name))
        return rows


def apportion(amounts: Sequence[float], total: int | None = None) -> list[int]:
    """``amounts`` rounded to whole tokens that add up to ``total`` (default: their rounded sum).

    Rounding each row on its own lets a table's rows miss its total by a few tokens; the
    largest-remainder rule hands the tokens lost to rounding down to the rows that lost the
    most, so a breakdown adds up exactly. ``total`` may differ from the sum by a rounding
    error of another table (a category split by tool): the difference is spread the same way.
    """
    floors = [math.floor(a) for a in amounts]
    target = round(sum(amounts)) if total is None else total
    missing = target - sum(floors)
    by_remainder = sorted(range(len(amounts)), key=lambda i: floors[i] - amounts[i])
    while missing > 0 and by_remainder:
        for i in by_remainder[:missing]:
            floors[i] += 1
        missing = target - sum(floors)
    while missing < 0 and any(floors):
        for i in reversed(by_remainder):
            if missing < 0 and floors[i] > 0:
                floors[i] -= 1
                missing += 1
    return floors


def _percent_of(tokens: int, total: int) -> float:
    return round(tokens * 100 / total, 1) if total > 0 else 0.0


def _user_block_category(entry: Entry, block: Block) -> str:
    if isinstance(block, TextBlock) and any(tag in block.text for tag in _LOCAL_OUTPUT_TAGS):
        return CATEGORY_LOCAL_COMMAND_OUTPUT
    if entry.is_meta or entry.is_compact_summary:
        return CATEGORY_META
    return CATEGORY_HUMAN


def breakdown(entries: Sequence[Entry], count: TokenCount | None = None) -> BreakdownResult:
    """Where the next request's tokens go, from padded estimates (usage cannot be split).

    Top-level categories partition the conversation; with ``count`` (the session's accounting)
    they are joined by the fixed prefix and, when microcompact cleared results since the last
    usage, by that saving as a negative row, so that the total is the status's total
    (docs/thresholds.md#accounting). Tool requests, tool results and attachments are further
    split by tool name / attachment type. A file read more than once wastes the tokens of every
    read but the last.
    """
    tool_names: dict[str, str] = {}
    for entry in entries:
        if entry.type == "assistant":
            for block in entry.blocks:
                if isinstance(block, ToolUseBlock) and block.id:
                    tool_names[block.id] = block.name

    top = _Tally()
    for name in _CATEGORY_ORDER:
        top.raw[name] = 0
        top.count[name] = 0
    requests, results, attachments = _Tally(), _Tally(), _Tally()
    reads: dict[str, list[str]] = {}
    reading = vocabulary().reads
    result_raw: dict[str, int] = {}

    for entry in entries:
        if not counts_toward_context(entry):
            continue
        if entry.type == "attachment":
            raw = estimate_entry_raw(entry)
            kind = (entry.attachment or {}).get("type")
            attachments.add(kind if isinstance(kind, str) and kind else _UNKNOWN, raw)
            top.add(CATEGORY_ATTACHMENTS, raw)
            continue
        for block in entry.blocks:
            raw = estimate_block_raw(block)
            if isinstance(block, ToolUseBlock):
                requests.add(block.name or _UNKNOWN, raw)
                top.add(CATEGORY_TOOL_REQUESTS, raw)
                path = call_file(block) if block.name in reading else None
                if block.name in reading and path is not None and block.id:
                    reads.setdefault(path, []).append(block.id)
            elif isinstance(block, ToolResultBlock):
                results.add(tool_names.get(block.tool_use_id, _UNKNOWN), raw)
                top.add(CATEGORY_TOOL_RESULTS, raw)
                result_raw[block.tool_use_id] = result_raw.get(block.tool_use_id, 0) + raw
            elif entry.type == "assistant":
                top.add(CATEGORY_ASSISTANT, raw)
            else:
                top.add(_user_block_category(entry, block), raw)

    conversation = sum(pad(raw) for raw in top.raw.values())
    prefix = count.fixed_prefix if count is not None else 0
    cleared = count.saved if count is not None else 0
    # Usage measures the conversation as a whole; the estimates only say how it divides. With
    # the session's count, the categories share out what the count gives the conversation.
    scale = 1.0
    if count is not None and conversation > 0:
        scale = max(0, count.tokens + cleared - prefix) / conversation
    total = max(0, prefix + round(conversation * scale) - cleared)
    rows = top.categories(total, sort=False, scale=scale)
    row_tokens = {row.name: row.tokens for row in rows}
    if prefix:
        rows.insert(
            0,
            BreakdownCategory(
                name=CATEGORY_FIXED_PREFIX, tokens=prefix, percent=_percent_of(prefix, total)
            ),
        )
    if cleared:
        rows.append(
            BreakdownCategory(
                name=CATEGORY_CLEARED, tokens=-cleared, percent=-_percent_of(cleared, total)
            )
        )
    duplicates = [
        DuplicateRead(
            path=path,
            reads=len(ids),
            wasted_tokens=round(
                sum(pad(result_raw.get(tool_id, 0)) for tool_id in ids[:-1]) * scale
            ),
        )
        for path, ids in reads.items()
        if len(ids) > 1
    ]
    duplicates.sort(key=lambda row: (-row.wasted_tokens, row.path))
    return BreakdownResult(
        total_tokens=total,
        categories=rows,
        # Each split adds up to its category's row.
        tool_requests=requests.categories(
            total, sort=True, scale=scale, adds_up_to=row_tokens[CATEGORY_TOOL_REQUESTS]
        ),
        tool_results=results.categories(
            total, sort=True, scale=scale, adds_up_to=row_tokens[CATEGORY_TOOL_RESULTS]
        ),
        attachments=attachments.categories(
            total, sort=True, scale=scale, adds_up_to=row_tokens[CATEGORY_ATTACHMENTS]
        ),
        duplicate_reads=duplicates,
        duplicate_read_tokens=sum(row.wasted_tokens for row in duplicates),
    )
