"""The survival ledger of a compaction and the check of a model's summary against it.

A model asked to summarize may quietly drop things the user said. Before a summary is
committed, compactd builds a deterministic ledger of the records being summarized -- every
human message, the files touched, the commands run with their outcome, the errors and the
explicit constraints the user stated (sentences with "must", "never", "always", "don't", ...) --
reusing ``offline_summary.collect_ledger`` for the facts. ``check_summary`` then looks for each
user message and file path in the summary (whitespace and quoting normalized, case ignored;
long messages need only a verbatim prefix) and ``complete_summary`` appends what the model left
out as a clearly labelled extra section, so the stored summary is complete.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from compactd.core.offline_summary import Command, ToolError, collect_ledger
from compactd.transcript.model import Record

__all__ = [
    "LEDGER_SECTION_TITLE",
    "Missing",
    "SurvivalLedger",
    "build_ledger",
    "check_summary",
    "complete_summary",
    "render_missing",
]

# Heading of the section compactd appends to a summary that left things out.
LEDGER_SECTION_TITLE: Final = "Preserved from the conversation (added by compactd)"

# A user message longer than this counts as present when its first this-many characters
# (whitespace-normalized) appear in the summary: models quote the start of long requests and
# the offline summary clips them. compactd's own choice, no reference figure.
LEDGER_VERBATIM_PREFIX_CHARS: Final = 200

# Cap on the text the appended section may add, so that restoring cannot undo the point of the
# compaction (about 10K tokens at 4 characters per token). Most recent messages go first; what
# does not fit is counted and stays searchable with recall/search. compactd's own choice.
LEDGER_RESTORE_MAX_CHARS: Final = 40_000

# How much of a restored user message or constraint names it in the list of what was restored
# (a one-line label, not the content). compactd's own choice.
_RESTORED_LABEL_CHARS: Final = 120

# Marker words of an explicit constraint in a user sentence. compactd's own list.
_CONSTRAINT: Final = re.compile(
    r"\b(must|mustn't|must not|never|always|don't|do not|shouldn't|should not|"
    r"make sure|ensure|only ever|under no circumstances|required?)\b",
    re.IGNORECASE,
)
_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+|\n+")
_QUOTE_PREFIX: Final = re.compile(r"^[ \t]*(?:[>|][ \t]?)+", re.MULTILINE)
_SPACES: Final = re.compile(r"\s+")
# Harness-injected text in user turns, not something the person typed.
_NOT_HUMAN_PREFIXES: Final = ("<system-reminder>", "<local-command-stdout>")


@dataclass(slots=True)
class SurvivalLedger:
    """What must survive a compaction of some records, in order of appearance."""

    user_messages: list[str] = field(default_factory=list)
    file_paths: list[str] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)
    errors: list[ToolError] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Missing:
    """The ledger items a summary does not mention."""

    user_messages: list[str] = field(default_factory=list)
    file_paths: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.user_messages or self.file_paths or self.constraints)


def _constraints_of(message: str) -> list[str]:
    out: list[str] = []
    for sentence in _SENTENCE_END.split(message):
        sentence = " ".join(sentence.split())
        if sentence and _CONSTRAINT.search(sentence):
            out.append(sentence)
    return out


def _is_human(text: str) -> bool:
    return not text.lstrip().startswith(_NOT_HUMAN_PREFIXES)


def build_ledger(
    records: Sequence[Record], *, cleared_tool_ids: frozenset[str] = frozenset()
) -> SurvivalLedger:
    """The survival ledger of ``records`` (the ones a compaction is about to summarize)."""
    facts = collect_ledger(records, cleared_tool_ids=cleared_tool_ids)
    messages = [m for m in facts.user_messages if _is_human(m)]
    paths = list(dict.fromkeys([*facts.files_edited, *facts.files_read]))
    constraints = list(dict.fromkeys(c for m in messages for c in _constraints_of(m)))
    return SurvivalLedger(
        user_messages=messages,
        file_paths=paths,
        commands=list(facts.commands),
        errors=list(facts.errors),
        constraints=constraints,
    )


def _normalize(text: str) -> str:
    """Quote markers dropped, whitespace collapsed, case folded: how text is compared."""
    return _SPACES.sub(" ", _QUOTE_PREFIX.sub("", text)).strip().casefold()


def _present(item: str, haystack: str) -> bool:
    needle = _normalize(item)
    if not needle:
        return True
    if len(needle) > LEDGER_VERBATIM_PREFIX_CHARS:
        needle = needle[:LEDGER_VERBATIM_PREFIX_CHARS].rstrip()
    return needle in haystack


def check_summary(ledger: SurvivalLedger, summary: str) -> Missing:
    """The user messages, file paths and constraints of ``ledger`` that ``summary`` omits.

    A constraint inside a user message that is itself reported missing is not listed again.
    """
    haystack = _normalize(summary)
    messages = list(dict.fromkeys(m for m in ledger.user_messages if not _present(m, haystack)))
    in_missing = _normalize("\n".join(messages))
    constraints = [
        c
        for c in ledger.constraints
        if not _present(c, haystack) and _normalize(c) not in in_missing
    ]
    paths = [path for path in ledger.file_paths if path.casefold() not in haystack]
    return Missing(user_messages=messages, file_paths=paths, constraints=constraints)


def _quoted(text: str) -> list[str]:
    return ["   > " + line if line.strip() else "   >" for line in text.strip().splitlines()]


def render_missing(missing: Missing) -> tuple[str, list[str]]:
    """The section to append for ``missing`` and the list of what it restores.

    Items are named ``user message: ...``, ``constraint: ...`` and ``file: ...``. User
    messages are restored most recent first until ``LEDGER_RESTORE_MAX_CHARS`` is used up;
    the section then says how many were left out and where to find them.
    """
    restored: list[str] = []
    lines = [
        LEDGER_SECTION_TITLE + ":",
        "The summary above left out the following; they are quoted exactly from the conversation.",
    ]
    budget = LEDGER_RESTORE_MAX_CHARS
    kept_messages: list[str] = []
    for message in reversed(missing.user_messages):
        if len(message) > budget:
            break
        budget -= len(message)
        kept_messages.append(message)
    kept_messages.reverse()
    left_out = len(missing.user_messages) - len(kept_messages)
    if kept_messages or left_out:
        lines.append("")
        lines.append("User messages:")
        if left_out:
            lines.append(
                f"   ({left_out} earlier user messages did not fit; they are in the transcript "
                "and can be found with recall/search)"
            )
        for i, message in enumerate(kept_messages):
            if i:
                lines.append("")
            lines.extend(_quoted(message))
            restored.append("user message: " + " ".join(message.split())[:_RESTORED_LABEL_CHARS])
    if missing.constraints:
        lines.append("")
        lines.append("Constraints the user stated:")
        for constraint in missing.constraints:
            lines.append(f"   - {constraint}")
            restored.append("constraint: " + constraint[:_RESTORED_LABEL_CHARS])
    if missing.file_paths:
        lines.append("")
        lines.append("Files read or changed:")
        for path in missing.file_paths:
            lines.append(f"   - {path}")
            restored.append("file: " + path)
    return "\n".join(line.rstrip() for line in lines).strip(), restored


def complete_summary(summary: str, ledger: SurvivalLedger) -> tuple[str, list[str]]:
    """``summary`` with what it omitted from ``ledger`` appended, and the list of it.

    A complete summary comes back unchanged with an empty list.
    """
    missing = check_summary(ledger, summary)
    if not missing:
        return summary, []
    section, restored = render_missing(missing)
    return summary.rstrip() + "\n\n" + section, restored
