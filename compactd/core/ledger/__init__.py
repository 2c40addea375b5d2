"""The survival ledger: what a compaction must carry over, gathered from the transcript.

Before a summary replaces part of a conversation, compactd lists, deterministically, what the
agent must not lose (docs/compaction.md#survival-ledger):

- every message the person typed, verbatim. Harness messages that arrive in user turns (task
  notifications, slash-command bookkeeping, interruption markers, local command output) are
  recognized and kept as one short line each, never as the user's words;
- every distinct shell command with its outcome (exit status or the error line), the runs of
  one command counted once;
- every path a tool call named (Read, Edit, Write, NotebookEdit, Grep, Glob, LS, ...), with
  what changed in it;
- the failures and whether a later step resolved them, the constraints the user stated, the
  latest todo list, the last successful build or test command.

A summary, whoever writes it, is bound by one budget for the whole view the model sees next
(``ViewBudget``: summary, what the ledger adds and the rehydration attachments together). So
each part of the ledger can be rendered at several levels of detail (``Part``) and
``fit_parts`` lowers the largest ones until the whole fits: long messages keep their head and
tail around a recall pointer (``core.recall.pointer``: ``recall/search`` returns the whole
entry), older commands are grouped by program, paths by directory, and at last only the most
recent items are named and the others counted. ``check_summary`` looks for every item in a
model's summary and ``complete_summary`` appends what it left out; the result names each
restored item and each one left behind a pointer.

Repeated compactions must not make the summary grow. Each summary entry carries the ledger
folded to a short form (``Carry``, stored under ``CARRY_FIELD``); the next compaction reads it
back, so older rounds come back as short items with their pointers instead of being re-quoted.

The package holds one idea per module: ``budget`` (the view budget), ``text`` (shortening
text), ``commands`` (reading a shell command), ``model`` (the ledger and its carry), ``gather``
(``build_ledger``), ``fold`` (``carry_of``), ``render`` (parts within a budget) and ``check``
(``check_summary``, ``complete_summary``); the names callers use are re-exported here.

Pure: no I/O.
"""

from __future__ import annotations

from compactd.core.ledger.budget import (
    ATTACHMENTS_MIN_SHARE,
    SUMMARY_SHARE,
    VIEW_BUDGET_SHARE,
    ViewBudget,
    view_budget,
)
from compactd.core.ledger.check import (
    LEDGER_SECTION_TITLE,
    Missing,
    check_summary,
    complete_summary,
)
from compactd.core.ledger.fold import carry_of
from compactd.core.ledger.gather import build_ledger
from compactd.core.ledger.model import (
    CARRY_FIELD,
    CARRY_MAX_COMMANDS,
    CARRY_MAX_FILES,
    CARRY_MAX_MESSAGES,
    CARRY_OLDER_CHARS,
    CARRY_OLDER_COMMAND_CHARS,
    CARRY_RECENT_COMMANDS,
    CARRY_RECENT_MESSAGES,
    Carry,
    CommandRun,
    Failure,
    FileTouch,
    Message,
    SurvivalLedger,
)
from compactd.core.ledger.render import (
    MESSAGE_CHARS,
    Lines,
    Part,
    Rendered,
    carried_part,
    command_lines,
    command_part,
    file_lines,
    file_part,
    fit_parts,
    fit_text,
    harness_part,
    message_lines,
    message_part,
)
from compactd.core.ledger.text import clip

__all__ = [
    "ATTACHMENTS_MIN_SHARE",
    "CARRY_FIELD",
    "CARRY_MAX_COMMANDS",
    "CARRY_MAX_FILES",
    "CARRY_MAX_MESSAGES",
    "CARRY_OLDER_CHARS",
    "CARRY_OLDER_COMMAND_CHARS",
    "CARRY_RECENT_COMMANDS",
    "CARRY_RECENT_MESSAGES",
    "Carry",
    "CommandRun",
    "Failure",
    "FileTouch",
    "LEDGER_SECTION_TITLE",
    "Lines",
    "MESSAGE_CHARS",
    "Message",
    "Missing",
    "Part",
    "Rendered",
    "SUMMARY_SHARE",
    "SurvivalLedger",
    "VIEW_BUDGET_SHARE",
    "ViewBudget",
    "build_ledger",
    "carried_part",
    "carry_of",
    "check_summary",
    "clip",
    "command_lines",
    "command_part",
    "complete_summary",
    "file_lines",
    "file_part",
    "fit_parts",
    "fit_text",
    "harness_part",
    "message_lines",
    "message_part",
    "view_budget",
]
