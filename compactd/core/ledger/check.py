"""Checking a summary against the ledger and completing it with what it left out.

``check_summary`` looks for each of the person's messages, each command, each file and each
carried item in a summary (by a normalized prefix, quotes allowed); ``complete_summary`` appends
what is missing in a section of its own, fitted to the room the view budget leaves, and names
each restored item and each one left behind a pointer (docs/compaction.md#survival-ledger).
Pure: no I/O.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Final

from compactd.core.ledger.commands import COMMAND_KEY_CHARS
from compactd.core.ledger.model import CommandRun, FileTouch, Message, SurvivalLedger
from compactd.core.ledger.render import (
    Lines,
    Part,
    Rendered,
    carried_part,
    command_part,
    file_part,
    fit_text,
    message_lines,
    message_part,
)
from compactd.core.ledger.text import SPACES, clip

# Heading of the section compactd appends to a summary that left things out.
LEDGER_SECTION_TITLE: Final = "Preserved from the conversation (added by compactd)"

# A user message counts as present when its first this-many characters (normalized) appear in
# the summary: models quote the start of long requests. compactd's own choice.
LEDGER_VERBATIM_PREFIX_CHARS: Final = 200
# A command counts as present when its first ``COMMAND_KEY_CHARS`` characters appear; a carried
# message when the start of its head does.
_CARRIED_PREFIX_CHARS: Final = 40

# How much of a restored item names it in the list of what was restored (a label only).
_RESTORED_LABEL_CHARS: Final = 120

_QUOTE_PREFIX: Final = re.compile(r"^[ \t]*(?:[>|][ \t]?)+", re.MULTILINE)


def _normalize(text: str) -> str:
    """Quote markers dropped, whitespace collapsed, case folded: how text is compared."""
    return SPACES.sub(" ", _QUOTE_PREFIX.sub("", text)).strip().casefold()


def _present(item: str, haystack: str, prefix: int) -> bool:
    needle = _normalize(item)
    if not needle:
        return True
    return needle[:prefix].rstrip() in haystack


def _file_present(touch: FileTouch, haystack: str, unique_names: set[str]) -> bool:
    if touch.path.casefold() in haystack or touch.shown.casefold() in haystack:
        return True
    name = os.path.basename(touch.path.rstrip("/")).casefold()
    if name in unique_names and len(name) >= 4 and name in haystack:
        return True
    return _in_directory_group(touch, haystack)


def _in_directory_group(touch: FileTouch, haystack: str) -> bool:
    """Whether ``touch`` is named in a directory group the way compactd lists paths
    (``src/: lexer.py, parser.py``, ``render._directory_groups``): two files of one name in two
    folders are each found by their folder's group."""
    shown = touch.shown.rstrip("/") or touch.shown
    head, name = os.path.split(shown)
    if not head or not name:
        return False
    group = re.escape(f"{head}/: ".casefold())
    # The names after the folder (no "/" in a name), separated by ", ", up to the name (a
    # whole item).
    pattern = group + r"(?:[^,·/]{0,255}?, )*?" + re.escape(name.casefold()) + r"(?=,| ·| |$)"
    return re.search(pattern, haystack) is not None


@dataclass(slots=True)
class Missing:
    """The ledger items a summary does not mention."""

    messages: list[Message] = field(default_factory=list)
    commands: list[CommandRun] = field(default_factory=list)
    files: list[FileTouch] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.messages or self.commands or self.files or self.constraints)


def check_summary(ledger: SurvivalLedger, summary: str) -> Missing:
    """The person's messages, commands, paths and constraints that ``summary`` omits.

    A constraint inside a message that is itself reported missing is not listed again.
    """
    haystack = _normalize(summary)
    messages = [
        m
        for m in ledger.human
        if not _present(
            m.text,
            haystack,
            _CARRIED_PREFIX_CHARS if m.carried else LEDGER_VERBATIM_PREFIX_CHARS,
        )
    ]
    in_missing = _normalize("\n".join(m.text for m in messages))
    constraints = [
        x
        for x in ledger.constraints
        if not _present(x, haystack, LEDGER_VERBATIM_PREFIX_CHARS)
        and _normalize(x) not in in_missing
    ]
    commands = [r for r in ledger.commands if not _present(r.command, haystack, COMMAND_KEY_CHARS)]
    names = Counter(os.path.basename(f.path.rstrip("/")).casefold() for f in ledger.files)
    unique = {name for name, n in names.items() if n == 1}
    files = [f for f in ledger.files if not _file_present(f, haystack, unique)]
    return Missing(messages, commands, files, constraints)


def _restore_parts(missing: Missing) -> dict[str, Part]:
    current = [m for m in missing.messages if not m.carried]
    carried = [m for m in missing.messages if m.carried]

    def one(i: int, m: Message, chars: int) -> Lines:
        return message_lines("-", m, chars)

    def older(n: int) -> str:
        return f"   - {n} earlier messages (recall/search finds each by its text)"

    return {
        "messages": message_part(current, one, older),
        "carried": carried_part(carried),
        "commands": command_part(missing.commands),
        "files": file_part(missing.files),
    }


def _restore_section(missing: Missing, chosen: Mapping[str, Rendered]) -> str:
    lines = [
        LEDGER_SECTION_TITLE + ":",
        "The summary above left these out. The user's messages are quoted exactly as written; "
        "recall:<id> names a transcript entry that recall/search returns whole.",
    ]
    blocks = (
        ("messages", "User messages:"),
        ("carried", "User messages from earlier compactions (shortened):"),
        ("commands", "Shell commands run, most recent first:"),
        ("files", "Files read, searched or changed:"),
    )
    for key, heading in blocks[:2]:
        if chosen[key].lines:
            lines += ["", heading, *chosen[key].lines]
    if missing.constraints:
        lines += ["", "Constraints the user stated:"]
        lines.extend(f"   - {x}" for x in missing.constraints)
    for key, heading in blocks[2:]:
        if chosen[key].lines:
            lines += ["", heading, *chosen[key].lines]
    return "\n".join(line.rstrip() for line in lines).strip()


def _labels(missing: Missing, chosen: Mapping[str, Rendered]) -> list[str]:
    """What the section restores, and what it leaves behind a recall pointer."""
    out: list[str] = []
    for key in ("messages", "carried"):
        group = [m for m in missing.messages if m.carried == (key == "carried")]
        got = chosen[key]
        for i, m in enumerate(group):
            label = clip(m.text, _RESTORED_LABEL_CHARS)
            kind = "earlier user message" if m.carried else "user message"
            if i < len(group) - got.shown:
                out.append(f"recall pointer: {kind}: {label}")
            elif len(m.text) > got.chars:
                out.append(f"restored (shortened, recall pointer): {kind}: {label}")
            else:
                out.append(f"restored: {kind}: {label}")
    out.extend(
        f"restored: constraint: {clip(x, _RESTORED_LABEL_CHARS)}" for x in missing.constraints
    )
    shown = chosen["commands"].shown
    for i, r in enumerate(missing.commands):
        how = "restored" if i < shown else "recall pointer"
        out.append(f"{how}: command: {clip(r.command, _RESTORED_LABEL_CHARS)}")
    shown = chosen["files"].shown
    out.extend(
        f"{'restored' if i < shown else 'recall pointer'}: file: {f.path}"
        for i, f in enumerate(missing.files)
    )
    return out


def complete_summary(
    summary: str, ledger: SurvivalLedger, limit: int | None = None
) -> tuple[str, list[str]]:
    """``summary`` with what it omitted from ``ledger`` appended, and the list of it.

    The appended section is as detailed as ``limit`` characters allow (no limit: the most
    detailed). Each entry of the list says whether the item was restored or left behind a
    recall pointer. A complete summary comes back unchanged with an empty list.
    """
    missing = check_summary(ledger, summary)
    if not missing:
        return summary, []
    section, chosen = fit_text(_restore_parts(missing), partial(_restore_section, missing), limit)
    return summary.rstrip() + "\n\n" + section, _labels(missing, chosen)
