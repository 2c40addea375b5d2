"""An agent's hook event as compactd reads it, and the answer a hook prints (docs/agents.md#hooks).

Claude Code and Codex CLI run their hooks the same way: the event as JSON on stdin
(``hook_event_name``, ``session_id``, ``transcript_path``, ``cwd``, and per event ``source``,
``trigger``, ``prompt``...), an answer on stdout, where ``hookSpecificOutput.additionalContext``
is text for the model. Imports only msgspec: the hooks start often.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

__all__ = [
    "ENV_NO_WARNING",
    "HOOK_DEADLINE_S",
    "MAX_EVENT_BYTES",
    "ERR_CHARS",
    "err",
    "out",
    "read_stdin",
    "run_bounded",
    "HookAnswer",
    "HookEvent",
    "HookInputError",
    "context_json",
    "parse_event",
    "transcript_of",
]

# The most a hook reads from stdin: the agents' events are small (Claude Code's PostCompact
# holds a summary); anything larger is not an event.
MAX_EVENT_BYTES: Final = 8 * 1024 * 1024
# Every agent's hook's own deadline, from the process's start (compactd's choice: a third of
# the 60 s timeout each install gives the agent for it; generous beside the tenth of a second a
# hook usually takes, so that a busy machine does not cut it: the hand-back of a 32 MB tail
# takes some 9 s on a shared 2-core machine). Reading standard input gets half of it
# (docs/safe-io.md#deadlines).
HOOK_DEADLINE_S: Final = 20.0
# The most one line on stderr carries (a path or a message quoted in it is cut).
ERR_CHARS: Final = 1_000
# Set to 1 to switch the threshold warning off (every agent's hook reads it).
ENV_NO_WARNING: Final = "COMPACTD_NO_THRESHOLD_WARNING"


class HookInputError(ValueError):
    """The event on stdin is not one a hook can act on (the message says why)."""


class HookEvent(msgspec.Struct, kw_only=True):
    """The fields of a hook event compactd reads; unknown ones are ignored."""

    hook_event_name: str
    session_id: str = ""
    transcript_path: str | None = ""
    cwd: str = ""
    source: str | None = None
    trigger: str | None = None
    compact_summary: str | None = None
    model: str | None = None


@dataclass(frozen=True, slots=True)
class HookAnswer:
    """What the hook prints: ``stdout`` (text or one JSON object), and its exit code."""

    stdout: str = ""
    exit_code: int = 0


def parse_event(raw: bytes, agent: str = "Claude Code") -> HookEvent:
    """The event ``raw`` that ``agent`` sent (raises ``HookInputError``)."""
    if not raw.strip():
        raise HookInputError(f"no hook event on stdin (expected {agent}'s JSON)")
    try:
        return msgspec.json.decode(raw, type=HookEvent)
    except msgspec.ValidationError as exc:
        raise HookInputError(f"the hook event is not one {agent} sends: {exc}") from None
    except msgspec.DecodeError:
        raise HookInputError("the hook event on stdin is not JSON") from None


def context_json(event: str, text: str, message: str | None = None) -> str:
    """The answer that gives the model ``text`` (and the person ``message``)."""
    out: dict[str, Any] = {
        "hookSpecificOutput": {"hookEventName": event, "additionalContext": text}
    }
    if message:
        out["systemMessage"] = message
    return msgspec.json.encode(out).decode()


def transcript_of(event: HookEvent) -> Path:
    """The session file the event names (raises ``HookInputError`` when it names none)."""
    if not event.transcript_path:
        raise HookInputError(f"the {event.hook_event_name} event names no transcript_path")
    return Path(event.transcript_path)


def _whole_object(data: bytes) -> bool:
    """Whether ``data`` is one whole JSON object (an event whose sender keeps stdin open)."""
    if not data.rstrip().endswith(b"}"):
        return False
    try:
        return isinstance(msgspec.json.decode(data), dict)
    except msgspec.DecodeError:
        return False


def read_stdin(started: float, deadline_s: float, limit: int = MAX_EVENT_BYTES) -> bytes:
    """The event on stdin: read until it ends or holds one whole JSON object, at most ``limit``
    bytes, within half of the process's ``deadline_s`` (counted from ``started``, a
    ``time.monotonic()``), so that an agent keeping stdin open cannot hang the hook
    (docs/safe-io.md)."""
    from compactd.services.safe_io import Deadline, read_input

    remaining = max(0.5, deadline_s / 2 - (time.monotonic() - started))
    return read_input(Deadline(remaining), limit, _whole_object, what="stdin")


def out(line: str) -> None:
    """One line on stdout: what the agent reads from a hook (a hook's process is the agent's,
    not the daemon's: no protocol frames here). Keys are redacted (docs/secrets.md)."""
    from compactd.core.outbound import redact

    sys.stdout.write(redact(line) + "\n")
    sys.stdout.flush()


def err(line: str) -> None:
    """One line on stderr: a message for the person, never read by the agent as output; keys
    redacted, and cut at ``ERR_CHARS``."""
    from compactd.core.outbound import redact

    line = " ".join(redact(line).split())
    if len(line) > ERR_CHARS:
        line = line[: ERR_CHARS - 1] + "…"
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def run_bounded(
    name: str, started: float, deadline_s: float, work: Callable[[], tuple[str, int]]
) -> int:
    """Run a hook's ``work`` (its answer and exit code) so that it never fails the agent's
    session: any error is one line on stderr and exit 0, and past ``deadline_s`` from
    ``started`` the process ends wherever it is waiting, with no answer (docs/safe-io.md)."""
    from compactd.services.safe_io import Watchdog

    left = max(0.5, deadline_s - (time.monotonic() - started))
    dog = Watchdog(left, lambda: f"{name}: gave up after its {deadline_s:g} s deadline, no answer")
    try:
        text, code = work()
    except Exception as exc:  # noqa: BLE001 - a hook must never fail the user's session
        dog.stop()
        err(f"{name}: {exc}")
        return 0
    dog.stop()  # the answer is written whole, or not at all
    if text:
        out(text)
    return code
