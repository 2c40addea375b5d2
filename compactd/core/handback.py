"""What another agent's own summary dropped, handed back to its model within a character budget.

An agent that compacts by itself (Claude Code, Codex) replaces a span of its conversation with a
summary of its own. ``last_compaction`` finds, in the records read from the end of its
transcript, the latest compaction: its summary and the span it replaced (the records since the
compaction before it, less those the agent kept verbatim). ``hand_back`` runs the survival
ledger over that span, checks the summary against it, and renders what the summary left out
(the user's messages word for word, long ones as their opening words and a recall pointer; the
files; the commands) in at most ``limit`` characters. What does not fit is named by a pointer or
counted with the words to find it by; nothing is cut off silently
(docs/claude-code.md#sessionstart-after-a-compaction). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from compactd.core.ledger import (
    CARRY_FIELD,
    Lines,
    Message,
    Missing,
    Rendered,
    SurvivalLedger,
    build_ledger,
    carried_part,
    carry_of,
    check_summary,
    command_part,
    file_part,
    fit_text,
    message_lines,
    message_part,
)
from compactd.core.recall import pointer
from compactd.core.tools import blocks_text
from compactd.core.view import main_thread, preserved_records
from compactd.transcript.model import Record, record_from_dict

__all__ = [
    "HANDBACK_TITLE",
    "Compaction",
    "Handback",
    "compaction_in_progress",
    "hand_back",
    "handback_title",
    "last_compaction",
]

# The opening of the text handed back: the tests and the docs find it by these words.
HANDBACK_TITLE: Final = "compactd: what Claude Code's summary above left out"


def handback_title(agent: str) -> str:
    """The opening of the text handed back to ``agent``'s model."""
    return f"compactd: what {agent}'s summary above left out"


# How many pointers of messages that did not fit are listed one by one (the rest are counted).
_OLDER_POINTERS: Final = 12


@dataclass(frozen=True, slots=True)
class Compaction:
    """An agent's latest compaction, as its transcript records it."""

    boundary_id: str
    trigger: str
    summary: str
    #: the records the summary replaced, in file order (the kept ones left out)
    replaced: list[Record]
    #: the summary that started the span (an earlier compaction's), when there was one
    previous_boundary_id: str | None = None
    #: whether the span was read from its start (False: only its end was read)
    whole: bool = True
    pre_tokens: int | None = None
    post_tokens: int | None = None


def _is_boundary(record: Record) -> bool:
    return record.entry.is_compact_boundary


def _is_summary(record: Record) -> bool:
    return record.entry.type == "user" and record.entry.is_compact_summary is True


def _summary_text(record: Record) -> str:
    return blocks_text(record.entry.blocks)


def _boundary_of(records: Sequence[Record], summary_at: int) -> int:
    """Where the compaction whose summary is at ``summary_at`` starts: its boundary, which comes
    before it with only attachments and bookkeeping lines between, or the summary itself when
    it has none (older versions wrote none)."""
    for i in range(summary_at - 1, -1, -1):
        if _is_boundary(records[i]):
            return i
        if records[i].entry.type in ("user", "assistant"):
            break
    return summary_at


def last_compaction(records: Sequence[Record], *, whole: bool = True) -> Compaction | None:
    """The latest compaction among ``records`` (read from the end of a transcript), or None.

    A compaction is a ``compact_boundary`` followed by its summary (a user line marked
    ``isCompactSummary``); a summary with no boundary before it (written by older versions) is
    its own boundary. A boundary whose summary is not written yet is no compaction yet.
    ``whole``: whether ``records`` start at the start of the file.
    """
    summary_at = next(
        (
            i
            for i in range(len(records) - 1, -1, -1)
            if _is_summary(records[i]) or _is_boundary(records[i])
        ),
        None,
    )
    if summary_at is None or not _is_summary(records[summary_at]):
        return None  # none, or a boundary whose summary is still being written
    boundary_at = _boundary_of(records, summary_at)
    start, previous = _span_start(records, boundary_at)
    kept = {r.entry.uuid for r in preserved_records(records, boundary_at)}
    span = [
        r
        for r in records[start:boundary_at]
        if not _is_boundary(r) and (r.entry.uuid is None or r.entry.uuid not in kept)
    ]
    boundary = records[boundary_at].entry
    meta = boundary.compact_metadata
    return Compaction(
        boundary_id=boundary.uuid or records[summary_at].entry.uuid or "",
        trigger=(meta.trigger if meta is not None else None) or "auto",
        summary=_summary_text(records[summary_at]),
        replaced=main_thread(span),
        previous_boundary_id=previous,
        whole=whole or previous is not None,
        pre_tokens=meta.pre_tokens if meta is not None else None,
        post_tokens=meta.post_tokens if meta is not None else None,
    )


def _span_start(records: Sequence[Record], end: int) -> tuple[int, str | None]:
    """Where the span before ``end`` starts: the latest summary before it (an earlier
    compaction's, kept in the span for what it carries) with its boundary's id, or the start."""
    for i in range(end - 1, -1, -1):
        if _is_boundary(records[i]) or _is_summary(records[i]):
            opened = _boundary_of(records, i) if _is_summary(records[i]) else i
            return i, records[opened].entry.uuid or records[i].entry.uuid
    return 0, None


def compaction_in_progress(
    records: Sequence[Record], summary: str, trigger: str, *, whole: bool = True
) -> Compaction:
    """The compaction whose ``summary`` Claude Code has written but not yet put in its file.

    Claude Code runs its PostCompact and SessionStart hooks before it appends the boundary and
    the summary (docs/claude-code.md#sessionstart-after-a-compaction): the span is everything
    since the latest compaction in the file. The messages Claude Code keeps after its summary
    are not named yet, so they count as replaced.
    """
    start, previous = _span_start(records, len(records))
    span = [r for r in records[start:] if not _is_boundary(r)]
    return Compaction(
        boundary_id="",
        trigger=trigger,
        summary=summary,
        replaced=main_thread(span),
        previous_boundary_id=previous,
        whole=whole or previous is not None,
    )


@dataclass(frozen=True, slots=True)
class Handback:
    """What a summary left out, as the text given to the model, and its figures."""

    text: str  # empty when the summary left nothing out
    missing: Missing
    #: the ledger's totals in the span: user messages, commands, files
    totals: tuple[int, int, int]
    #: the ledger folded, to carry to the next compaction (see ``hand_back``'s ``carry``)
    carry: dict[str, Any] = field(default_factory=dict)

    @property
    def counts(self) -> tuple[int, int, int]:
        """How many user messages, commands and files the summary left out."""
        m = self.missing
        return len(m.messages), len(m.commands), len(m.files)

    def kept_line(self) -> str:
        """What the summary kept, e.g. ``1 of 2 user messages, 0 of 3 commands, 1 of 1 files``."""
        names = ("user messages", "commands", "files")
        return ", ".join(
            f"{total - left} of {total} {name}"
            for name, total, left in zip(names, self.totals, self.counts, strict=True)
        )


def _older(messages: Sequence[Message]) -> Any:
    def line(n: int) -> str:
        named = [pointer(m.uuid) for m in messages[:n] if m.uuid][-_OLDER_POINTERS:]
        rest = n - len(named)
        more = f" and {rest} before them (find them by their words)" if rest > 0 else ""
        return f"   - {n} earlier messages, each whole by recall: {' '.join(named)}{more}"

    return line


def _parts(missing: Missing) -> dict[str, Any]:
    current = [m for m in missing.messages if not m.carried]
    carried = [m for m in missing.messages if m.carried]

    def one(i: int, m: Message, chars: int) -> Lines:
        return message_lines("-", m, chars)

    return {
        "messages": message_part(current, one, _older(current)),
        "carried": carried_part(carried),
        "commands": command_part(missing.commands),
        "files": file_part(missing.files),
    }


def _render(compaction: Compaction, chosen: Mapping[str, Rendered], agent: str) -> str:
    lines = [
        handback_title(agent) + ":",
        "These come from the part of the conversation the summary replaced; the user's "
        "messages are quoted exactly. For anything else from before the summary (exact words, "
        "output, a file's content), call the `recall` tool of the compactd MCP server with a few "
        "words, a path, a command, or a recall:<id> pointer (it returns the original entry).",
    ]
    if not compaction.whole:
        lines.append("(Only the end of that part was read; recall searches all of it.)")
    blocks = (
        ("messages", "User messages, in order:"),
        ("carried", "User messages from earlier compactions (shortened):"),
        ("commands", "Shell commands run, most recent first:"),
        ("files", "Files read, searched or changed:"),
    )
    for key, heading in blocks:
        if chosen[key].lines:
            lines += ["", heading, *chosen[key].lines]
    text = "\n".join(line.rstrip() for line in lines).strip()
    return text.replace("recall/search", "recall")


def _with_carry(records: list[Record], carry: Mapping[str, Any] | None) -> list[Record]:
    """``records`` with ``carry`` put on the earlier summary that opens them (in memory only),
    so that the ledger checks what earlier compactions handed back too."""
    at = next((i for i, r in enumerate(records) if _is_summary(r)), None) if carry else None
    if carry is None or at is None:
        return records
    marked = record_from_dict({**records[at].to_builtins(), CARRY_FIELD: dict(carry)})
    return [*records[:at], marked, *records[at + 1 :]]


def hand_back(
    compaction: Compaction,
    *,
    limit: int,
    cwd: str | None = None,
    carry: Mapping[str, Any] | None = None,
    agent: str = "Claude Code",
) -> Handback:
    """What ``compaction``'s summary left out of the span it replaced, in at most ``limit``
    characters.

    ``carry``: the ledger folded at the compaction before (``Handback.carry`` of its hand-back),
    when one was handed back: its items are checked against this summary too. ``agent``: whose
    summary it is (the text names it).
    """
    ledger: SurvivalLedger = build_ledger(_with_carry(compaction.replaced, carry), cwd=cwd)
    missing = check_summary(ledger, compaction.summary)
    missing.constraints = []  # the user's messages that hold them are checked themselves
    totals = (len(ledger.human), len(ledger.commands), len(ledger.files))
    folded = carry_of(ledger)
    if not missing:
        return Handback("", missing, totals, folded)
    text, _ = fit_text(_parts(missing), lambda chosen: _render(compaction, chosen, agent), limit)
    return Handback(text, missing, totals, folded)
