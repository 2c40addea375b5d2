"""What ``compactd claude-code hook`` answers to each Claude Code hook event.

Claude Code runs it for each hook event with the event as JSON on stdin (docs/claude-code.md#hooks).
``answer`` records the session as the current one of its folder (``state``), then by event:
``SessionStart`` and ``PostCompact`` go to ``handback`` (what a summary dropped);
``PreCompact`` gets instructions that steer Claude Code's summary toward the exact words, paths
and commands; ``UserPromptSubmit`` gets a warning, once per level and compaction, when the count
reaches the warning level before the automatic compaction. Each event imports only what it
uses, and nothing here imports a model SDK: these run in short processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from compactd.agents.claude_code.services import state
from compactd.agents.claude_code.services.events import (
    HookAnswer,
    HookEvent,
    HookInputError,
    context_json,
    parse_event,
    transcript_of,
)
from compactd.services.safe_io import is_regular_file

__all__ = ["ENV_NO_WARNING", "PRECOMPACT_INSTRUCTIONS", "answer"]

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


def _filed(kept: state.SessionState, records: list[Any]) -> bool:
    """Complete the latest hand-back with what Claude Code filed since: its compaction's
    boundary id and its count right after (``postTokens``, which the status line shows).
    Whether anything changed."""
    last = kept.last
    if last is None or last.boundary_id:
        return False
    boundary = next((r.entry for r in reversed(records) if r.entry.is_compact_boundary), None)
    if boundary is None or boundary.uuid is None or boundary.uuid == last.after:
        return False
    meta = boundary.compact_metadata
    last.boundary_id = boundary.uuid
    last.post_tokens = meta.post_tokens if meta is not None else None
    return True


def _warning(event: HookEvent, data_dir: Path, env: Mapping[str, str]) -> HookAnswer:
    if env.get(ENV_NO_WARNING, "").strip() not in ("", "0"):
        return HookAnswer()
    # Imported here: a PreCompact run does not need to pay for them.
    from compactd.core.agent_gauge import gauge, warning_text
    from compactd.services.agent_tail import read_tail

    records = read_tail(transcript_of(event), need="usage").records
    kept = state.load_session(data_dir, event.session_id)
    if _filed(kept, records):
        state.save_session(data_dir, kept)
    found = _tokens(records)
    if found is None:
        return HookAnswer()
    tokens, model, boundary = found
    g = gauge(tokens, model, env)
    mark = f"{boundary}:{g.level}"
    if g.level is None or kept.warned == mark:
        return HookAnswer()
    kept.warned = mark
    state.save_session(data_dir, kept)
    line = f"compactd: context at {g.share:.0%} of the auto-compact threshold ({g.tokens:,} tokens)"
    return HookAnswer(context_json("UserPromptSubmit", warning_text(g), line))


def answer(
    raw: bytes, data_dir: Path, env: Mapping[str, str], *, block_compaction: bool = False
) -> HookAnswer:
    """The answer to the hook event ``raw`` (raises ``HookInputError`` or ``TailError``)."""
    event = parse_event(raw)
    # Only a regular file is recorded as the session's transcript: a FIFO or a device named
    # there would be handed to the MCP server and the status line as the current session.
    path = event.transcript_path
    if event.session_id and event.cwd and path and is_regular_file(path):
        state.record_current(
            data_dir,
            state.CurrentSession(session_id=event.session_id, transcript_path=path, cwd=event.cwd),
        )
    name = event.hook_event_name
    if name in ("SessionStart", "PostCompact"):
        # Imported here: only these read the survival ledger.
        from compactd.agents.claude_code.services import handback as claude_handback

        if name == "SessionStart":
            return claude_handback.session_start(event, data_dir)
        return claude_handback.post_compact(event, data_dir)
    if name == "PreCompact":
        if block_compaction:
            return HookAnswer('{"decision": "block", "reason": "compactd blocks compaction"}', 0)
        return HookAnswer(PRECOMPACT_INSTRUCTIONS)
    if name == "UserPromptSubmit":
        return _warning(event, data_dir, env)
    if name in ("Stop", "PreModelSwitch", "PostModelSwitch"):
        return HookAnswer()
    raise HookInputError(f"compactd does not handle the hook event {name!r}")
