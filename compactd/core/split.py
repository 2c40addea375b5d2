"""API rounds and safe cut points: where a conversation may be split without breaking it.

Partial compaction, session-memory compaction and prompt-too-long truncation all cut a
conversation in two and keep one side. The API rejects a ``tool_result`` whose ``tool_use`` is
missing and a ``tool_use`` left without its result, and one model response written as several
entries must stay whole (docs/partial.md#safe-cuts). This module finds the cuts that respect that.

A round is one model response (every assistant entry sharing its ``message.id``) together with
what follows it up to the next response: its tool results, then possibly the next user prompt.
Content before the first response forms a round of its own.

Pure: no I/O.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from compactd.transcript.model import Entry, ToolResultBlock, ToolUseBlock

__all__ = [
    "after_compacted",
    "leading_compaction",
    "PTL_DROP_FRACTION",
    "TRUNCATION_MARKER",
    "Round",
    "adjust_cut",
    "group_api_rounds",
    "group_rounds",
    "is_safe_cut",
    "parse_prompt_too_long",
    "prompt_too_long_gap",
    "safe_cut_points",
    "truncate_head_for_ptl",
]

# The user turn put in front of a conversation whose head was dropped to fit the window. It is
# recognised and removed on the next attempt, so retries never stack markers.
TRUNCATION_MARKER: Final = "[earlier conversation truncated to fit the context window]"

# Share of rounds dropped per retry when the error does not say by how much the prompt was too
# long (docs/compaction.md#prompt-too-long: 20% of the rounds, at least one).
PTL_DROP_FRACTION: Final = 0.2

_PTL_PATTERN: Final = re.compile(
    r"prompt is too long:\s*([\d,_]+)\s*tokens?\s*>\s*([\d,_]+)\s*(?:tokens?\s*)?maximum",
    re.IGNORECASE,
)


@dataclass(slots=True, frozen=True)
class Round:
    """Entries ``start`` to ``end`` (exclusive) of the sequence it was computed from.

    ``message_id`` is the response's id; None for the leading round without a response and
    for a response whose entries carry no id.
    """

    start: int
    end: int
    message_id: str | None

    def __len__(self) -> int:
        return self.end - self.start


def group_rounds(entries: Sequence[Entry]) -> list[Round]:
    """Split ``entries`` into rounds; the rounds cover every entry exactly once, in order.

    A round starts at the first entry of a new response, provided that is a safe cut: when
    other entries are written into the middle of a response (an inline sub-agent run between
    parallel tool calls), they stay in the round of the response around them, so a round
    boundary is always a place where the conversation may be cut.
    """
    if not entries:
        return []
    blocked = _blocked(entries)
    rounds: list[Round] = []
    start = 0
    start_id: str | None = None
    for i, entry in enumerate(entries):
        if entry.type != "assistant" or not _turns_here(entries, i):
            continue
        if i == 0:
            start_id = entry.message_id
            continue
        if blocked[i]:
            continue
        rounds.append(Round(start, i, start_id))
        start, start_id = i, entry.message_id
    rounds.append(Round(start, len(entries), start_id))
    return rounds


def safe_cut_points(entries: Sequence[Entry]) -> list[int]:
    """Every index ``i`` (0..len) at which ``entries[:i]`` / ``entries[i:]`` is a safe split.

    A cut is safe when no response has entries on both sides and no tool use is on one side
    with its result on the other. Beyond that, a cut lands only where a conversation naturally
    turns: at either end, before a new response, or before a user prompt (a user entry that is
    not a tool result). Ascending; always contains 0 and ``len(entries)``.
    """
    n = len(entries)
    blocked = _blocked(entries)
    points = [0]
    for i in range(1, n):
        if blocked[i]:
            continue
        if _turns_here(entries, i):
            points.append(i)
    if n > 0:
        points.append(n)
    return points


def is_safe_cut(entries: Sequence[Entry], i: int) -> bool:
    """Whether cutting before ``entries[i]`` is one of ``safe_cut_points``."""
    n = len(entries)
    if i <= 0 or i >= n:
        return i in (0, n)
    return not _blocked(entries)[i] and _turns_here(entries, i)


def adjust_cut(
    entries: Sequence[Entry], i: int, direction: Literal["back", "forward"] = "back"
) -> int:
    """The safe cut nearest to ``i``: at or before it (``back``) or at or after it."""
    points = safe_cut_points(entries)
    i = max(0, min(i, len(entries)))
    if direction == "back":
        return points[bisect_right(points, i) - 1]
    if direction == "forward":
        return points[bisect_left(points, i)]
    raise ValueError(f"direction must be 'back' or 'forward', not {direction!r}")


# -- floors: where a cut may not go before ------------------------------------------------------


def leading_compaction(entries: Sequence[Entry]) -> int:
    """How many entries at the head are the previous compaction's boundary and summary.

    No cut goes before them: it would separate the boundary from its own summary. Entries the
    previous compaction kept verbatim come after them and may be summarized again.
    """
    n = 0
    while n < len(entries) and (
        entries[n].is_compact_boundary or entries[n].is_compact_summary is True
    ):
        n += 1
    return n


def after_compacted(entries: Sequence[Entry], relinked: Sequence[bool]) -> int:
    """The first index after the previous compaction's boundary, its summary and the entries it
    kept verbatim (``relinked[i]``: entry ``i`` sits before its boundary in the file).

    Session-memory compaction keeps everything from here on: its notes cover only what came
    after the last compaction.
    """
    floor = 0
    for i, entry in enumerate(entries):
        if entry.is_compact_boundary or entry.is_compact_summary or relinked[i]:
            floor = i + 1
    return floor


def parse_prompt_too_long(message: str) -> tuple[int, int] | None:
    """``(actual, limit)`` from "prompt is too long: N tokens > M maximum", else None."""
    match = _PTL_PATTERN.search(message)
    if match is None:
        return None
    actual, limit = (int(re.sub(r"[,_]", "", g)) for g in match.groups())
    return actual, limit


def prompt_too_long_gap(message: str) -> int | None:
    """How many tokens over the limit the error says the prompt was, when it says so."""
    parsed = parse_prompt_too_long(message)
    if parsed is None:
        return None
    actual, limit = parsed
    return actual - limit if actual > limit else None


def group_api_rounds(messages: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Group API messages by round: each assistant message starts a new group.

    Leading user messages form the first group. On normalized messages a group is one
    response plus the user message with its tool results, so dropping whole groups from the
    head never orphans a tool result.
    """
    groups: list[list[dict[str, Any]]] = []
    for message in messages:
        if not groups or message.get("role") == "assistant":
            groups.append([message])
        else:
            groups[-1].append(message)
    return groups


def truncate_head_for_ptl(
    messages: list[dict[str, Any]],
    token_gap: int | None,
    estimate: Callable[[dict[str, Any]], int],
) -> list[dict[str, Any]] | None:
    """Drop the oldest rounds of a request that was too long; None when nothing would be left.

    ``token_gap`` is how far over the limit the last attempt was (see ``prompt_too_long_gap``):
    whole rounds are dropped, oldest first, until their estimated size covers it. When the gap
    is unknown, ``PTL_DROP_FRACTION`` of the rounds go (at least one). A marker left at the head
    by an earlier attempt is removed first; if the remainder starts with an assistant message
    a fresh marker is put in front, since the API wants a user message first.
    """
    rest = list(messages)
    if rest and _is_marker(rest[0]):
        rest = rest[1:]
    groups = group_api_rounds(rest)
    if not groups:
        return None
    if token_gap is None or token_gap <= 0:
        drop = max(1, int(len(groups) * PTL_DROP_FRACTION))
    else:
        drop = 0
        covered = 0
        while drop < len(groups) and covered < token_gap:
            covered += sum(estimate(m) for m in groups[drop])
            drop += 1
    kept = [m for group in groups[drop:] for m in group]
    if not kept:
        return None
    if kept[0].get("role") == "assistant":
        kept.insert(0, {"role": "user", "content": [{"type": "text", "text": TRUNCATION_MARKER}]})
    return kept


# -- internals -----------------------------------------------------------------------------------


def _is_marker(message: dict[str, Any]) -> bool:
    if message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, str):
        return content == TRUNCATION_MARKER
    return (
        isinstance(content, list)
        and len(content) == 1
        and isinstance(content[0], dict)
        and content[0].get("type") == "text"
        and content[0].get("text") == TRUNCATION_MARKER
    )


def _is_tool_result_entry(entry: Entry) -> bool:
    return any(isinstance(b, ToolResultBlock) for b in entry.blocks)


def _turns_here(entries: Sequence[Entry], i: int) -> bool:
    """Whether a conversation turns before ``entries[i]``: a new response or a user prompt."""
    entry = entries[i]
    if entry.type == "user":
        return not _is_tool_result_entry(entry)
    if entry.type != "assistant":
        return False
    mid = entry.message_id
    if mid is None:
        return True
    for j in range(i - 1, -1, -1):
        if entries[j].type == "assistant":
            return entries[j].message_id != mid
    return True


def _blocked(entries: Sequence[Entry]) -> list[bool]:
    """``blocked[i]`` is True when a response or a tool pair straddles the cut before ``i``."""
    n = len(entries)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    uses: dict[str, int] = {}
    results: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry.type == "assistant":
            mid = entry.message_id
            if mid is not None:
                first.setdefault(mid, i)
                last[mid] = i
            for block in entry.blocks:
                if isinstance(block, ToolUseBlock) and block.id:
                    uses.setdefault(block.id, i)
        elif entry.type == "user":
            for block in entry.blocks:
                if isinstance(block, ToolResultBlock) and block.tool_use_id:
                    results.setdefault(block.tool_use_id, i)
    # Count the spans covering each cut with a difference array: span (a, b) blocks every cut
    # before i for a < i <= b.
    diff = [0] * (n + 2)
    spans = [(first[m], last[m]) for m in first]
    spans += [(min(uses[t], r), max(uses[t], r)) for t, r in results.items() if t in uses]
    for lo, hi in spans:
        if lo < hi:
            diff[lo + 1] += 1
            diff[hi + 1] -= 1
    blocked = [False] * (n + 1)
    running = 0
    for i in range(n + 1):
        running += diff[i]
        blocked[i] = running > 0
    return blocked
