"""What each Claude Code hook event and the status line answer, from the transcript and state.

Claude Code runs ``compactd claude-code hook`` for each hook event with the event as JSON on
stdin (docs/claude-code.md#hooks). ``answer`` records the session as the current one of its
folder (``claude_state``), then by event:

- ``SessionStart`` after a compaction (``compact``), or when a session is picked up again
  (``resume``): the latest compaction's dropped items (``core.handback``), unless they were
  handed back already; the state remembers which compactions were, so none is handed back twice;
- ``PreCompact``: instructions that steer Claude Code's summary toward the exact words, paths
  and commands;
- ``PostCompact``: one line for the user, what the summary kept and what compactd gives back;
- ``UserPromptSubmit``: a warning, once per level and compaction, when the count reaches the
  warning level before the automatic compaction.

The transcript is only read, from its end (``agent_tail``). ``status_line`` answers the
``statusLine`` command. Nothing here imports a model SDK: these run in short processes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

from compactd.core.agent_gauge import Gauge, gauge, status_line, warning_text
from compactd.core.handback import (
    Compaction,
    Handback,
    compaction_in_progress,
    hand_back,
    last_compaction,
)
from compactd.services import claude_state as state
from compactd.services.agent_tail import read_tail

__all__ = [
    "CONTEXT_LIMIT",
    "ENV_NO_WARNING",
    "HookAnswer",
    "HookInputError",
    "PRECOMPACT_INSTRUCTIONS",
    "answer",
    "status_line_for",
]

# Claude Code puts hook context above this many characters into a file and shows the model only
# its path and a preview (docs/claude-code.md#hooks); compactd's text stays below it with room
# for the JSON around it.
CC_HOOK_CONTEXT_CHARS: Final = 10_000
CONTEXT_LIMIT: Final = 9_000
# Set to 1 to switch the threshold warning off.
ENV_NO_WARNING: Final = "COMPACTD_NO_THRESHOLD_WARNING"

PRECOMPACT_INSTRUCTIONS: Final = (
    "When you write the summary, keep what cannot be rebuilt from a paraphrase:\n"
    "- quote every message the user typed word for word in the list of user messages "
    "(a very long one: its first sentences, word for word);\n"
    "- name every file that was read, searched, created or changed by its full path;\n"
    "- list every shell command that was run, exactly as it was typed, with whether it "
    "succeeded and the error line when it failed;\n"
    "- keep constraints the user stated (must, never, always, don't) in their own words."
)


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


def _context_json(event: str, text: str, message: str | None = None) -> str:
    out: dict[str, Any] = {
        "hookSpecificOutput": {"hookEventName": event, "additionalContext": text}
    }
    if message:
        out["systemMessage"] = message
    return msgspec.json.encode(out).decode()


def _transcript(event: HookEvent) -> Path:
    if not event.transcript_path:
        raise HookInputError(f"the {event.hook_event_name} event names no transcript_path")
    return Path(event.transcript_path)


def _fitted(compaction: Compaction, cwd: str | None, carry: dict[str, Any] | None) -> Handback:
    """The hand-back whose JSON output stays under Claude Code's limit."""
    limit = CONTEXT_LIMIT
    while True:
        back = hand_back(compaction, limit=limit, cwd=cwd, carry=carry)
        size = len(_context_json("SessionStart", back.text))
        if size < CC_HOOK_CONTEXT_CHARS or limit < 1_000:
            return back
        limit -= size - CC_HOOK_CONTEXT_CHARS + 200


def _handed_back(kept: state.SessionState, compaction: Compaction) -> bool:
    """Whether ``compaction``'s items were handed back: it is one the state names, or the one
    that followed the compaction a hand-back ran after before it was filed."""
    after = compaction.previous_boundary_id or ""
    return any(
        (c.boundary_id or "") == compaction.boundary_id
        if c.boundary_id
        else compaction.boundary_id != after and c.after == after
        for c in kept.handed_back
    )


def _due(event: HookEvent, kept: state.SessionState) -> Compaction | None:
    """The compaction whose items are due now, if any (never one handed back).

    Claude Code 2.1.330 runs ``SessionStart`` (``compact``) before it files the compaction and
    before ``PostCompact``, and does not pass the summary: the compaction then is the one in
    progress, and everything its span holds goes back (docs/claude-code.md#sessionstart).
    On ``resume`` it is the latest one filed, checked against its summary.
    """
    tail = read_tail(_transcript(event))
    if event.source == "compact":
        fresh = compaction_in_progress(tail.records, "", "auto", whole=tail.whole)
        return None if _handed_back(kept, fresh) else fresh
    filed = last_compaction(tail.records, whole=tail.whole)
    return None if filed is None or _handed_back(kept, filed) else filed


def _carry_fits(carry_after: str, compaction: Compaction) -> bool:
    """Whether the carry kept at the latest hand-back belongs to the compaction that opens
    ``compaction``'s span: the same boundary, or the one filed after the compaction a
    hand-back ran after before it was filed (``after:<id>``)."""
    opened = compaction.previous_boundary_id
    if not carry_after or opened is None:
        return False
    if carry_after.startswith("after:"):
        return opened != carry_after.removeprefix("after:")
    return opened == carry_after


def _session_start(event: HookEvent, data_dir: Path) -> HookAnswer:
    if event.source not in ("compact", "resume"):
        return HookAnswer()
    kept = state.load_session(data_dir, event.session_id)
    compaction = _due(event, kept)
    if compaction is None:
        return HookAnswer()
    carry = kept.carry if _carry_fits(kept.carry_after, compaction) else None
    back = _fitted(compaction, event.cwd or None, carry)
    m, k, f = back.counts
    after = compaction.previous_boundary_id or ""
    kept.handed_back.append(state.Compacted(boundary_id=compaction.boundary_id, after=after))
    kept.last = state.Restored(
        boundary_id=compaction.boundary_id,
        after=after,
        at=time.time(),
        messages=m,
        commands=k,
        files=f,
        chars=len(back.text),
        post_tokens=compaction.post_tokens,
    )
    # The next compaction's span opens with this one's summary: its carry is checked there.
    kept.carry, kept.carry_after = back.carry, compaction.boundary_id or f"after:{after}"
    state.save_session(data_dir, kept)
    if not back.text:
        return HookAnswer()
    return HookAnswer(_context_json("SessionStart", back.text))


def _post_compact(event: HookEvent, data_dir: Path) -> HookAnswer:
    summary = event.compact_summary or ""
    if not summary.strip():
        return HookAnswer()  # a compaction supplied by other means: no summary to check
    tail = read_tail(_transcript(event))
    compaction = compaction_in_progress(
        tail.records, summary, event.trigger or "auto", whole=tail.whole
    )
    check = hand_back(compaction, limit=CONTEXT_LIMIT, cwd=event.cwd or None)
    kept = state.load_session(data_dir, event.session_id)
    last = kept.last
    after = compaction.previous_boundary_id or ""
    if last is not None and not last.boundary_id and last.after == after:
        last.kept = check.kept_line()
        state.save_session(data_dir, kept)
        gave = f"compactd gave the model {last.messages} user messages, {last.commands} commands, {last.files} files word for word"
    else:
        gave = "compactd gives the model what it left out when the session resumes"
    return HookAnswer(f"compactd: Claude Code's summary kept {check.kept_line()}; {gave}")


def _tokens(records: list[Any]) -> tuple[int, str | None, str] | None:
    """The latest count in the records: the latest response's usage, or the count recorded
    right after a compaction when no response came since; with the model and the compaction."""
    for record in reversed(records):
        entry = record.entry
        if entry.is_compact_boundary:
            meta = entry.compact_metadata
            post = meta.post_tokens if meta is not None else None
            return (post, None, entry.uuid or "") if post is not None else None
        message = entry.message if entry.type == "assistant" else None
        if message is not None and message.usage is not None and message.model != "<synthetic>":
            boundary = next(
                (r.entry.uuid or "" for r in reversed(records) if r.entry.is_compact_boundary),
                "",
            )
            return message.usage.total(), message.model, boundary
    return None


def _warning(event: HookEvent, data_dir: Path, env: Mapping[str, str]) -> HookAnswer:
    if env.get(ENV_NO_WARNING, "").strip() not in ("", "0"):
        return HookAnswer()
    found = _tokens(read_tail(_transcript(event), need="usage").records)
    if found is None:
        return HookAnswer()
    tokens, model, boundary = found
    g = gauge(tokens, model, env)
    if g.level is None:
        return HookAnswer()
    kept = state.load_session(data_dir, event.session_id)
    mark = f"{boundary}:{g.level}"
    if kept.warned == mark:
        return HookAnswer()
    kept.warned = mark
    state.save_session(data_dir, kept)
    line = f"compactd: context at {g.share:.0%} of the auto-compact threshold ({g.tokens:,} tokens)"
    return HookAnswer(_context_json("UserPromptSubmit", warning_text(g), line))


def answer(
    raw: bytes, data_dir: Path, env: Mapping[str, str], *, block_compaction: bool = False
) -> HookAnswer:
    """The answer to the hook event ``raw`` (raises ``HookInputError`` or ``TailError``)."""
    event = parse_event(raw)
    if event.session_id and event.transcript_path and event.cwd:
        state.record_current(
            data_dir,
            state.CurrentSession(
                session_id=event.session_id, transcript_path=event.transcript_path, cwd=event.cwd
            ),
        )
    name = event.hook_event_name
    if name == "SessionStart":
        return _session_start(event, data_dir)
    if name == "PreCompact":
        if block_compaction:
            return HookAnswer('{"decision": "block", "reason": "compactd blocks compaction"}', 0)
        return HookAnswer(PRECOMPACT_INSTRUCTIONS)
    if name == "PostCompact":
        return _post_compact(event, data_dir)
    if name == "UserPromptSubmit":
        return _warning(event, data_dir, env)
    if name in ("Stop", "PreModelSwitch", "PostModelSwitch"):
        return HookAnswer()
    raise HookInputError(f"compactd does not handle the hook event {name!r}")


class StatusInput(msgspec.Struct, kw_only=True):
    session_id: str = ""
    transcript_path: str = ""
    cwd: str = ""
    model: dict[str, Any] | None = None
    context_window: dict[str, Any] | None = None


def _usage_total(usage: Any) -> int | None:
    if not isinstance(usage, dict):
        return None
    keys = (
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "output_tokens",
    )
    return sum(v for k in keys if isinstance(v := usage.get(k), int))


def status_line_for(raw: bytes, data_dir: Path, env: Mapping[str, str]) -> str:
    """The status line for Claude Code's ``statusLine`` JSON ``raw``."""
    try:
        status = msgspec.json.decode(raw, type=StatusInput) if raw.strip() else StatusInput()
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise HookInputError("the status line input on stdin is not Claude Code's JSON") from None
    window = status.context_window or {}
    tokens = _usage_total(window.get("current_usage"))
    size = window.get("context_window_size")
    model = (status.model or {}).get("id")
    g: Gauge | None = None
    if tokens is not None:
        g = gauge(tokens, model if isinstance(model, str) else None, env,
                  size if isinstance(size, int) and size > 0 else None)  # fmt: skip
    restored: str | None = None
    post: int | None = None
    if status.session_id:
        last = state.load_session(data_dir, status.session_id).last
        if last is not None:
            post = last.post_tokens
            restored = (
                f"last compaction: restored {last.messages} msgs, {last.commands} cmds, "
                f"{last.files} files"
                if last.chars
                else "last compaction: nothing to restore"
            )
    return status_line(g, restored, post)
