"""What the survival ledger holds, and the short form a summary carries to the next round.

``SurvivalLedger`` lists the person's messages, the harness messages, the shell commands with
their outcomes, the files touched, the failures, the constraints, the todo list and the last
check of a conversation. ``Carry`` is the ledger folded to bounded lists of short items, stored
in the summary entry under ``CARRY_FIELD`` so that repeated compactions do not make the summary
grow (docs/compaction.md#survival-ledger). Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import msgspec

from compactd.core.ledger.commands import program_of
from compactd.transcript.model import (
    LEDGER_FIELD,
)

HarnessKind = Literal[
    "task notification", "slash command", "local command output", "interruption", "shell"
]


@dataclass(slots=True)
class Message:
    """A user turn: the person's words, or a harness message reduced to one line."""

    text: str  # as written; for a harness message its one line; when carried, its head
    uuid: str | None = None
    harness: HarnessKind | None = None
    carried: bool = False  # from an earlier compaction (``text`` is then only the head)
    chars: int = 0  # length of the whole original text

    @property
    def human(self) -> bool:
        return self.harness is None


@dataclass(slots=True)
class CommandRun:
    """One distinct shell command: its runs counted, its latest outcome kept."""

    command: str
    ok: bool | None = None  # None while the result is missing
    error: str = ""  # the error line of the latest failed run
    exit_code: int | None = None
    runs: int = 0
    failures: int = 0
    order: int = 0  # position of the latest run, for "most recent first"
    carried: bool = False

    @property
    def program(self) -> str:
        return program_of(self.command)


@dataclass(slots=True)
class FileTouch:
    """A path some tool call named."""

    path: str  # as the tool named it
    shown: str  # relative to the working directory when below it
    reads: int = 0
    edits: int = 0
    writes: int = 0
    last_edit: str = ""  # the first line of the latest edit's new text
    written_lines: int = 0  # lines of the latest Write
    order: int = 0
    carried: bool = False

    @property
    def changed(self) -> bool:
        return self.edits > 0 or self.writes > 0


@dataclass(slots=True)
class Failure:
    """Something that failed, how often, and what later resolved it (None when nothing did)."""

    what: str
    message: str
    count: int = 1
    resolution: str | None = None


class CarriedMessage(msgspec.Struct, array_like=True):
    uuid: str
    head: str
    chars: int


class CarriedCommand(msgspec.Struct, array_like=True):
    command: str
    ok: bool | None


class CarriedFile(msgspec.Struct, array_like=True):
    path: str
    changed: bool


class Carry(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The ledger of all earlier compactions, folded: stored with each summary entry."""

    rounds: int = 0
    first: CarriedMessage | None = None
    messages: list[CarriedMessage] = msgspec.field(default_factory=list)
    commands: list[CarriedCommand] = msgspec.field(default_factory=list)
    files: list[CarriedFile] = msgspec.field(default_factory=list)
    dropped_messages: int = 0
    dropped_commands: int = 0
    dropped_files: int = 0
    # The start of an earlier summary compactd did not write (no carry of its own).
    foreign: CarriedMessage | None = None


# Claude Code's built-in slash commands that manage the session rather than ask for work; with
# arguments they still are no request (``/model opus``, ``/compact keep the tests``).
_HOUSEKEEPING: Final = frozenset(
    "add-dir agents bug clear compact config context cost doctor exit export help hooks ide "
    "init login logout mcp memory model output-style permissions plugin release-notes resume "
    "rewind status statusline terminal-setup theme usage vim".split()
)


def _is_task_command(message: Message) -> bool:
    if message.harness != "slash command":
        return False
    name, _, args = message.text.partition(" ")
    return bool(args.strip()) and name.lstrip("/") not in _HOUSEKEEPING


# The summary entry's field that holds its ``Carry`` (compactd's own; other readers ignore it).
CARRY_FIELD: Final = LEDGER_FIELD
# Bounds of a carry, so that it does not grow with the number of compactions: the most recent
# items are kept, older ones are counted (their originals stay in the transcript, where
# recall/search finds them). The user's messages are bounded loosely: the summary shows what
# its room allows of them (``render.carried_part`` shortens them first), so the carry keeps
# many, the latest ``CARRY_RECENT_MESSAGES`` with a head of ``CARRY_HEAD_CHARS`` and the
# older ones with a head of ``CARRY_OLDER_CHARS`` (at most some 50,000 characters in all).
# The shell commands and the paths likewise: a session runs hundreds over its compactions, and
# bounds of 100 commands and 150 paths once left the earliest ones unnamed after the third
# compaction of a session in a window with room for all of them
# (docs/compaction.md#survival-ledger); the latest ``CARRY_RECENT_COMMANDS`` commands keep
# ``CARRY_COMMAND_CHARS``, older ones ``CARRY_OLDER_COMMAND_CHARS`` (past the characters a command
# is known by, ``commands.COMMAND_KEY_CHARS``). compactd's own choice.
CARRY_MAX_MESSAGES: Final = 400
CARRY_RECENT_MESSAGES: Final = 60
CARRY_OLDER_CHARS: Final = 100
CARRY_MAX_COMMANDS: Final = 400
CARRY_RECENT_COMMANDS: Final = 100
CARRY_MAX_FILES: Final = 400
CARRY_HEAD_CHARS: Final = 240
CARRY_FIRST_CHARS: Final = 2_000
CARRY_COMMAND_CHARS: Final = 200
CARRY_OLDER_COMMAND_CHARS: Final = 100


@dataclass(slots=True)
class SurvivalLedger:
    """What must survive a compaction of some records (see the module docstring)."""

    messages: list[Message] = field(default_factory=list)  # chronological, carried first
    commands: list[CommandRun] = field(default_factory=list)  # most recent first
    files: list[FileTouch] = field(default_factory=list)  # most recent first
    failures: list[Failure] = field(default_factory=list)  # chronological
    constraints: list[str] = field(default_factory=list)
    todos: list[dict[str, Any]] | None = None
    last_assistant_text: str | None = None
    last_check: CommandRun | None = None  # the last successful build / test / lint command
    recent_actions: list[str] = field(default_factory=list)  # the latest tool calls, in words
    tool_counts: Counter[str] = field(default_factory=Counter)
    carry: Carry = field(default_factory=Carry)  # what earlier compactions folded
    foreign: list[Message] = field(default_factory=list)  # earlier summaries without a carry

    @property
    def human(self) -> list[Message]:
        """The person's own messages, this round's and the carried ones."""
        return [m for m in self.messages if m.human]

    @property
    def current(self) -> list[Message]:
        """The person's messages in the records being compacted."""
        return [m for m in self.messages if m.human and not m.carried]

    @property
    def requests(self) -> list[Message]:
        """What the person asked for in the records being compacted: their messages and the
        slash commands they gave a task to (``/review the parser``), in order."""
        return [m for m in self.messages if not m.carried and (m.human or _is_task_command(m))]

    @property
    def first_request(self) -> Message | None:
        first = self.carry.first
        if first is not None:
            return Message(first.head, first.uuid, carried=True, chars=first.chars)
        requests = self.requests
        return requests[0] if requests else None

    @property
    def latest_request(self) -> Message | None:
        requests = self.requests
        return requests[-1] if requests else None


def failure_text(run: CommandRun) -> str:
    code = f"exit {run.exit_code}" if run.exit_code is not None else ""
    return ": ".join(x for x in (code, run.error) if x) or "failed"
