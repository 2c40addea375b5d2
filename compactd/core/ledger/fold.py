"""Folding a ledger into the carry a summary entry stores for the next compaction.

``carry_of`` keeps the most recent messages, commands and files of the previous carry and this
round's ledger within the ``CARRY_MAX_*`` bounds, each as a short head with its pointer (the
older messages and commands with a shorter one), and counts the rest (their originals stay in the transcript, where ``recall/search`` finds them).
Two carries met in one compaction are merged oldest first. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from compactd.core.ledger.model import (
    CARRY_COMMAND_CHARS,
    CARRY_FIRST_CHARS,
    CARRY_HEAD_CHARS,
    CARRY_MAX_COMMANDS,
    CARRY_MAX_FILES,
    CARRY_MAX_MESSAGES,
    CARRY_OLDER_CHARS,
    CARRY_OLDER_COMMAND_CHARS,
    CARRY_RECENT_COMMANDS,
    CARRY_RECENT_MESSAGES,
    CarriedCommand,
    CarriedFile,
    CarriedMessage,
    Carry,
    Message,
    SurvivalLedger,
)
from compactd.core.ledger.text import clip_head, flatten

T = TypeVar("T")


def carried_messages(carry: Carry) -> list[Message]:
    return [Message(m.head, m.uuid, carried=True, chars=m.chars) for m in carry.messages]


def _keep_last(items: list[Any], limit: int) -> tuple[list[Any], int]:
    if len(items) <= limit:
        return items, 0
    return items[-limit:], len(items) - limit


def _keep_shortened(
    items: list[T], limit: int, recent: int, shorten: Callable[[T], T]
) -> tuple[list[T], int]:
    """The latest ``limit`` of ``items``, all but the latest ``recent`` of them shortened, and
    how many were dropped."""
    kept, dropped = _keep_last(items, limit)
    older = len(kept) - recent
    if older > 0:
        kept[:older] = [shorten(x) for x in kept[:older]]
    return kept, dropped


def _keep_messages(messages: list[CarriedMessage]) -> tuple[list[CarriedMessage], int]:
    """The messages a carry keeps, and how many it drops: the latest ``CARRY_MAX_MESSAGES``,
    all but the latest ``CARRY_RECENT_MESSAGES`` of them with a shorter head (``chars`` still
    says how long each was, so the summary names its pointer)."""
    return _keep_shortened(
        messages,
        CARRY_MAX_MESSAGES,
        CARRY_RECENT_MESSAGES,
        lambda m: msgspec.structs.replace(m, head=clip_head(m.head, CARRY_OLDER_CHARS)),
    )


def _keep_commands(commands: list[CarriedCommand]) -> tuple[list[CarriedCommand], int]:
    """The commands a carry keeps, and how many it drops: the latest ``CARRY_MAX_COMMANDS``,
    all but the latest ``CARRY_RECENT_COMMANDS`` of them shortened further."""
    return _keep_shortened(
        commands,
        CARRY_MAX_COMMANDS,
        CARRY_RECENT_COMMANDS,
        lambda c: msgspec.structs.replace(
            c, command=clip_head(c.command, CARRY_OLDER_COMMAND_CHARS)
        ),
    )


def merge_carries(older: Carry, newer: Carry) -> Carry:
    """Two carries met in one compaction (two summaries among the records), oldest first."""
    if not (older.rounds or older.messages or older.commands or older.files):
        return newer
    messages, dm = _keep_messages([*older.messages, *newer.messages])
    commands, dc = _keep_commands([*older.commands, *newer.commands])
    files, df = _keep_last([*older.files, *newer.files], CARRY_MAX_FILES)
    return Carry(
        rounds=older.rounds + newer.rounds,
        first=older.first or newer.first,
        messages=messages,
        commands=commands,
        files=files,
        dropped_messages=older.dropped_messages + newer.dropped_messages + dm,
        dropped_commands=older.dropped_commands + newer.dropped_commands + dc,
        dropped_files=older.dropped_files + newer.dropped_files + df,
        foreign=older.foreign or newer.foreign,
    )


def carry_of(ledger: SurvivalLedger) -> dict[str, Any]:
    """The carry to store with the summary built from ``ledger`` (JSON-ready)."""
    old = ledger.carry

    def folded(m: Message) -> CarriedMessage:
        return CarriedMessage(
            m.uuid or "", clip_head(m.text, CARRY_HEAD_CHARS), m.chars or len(m.text)
        )

    current = ledger.current
    messages, dm = _keep_messages([*old.messages, *(folded(m) for m in current)])
    now = {flatten(r.command) for r in ledger.commands if not r.carried}
    commands, dc = _keep_commands(
        [
            *(x for x in old.commands if flatten(x.command) not in now),
            *(
                CarriedCommand(clip_head(r.command, CARRY_COMMAND_CHARS), r.ok)
                for r in reversed(ledger.commands)
                if not r.carried
            ),
        ]
    )
    paths = {f.path for f in ledger.files if not f.carried}
    files, df = _keep_last(
        [
            *(x for x in old.files if x.path not in paths),
            *(CarriedFile(f.path, f.changed) for f in reversed(ledger.files) if not f.carried),
        ],
        CARRY_MAX_FILES,
    )
    first = old.first
    if first is None and current:
        head = current[0]
        first = CarriedMessage(head.uuid or "", clip_head(head.text, CARRY_FIRST_CHARS), head.chars)
    foreign = old.foreign
    if foreign is None and ledger.foreign:
        earliest = ledger.foreign[0]
        foreign = CarriedMessage(
            earliest.uuid or "", clip_head(earliest.text, CARRY_FIRST_CHARS), earliest.chars
        )
    carry = Carry(
        rounds=old.rounds + 1,
        first=first,
        messages=messages,
        commands=commands,
        files=files,
        dropped_messages=old.dropped_messages + dm,
        dropped_commands=old.dropped_commands + dc,
        dropped_files=old.dropped_files + df,
        foreign=foreign,
    )
    out = msgspec.to_builtins(carry)
    assert isinstance(out, dict)
    return out
