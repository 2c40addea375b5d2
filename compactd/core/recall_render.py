"""Ranked recall results as text a model reads, within a budget (docs/recall.md#output).

The MCP ``recall`` tool answers with text, and Claude Code cuts an MCP tool's output at 25,000
tokens (docs/recall.md#output). A recall answer keeps well inside that: ``ANSWER_BUDGET_TOKENS``
of text, counted at ``CHARS_PER_TOKEN`` characters a token (a low figure: code and JSON
tokenize denser than prose, so the real count is at most this). Each hit shows who said it,
when, and its text; a long one is cut around the words asked for and names the pointer that
fetches it whole. Hits that do not fit are counted ("N more, narrow the query").

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from compactd.core.recall import snippet_at

__all__ = [
    "ANSWER_BUDGET_TOKENS",
    "CHARS_PER_TOKEN",
    "FETCH_BUDGET_TOKENS",
    "HIT_CHARS",
    "Found",
    "Revision",
    "Stored",
    "cut_around",
    "render_fetch",
    "render_hits",
    "snippet",
]

# compactd's own choices, well under Claude Code's MCP output cap of 25,000 tokens.
ANSWER_BUDGET_TOKENS: Final = 8_000
FETCH_BUDGET_TOKENS: Final = 12_000
# A conservative characters-per-token figure: prose runs near 4, code and JSON nearer 3.
CHARS_PER_TOKEN: Final = 3
# The most of one hit's text a search answer shows; a fetch shows the whole (within its budget).
HIT_CHARS: Final = 1_200
REVISION_CHARS: Final = 300


@dataclass(frozen=True, slots=True)
class Stored:
    """One indexed entry as the index gives it back."""

    uuid: str | None
    role: str
    type: str
    timestamp: str | None
    text: str
    line: int  # its line in the transcript, from 0
    tool_use_id: str | None = None  # of a tool result: the call it answers


@dataclass(frozen=True, slots=True)
class Revision:
    """A later entry that changed what a hit was about, and how (docs/recall.md#revisions)."""

    entry: Stored
    reason: str


@dataclass(frozen=True, slots=True)
class Found:
    entry: Stored
    match: str  # which stage found it: "all words", "prefixes", "some words", "substring"
    revisions: tuple[Revision, ...] = ()


@dataclass(slots=True)
class _Budget:
    left: int
    lines: list[str] = field(default_factory=list)

    def take(self, text: str) -> bool:
        if len(text) + 1 > self.left:
            return False
        self.lines.append(text)
        self.left -= len(text) + 1
        return True


def _first_at(text: str, terms: Sequence[str]) -> int:
    folded = text.casefold()
    found = [at for at in (folded.find(t) for t in terms if t) if at >= 0]
    return min(found) if found else 0


def snippet(text: str, terms: Sequence[str]) -> str:
    """A one-line window of ``text`` around the first of ``terms`` it holds."""
    at = _first_at(text, terms)
    length = next((len(t) for t in terms if text.casefold().startswith(t, at)), 0)
    return snippet_at(text, at, length)


def cut_around(text: str, terms: Sequence[str], limit: int, uuid: str | None) -> str:
    """``text`` whole when it fits ``limit``, else the part around the first word asked for,
    with the pointer that fetches the rest."""
    if len(text) <= limit:
        return text
    at = _first_at(text, terms)
    start = max(0, min(at - limit // 4, len(text) - limit))
    # Start and stop at whitespace when there is some near, not mid-word.
    space = text.find(" ", start, start + 40) if start else -1
    start = space + 1 if space >= 0 else start
    stop = start + limit
    space = text.rfind(" ", stop - 40, stop)
    stop = space if space > start else stop
    where = f"recall:{uuid} returns it whole" if uuid else "the transcript has it whole"
    return ("…" if start else "") + text[start:stop] + f"… [{len(text):,} characters; cut: {where}]"


def _who(e: Stored) -> str:
    """Who said it, when, and how to fetch it: ``user · 2026-01-02T10:00:00Z · recall:<uuid>``."""
    when = e.timestamp or "no time"
    where = f"recall:{e.uuid}" if e.uuid else f"line {e.line + 1}"
    return f"{e.role} · {when} · {where}"


def render_hits(
    found: Sequence[Found],
    terms: Sequence[str],
    *,
    header: str,
    total: int,
    budget_tokens: int = ANSWER_BUDGET_TOKENS,
) -> str:
    """The answer to a search: ``header``, then each hit (best first) while the budget lasts,
    then how many more matched."""
    budget = _Budget(budget_tokens * CHARS_PER_TOKEN)
    budget.take(header)
    shown = 0
    for n, hit in enumerate(found, 1):
        parts = [
            f"[{n}] {_who(hit.entry)} · matched {hit.match}",
            cut_around(hit.entry.text, terms, HIT_CHARS, hit.entry.uuid),
        ]
        for rev in hit.revisions:
            parts.append(f"  ↳ {rev.reason}: {_who(rev.entry)}")
            parts.append("    " + cut_around(rev.entry.text, terms, REVISION_CHARS, rev.entry.uuid))
        if not budget.take("\n".join(parts) + "\n"):
            break
        shown += 1
    more = max(0, total - shown)
    if more:
        budget.lines.append(
            f"{more} more matching entries not shown: narrow the query "
            "(more words, a quoted phrase, a file name)."
        )
    return "\n".join(budget.lines)


def render_fetch(
    entry: Stored, start: int, *, header: str, budget_tokens: int = FETCH_BUDGET_TOKENS
) -> str:
    """One entry whole from character ``start``; what does not fit is named by the pointer
    that continues it (``recall:<uuid>+<offset>``)."""
    room = budget_tokens * CHARS_PER_TOKEN
    text = entry.text[start:]
    lines = [header, _who(entry)]
    if start:
        lines.append(f"(from character {start:,} of {len(entry.text):,})")
    if len(text) > room:
        stop = start + room
        lines.append(text[:room])
        lines.append(
            f"[cut at character {stop:,} of {len(entry.text):,}: recall:{entry.uuid}+{stop} continues]"
        )
    else:
        lines.append(text)
    return "\n".join(lines)
