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

Pure: no I/O.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, Literal

import msgspec

from compactd.core import constants as c
from compactd.core.normalize import SYSTEM_REMINDER_CLOSE, SYSTEM_REMINDER_OPEN
from compactd.core.prompts import strip_continuation
from compactd.core.recall import pointer
from compactd.core.tools import blocks_text, named_path, result_text
from compactd.core.view import main_thread
from compactd.transcript.model import (
    LEDGER_FIELD,
    Record,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

__all__ = [
    "ATTACHMENTS_MIN_SHARE",
    "CARRY_FIELD",
    "LEDGER_SECTION_TITLE",
    "MESSAGE_CHARS",
    "SUMMARY_SHARE",
    "VIEW_BUDGET_SHARE",
    "Carry",
    "CommandRun",
    "Failure",
    "FileTouch",
    "Message",
    "Missing",
    "Part",
    "Rendered",
    "SurvivalLedger",
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

# -- budget ---------------------------------------------------------------------------------------

# The whole view a compaction leaves (summary, what the ledger restores, attachments) stays
# within this share of the effective window, in tokens/status terms (compactd's own choice: a
# tenth of the window leaves the agent most of it to work in before the next threshold).
VIEW_BUDGET_SHARE: Final = 0.10
# A floor, so that a tiny window still leaves room for the request and the pointers.
VIEW_BUDGET_MIN_TOKENS: Final = 1_000
# The part of the view budget a model is asked to keep its summary within; what the ledger adds
# and the attachments share the rest. compactd's own choice.
SUMMARY_SHARE: Final = 0.6
# The part kept for the attachments whatever the summary and the ledger need: the user's words
# come before files the agent can read again, but the todo list and the plan must still fit.
ATTACHMENTS_MIN_SHARE: Final = 0.1


@dataclass(frozen=True, slots=True)
class ViewBudget:
    """The most the view after a compaction may count, in ``tokens/status`` tokens."""

    tokens: int

    @property
    def raw_tokens(self) -> int:
        """The budget before the estimator's padding (``tokens.pad`` multiplies by 4/3)."""
        return self.tokens * c.ESTIMATE_PADDING_DENOMINATOR // c.ESTIMATE_PADDING_NUMERATOR

    @property
    def chars(self) -> int:
        return self.raw_tokens * c.CHARS_PER_TOKEN

    @property
    def summary_chars(self) -> int:
        """The most the summary and what the ledger adds may take, in characters."""
        return int(self.chars * (1 - ATTACHMENTS_MIN_SHARE))

    @property
    def model_chars(self) -> int:
        """What a model is asked to keep its own summary within, in characters."""
        return int(self.chars * SUMMARY_SHARE)


def view_budget(effective_window: int) -> ViewBudget:
    """The view budget of a session whose effective window is ``effective_window``."""
    return ViewBudget(max(VIEW_BUDGET_MIN_TOKENS, int(effective_window * VIEW_BUDGET_SHARE)))


# -- text helpers ---------------------------------------------------------------------------------

_SPACES: Final = re.compile(r"\s+")


def _flat(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


def clip(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters, cut between words with an ellipsis."""
    flat = _flat(text)
    if len(flat) <= limit:
        return flat
    cut = flat[: max(1, limit - 1)]
    space = cut.rfind(" ")
    if space >= len(cut) * 3 // 4:
        cut = cut[:space]
    return cut.rstrip(" ,;:.") + "…"


def _head(text: str, limit: int) -> str:
    """The start of ``text`` (lines kept), cut at a line end or between words."""
    head = text[:limit]
    for sep in ("\n", " "):
        at = head.rfind(sep)
        if at >= limit // 2:
            return head[:at].rstrip()
    return head.rstrip()


def _tail(text: str, limit: int) -> str:
    """The end of ``text`` (lines kept), starting at a line start or between words."""
    tail = text[-limit:]
    for sep in ("\n", " "):
        at = tail.find(sep)
        if 0 <= at <= limit // 2:
            return tail[at + 1 :].lstrip()
    return tail.lstrip()


# What the note in the middle of a cut message costs (the pointer included): a message is cut
# only when cutting saves more than this.
_CUT_NOTE_CHARS: Final = 120


def _head_tail(text: str, limit: int, uid: str | None) -> tuple[str, bool]:
    """``text`` as written when it fits ``limit`` (or cutting it would not make it shorter),
    else its head and tail within ``limit`` around a recall pointer."""
    text = text.strip("\n")
    if len(text) <= limit + _CUT_NOTE_CHARS:
        return text, False
    head = _head(text, max(60, limit * 2 // 3))
    tail = _tail(text, max(0, limit - len(head)))
    left = len(text) - len(head) - len(tail)
    where = f"{pointer(uid)} returns it whole" if uid else "recall/search finds it whole"
    note = f"[… {left:,} characters of this message left out here; {where} …]"
    return "\n".join(part for part in (head, note, tail) if part), True


# -- what the ledger holds ------------------------------------------------------------------------

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
        return _program_of(self.command)


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


# The summary entry's field that holds its ``Carry`` (compactd's own; other readers ignore it).
CARRY_FIELD: Final = LEDGER_FIELD
# Bounds of a carry, so that neither it nor the summary grows with the number of compactions:
# the most recent items are kept, older ones are counted (their originals stay in the
# transcript, where recall/search finds them). compactd's own choice.
CARRY_MAX_MESSAGES: Final = 60
CARRY_MAX_COMMANDS: Final = 100
CARRY_MAX_FILES: Final = 150
CARRY_HEAD_CHARS: Final = 240
CARRY_FIRST_CHARS: Final = 2_000
CARRY_COMMAND_CHARS: Final = 200


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


# -- gathering ------------------------------------------------------------------------------------

_SHELL_TOOLS: Final = frozenset({"Bash", "PowerShell"})
_READ_TOOLS: Final = c.FILE_READ_TOOLS | {"NotebookRead"}
# Input keys that name a path, in any tool (Grep and Glob search under ``path``).
_RECENT_ACTIONS: Final = 5

_REMINDER: Final = re.compile(
    re.escape(SYSTEM_REMINDER_OPEN) + r".*?(?:" + re.escape(SYSTEM_REMINDER_CLOSE) + r"|\Z)",
    re.DOTALL,
)
_CAVEAT_PREFIXES: Final = (
    "<local-command-caveat>",
    "Caveat: The messages below were generated by the user while running local",
)
_INTERRUPTED: Final = "[Request interrupted by user"
_EXIT_CODE: Final = re.compile(r"\bexit(?:ed with)?(?: code| status)?[: ]+(-?\d+)", re.IGNORECASE)
# Lines that say what went wrong: one that starts with a named error (``E   KeyError: ...``,
# ``error[E0308]: ...``), then one that names an error, then any line that sounds like one.
_ERROR_LEADS: Final = re.compile(
    r"^(?:E\s+)?(?:\w+(?:Error|Exception)\b|error\b|fatal\b|panic\b)", re.IGNORECASE
)
_ERROR_NAMED: Final = re.compile(
    r"\w(?:Error|Exception)\b|\berror(?:\[\w+\])?:|\bfatal:|\bpanic|permission denied|"
    r"no such file|not found|command not found",
    re.IGNORECASE,
)
_ERRORISH: Final = re.compile(
    r"error|exception|fail|fatal|traceback|denied|cannot|can't|invalid|refused|timed? ?out|"
    r"abort|segmentation",
    re.IGNORECASE,
)
# Commands that build, test or check a project: the last successful one is the state of the
# work. compactd's own list of common tools.
_CHECK: Final = re.compile(
    r"\b(pytest|tox|nox|make|ninja|cargo (?:build|test|check|clippy)|go (?:build|test|vet)|"
    r"(?:npm|yarn|pnpm|bun)(?: run)? (?:test|build|lint|check|typecheck)|jest|vitest|mocha|"
    r"tsc|mvn|gradle|ruff|mypy|pyright|eslint|unittest|ctest|cmake --build|"
    r"bazel (?:build|test)|dotnet (?:build|test)|mix test|rspec|phpunit|swift (?:build|test))\b"
)
_ENV_ASSIGN: Final = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)+")
_SEGMENTS: Final = re.compile(r"\s*(?:&&|\|\||;)\s*")

# Marker words of an explicit constraint in a user sentence. compactd's own list.
_CONSTRAINT: Final = re.compile(
    r"\b(must|mustn't|must not|never|always|don't|do not|shouldn't|should not|"
    r"make sure|ensure|only ever|under no circumstances|required?)\b",
    re.IGNORECASE,
)
_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+|\n+")


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


def _program_of(command: str) -> str:
    """The program a shell command runs first (``cd`` and variable assignments skipped)."""
    for part in _SEGMENTS.split(_flat(command)):
        part = _ENV_ASSIGN.sub("", part)
        word = part.split(" ", 1)[0] if part else ""
        if word and word != "cd":
            return os.path.basename(word) or word
    return "sh"


_SUBCOMMAND: Final = re.compile(r"[a-z][a-z0-9:_-]*")


def _family(command: str) -> tuple[str, ...]:
    """A command's program and its subcommand words, if any (``git push``, ``npm run build``)."""
    for part in _SEGMENTS.split(_flat(command)):
        words = _ENV_ASSIGN.sub("", part).split(" ")
        if words and words[0] and words[0] != "cd":
            family = [os.path.basename(words[0]) or words[0]]
            for word in words[1:3]:
                if not _SUBCOMMAND.fullmatch(word):
                    break
                family.append(word)
            return tuple(family)
    return ("sh",)


def _tag(text: str, name: str) -> str | None:
    match = re.search(rf"<{name}>(.*?)</{name}>", text, re.DOTALL)
    return match.group(1).strip() if match else None


def _classify(text: str) -> tuple[HarnessKind | None, str] | None:
    """A user text as (None, the words) or (harness kind, one line); None to skip it."""
    body = _REMINDER.sub("", text).strip()
    if not body or body.startswith(_CAVEAT_PREFIXES):
        return None
    if body.startswith("<task-notification>"):
        what = clip(_tag(body, "summary") or _tag(body, "task-id") or "a background task", 160)
        status = _tag(body, "status")
        if status and status.casefold() not in what.casefold():
            what += f" ({status})"
        return "task notification", what
    if body.startswith(("<command-name>", "<command-message>", "<command-args>")):
        name = _tag(body, "command-name") or _tag(body, "command-message") or "?"
        args = _tag(body, "command-args") or ""
        return "slash command", clip(f"{name} {args}", 200)
    if body.startswith(("<local-command-stdout>", "<local-command-stderr>")):
        out = _tag(body, "local-command-stdout") or _tag(body, "local-command-stderr") or ""
        return "local command output", clip(out, 120) if out else "(empty)"
    if body.startswith(_INTERRUPTED):
        return "interruption", clip(body.strip("[]"), 80)
    if body.startswith("<bash-input>"):
        return "shell", clip(_tag(body, "bash-input") or "", 200)
    if body.startswith(("<bash-stdout>", "<bash-stderr>")):
        return None  # the outcome of the shell command before it (see _Walk._shell_output)
    return None, body


def _error_line(text: str) -> str:
    """The line of a failure's output that says what went wrong."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not _EXIT_CODE.fullmatch(ln)] or lines
    for pattern in (_ERROR_LEADS, _ERROR_NAMED, _ERRORISH):
        for line in reversed(lines):
            if pattern.search(line):
                return line
    return lines[0] if lines else ""


def _constraints_of(message: str) -> list[str]:
    out: list[str] = []
    for sentence in _SENTENCE_END.split(message):
        sentence = _flat(sentence)
        if sentence and _CONSTRAINT.search(sentence):
            out.append(sentence)
    return out


def _shown(path: str, cwd: str | None) -> str:
    if cwd and os.path.isabs(path):
        base = cwd.rstrip(os.sep) + os.sep
        if path.startswith(base):
            return path[len(base) :]
    return path


@dataclass(slots=True)
class _Event:
    """A tool outcome, for pairing failures with what resolved them."""

    at: int
    ok: bool
    what: str  # how the failure is named
    key: tuple[str, ...]  # the same key succeeding later resolves it
    family: tuple[str, ...]  # a success of the same family resolves it less exactly
    message: str = ""
    success_text: str = ""  # how a success of this event is named in a resolution


class _Walk:
    def __init__(self, cleared: frozenset[str], cwd: str | None) -> None:
        self.cleared = cleared
        self.cwd = cwd
        self.ledger = SurvivalLedger()
        self.uses: dict[str, ToolUseBlock] = {}
        self.commands: dict[str, CommandRun] = {}
        self.files: dict[str, FileTouch] = {}
        self.events: list[_Event] = []
        self.actions: list[tuple[str, int]] = []  # the latest actions, each with its repeats
        self.at = 0
        self.shell: CommandRun | None = None  # a "!" command typed by the user, unanswered

    # entries

    def add(self, record: Record) -> None:
        self.at += 1
        entry = record.entry
        if entry.type == "user":
            if entry.is_compact_summary:
                self._previous_summary(record)
                return
            for block in entry.blocks:
                if isinstance(block, ToolResultBlock):
                    self._result(block)
            if entry.is_meta:
                return
            texts = [b for b in entry.blocks if not isinstance(b, ToolResultBlock)]
            self._user_text(blocks_text(texts), entry.uuid)
        elif entry.type == "assistant":
            if entry.is_api_error_message:
                return
            text = blocks_text(b for b in entry.blocks if isinstance(b, TextBlock))
            if text.strip():
                self.ledger.last_assistant_text = text
            for block in entry.blocks:
                if isinstance(block, ToolUseBlock):
                    self._use(block)
        elif entry.type == "attachment" and entry.attachment:
            # A prompt the person queued while the agent was busy reaches the model as theirs.
            payload = entry.attachment
            prompt = payload.get("prompt")
            if payload.get("type") == "queued_command" and isinstance(prompt, str):
                self._user_text(prompt, entry.uuid)

    def _user_text(self, text: str, uid: str | None) -> None:
        if not text.strip():
            return
        body = _REMINDER.sub("", text).strip()
        if body.startswith(("<bash-stdout>", "<bash-stderr>")):
            self._shell_output(body)
            return
        kind = _classify(text)
        if kind is None:
            return
        harness, words = kind
        if harness is None:
            self.ledger.messages.append(Message(words, uid, chars=len(words)))
            return
        self.ledger.messages.append(Message(words, uid, harness=harness, chars=len(text)))
        if harness == "shell" and words:
            self.shell = self._command(words)

    def _shell_output(self, body: str) -> None:
        run, self.shell = self.shell, None
        if run is None:
            return
        err = _tag(body, "bash-stderr") or ""
        self._outcome(run, not err.strip(), err)

    def _previous_summary(self, record: Record) -> None:
        raw = record.to_builtins().get(CARRY_FIELD)
        if raw is not None:
            try:
                carry = msgspec.convert(raw, Carry)
            except msgspec.ValidationError:
                carry = None
            if carry is not None:
                self.ledger.carry = _merge_carries(self.ledger.carry, carry)
                return
        text = strip_continuation(blocks_text(record.entry.blocks))
        if text.strip():
            self.ledger.foreign.append(
                Message(text, record.entry.uuid, carried=True, chars=len(text))
            )

    # tools

    def _touch(self, path: str) -> FileTouch:
        touch = self.files.get(path)
        if touch is None:
            touch = self.files[path] = FileTouch(path, _shown(path, self.cwd))
        touch.order = self.at
        return touch

    def _command(self, command: str) -> CommandRun:
        key = _flat(command)
        run = self.commands.get(key)
        if run is None:
            run = self.commands[key] = CommandRun(command.strip())
        run.runs += 1
        run.ok = None
        run.order = self.at
        return run

    def _use(self, block: ToolUseBlock) -> None:
        self.uses[block.id] = block
        self.ledger.tool_counts[block.name] += 1
        args = block.input if isinstance(block.input, dict) else {}
        path = named_path(args)
        if path is not None:
            touch = self._touch(path)
            if block.name in c.FILE_WRITE_TOOLS:
                if block.name == "Write":
                    content = args.get("content")
                    touch.writes += 1
                    touch.written_lines = (
                        len(content.splitlines()) if isinstance(content, str) else 0
                    )
                else:
                    edits = args.get("edits")
                    touch.edits += len(edits) if isinstance(edits, list) and edits else 1
                    new = args.get("new_string") or args.get("new_source")
                    first = next((ln for ln in str(new or "").splitlines() if ln.strip()), "")
                    touch.last_edit = clip(first, 100) if first else ""
                self._act(f"changed {touch.shown}")
            elif block.name in _READ_TOOLS:
                touch.reads += 1
                self._act(f"read {touch.shown}")
            else:
                self._act(f"{block.name} in {touch.shown}")
        elif block.name in _SHELL_TOOLS:
            command = args.get("command")
            if isinstance(command, str) and command.strip():
                self._command(command)
                self._act(f"ran `{clip(command, 80)}`")
        elif block.name == c.TODO_TOOL:
            todos = args.get("todos")
            if isinstance(todos, list):
                self.ledger.todos = [t for t in todos if isinstance(t, dict)] or None
                self._act("updated the todo list")
        elif block.name in c.AGENT_TOOLS and isinstance(args.get("description"), str):
            self._act(f"started an agent: {clip(args['description'], 80)}")
        else:
            self._act(f"called {block.name}")

    def _act(self, action: str) -> None:
        """The latest actions, in words; a repeated one is counted, not listed again."""
        if self.actions and self.actions[-1][0] == action:
            self.actions[-1] = (action, self.actions[-1][1] + 1)
            return
        self.actions.append((action, 1))
        del self.actions[:-_RECENT_ACTIONS]

    def _result(self, block: ToolResultBlock) -> None:
        use = self.uses.get(block.tool_use_id)
        if use is None:
            return
        text = "" if block.tool_use_id in self.cleared else result_text(block)
        ok = block.is_error is not True
        args = use.input if isinstance(use.input, dict) else {}
        if use.name in _SHELL_TOOLS:
            command = args.get("command")
            run = self.commands.get(_flat(command)) if isinstance(command, str) else None
            if run is not None:
                self._outcome(run, ok, text)
            return
        path = named_path(args)
        shown = _shown(path, self.cwd) if path else None
        what = f"{use.name} of {shown}" if shown else use.name
        if not ok and use.name in c.FILE_WRITE_TOOLS and path in self.files:
            # A change that failed changed nothing.
            touch = self.files[path]
            if use.name == "Write":
                touch.writes = max(0, touch.writes - 1)
            else:
                touch.edits = max(0, touch.edits - 1)
        family = ("file", path) if path and use.name in c.FILE_WRITE_TOOLS else ("tool", use.name)
        self.events.append(
            _Event(
                self.at,
                ok,
                what,
                ("tool", use.name, path or ""),
                family,
                _error_line(text) if not ok else "",
                f"a later {what} succeeded",
            )
        )

    def _outcome(self, run: CommandRun, ok: bool, text: str) -> None:
        run.ok = ok
        if ok:
            if _CHECK.search(run.command):
                self.ledger.last_check = run
        else:
            run.failures += 1
            code = _EXIT_CODE.search(text)
            run.exit_code = int(code.group(1)) if code else None
            run.error = _error_line(text)
        shown = clip(run.command, 80)
        self.events.append(
            _Event(
                self.at,
                ok,
                f"`{shown}`",
                ("command", _flat(run.command)),
                ("program", *_family(run.command)),
                _failure_text(run) if not ok else "",
                f"`{shown}` succeeded later",
            )
        )

    # the end

    def finish(self) -> SurvivalLedger:
        ledger = self.ledger
        carried = _carried_messages(ledger.carry)
        first = ledger.carry.first
        if first is not None and all(m.uuid != first.uuid for m in carried):
            # The session's first request stays checked for as long as the session lasts.
            carried.insert(0, Message(first.head, first.uuid, carried=True, chars=first.chars))
        ledger.messages[:0] = carried
        ledger.commands = sorted(self.commands.values(), key=lambda r: r.order, reverse=True)
        ledger.commands += [
            CommandRun(x.command, ok=x.ok, carried=True)
            for x in reversed(ledger.carry.commands)
            if _flat(x.command) not in self.commands
        ]
        ledger.files = sorted(self.files.values(), key=lambda f: f.order, reverse=True)
        ledger.files += [
            FileTouch(x.path, _shown(x.path, self.cwd), edits=int(x.changed), carried=True)
            for x in reversed(ledger.carry.files)
            if x.path not in self.files
        ]
        ledger.failures = _failures(self.events)
        ledger.recent_actions = [f"{a} ×{n}" if n > 1 else a for a, n in self.actions]
        ledger.constraints = list(
            dict.fromkeys(x for m in ledger.current for x in _constraints_of(m.text))
        )
        return ledger


def _failure_text(run: CommandRun) -> str:
    code = f"exit {run.exit_code}" if run.exit_code is not None else ""
    return ": ".join(x for x in (code, run.error) if x) or "failed"


def _failures(events: list[_Event]) -> list[Failure]:
    """Each distinct failure once, with what later resolved its latest occurrence."""
    last_ok_key: dict[tuple[str, ...], _Event] = {}
    last_ok_family: dict[tuple[str, ...], _Event] = {}
    resolution_of: dict[int, str | None] = {}
    for ev in reversed(events):
        if ev.ok:
            last_ok_key.setdefault(ev.key, ev)
            last_ok_family.setdefault(ev.family, ev)
            continue
        same = last_ok_key.get(ev.key)
        if same is not None and same.at > ev.at:
            resolution_of[id(ev)] = "fixed: it succeeded on a later run"
            continue
        # A later success of another command counts only when both run the same subcommand
        # (``npm test``, ``git push``); a file changed by a later call resolves its failure.
        near = (
            last_ok_family.get(ev.family) if len(ev.family) > 2 or ev.family[0] == "file" else None
        )
        resolution_of[id(ev)] = near.success_text if near is not None and near.at > ev.at else None
    out: dict[tuple[str, str], Failure] = {}
    for ev in events:
        if ev.ok:
            continue
        key = (ev.what, ev.message)
        failure = out.get(key)
        if failure is None:
            out[key] = Failure(ev.what, ev.message, resolution=resolution_of.get(id(ev)))
        else:
            failure.count += 1
            failure.resolution = resolution_of.get(id(ev))
            out[key] = out.pop(key)  # most recent occurrence last
    return list(out.values())


def build_ledger(
    records: Sequence[Record],
    *,
    cleared_tool_ids: frozenset[str] = frozenset(),
    cwd: str | None = None,
) -> SurvivalLedger:
    """The ledger of ``records`` (the ones a compaction is about to summarize).

    Sub-agent sidechains and bookkeeping entries are skipped; the results of ``cleared_tool_ids``
    (cleared by microcompact) are not read. Paths below ``cwd`` are shown relative to it. A
    previous summary among the records contributes its carry (or, when compactd did not write
    it, its text as an earlier summary).
    """
    walk = _Walk(cleared_tool_ids, cwd)
    for record in main_thread(records):
        walk.add(record)
    return walk.finish()


# -- folding for the next compaction --------------------------------------------------------------


def _carried_messages(carry: Carry) -> list[Message]:
    return [Message(m.head, m.uuid, carried=True, chars=m.chars) for m in carry.messages]


def _keep_last(items: list[Any], limit: int) -> tuple[list[Any], int]:
    if len(items) <= limit:
        return items, 0
    return items[-limit:], len(items) - limit


def _merge_carries(older: Carry, newer: Carry) -> Carry:
    """Two carries met in one compaction (two summaries among the records), oldest first."""
    if not (older.rounds or older.messages or older.commands or older.files):
        return newer
    messages, dm = _keep_last([*older.messages, *newer.messages], CARRY_MAX_MESSAGES)
    commands, dc = _keep_last([*older.commands, *newer.commands], CARRY_MAX_COMMANDS)
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
        return CarriedMessage(m.uuid or "", _head(m.text, CARRY_HEAD_CHARS), m.chars or len(m.text))

    current = ledger.current
    messages, dm = _keep_last([*old.messages, *(folded(m) for m in current)], CARRY_MAX_MESSAGES)
    now = {_flat(r.command) for r in ledger.commands if not r.carried}
    commands, dc = _keep_last(
        [
            *(x for x in old.commands if _flat(x.command) not in now),
            *(
                CarriedCommand(_head(r.command, CARRY_COMMAND_CHARS), r.ok)
                for r in reversed(ledger.commands)
                if not r.carried
            ),
        ],
        CARRY_MAX_COMMANDS,
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
        first = CarriedMessage(head.uuid or "", _head(head.text, CARRY_FIRST_CHARS), head.chars)
    foreign = old.foreign
    if foreign is None and ledger.foreign:
        earliest = ledger.foreign[0]
        foreign = CarriedMessage(
            earliest.uuid or "", _head(earliest.text, CARRY_FIRST_CHARS), earliest.chars
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


# -- rendering within a budget --------------------------------------------------------------------

Lines = list[str]


@dataclass(frozen=True, slots=True)
class Rendered:
    """A part at one level of detail: its lines, and how many of its items it names one by one
    (the first ones in the part's order; the others are only counted, behind recall/search)."""

    lines: Lines
    shown: int
    chars: int = 0  # messages: the most characters of each shown as written

    @property
    def size(self) -> int:
        return sum(len(line) + 1 for line in self.lines)


@dataclass(frozen=True, slots=True)
class Part:
    """Something a rendering shows, at levels from the most detailed to the least.

    ``weight``: how readily it gives up detail when the whole does not fit (the user's words
    give it up last).
    """

    levels: Sequence[Callable[[], Rendered]]
    weight: float = 1.0


def fit_parts(parts: Mapping[str, Part], room: int) -> dict[str, Rendered]:
    """Each part at a level such that together they fit in ``room`` characters if they can.

    All start at their most detailed level; while the whole is too large, the part that is the
    largest for its weight moves one level down.
    """
    at = dict.fromkeys(parts, 0)
    cache: dict[tuple[str, int], Rendered] = {}

    def current(key: str) -> Rendered:
        level = (key, at[key])
        got = cache.get(level)
        if got is None:
            got = cache[level] = parts[key].levels[at[key]]()
        return got

    total = sum(current(key).size for key in parts)
    while total > room:
        movable = [key for key in parts if at[key] + 1 < len(parts[key].levels)]
        if not movable:
            break
        key = max(movable, key=lambda k: current(k).size * parts[k].weight)
        total -= current(key).size
        at[key] += 1
        total += current(key).size
    return {key: current(key) for key in parts}


def fit_text(
    parts: Mapping[str, Part],
    render: Callable[[Mapping[str, Rendered]], str],
    limit: int | None,
) -> tuple[str, dict[str, Rendered]]:
    """``render`` of ``parts`` fitted so that the text is at most ``limit`` characters when it
    can be (the text around the parts is measured with the parts empty, then corrected)."""
    if limit is None:
        chosen = {key: part.levels[0]() for key, part in parts.items()}
        return render(chosen), chosen
    frame = len(render({key: Rendered([], 0) for key in parts}))
    room = limit - frame
    chosen = fit_parts(parts, room)
    text = render(chosen)
    if len(text) > limit:
        chosen = fit_parts(parts, room - (len(text) - limit))
        text = render(chosen)
    return text, chosen


# The levels of detail. Messages: as written up to this many characters (a longer one keeps its
# head and tail around its pointer), then only the most recent ones. Commands: the latest few
# one per line with their outcome, older ones grouped by program, then only the most recent
# ones named. compactd's own choices.
MESSAGE_CHARS: Final = (2_000, 1_600, 1_200, 800, 480, 320, 240, 160, 120, 96, 80)
ONE_LINE_CHARS: Final = (120, 90, 72)
CARRIED_CHARS: Final = (240, 160, 120, 100, 80, 64)
_COUNTS: Final = (300, 200, 150, 100, 70, 50, 35, 25, 15, 10, 5, 2)
# (listed one per line, their characters, characters of a grouped one, characters of an error)
_COMMAND_WIDTHS: Final = (
    (60, 240, 120, 200),
    (30, 160, 96, 140),
    (20, 120, 80, 100),
    (12, 100, 72, 80),
    (6, 80, 64, 60),
    (3, 64, 56, 0),
)


def message_lines(label: str, message: Message, chars: int) -> Lines:
    """A message after ``label``: on the same line when it is one line, else as the block of
    lines it was written as; a long one keeps its head and tail around a recall pointer."""
    text, _ = _head_tail(message.text, chars, message.uuid)
    lines = text.splitlines()
    if len(lines) == 1:
        return [f"   {label} {lines[0]}"]
    return [f"   {label}", *lines]


MessageLines = Callable[[int, Message, int], Lines]


def message_part(
    messages: Sequence[Message], lines_of: MessageLines, older: Callable[[int], str]
) -> Part:
    """The person's messages (chronological): all of them at decreasing lengths, then each on
    one line cut between words (recall/search finds the whole by any of its words), then only
    the most recent ones, the older ones counted by ``older(n)``. ``lines_of(i, message,
    chars)`` renders the ``i``-th (from 1)."""

    def shown(first: int, chars: int, width: int) -> Lines:
        out: Lines = []
        for i, m in enumerate(messages[first:], first + 1):
            if width:
                m = Message(clip(m.text, width), m.uuid, m.harness, m.carried, m.chars)
            out.extend(lines_of(i, m, chars))
        return out

    def full(chars: int, width: int = 0) -> Rendered:
        return Rendered(shown(0, chars, width), len(messages), width or chars)

    def recent(n: int) -> Rendered:
        skipped = len(messages) - n
        width = ONE_LINE_CHARS[-1]
        return Rendered([older(skipped), *shown(skipped, width, width)], n, width)

    levels: list[Callable[[], Rendered]] = [partial(full, chars) for chars in MESSAGE_CHARS]
    levels += [partial(full, MESSAGE_CHARS[-1], width) for width in ONE_LINE_CHARS]
    levels += [partial(recent, n) for n in _COUNTS if n < len(messages)]
    return Part(levels, weight=0.2)


def carried_line(message: Message, chars: int, pointers: bool) -> str:
    """A message from an earlier compaction, on one line; shortened ones name their pointer."""
    text = clip(message.text, chars)
    shortened = message.chars > len(message.text) or text != _flat(message.text)
    where = f" ({pointer(message.uuid)})" if shortened and pointers else ""
    return f"   - {text}{where}"


def carried_part(messages: Sequence[Message], dropped: int = 0) -> Part:
    """Messages from earlier compactions (chronological), shortened; older ones counted."""

    def note(n: int) -> Lines:
        return [f"   - {n} messages before these (recall/search finds them)"] if n else []

    def level(chars: int, n: int) -> Rendered:
        shown = messages[len(messages) - n :] if n else []
        out = note(dropped + len(messages) - n)
        out += [carried_line(m, chars, chars >= CARRIED_CHARS[1]) for m in shown]
        return Rendered(out, n, chars)

    levels = [partial(level, chars, len(messages)) for chars in CARRIED_CHARS]
    levels += [partial(level, CARRIED_CHARS[-1], n) for n in _COUNTS if n < len(messages)]
    levels.append(partial(level, 0, 0))
    return Part(levels)


def _status(run: CommandRun, chars: int) -> str:
    times = f" ×{run.runs}" if run.runs > 1 else ""
    if run.ok is None:
        return "(no result recorded)" if not run.carried else ""
    if run.ok:
        failed = f", failed {run.failures} of {run.runs} runs" if run.failures else ""
        return f"ok{times}{failed}"
    what = clip(_failure_text(run), chars) if chars else ""
    if not what and run.exit_code is not None:
        what = f"exit {run.exit_code}"
    return f"FAILED{times}: {what}" if what else f"FAILED{times}"


def _commands(
    runs: Sequence[CommandRun], widths: tuple[int, int, int, int], named: int
) -> Rendered:
    listed_n, listed_chars, grouped_chars, outcome_chars = widths
    listed = runs[:listed_n]
    grouped = runs[len(listed) : named]
    counted = runs[max(named, len(listed)) :]
    lines: Lines = []
    for run in listed:
        status = _status(run, outcome_chars)
        shown = f"   - `{clip(run.command, listed_chars)}`"
        lines.append(shown + (f" {status}" if status else ""))
    groups: dict[str, list[CommandRun]] = {}
    for run in grouped:
        groups.setdefault(run.program, []).append(run)
    if groups:
        lines.append(
            f"   {'Older commands' if listed else 'Commands'} by program, most recent first "
            "(✗ = failed):"
        )
        for program, group in groups.items():
            shown = " · ".join(
                f"`{clip(r.command, grouped_chars)}`" + (" ✗" if r.ok is False else "")
                for r in group
            )
            lines.append(f"   - {program} ({len(group)}): {shown}")
    if counted:
        by_program = Counter(r.program for r in counted)
        counts = ", ".join(f"{program} ×{n}" for program, n in by_program.items())
        lines.append(
            f"   - {len(counted)} {'older ' if listed or grouped else ''}commands: {counts} "
            "(recall/search finds each by its text)"
        )
    return Rendered(lines, len(listed) + len(grouped))


def command_part(runs: Sequence[CommandRun]) -> Part:
    """Shell commands, most recent first: the latest with their outcome, older ones grouped by
    program, then only the most recent ones named and the rest counted."""
    levels = [partial(_commands, runs, widths, len(runs)) for widths in _COMMAND_WIDTHS]
    tight = _COMMAND_WIDTHS[-1]
    levels += [partial(_commands, runs, tight, n) for n in _COUNTS if n < len(runs)]
    levels.append(partial(_commands, runs, (0, 0, 0, 0), 0))
    return Part(levels)


def command_lines(runs: Sequence[CommandRun]) -> Lines:
    """Shell commands at the most detailed level."""
    return _commands(runs, _COMMAND_WIDTHS[0], len(runs)).lines


def _directory_groups(files: Sequence[FileTouch]) -> Lines:
    groups: dict[str, list[str]] = {}
    for f in files:
        shown = f.shown.rstrip("/") or f.shown
        head, name = os.path.split(shown)
        groups.setdefault(head, []).append(name or shown)
    return [
        (f"{head}/: " if head else "") + ", ".join(dict.fromkeys(names))
        for head, names in groups.items()
    ]


def _changed(f: FileTouch) -> str:
    counts = []
    if f.writes:
        counts.append(f"written ({f.written_lines} lines)" if f.written_lines else "written")
    if f.edits:
        counts.append(f"{f.edits} edit{'s' if f.edits > 1 else ''}")
    what = ", ".join(counts) if not f.carried else ""
    if f.edits and f.last_edit:
        what += f"; latest: {f.last_edit}"
    return f"   - {f.shown}" + (f": {what}" if what else "")


def _files(files: Sequence[FileTouch], full: bool, named: int) -> Rendered:
    shown, counted = files[:named], files[named:]
    changed = [f for f in shown if f.changed]
    others = [f for f in shown if not f.changed]
    lines: Lines = []
    if changed:
        if full:
            lines.append("   Changed:")
            lines.extend(_changed(f) for f in changed)
        else:
            lines.append("   Changed: " + " · ".join(_directory_groups(changed)))
    if others:
        if full:
            lines.append("   Read or searched:")
            lines.extend(f"   - {group}" for group in _directory_groups(others))
        else:
            lines.append("   Read or searched: " + " · ".join(_directory_groups(others)))
    if counted:
        n_changed = sum(1 for f in counted if f.changed)
        lines.append(
            f"   - {len(counted)} {'more ' if shown else ''}paths ({n_changed} changed; "
            "recall/search finds them by name)"
        )
    return Rendered(lines, len(shown))


def file_part(files: Sequence[FileTouch]) -> Part:
    """Paths, most recent first: the changed ones with what changed and the others by
    directory, then all by directory, then only the most recent ones named."""
    levels = [partial(_files, files, True, len(files)), partial(_files, files, False, len(files))]
    levels += [partial(_files, files, False, n) for n in _COUNTS if n < len(files)]
    levels.append(partial(_files, files, False, 0))
    return Part(levels)


def file_lines(files: Sequence[FileTouch]) -> Lines:
    """Paths at the most detailed level."""
    return _files(files, True, len(files)).lines


def harness_part(messages: Sequence[Message]) -> Part:
    """Harness messages, one line each (repeats counted once), or only counted by kind."""
    items = [m for m in messages if m.harness is not None]

    def listed() -> Rendered:
        counted = Counter(f"{m.harness}: {m.text}" for m in items)
        lines = [f"   - {line}" + (f" (×{n})" if n > 1 else "") for line, n in counted.items()]
        return Rendered(lines, len(items))

    def kinds() -> Rendered:
        by_kind = Counter(m.harness for m in items)
        line = "   - " + ", ".join(f"{kind} ×{n}" for kind, n in by_kind.items())
        return Rendered([line] if items else [], 0)

    return Part([listed, kinds], weight=1.5)


# -- checking a summary ---------------------------------------------------------------------------

# Heading of the section compactd appends to a summary that left things out.
LEDGER_SECTION_TITLE: Final = "Preserved from the conversation (added by compactd)"

# A user message counts as present when its first this-many characters (normalized) appear in
# the summary: models quote the start of long requests. compactd's own choice.
LEDGER_VERBATIM_PREFIX_CHARS: Final = 200
# A command counts as present when its first this-many characters appear; a carried message
# when the start of its head does.
_COMMAND_PREFIX_CHARS: Final = 48
_CARRIED_PREFIX_CHARS: Final = 40

# How much of a restored item names it in the list of what was restored (a label only).
_RESTORED_LABEL_CHARS: Final = 120

_QUOTE_PREFIX: Final = re.compile(r"^[ \t]*(?:[>|][ \t]?)+", re.MULTILINE)


def _normalize(text: str) -> str:
    """Quote markers dropped, whitespace collapsed, case folded: how text is compared."""
    return _SPACES.sub(" ", _QUOTE_PREFIX.sub("", text)).strip().casefold()


def _present(item: str, haystack: str, prefix: int) -> bool:
    needle = _normalize(item)
    if not needle:
        return True
    return needle[:prefix].rstrip() in haystack


def _file_present(touch: FileTouch, haystack: str, unique_names: set[str]) -> bool:
    if touch.path.casefold() in haystack or touch.shown.casefold() in haystack:
        return True
    name = os.path.basename(touch.path.rstrip("/")).casefold()
    return name in unique_names and len(name) >= 4 and name in haystack


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
    commands = [
        r for r in ledger.commands if not _present(r.command, haystack, _COMMAND_PREFIX_CHARS)
    ]
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
