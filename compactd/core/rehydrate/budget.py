"""The reference's caps on what rehydration restores (docs/rehydration.md), and cutting a text
to a number of tokens on a line end.

Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from compactd.core import constants as c
from compactd.core.tokens import estimate_text_tokens

__all__ = [
    "Budgets",
    "MIN_PARTIAL_TOKENS",
    "truncate_to_tokens",
]

# When what is left of a budget is smaller than this, a truncated copy would be too short to
# be useful: the file is announced by reference instead (compactd's choice; the reference only
# fixes the caps).
MIN_PARTIAL_TOKENS: Final = 500

# Room kept for the truncation marker so that content plus marker stays within the cap.
_MARKER_RESERVE_CHARS: Final = 240


@dataclass(frozen=True, slots=True)
class Budgets:
    """The caps of docs/rehydration.md; tests and callers may shrink them."""

    max_files: int = c.REHYDRATE_MAX_FILES
    file_tokens: int = c.REHYDRATE_FILE_TOKENS
    files_total_tokens: int = c.REHYDRATE_FILES_TOTAL_TOKENS
    skill_tokens: int = c.REHYDRATE_SKILL_TOKENS
    skills_total_tokens: int = c.REHYDRATE_SKILLS_TOTAL_TOKENS
    min_partial_tokens: int = MIN_PARTIAL_TOKENS


def truncate_to_tokens(
    text: str, max_tokens: int, marker: Callable[[int], str]
) -> tuple[str, bool]:
    """Cut ``text`` so that it and its marker fit in ``max_tokens``.

    The cut falls on a line end when one exists in the second half of the kept part, so the
    model never sees half a line. ``marker(lines_kept)`` returns the note appended after the
    cut. Returns the text and whether it was cut.
    """
    if estimate_text_tokens(text) <= max_tokens:
        return text, False
    budget = max(0, max_tokens * c.CHARS_PER_TOKEN - _MARKER_RESERVE_CHARS)
    head = text[:budget]
    newline = head.rfind("\n")
    if newline >= budget // 2:
        head = head[: newline + 1]
    kept_lines = head.count("\n") + (0 if head.endswith("\n") or not head else 1)
    note = marker(kept_lines)
    # The reserve covers any marker we write; trim further if a caller's marker is longer.
    overflow = len(head) + len(note) - max_tokens * c.CHARS_PER_TOKEN
    if overflow > 0:
        head = head[: max(0, len(head) - overflow)]
    return head + note, True
