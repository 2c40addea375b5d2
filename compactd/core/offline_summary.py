"""A summary built without a model, from what the transcript records for certain.

When no API key is configured (or ``summarizer.offline`` is set), and as the fallback when the
API keeps failing, compaction still has to produce a summary (docs/compaction.md#offline-summary).
``offline_summary`` writes one from the survival ledger (``core.ledger``) in the nine sections a
model summary has, for a reader who was not there: the task (the first and the latest request,
as the user wrote them), the state of the work (the files changed and how, the last successful
build or test command), what failed and what resolved it, every shell command once with its
outcome, every message of the user, the open todos and the next step. Only exact facts: no
output dumps, no line cut in the middle of a word, no line repeated. A previous summary is
folded in through its carry (older messages come back shortened, with recall pointers) rather
than pasted again, so repeated compactions do not make it grow.

It fits in the characters it is given: each part (the requests, the messages, the commands,
the paths, ...) can be shown at several levels of detail, and ``core.ledger.fit_parts`` lowers
the largest ones until the whole fits, the user's words last. The todo list is not repeated: the rehydration
attachment that follows the summary carries it, and section 7 says so.

Pure: no I/O.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Final

from compactd.core.ledger import (
    MESSAGE_CHARS,
    Failure,
    Lines,
    Message,
    Part,
    Rendered,
    SurvivalLedger,
    carried_part,
    clip,
    command_part,
    file_part,
    fit_text,
    harness_part,
    message_lines,
    message_part,
)
from compactd.core.recall import pointer

__all__ = [
    "OFFLINE_HEADING",
    "OFFLINE_INSTRUCTIONS_WARNING",
    "failure_lines",
    "offline_summary",
    "todo_lines",
]

# The first lines of every offline summary (the stored summary starts with "Summary:" like a
# model's, see core/prompts.format_summary).
OFFLINE_HEADING: Final = (
    "Summary:\n"
    "(Built by compactd without a model, from the transcript: every fact below is exact. "
    "recall:<id> names a transcript entry that recall/search returns whole.)"
)

OFFLINE_INSTRUCTIONS_WARNING = (
    "custom instructions could not be followed: the offline summarizer builds the summary "
    "from the transcript without a model; they are quoted at the end of the summary"
)


def _concepts(ledger: SurvivalLedger) -> Lines:
    lines: Lines = []
    if ledger.tool_counts:
        used = ", ".join(f"{name} ×{n}" for name, n in ledger.tool_counts.most_common())
        lines.append(f"   - Tools used: {used}")
    programs = Counter(r.program for r in ledger.commands if not r.carried)
    if programs:
        lines.append(
            "   - Programs run: " + ", ".join(f"{p} ×{n}" for p, n in programs.most_common(12))
        )
    types = Counter(
        ext for f in ledger.files if not f.carried and (ext := os.path.splitext(f.path)[1])
    )
    if types:
        lines.append(
            "   - File types: " + ", ".join(f"{ext} ×{n}" for ext, n in types.most_common(10))
        )
    return lines or ["   - (no tool was used)"]


def failure_lines(failures: Sequence[Failure], shown: int, chars: int) -> Lines:
    """The latest ``shown`` distinct failures with what resolved them; older ones counted."""
    latest = list(failures[len(failures) - shown :]) if shown else []
    older = failures[: len(failures) - len(latest)]
    lines: Lines = []
    if older:
        open_ = sum(1 for f in older if f.resolution is None)
        lines.append(
            f"   - {len(older)} earlier failures ({open_} without a later fix in the transcript)"
        )
    for f in latest:
        times = f" ×{f.count}" if f.count > 1 else ""
        message = f": {clip(f.message, chars)}" if f.message and chars else ""
        fixed = f" — {f.resolution}" if f.resolution else " — not resolved in the transcript"
        lines.append(f"   - {f.what} failed{times}{message}{fixed}")
    return lines


def _failure_part(failures: Sequence[Failure]) -> Part:
    def level(shown: int, chars: int) -> Rendered:
        return Rendered(failure_lines(failures, shown, chars), shown)

    shapes = [(len(failures), 200), (20, 160), (10, 120), (6, 80), (3, 60), (1, 0), (0, 0)]
    shown = [partial(level, n, chars) for n, chars in shapes if n <= len(failures)]
    return Part(shown, excerpt=True)


def _text_part(text: str | None, widths: Sequence[int], weight: float = 1.0) -> Part:
    """A text shown whole up to a width, else clipped between words, at decreasing widths (an
    excerpt: it gives way to the ledger's items)."""

    def level(width: int) -> Rendered:
        if not text or not width:
            return Rendered([], 0)
        shown = text.strip() if len(text.strip()) <= width else clip(text, width)
        return Rendered(shown.splitlines(), 1, width)

    return Part([partial(level, w) for w in (*widths, 0)], weight, excerpt=True)


def _requests_part(first: Message | None, latest: Message | None) -> Part:
    def level(chars: int) -> Rendered:
        out: Lines = []
        for label, m in (("First request", first), ("Latest request", latest)):
            if m is None:
                continue
            if m.carried:
                out.append(
                    f"   {label} (from an earlier compaction; {pointer(m.uuid)} has it whole):"
                )
                out.append(clip(m.text, max(chars, 120)))
            else:
                out.extend(message_lines(f"{label}:", m, chars))
        return Rendered(out, len(out), chars)

    return Part([partial(level, chars) for chars in MESSAGE_CHARS], weight=0.2)


def todo_lines(todos: Sequence[dict[str, Any]], *, open_only: bool) -> Lines:
    """The todo list, one item per line (only the unfinished ones with ``open_only``)."""
    lines = []
    for todo in todos:
        status = str(todo.get("status", "pending"))
        if open_only and status == "completed":
            continue
        content = todo.get("content")
        lines.append(f"   - [{status}] {clip(str(content or todo), 200)}")
    return lines


def _in_progress(ledger: SurvivalLedger) -> int | None:
    """The position (from 1) of the todo item in progress."""
    for i, todo in enumerate(ledger.todos or [], 1):
        if todo.get("status") == "in_progress":
            return i
    return None


def _parts(
    ledger: SurvivalLedger, first: Message | None, latest: Message | None
) -> dict[str, Part]:
    current = ledger.current
    carried = [m for m in ledger.human if m.carried and (first is None or m.uuid != first.uuid)]

    quoted = {
        i: which
        for which, m in (("latest", latest), ("first", first))
        for i, x in enumerate(current, 1)
        if x is m
    }

    def one(i: int, m: Message, chars: int) -> Lines:
        if i in quoted:
            return [f"   [{i}] (the {quoted[i]} request, quoted in section 1)"]
        return message_lines(f"[{i}]", m, chars)

    def older(n: int) -> str:
        return f"   - [1-{n}] (not shown: recall/search finds each by its text)"

    return {
        "requests": _requests_part(first, latest if latest is not first else None),
        "messages": message_part(current, one, older),
        "carried": carried_part(carried, ledger.carry.dropped_messages),
        "harness": harness_part(ledger.messages),
        "files": file_part(ledger.files),
        "failures": _failure_part(ledger.failures),
        "commands": command_part(ledger.commands),
        "last_text": _text_part(ledger.last_assistant_text, (1_000, 600, 300, 150)),
        "foreign": _text_part(
            ledger.foreign[0].text if ledger.foreign else None,
            (2_000, 1_500, 1_000, 700, 400, 200),
            weight=1.5,
        ),
    }


def _render(
    ledger: SurvivalLedger,
    first: Message | None,
    latest: Message | None,
    got: Mapping[str, Rendered],
) -> str:
    out: Lines = [OFFLINE_HEADING, ""]

    out.append("1. Primary Request and Intent:")
    out.extend(got["requests"].lines)
    if first is None and latest is None:
        out.append("   - (no request of the user is recorded)")
    if ledger.carry.rounds:
        out.append(
            f"   This continues after {ledger.carry.rounds} earlier compaction(s); what they "
            "covered is folded into the sections below."
        )
    if got["foreign"].lines and ledger.foreign:
        out.append(f"   An earlier summary ({pointer(ledger.foreign[0].uuid)} has it whole) began:")
        out.extend(got["foreign"].lines)
    out.append("")

    out.append("2. Key Technical Concepts:")
    out.extend(_concepts(ledger))
    out.append("")

    out.append("3. Files and Code Sections:")
    out.extend(got["files"].lines or ["   - (no file was read, searched or changed)"])
    out.append("")

    out.append("4. Errors and Fixes:")
    out.extend(got["failures"].lines or ["   - (nothing failed)"])
    out.append("")

    out.append("5. Problem Solving:")
    if ledger.last_check is not None:
        out.append(
            f"   Last successful build or test command: `{clip(ledger.last_check.command, 200)}`"
        )
    if ledger.commands:
        out.append("   Shell commands, most recent first (each once; ×N = runs):")
        out.extend(got["commands"].lines)
    else:
        out.append("   - (no shell command was run)")
    out.append("")

    out.append("6. All User Messages:")
    if got["carried"].lines:
        out.append("   From earlier compactions, oldest first:")
        out.extend(got["carried"].lines)
        out.append("   Since the last compaction:")
    out.extend(got["messages"].lines)
    if not ledger.human:
        out.append("   - (none)")
    if got["harness"].lines:
        out.append("   Messages from the harness, not typed by the user:")
        out.extend(got["harness"].lines)
    out.append("")

    out.append("7. Pending Tasks:")
    todos = ledger.todos or []
    open_items = [t for t in todos if t.get("status") != "completed"]
    if todos:
        state = (
            f"{len(open_items)} of its {len(todos)} items are open"
            if open_items
            else f"all {len(todos)} items are done"
        )
        out.append(f"   - The todo list is attached after this summary; {state}.")
    else:
        out.append("   - (no todo list; the latest request in section 1 is the open task)")
    out.append("")

    out.append("8. Current Work:")
    if got["last_text"].lines:
        out.append("   The assistant's last message:")
        out.extend(got["last_text"].lines)
    if ledger.recent_actions:
        out.append("   Its latest actions: " + "; ".join(ledger.recent_actions) + ".")
    if not got["last_text"].lines and not ledger.recent_actions:
        out.append("   - (nothing recorded)")
    out.append("")

    out.append("9. Optional Next Step:")
    doing = _in_progress(ledger)
    if doing is not None:
        # The attached list names it; it is not repeated here.
        out.append(
            f"   Continue the item in progress in the todo list (item {doing} of {len(todos)})."
        )
    elif latest is not None or first is not None:
        out.append("   Continue with the latest request (section 1).")
    else:
        out.append("   - (no request recorded)")
    return "\n".join(line.rstrip() for line in out)


def offline_summary(
    ledger: SurvivalLedger, *, limit: int | None = None, instructions: Sequence[str] = ()
) -> str:
    """The offline summary of ``ledger``, at most ``limit`` characters when it can be.

    Starts with "Summary:", like a formatted model summary. The offline summary has no model
    to follow ``instructions``; they are quoted at its end, so that the model reading it sees
    what the user asked the summary to keep.
    """
    note = ""
    if instructions:
        quoted = "\n\n".join(x.strip() for x in instructions if x.strip())
        note = "\n\nInstructions given for this summary, which an offline summary cannot follow:\n"
        note += quoted
    first = ledger.first_request
    latest = ledger.latest_request
    if latest is not None and first is not None and latest.uuid == first.uuid:
        latest = first
    room = None if limit is None else limit - len(note)
    text, _ = fit_text(_parts(ledger, first, latest), partial(_render, ledger, first, latest), room)
    return text + note
