"""The hooks that give the model back what Claude Code's summary dropped.

``SessionStart`` after a compaction (``compact``) or when a session is picked up again
(``resume``) hands back the latest compaction's items (``core.handback``), unless they were
handed back already: the state (``state``) remembers which compactions were, so none is
handed back twice. ``PostCompact`` gives the user one line: what the summary kept, what compactd
gave back (docs/claude-code.md#hooks). The transcript is only read, from its end.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from compactd.agents.claude_code.services import state
from compactd.agents.claude_code.services.events import (
    CC_HOOK_CONTEXT_CHARS,
    CONTEXT_LIMIT,
    HookAnswer,
    HookEvent,
    context_json,
    transcript_of,
)
from compactd.core.handback import (
    Compaction,
    Handback,
    compaction_in_progress,
    hand_back,
    last_compaction,
)
from compactd.services.agent_tail import read_tail

__all__ = ["post_compact", "session_start"]


def _fitted(compaction: Compaction, cwd: str | None, carry: dict[str, Any] | None) -> Handback:
    """The hand-back whose JSON output stays under Claude Code's limit."""
    limit = CONTEXT_LIMIT
    while True:
        back = hand_back(compaction, limit=limit, cwd=cwd, carry=carry)
        size = len(context_json("SessionStart", back.text))
        if size < CC_HOOK_CONTEXT_CHARS or limit < 1_000:
            return back
        limit -= size - CC_HOOK_CONTEXT_CHARS + 200


def _handed_back(kept: state.SessionState, compaction: Compaction) -> bool:
    """Whether ``compaction``'s items were handed back: it is one the state names, or the one
    that followed the compaction a hand-back ran after before it was filed (the session's first
    compaction follows none: ``after`` is empty)."""
    after = compaction.previous_boundary_id or ""
    return any(
        (c.boundary_id or "") == compaction.boundary_id if c.boundary_id else c.after == after
        for c in kept.handed_back
    )


# Who answered a compaction inside it (the plugin's module, through ``compactd claude-code
# session-compact``): its items are in the compaction itself (docs/claude-code.md#the-plugin).
_IN_THE_COMPACTION = ("prepared", "offline", "claude-code")


def _module_has_it(kept: state.SessionState, now: float) -> bool:
    """Whether the compaction in progress is (or will be) handed back by the plugin's module:
    it answered a moment ago, or it went on to Claude Code's own compaction and will add
    compactd's rows to it (docs/claude-code.md#the-plugin)."""
    if kept.pending_after is not None and now - kept.pending_at < state.MODULE_PENDING_S:
        return True
    last = kept.last
    return (
        last is not None
        and last.source in _IN_THE_COMPACTION
        and now - last.at < state.MODULE_RECENT_S
    )


def _due(event: HookEvent, kept: state.SessionState) -> Compaction | None:
    """The compaction whose items are due now, if any (never one handed back).

    Claude Code 2.1.330 runs ``SessionStart`` (``compact``) before it files the compaction and
    before ``PostCompact``, and does not pass the summary: the compaction then is the one in
    progress, and everything its span holds goes back (docs/claude-code.md#sessionstart-after-a-compaction).
    On ``resume`` it is the latest one filed, checked against its summary.
    """
    tail = read_tail(transcript_of(event))
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


def session_start(event: HookEvent, data_dir: Path) -> HookAnswer:
    if event.source not in ("compact", "resume"):
        return HookAnswer()
    kept = state.load_session(data_dir, event.session_id)
    if event.source == "compact" and _module_has_it(kept, time.time()):
        return HookAnswer()  # the module's rows are part of the compaction itself
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
    return HookAnswer(context_json("SessionStart", back.text))


def _answered_line(last: state.Restored) -> str:
    """The user's line after a compaction compactd answered itself."""
    how = (
        "its summary prepared in the background"
        if last.source == "prepared"
        else ("its offline summary")
    )
    took = f" in {last.answer_ms:,} ms" if last.answer_ms is not None else ""
    return (
        f"compactd: compacted with {how}{took}, keeping {last.messages} user messages word for "
        f"word, {last.commands} commands, {last.files} files"
    )


def post_compact(event: HookEvent, data_dir: Path) -> HookAnswer:
    summary = event.compact_summary or ""
    kept = state.load_session(data_dir, event.session_id)
    now = time.time()
    last = kept.last
    if not summary.strip():
        # No summary of Claude Code's: the plugin's module answered with compactd's own.
        if (
            last is not None
            and last.source in ("prepared", "offline")
            and now - last.at < state.MODULE_RECENT_S
        ):
            return HookAnswer(_answered_line(last))
        return HookAnswer()  # a compaction supplied by other means: no summary to check
    tail = read_tail(transcript_of(event))
    compaction = compaction_in_progress(
        tail.records, summary, event.trigger or "auto", whole=tail.whole
    )
    check = hand_back(compaction, limit=CONTEXT_LIMIT, cwd=event.cwd or None)
    after = compaction.previous_boundary_id or ""
    if kept.pending_after is not None and now - kept.pending_at < state.MODULE_PENDING_S:
        gave = "compactd adds what it left out to the compaction"
    elif last is not None and not last.boundary_id and last.after == after:
        last.kept = check.kept_line()
        state.save_session(data_dir, kept)
        gave = f"compactd gave the model {last.messages} user messages, {last.commands} commands, {last.files} files word for word"
    else:
        gave = "compactd gives the model what it left out when the session resumes"
    return HookAnswer(f"compactd: Claude Code's summary kept {check.kept_line()}; {gave}")
