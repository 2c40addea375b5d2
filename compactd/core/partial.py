"""Where a partial compaction cuts the context, and which side it summarizes.

A partial compaction names a pivot entry and a direction (docs/partial.md): ``upTo``
summarizes everything before the pivot and keeps the pivot and what follows verbatim after
the summary; ``from`` keeps everything before the pivot verbatim (so its prompt-cache prefix
survives) and summarizes the pivot and what follows. The pivot the user picks may fall inside
a response written as several entries, or between a tool call and its result; cutting there
would leave the API an orphaned ``tool_use`` / ``tool_result``. ``plan_partial`` moves the cut
to a safe one (``core.split``): backwards first, which keeps the pivot on the side the user
named, forwards only when going back would leave nothing to summarize.

Pure: no I/O. Errors are ``PartialError`` with a stable code the handler passes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from compactd.core.split import leading_compaction, safe_cut_points
from compactd.transcript.model import Record

__all__ = [
    "Direction",
    "Moved",
    "NOTHING_TO_SUMMARIZE",
    "PIVOT_NOT_FOUND",
    "PartialError",
    "PartialPlan",
    "plan_partial",
]

Direction = Literal["upTo", "from"]
Moved = Literal["none", "back", "forward"]

# Stable error codes, equal to the protocol's ``ErrorCode`` strings (the core does not import
# the protocol module).
PIVOT_NOT_FOUND: Final = "pivotNotFound"
NOTHING_TO_SUMMARIZE: Final = "notEnoughMessages"


class PartialError(ValueError):
    """The pivot cannot be used; ``code`` is one of the constants above."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class PartialPlan:
    """The cut of ``context`` a partial compaction uses.

    ``cut`` is an index into the context: ``context[:cut]`` is the earlier side and
    ``context[cut:]`` the later one. ``requested`` is the pivot's own index; ``moved`` says
    whether the cut had to move from it to stay safe, and which way. ``pivot_uuid`` is the
    uuid of the entry the cut now starts at (the effective pivot).
    """

    direction: Direction
    requested: int
    cut: int
    moved: Moved
    pivot_uuid: str | None
    summarize: list[Record]
    kept: list[Record]
    kept_before: list[Record]
    request: list[Record]


def _has_content(records: Sequence[Record]) -> bool:
    """Whether ``records`` hold conversation worth a summary (not just an earlier summary)."""
    return any(
        r.entry.type in ("user", "assistant") and r.entry.is_compact_summary is not True
        for r in records
    )


def plan_partial(context: Sequence[Record], pivot_uuid: str, direction: Direction) -> PartialPlan:
    """Plan a partial compaction of ``context`` (a session's current view) around a pivot.

    Raises ``PartialError(PIVOT_NOT_FOUND)`` when no entry of the context has that uuid, and
    ``PartialError(NOTHING_TO_SUMMARIZE)`` when no safe cut near the pivot leaves conversation
    to summarize on the side ``direction`` names.
    """
    if direction not in ("upTo", "from"):
        raise ValueError(f"direction must be 'upTo' or 'from', not {direction!r}")
    requested = next((i for i, r in enumerate(context) if r.entry.uuid == pivot_uuid), None)
    if requested is None:
        raise PartialError(
            PIVOT_NOT_FOUND,
            f"no entry with uuid {pivot_uuid!r} in the session's current context (entries "
            "summarized by an earlier compaction cannot be pivots)",
        )
    entries = [r.entry for r in context]
    floor = leading_compaction(entries)
    points = [i for i in safe_cut_points(entries) if i >= floor]
    if floor not in points:
        points.insert(0, floor)

    def summarized(cut: int) -> Sequence[Record]:
        return context[:cut] if direction == "upTo" else context[cut:]

    back = max((i for i in points if i <= requested), default=floor)
    forward = min((i for i in points if i >= requested), default=len(context))
    cut: int | None = None
    moved: Moved = "none"
    tries: tuple[tuple[int, Moved], ...] = ((back, "back"), (forward, "forward"))
    for candidate, way in tries:
        if _has_content(summarized(candidate)):
            cut = candidate
            moved = "none" if candidate == requested else way
            break
    if cut is None:
        side = "before" if direction == "upTo" else "from"
        raise PartialError(
            NOTHING_TO_SUMMARIZE,
            f"nothing to summarize {side} pivot {pivot_uuid!r}: the nearest safe cut leaves no "
            f"user or assistant message on the summarized side (direction {direction!r})",
        )
    earlier, later = list(context[:cut]), list(context[cut:])
    effective = context[cut].entry.uuid if cut < len(context) else None
    if direction == "upTo":
        return PartialPlan(direction, requested, cut, moved, effective, earlier, later, [], earlier)
    return PartialPlan(
        direction, requested, cut, moved, effective, later, [], earlier, [*earlier, *later]
    )
