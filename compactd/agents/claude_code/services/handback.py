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


def post_compact(event: HookEvent, data_dir: Path) -> HookAnswer:
    summary = event.compact_summary or ""
    if not summary.strip():
        return HookAnswer()  # a compaction supplied by other means: no summary to check
    tail = read_tail(transcript_of(event))
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
