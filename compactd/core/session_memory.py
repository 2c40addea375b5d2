"""Session memory: the notes file's template and limits, the extraction trigger and the kept part.

Session memory is a markdown notes file per session that a background request keeps up to date
while the agent works (docs/session-memory.md). It serves as a ready-made summary: when the context
fills up, ``compact/auto`` can replace the older part of the conversation by the notes and keep
the recent entries verbatim, with no model call at all. This module holds the pure parts: the
ten-section template (in compactd's own words), splitting notes into sections, measuring them
against the per-section and total budgets, truncating them for use in a summary, the
instruction of the extraction request and the parsing of its reply, the rule that decides when
an extraction runs, the deterministic notes built without a model, and the choice of the
entries a session-memory compaction keeps.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from compactd.core import split, tokens
from compactd.core.ledger import SurvivalLedger, command_lines, file_lines
from compactd.core.offline_summary import failure_lines, todo_lines
from compactd.transcript.model import Entry, TextBlock, ToolUseBlock

__all__ = [
    "DEFAULT_MIN_INIT_TOKENS",
    "DEFAULT_MIN_TOKEN_GROWTH",
    "DEFAULT_MIN_TOOL_CALLS",
    "KEEP_MAX_TOKENS",
    "KEEP_MIN_TEXT_ENTRIES",
    "KEEP_MIN_TOKENS",
    "NOTES_REPLY_TAG",
    "SECTIONS",
    "SECTION_MAX_TOKENS",
    "SECTION_USE_MAX_CHARS",
    "TOTAL_MAX_TOKENS",
    "KeepRule",
    "Section",
    "TriggerRule",
    "extraction_instruction",
    "has_content",
    "kept_start",
    "last_turn_has_tool_calls",
    "notes_for_summary",
    "offline_notes",
    "oversized_sections",
    "parse_notes_reply",
    "parse_sections",
    "should_extract",
    "template",
    "tool_call_count",
]

# -- budgets (docs/session-memory.md#budgets) ------------------------------------------------------

# Each section of the notes may hold about 2,000 tokens and the whole file 12,000
# (docs/session-memory.md#budgets); above that the next extraction is told to condense.
SECTION_MAX_TOKENS: Final = 2_000
TOTAL_MAX_TOKENS: Final = 12_000

# When notes stand in for the conversation, each section is cut to about 8,000 characters, with
# a marker saying where the whole file is (docs/session-memory.md#budgets).
SECTION_USE_MAX_CHARS: Final = 8_000

# A session-memory compaction keeps the recent entries: at least 10,000 tokens and 5 entries
# with text, at most 40,000 tokens
# (docs/session-memory.md#compaction-from-the-notes).
KEEP_MIN_TOKENS: Final = 10_000
KEEP_MIN_TEXT_ENTRIES: Final = 5
KEEP_MAX_TOKENS: Final = 40_000

# -- extraction trigger (docs/session-memory.md#extraction-trigger; the figures are compactd's
# choices, configurable with ``initializationOptions.sessionMemory``) ---------------------------

# No notes are written before the conversation holds this many tokens: a short exchange is
# cheaper to summarize than to take notes on.
DEFAULT_MIN_INIT_TOKENS: Final = 10_000
# Between two extractions the context must have grown by at least this many tokens: frequent
# enough that the notes lag little behind, rare enough that the extraction cost stays small
# next to the main loop's (one extraction per ~5K new tokens).
DEFAULT_MIN_TOKEN_GROWTH: Final = 5_000
# ... and the agent must have made this many tool calls since, unless its last turn made none
# (it stopped to answer the user: a natural moment to write things down).
DEFAULT_MIN_TOOL_CALLS: Final = 3

# The reply of an extraction carries the whole updated file between these tags.
NOTES_REPLY_TAG: Final = "session_notes"

# -- notes without a model (``offline_notes``; compactd's own sizes, no reference figure: they
# keep the deterministic notes short and well under TOTAL_MAX_TOKENS) -------------------------

# Longest one-line quote of the first request (used as the title), the latest request, the
# assistant's last reply, an earlier request, a carried-over summary and a command.
_OFFLINE_TITLE_CHARS: Final = 80
_OFFLINE_LATEST_REQUEST_CHARS: Final = 500
_OFFLINE_LAST_REPLY_CHARS: Final = 800
_OFFLINE_REQUEST_CHARS: Final = 400
_OFFLINE_CARRIED_SUMMARY_CHARS: Final = 1_500
_OFFLINE_COMMAND_CHARS: Final = 120
# How many recent user requests, workflow lines and worklog commands are listed.
_OFFLINE_RECENT_REQUESTS: Final = 10
_OFFLINE_WORKFLOW_LINES: Final = 15
_OFFLINE_WORKLOG_COMMANDS: Final = 10


@dataclass(frozen=True, slots=True)
class Section:
    heading: str
    guide: str


# The ten sections of the notes (docs/session-memory.md#notes-file), each with a one-line guide
# kept in the file so that whoever updates it knows what belongs where.
SECTIONS: Final[tuple[Section, ...]] = (
    Section("Session Title", "A short, specific name for what this session is about."),
    Section(
        "Current State",
        "What is being worked on right now, what was just finished, and the immediate next step.",
    ),
    Section(
        "Task Specification",
        "What the user asked for, with their constraints, preferences and design decisions.",
    ),
    Section(
        "Files and Functions",
        "The files and functions that matter to the task: where they are and what they do.",
    ),
    Section(
        "Workflow",
        "Commands to build, run and test, and the order in which things are done.",
    ),
    Section(
        "Errors and Corrections",
        "Errors met and how they were fixed; approaches that failed; corrections from the user.",
    ),
    Section(
        "Codebase Documentation",
        "How the relevant parts of the codebase work: components, data flow, conventions.",
    ),
    Section(
        "Learnings",
        "What worked well, what to avoid, and anything surprising about this project.",
    ),
    Section(
        "Key Results",
        "Exact outputs the user asked for: answers, figures, tables, final decisions.",
    ),
    Section("Worklog", "A terse, dated list of the steps taken, newest last."),
)

_HEADING: Final = re.compile(r"^# (.+?)\s*$", re.MULTILINE)
_GUIDE_PREFIX: Final = "_"


def template() -> str:
    """The empty notes file: each section's heading and guide line, no content yet."""
    return "\n".join(f"# {s.heading}\n{_GUIDE_PREFIX}{s.guide}{_GUIDE_PREFIX}\n" for s in SECTIONS)


def parse_sections(notes: str) -> list[tuple[str, str]]:
    """``(heading, body)`` of each top-level (``# ``) section, in order.

    Text before the first heading is returned under an empty heading when it is not blank.
    """
    out: list[tuple[str, str]] = []
    matches = list(_HEADING.finditer(notes))
    head = notes[: matches[0].start()] if matches else notes
    if head.strip():
        out.append(("", head.strip("\n")))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(notes)
        out.append((match.group(1), notes[match.end() : end].strip("\n")))
    return out


def _is_guide(line: str) -> bool:
    s = line.strip()
    return len(s) > 1 and s.startswith(_GUIDE_PREFIX) and s.endswith(_GUIDE_PREFIX)


def has_content(notes: str) -> bool:
    """Whether the notes say anything beyond the template's headings and guide lines."""
    for _heading, body in parse_sections(notes):
        if any(line.strip() and not _is_guide(line) for line in body.splitlines()):
            return True
    return False


def oversized_sections(
    notes: str,
    section_max_tokens: int = SECTION_MAX_TOKENS,
    total_max_tokens: int = TOTAL_MAX_TOKENS,
) -> tuple[list[str], bool]:
    """The headings of sections above their budget, and whether the whole file is above its own."""
    over = [
        heading or "(preamble)"
        for heading, body in parse_sections(notes)
        if tokens.estimate_text_tokens(body) > section_max_tokens
    ]
    return over, tokens.estimate_text_tokens(notes) > total_max_tokens


def notes_for_summary(notes: str, notes_path: str, max_chars: int = SECTION_USE_MAX_CHARS) -> str:
    """The notes as a compaction summary: each section cut to ``max_chars`` with a marker.

    The marker names the notes file, so the agent knows the rest is one read away. The
    template's guide lines and the sections left empty are dropped: they carry no information.
    """
    parts: list[str] = []
    for heading, full in parse_sections(notes):
        body = "\n".join(ln for ln in full.splitlines() if not _is_guide(ln)).strip("\n")
        if not body.strip():
            continue
        if len(body) > max_chars:
            cut = body[:max_chars]
            # Cut at a line end when there is one in the last quarter, so no line is half there.
            newline = cut.rfind("\n")
            if newline > max_chars * 3 // 4:
                cut = cut[:newline]
            body = (
                f"{cut.rstrip()}\n[... this section is cut here; {len(body) - len(cut)} more "
                f"characters are in the full session notes at {notes_path}]"
            )
        parts.append(f"# {heading}\n{body}" if heading else body)
    return "\n\n".join(parts).strip()


def extraction_instruction(
    current: str,
    notes_path: str,
    *,
    section_max_tokens: int = SECTION_MAX_TOKENS,
    total_max_tokens: int = TOTAL_MAX_TOKENS,
) -> str:
    """The instruction of an extraction request: update ``current`` from the conversation.

    The request may only produce the notes: no tool calls, the whole updated file between
    ``NOTES_REPLY_TAG`` tags. Sections above their budget are named with an order to condense.
    """
    tag = NOTES_REPLY_TAG
    parts = [
        "IMPORTANT: this is a note-taking request, not a turn of the conversation. Do not call "
        "any tool and do not continue the task. Your only job is to update the session notes "
        "below from the conversation above.",
        f"The notes live in {notes_path}. They will stand in for the conversation when it "
        "grows too long, so they must let someone carry on the work without the transcript: "
        "exact file paths, function names, commands, error messages and the user's own words "
        "where they matter.",
        "Rules:\n"
        "- Keep every '# ' heading and the italic guide line under it exactly as they are; "
        "write only below the guide lines. Do not add or remove sections.\n"
        "- Update what changed, add what is new, remove what is no longer true. Keep what is "
        "still right, even if the conversation no longer mentions it.\n"
        "- Always bring 'Current State' up to date with the latest work.\n"
        f"- Stay within about {section_max_tokens} tokens per section and "
        f"{total_max_tokens} tokens in total: prefer dense facts to prose.\n"
        "- Leave a section with nothing to say empty.",
    ]
    over, total_over = oversized_sections(current, section_max_tokens, total_max_tokens)
    if over or total_over:
        where = ", ".join(f"'{h}'" for h in over) if over else "the file as a whole"
        parts.append(
            f"The notes have outgrown their budget ({where}). Condense: merge related items, "
            "drop details that no longer matter, shorten the worklog to its milestones."
        )
    parts.append(f"Current notes:\n<current_notes>\n{current}\n</current_notes>")
    parts.append(
        f"Reply with the complete updated notes file between <{tag}> and </{tag}> tags and "
        "nothing else. Do not call any tool."
    )
    return "\n\n".join(parts)


_REPLY: Final = re.compile(rf"<{NOTES_REPLY_TAG}>\s*(.*?)\s*</{NOTES_REPLY_TAG}>", re.DOTALL)
_FENCE: Final = re.compile(r"```(?:markdown|md)?\s*\n(.*?)\n```", re.DOTALL)


def parse_notes_reply(text: str) -> str | None:
    """The notes file in an extraction reply (tagged, else a fenced block); None if absent."""
    match = _REPLY.search(text)
    if match is None:
        match = _FENCE.search(text)
    if match is None:
        return None
    notes = match.group(1).strip()
    if not _HEADING.search(notes):
        return None
    return notes + "\n"


# -- when to extract --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TriggerRule:
    min_init_tokens: int = DEFAULT_MIN_INIT_TOKENS
    min_token_growth: int = DEFAULT_MIN_TOKEN_GROWTH
    min_tool_calls: int = DEFAULT_MIN_TOOL_CALLS


def should_extract(
    rule: TriggerRule,
    *,
    tokens_now: int,
    tokens_at_last: int | None,
    tool_calls_since: int,
    last_turn_tool_calls: bool,
) -> bool:
    """Enough token growth since the last update AND (enough tool calls since it OR none in
    the last turn), docs/session-memory.md#extraction-trigger. ``tokens_at_last`` None: no
    extraction yet, which also needs the conversation to reach ``min_init_tokens``."""
    if tokens_at_last is None:
        if tokens_now < rule.min_init_tokens:
            return False
        grown = tokens_now
    else:
        grown = tokens_now - tokens_at_last
    if grown < rule.min_token_growth:
        return False
    return tool_calls_since >= rule.min_tool_calls or not last_turn_tool_calls


def tool_call_count(entries: Sequence[Entry]) -> int:
    return sum(
        1 for e in entries if e.type == "assistant" for b in e.blocks if isinstance(b, ToolUseBlock)
    )


def last_turn_has_tool_calls(entries: Sequence[Entry]) -> bool | None:
    """Whether the latest model response calls a tool; None when ``entries`` have none.

    One response may be written as several entries sharing ``message.id``: all of them count.
    """
    last_id: str | None = None
    found = False
    for e in reversed(entries):
        if e.type != "assistant" or e.is_api_error_message:
            continue
        if found and (last_id is None or e.message_id != last_id):
            break
        if not found:
            found, last_id = True, e.message_id
        if any(isinstance(b, ToolUseBlock) for b in e.blocks):
            return True
    return False if found else None


# -- which entries a session-memory compaction keeps ------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeepRule:
    min_tokens: int = KEEP_MIN_TOKENS
    min_text_entries: int = KEEP_MIN_TEXT_ENTRIES
    max_tokens: int = KEEP_MAX_TOKENS


def _has_text(entry: Entry) -> bool:
    return entry.type in ("user", "assistant") and any(
        isinstance(b, TextBlock) and b.text.strip() for b in entry.blocks
    )


def kept_start(
    entries: Sequence[Entry], first_unsummarized: int, floor: int, rule: KeepRule = KeepRule()
) -> int:
    """Index of the first entry a session-memory compaction keeps
    (docs/session-memory.md#compaction-from-the-notes).

    ``first_unsummarized``: the first entry the notes do not cover yet; everything from there
    on is kept. The start then moves back, one entry at a time, until the kept part holds at
    least ``min_tokens`` and ``min_text_entries`` entries with text, as long as it stays within
    ``max_tokens`` (a part that is already above it is kept whole: the notes do not cover it)
    and does not go before ``floor`` (the first entry after the last compaction's summary).
    Finally the start moves back to a safe cut, so no tool call is parted from its result and no
    response is split; when that would cross ``floor``, it moves forward instead.
    """
    n = len(entries)
    floor = max(0, min(floor, n))
    start = max(floor, min(first_unsummarized, n))
    kept_tokens = sum(tokens.estimate_entry_raw(e) for e in entries[start:])
    text_entries = sum(1 for e in entries[start:] if _has_text(e))

    def satisfied() -> bool:
        return tokens.pad(kept_tokens) >= rule.min_tokens and text_entries >= rule.min_text_entries

    # Budgets are compared with padded estimates, like every token figure compactd reports.
    if tokens.pad(kept_tokens) < rule.max_tokens:
        while start > floor and not satisfied():
            cost = tokens.estimate_entry_raw(entries[start - 1])
            if tokens.pad(kept_tokens + cost) > rule.max_tokens:
                break
            start -= 1
            kept_tokens += cost
            text_entries += 1 if _has_text(entries[start]) else 0
    cut = split.adjust_cut(entries, start, "back")
    if cut < floor:
        cut = split.adjust_cut(entries, start, "forward")
    return cut


# -- notes without a model ----------------------------------------------------------------------------


def offline_notes(ledger: SurvivalLedger, previous: str | None = None) -> str:
    """Notes built deterministically from the ledger of the conversation (no model call).

    Used when no API key is configured. Every section is rebuilt from the facts the transcript
    records for certain; the previous notes' title is kept when they had one.
    """
    requests = [m.text for m in ledger.current]
    first = requests[0] if requests else None
    latest = requests[-1] if requests else None

    def line(text: str, limit: int) -> str:
        flat = " ".join(text.split())
        return flat if len(flat) <= limit else flat[: limit - 3] + "..."

    title = None
    if previous:
        for heading, body in parse_sections(previous):
            kept = [ln for ln in body.splitlines() if ln.strip() and not _is_guide(ln)]
            if heading == SECTIONS[0].heading and kept:
                title = kept[0].strip()
    bodies: dict[str, list[str]] = {s.heading: [] for s in SECTIONS}
    bodies["Session Title"].append(
        title or (line(first, _OFFLINE_TITLE_CHARS) if first else "(untitled)")
    )
    state = bodies["Current State"]
    if latest is not None:
        state.append(f"- Latest request: {line(latest, _OFFLINE_LATEST_REQUEST_CHARS)}")
    if ledger.last_assistant_text:
        state.append(f"- Last reply: {line(ledger.last_assistant_text, _OFFLINE_LAST_REPLY_CHARS)}")
    if ledger.todos:
        state.extend(todo_lines(ledger.todos, open_only=True))
    spec = bodies["Task Specification"]
    for msg in requests[-_OFFLINE_RECENT_REQUESTS:]:
        spec.append(f"- {line(msg, _OFFLINE_REQUEST_CHARS)}")
    bodies["Files and Functions"].extend(file_lines(ledger.files))
    bodies["Workflow"].extend(command_lines(ledger.commands)[:_OFFLINE_WORKFLOW_LINES])
    bodies["Errors and Corrections"].extend(failure_lines(ledger.failures, 20, 300))
    if ledger.tool_counts:
        used = ", ".join(f"{name} x{n}" for name, n in ledger.tool_counts.most_common())
        bodies["Codebase Documentation"].append(f"- Tools used so far: {used}")
    for summary in ledger.foreign[-1:]:
        bodies["Learnings"].append(
            "- Carried over from an earlier compaction: "
            + line(summary.text, _OFFLINE_CARRIED_SUMMARY_CHARS)
        )
    bodies["Worklog"].extend(
        f"- {line(cmd.command, _OFFLINE_COMMAND_CHARS)}"
        for cmd in reversed(ledger.commands[:_OFFLINE_WORKLOG_COMMANDS])
    )
    out = []
    for s in SECTIONS:
        body = "\n".join(bodies[s.heading])
        out.append(
            f"# {s.heading}\n{_GUIDE_PREFIX}{s.guide}{_GUIDE_PREFIX}\n{body}".rstrip() + "\n"
        )
    return "\n".join(out)
