"""A Claude Code hook event as compactd reads it, and the answer a hook prints.

Shared by the hook front ends (``hooks`` dispatches; ``handback`` answers the
events that hand back what a summary dropped). Imports only msgspec: the hooks start often.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

__all__ = [
    "CC_HOOK_CONTEXT_CHARS",
    "CONTEXT_LIMIT",
    "HookAnswer",
    "HookEvent",
    "HookInputError",
    "context_json",
    "parse_event",
    "transcript_of",
]

# Claude Code puts hook context above this many characters into a file and shows the model only
# its path and a preview (docs/claude-code.md#hooks); compactd's text stays below it with room
# for the JSON around it.
CC_HOOK_CONTEXT_CHARS: Final = 10_000
CONTEXT_LIMIT: Final = 9_000
# Set to 1 to switch the threshold warning off.
ENV_NO_WARNING: Final = "COMPACTD_NO_THRESHOLD_WARNING"


class HookInputError(ValueError):
    """The event on stdin is not one a hook can act on (the message says why)."""


class HookEvent(msgspec.Struct, kw_only=True):
    """The fields of a hook event compactd reads; unknown ones are ignored."""

    hook_event_name: str
    session_id: str = ""
    transcript_path: str = ""
    cwd: str = ""
    source: str | None = None
    trigger: str | None = None
    compact_summary: str | None = None


@dataclass(frozen=True, slots=True)
class HookAnswer:
    """What the hook prints: ``stdout`` (text or one JSON object), and its exit code."""

    stdout: str = ""
    exit_code: int = 0


def parse_event(raw: bytes) -> HookEvent:
    if not raw.strip():
        raise HookInputError("no hook event on stdin (expected Claude Code's JSON)")
    try:
        return msgspec.json.decode(raw, type=HookEvent)
    except msgspec.ValidationError as exc:
        raise HookInputError(f"the hook event is not one Claude Code sends: {exc}") from None
    except msgspec.DecodeError:
        raise HookInputError("the hook event on stdin is not JSON") from None


def context_json(event: str, text: str, message: str | None = None) -> str:
    out: dict[str, Any] = {
        "hookSpecificOutput": {"hookEventName": event, "additionalContext": text}
    }
    if message:
        out["systemMessage"] = message
    return msgspec.json.encode(out).decode()


def transcript_of(event: HookEvent) -> Path:
    if not event.transcript_path:
        raise HookInputError(f"the {event.hook_event_name} event names no transcript_path")
    return Path(event.transcript_path)
