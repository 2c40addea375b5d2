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

It fits in the characters it is given: the ledger's ``LADDER`` is walked from the most to the
least detailed rendering until one fits. The todo list is not repeated: the rehydration
attachment that follows the summary carries it, and section 7 says so.

Pure: no I/O.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

from compactd.core.ledger import (
    Detail,
    Message,
    SurvivalLedger,
    carried_line,
    clip,
    command_lines,
    file_lines,
    fit,
    harness_lines,
    message_lines,
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


def _request(label: str, message: Message, detail: Detail) -> list[str]:
    if message.carried:
        shown = clip(message.text, max(detail.message_chars, 120))
        return [
            f"   {label} (from an earlier compaction; {pointer(message.uuid)} has it whole):",
            shown,
        ]
    return message_lines(f"{label}:", message, detail.message_chars)


def _concepts(ledger: SurvivalLedger) -> list[str]:
    lines: list[str] = []
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


def failure_lines(ledger: SurvivalLedger, shown: int, chars: int) -> list[str]:
    """The latest ``shown`` distinct failures with what resolved them; older ones counted."""
    failures = ledger.failures[-shown:] if shown else []
    lines: list[str] = []
    older = ledger.failures[: len(ledger.failures) - len(failures)]
    if older:
        open_ = sum(1 for f in older if f.resolution is None)
        lines.append(
            f"   - {len(older)} earlier failures ({open_} without a later fix in the transcript)"
        )
    for f in failures:
        times = f" ×{f.count}" if f.count > 1 else ""
        message = f": {clip(f.message, chars)}" if f.message and chars else ""
        fixed = f" — {f.resolution}" if f.resolution else " — not resolved in the transcript"
        lines.append(f"   - {f.what} failed{times}{message}{fixed}")
    return lines


def todo_lines(todos: Sequence[dict[str, Any]], *, open_only: bool) -> list[str]:
    """The todo list, one item per line (only the unfinished ones with ``open_only``)."""
    lines = []
    for todo in todos:
        status = str(todo.get("status", "pending"))
        if open_only and status == "completed":
            continue
        content = todo.get("content")
        lines.append(f"   - [{status}] {clip(str(content or todo), 200)}")
    return lines


def _in_progress(ledger: SurvivalLedger) -> str | None:
    for todo in ledger.todos or []:
        if todo.get("status") == "in_progress" and todo.get("content"):
            return clip(str(todo["content"]), 200)
    return None


def _render(ledger: SurvivalLedger, detail: Detail) -> str:
    first = ledger.first_request
    latest = ledger.latest_request
    out: list[str] = [OFFLINE_HEADING, ""]

    out.append("1. Primary Request and Intent:")
    if first is not None:
        out.extend(_request("First request", first, detail))
    if latest is not None and latest is not first and latest.uuid != (first and first.uuid):
        out.extend(_request("Latest request", latest, detail))
    if first is None and latest is None:
        out.append("   - (no request of the user is recorded)")
    if ledger.carry.rounds:
        out.append(
            f"   This continues after {ledger.carry.rounds} earlier compaction(s); what they "
            "covered is folded into the sections below."
        )
    for foreign in ledger.foreign[:1]:
        if detail.foreign_chars:
            out.append(f"   An earlier summary ({pointer(foreign.uuid)} has it whole) began:")
            text = foreign.text
            if len(text) > detail.foreign_chars:
                text = clip(text, detail.foreign_chars)
            out.append(text)
    out.append("")

    out.append("2. Key Technical Concepts:")
    out.extend(_concepts(ledger))
    out.append("")

    out.append("3. Files and Code Sections:")
    out.extend(file_lines(ledger.files, detail) or ["   - (no file was read, searched or changed)"])
    out.append("")

    out.append("4. Errors and Fixes:")
    failures = failure_lines(ledger, max(3, detail.listed_commands), detail.outcome_chars)
    out.extend(failures or ["   - (nothing failed)"])
    out.append("")

    out.append("5. Problem Solving:")
    if ledger.last_check is not None:
        out.append(
            f"   Last successful build or test command: `{clip(ledger.last_check.command, 200)}`"
        )
    if ledger.commands:
        out.append("   Shell commands, most recent first (each once; ×N = runs):")
        out.extend(command_lines(ledger.commands, detail))
    else:
        out.append("   - (no shell command was run)")
    out.append("")

    out.append("6. All User Messages:")
    current = ledger.current
    carried = [m for m in ledger.human if m.carried and (first is None or m.uuid != first.uuid)]
    dropped = ledger.carry.dropped_messages
    if carried or dropped:
        out.append("   From earlier compactions, oldest first:")
        if dropped:
            out.append(f"   - {dropped} messages before these (recall/search finds them)")
        if detail.carried_chars:
            out.extend(carried_line(m, detail) for m in carried)
        elif carried:
            out.append(f"   - {len(carried)} messages (recall/search finds each by its text)")
        out.append("   Since the last compaction:")
    for i, message in enumerate(current, 1):
        if message is first or message is latest:
            which = "first" if message is first else "latest"
            out.append(f"   [{i}] (the {which} request, quoted in section 1)")
            continue
        out.extend(message_lines(f"[{i}]", message, detail.message_chars))
    if not current and not carried:
        out.append("   - (none)")
    harness = harness_lines(ledger.messages, detail)
    if harness:
        out.append("   Messages from the harness, not typed by the user:")
        out.extend(harness)
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
    if ledger.last_assistant_text:
        limit = max(200, detail.message_chars // 2)
        text = ledger.last_assistant_text.strip()
        if len(text) > limit:
            text = clip(text, limit)
        out.append("   The assistant's last message:")
        out.append(text)
    if ledger.recent_actions:
        out.append("   Its latest actions: " + "; ".join(ledger.recent_actions) + ".")
    if not ledger.last_assistant_text and not ledger.recent_actions:
        out.append("   - (nothing recorded)")
    out.append("")

    out.append("9. Optional Next Step:")
    doing = _in_progress(ledger)
    if doing is not None:
        out.append(f"   Continue the task in progress: {doing}")
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
    room = (limit if limit is not None else 1 << 62) - len(note)
    text, _ = fit(lambda detail: _render(ledger, detail), room)
    return text + note
