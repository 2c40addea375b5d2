"""``compactd claude-code session-compact``: compactd's answer to Claude Code's ``session.compact``.

The plugin's hook module (``register.js``) runs this command with the event on stdin
(docs/claude-code.md#the-seam): ``{"event": {trigger, instructions?, messages}, "sessionId",
"transcriptPath", "claudeCode"?}``. The answer is one JSON object:

- ``{"messages": [...]}`` with compactd's compaction: a summary (the one prepared in the
  background, or the offline one), completed against the survival ledger of the span it
  replaces (every user message word for word, every file and command; past the budget, recall
  pointers), then the latest messages kept verbatim (at most a quarter of the conversation).
  No model is called: this is what Claude Code waits for.
- ``{"next": "<why>"}`` when compactd has nothing ready (no summarizer configured, nothing
  prepared, a prepared summary that no longer fits, instructions it was not written with):
  the module lets Claude Code compact and asks again with Claude Code's answer.
- with ``claudeCode`` (what ``next(e)`` returned): Claude Code's rows, then compactd's row with
  what Claude Code's summary left out (the ledger run against its actual text), or Claude
  Code's rows unchanged when it left nothing out.

Every answer is new rows: none is given back by its handle. The hooks' state
(``services.state``) records the compaction as handed back, so the SessionStart hook does not
repeat it, and what the status line shows after it. Reads the transcript only to know the span
and its lines; writes nothing into it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec

from compactd.agents.claude_code.services import state
from compactd.agents.claude_code.services.choice import summarizer_choice
from compactd.agents.claude_code.services.events import CONTEXT_LIMIT
from compactd.agents.claude_code.services.hooks import PRECOMPACT_INSTRUCTIONS
from compactd.agents.claude_code.services.prepared import Prepared, read_prepared
from compactd.agents.claude_code.services.rows import (
    ClaudeCodeAnswer,
    CompactEvent,
    Row,
    new_row,
    record_of,
    rows_tokens,
    safe_start,
    text_row,
    turn_start,
)
from compactd.core import constants as c
from compactd.core.handback import (
    Compaction,
    compaction_in_progress,
    hand_back,
    span_ledger,
)
from compactd.core.ledger import carry_of, complete_summary
from compactd.core.ledger.budget import view_budget
from compactd.core.offline_summary import offline_summary
from compactd.core.prompts import agent_summary_message
from compactd.core.view import main_thread
from compactd.services.agent_tail import Tail, TailError, read_tail
from compactd.transcript.model import Record

__all__ = [
    "SUMMARY_TOKENS",
    "TAIL_SHARE",
    "Answer",
    "CompactInputError",
    "answer",
]

# The most a session.compact input takes: the whole conversation with its tool results.
# The most compactd's summary (the ledger's additions included) takes in an answer, in tokens
# (compactd's choice: a summary stays a small part of any window).
SUMMARY_TOKENS: Final = 15_000
# The most the messages kept verbatim take, as a share of the conversation they are kept from.
TAIL_SHARE: Final = 0.25
# Set to 1 to have the plugin's module veto every compaction (Claude Code then goes on with the
# whole history until its window refuses it): the one case compactd answers ``skip``.
ENV_BLOCK: Final = "COMPACTD_BLOCK_COMPACTION"


class CompactInputError(ValueError):
    """The input on stdin is not a session.compact request (the message says why)."""


class _Input(msgspec.Struct, rename="camel", kw_only=True):
    event: CompactEvent
    session_id: str = ""
    transcript_path: str = ""
    claude_code: dict[str, Any] | None = None


@dataclass(slots=True)
class Answer:
    """The answer (``body`` is what the command prints) and how it came about."""

    body: dict[str, Any]
    #: "prepared", "offline", "claude-code" (compactd's rows added), "unchanged", "next"
    source: str
    #: the rows given to Claude Code, and the conversation's size before and kept verbatim
    rows: list[dict[str, Any]] = field(default_factory=list)
    tokens_before: int = 0
    tokens_kept: int = 0
    summary_chars: int = 0


def _decode(raw: bytes) -> tuple[_Input, ClaudeCodeAnswer | None]:
    if not raw.strip():
        raise CompactInputError("no session.compact request on stdin (expected JSON)")
    try:
        inp = msgspec.json.decode(raw, type=_Input)
        cc = (
            msgspec.convert(inp.claude_code, type=ClaudeCodeAnswer)
            if inp.claude_code is not None
            else None
        )
    except msgspec.ValidationError as exc:
        raise CompactInputError(
            f"the session.compact request is not one compactd reads: {exc}"
        ) from None
    except msgspec.DecodeError:
        raise CompactInputError("the session.compact request on stdin is not JSON") from None
    if not inp.event.messages:
        raise CompactInputError("the session.compact event has no messages")
    if cc is not None and not cc.messages:
        raise CompactInputError("claudeCode (what next(e) returned) has no messages")
    return inp, cc


def _tail(path: Path | None) -> Tail | None:
    if path is None:
        return None
    try:
        return read_tail(path)
    except TailError:
        return None


def _span(rows: Sequence[Row], tail: Tail | None, cwd: str | None) -> list[Record]:
    """The transcript records the rows stand for, in order: the transcript's own line where it
    has the row's handle, else a record made from the row."""
    by_uuid = {r.uuid: r for r in tail.records if r.uuid} if tail is not None else {}
    out: list[Record] = []
    parent: str | None = None
    for row in rows:
        found = by_uuid.get(row.handle) if row.handle else None
        out.append(found if found is not None else record_of(row, parent=parent, cwd=cwd))
        parent = row.handle or parent
    return out


def _summary_chars(env: Mapping[str, str], model: str | None, window: int = 0) -> int:
    """The room for compactd's summary in an answer: the view budget of the session's effective
    window (docs/compaction.md#survival-ledger), at most ``SUMMARY_TOKENS``. ``window``: the one
    a prepared summary recorded; else it is worked out from ``model`` and ``env``, which imports
    the token levels (a tenth of the command's time: docs/claude-code.md#the-seam)."""
    if window <= 0:
        from compactd.core.agent_gauge import gauge

        window = gauge(0, model, env).status.effective_window
    return min(view_budget(window).summary_chars, SUMMARY_TOKENS * c.CHARS_PER_TOKEN)


def _model(tail: Tail | None) -> str | None:
    if tail is None:
        return None
    for record in reversed(tail.records):
        message = record.entry.message if record.entry.type == "assistant" else None
        if message is not None and message.model and message.model != "<synthetic>":
            return message.model
    return None


def _tokens_before(tail: Tail | None) -> int | None:
    """Claude Code's count before the compaction: the latest response's usage."""
    if tail is None:
        return None
    for record in reversed(tail.records):
        entry = record.entry
        if entry.is_compact_boundary:
            return None
        message = entry.message if entry.type == "assistant" else None
        if message is not None and message.usage is not None and message.model != "<synthetic>":
            return message.usage.total()
    return None


def _post_tokens(
    tail: Tail | None, rows: Sequence[Row], out: Sequence[Mapping[str, Any]]
) -> int | None:
    """compactd's estimate of Claude Code's count right after the answer: what Claude Code
    sent besides the conversation (system prompt, tools), plus the answer's rows."""
    before = _tokens_before(tail)
    if before is None:
        return None
    fixed = max(0, before - rows_tokens(rows))
    return fixed + rows_tokens(out)


class _Cwd(msgspec.Struct):
    cwd: str | None = None


_CWD: Final = msgspec.json.Decoder(_Cwd)


def _cwd_of(records: list[Record]) -> str | None:
    """The working folder the latest line that names one names (a field left in the raw line,
    not decoded into its entry)."""
    for record in reversed(records):
        if b'"cwd"' not in record.raw:
            continue
        try:
            cwd = _CWD.decode(record.raw).cwd
        except msgspec.DecodeError:
            continue
        if cwd:
            return cwd
    return None


class _Context:
    """What every path of the answer needs: the request, the transcript, the hooks' state."""

    def __init__(
        self, inp: _Input, data_dir: Path, env: Mapping[str, str], transcript: Path | None
    ):
        self.inp = inp
        self.rows = inp.event.messages
        self.data_dir = data_dir
        self.env = env
        path = transcript or (Path(inp.transcript_path) if inp.transcript_path else None)
        self.path = path
        self.tail = _tail(path)
        self.cwd = _cwd_of(self.tail.records) if self.tail is not None else None
        self.span = _span(self.rows, self.tail, self.cwd)
        # Where each line is in the transcript (as far as it was read).
        self.lines: dict[str, int] = (
            {r.uuid: i for i, r in enumerate(self.tail.records) if r.uuid}
            if self.tail is not None
            else {}
        )
        # The boundary that opens the span being replaced; None when the transcript was not read.
        self.after: str | None = None
        if self.tail is not None:
            self.after = (
                compaction_in_progress(self.tail.records, "", "auto").previous_boundary_id or ""
            )
        self.sid = inp.session_id
        self.answered_by = ""
        self.kept = state.load_session(data_dir, self.sid) if self.sid else None

    @property
    def carry(self) -> dict[str, Any] | None:
        kept = self.kept
        if kept is None or not kept.carry or self.after is None:
            return None
        opened, carried = self.after, kept.carry_after
        if carried.startswith("after:"):
            return kept.carry if opened and opened != carried.removeprefix("after:") else None
        return kept.carry if opened and opened == carried else None

    def record(self, restored: state.Restored, carry: dict[str, Any], now: float) -> None:
        """The compaction is handed back: the SessionStart hook does not repeat it, the status
        line shows it, and its carry goes to the next compaction."""
        kept = self.kept
        if kept is None:
            return
        after = self.after or ""
        kept.handed_back.append(state.Compacted(boundary_id="", after=after))
        kept.last = restored
        kept.carry, kept.carry_after = carry, f"after:{after}"
        kept.pending_after, kept.pending_at = None, 0.0
        state.save_session(self.data_dir, kept)

    def pending(self, now: float) -> None:
        """The module goes on to Claude Code's own compaction and asks again with it."""
        kept = self.kept
        if kept is None:
            return
        kept.pending_after, kept.pending_at = self.after or "", now
        state.save_session(self.data_dir, kept)


def _covered(prepared: Prepared, ctx: _Context) -> int:
    """How many of the rows (from the first) the prepared summary covers: those up to its last
    line E, in the transcript's order (E may be a line that is no row, an attachment say); by
    the rows' own handles when the transcript was not read. 0: none."""
    rows = ctx.rows
    lines = ctx.lines
    at = lines.get(prepared.snapshot_uuid)
    if at is None:
        found = [i for i, r in enumerate(rows) if r.handle == prepared.snapshot_uuid]
        return found[-1] + 1 if found else 0
    covered = 0
    for i, row in enumerate(rows):
        line = lines.get(row.handle) if row.handle else None
        if line is not None and line <= at:
            covered = i + 1
    return covered


def _unfit(prepared: Prepared | None, ctx: _Context) -> str | None:
    """Why ``prepared`` cannot answer this compaction (None: it can)."""
    if prepared is None:
        return "no summary is prepared for this session yet"
    if (ctx.inp.event.instructions or "").strip():
        return "the compaction has instructions, which the prepared summary was written without"
    if ctx.after is not None and prepared.after != ctx.after:
        return "the prepared summary is of an earlier span of the session"
    if _covered(prepared, ctx) == 0:
        return "the prepared summary covers lines this compaction does not replace"
    return None


def _tail_start(rows: Sequence[Row], start: int) -> int:
    """Where the kept tail starts: at ``start`` or later, never on a row of tool results, and
    no more than ``TAIL_SHARE`` of the conversation; at least one row is replaced."""
    total = rows_tokens(rows)
    at = safe_start(rows, max(1, start))
    while at < len(rows) and rows_tokens(rows[at:]) > total * TAIL_SHARE:
        at = safe_start(rows, at + 1)
    return at


def _compactd(ctx: _Context, prepared: Prepared | None, now: float, started: float) -> Answer:
    """compactd's own compaction: its summary completed against the ledger, then the tail."""
    rows = ctx.rows
    event = ctx.inp.event
    if prepared is not None:
        start = _covered(prepared, ctx)
    else:
        start = turn_start(rows)
    at = _tail_start(rows, start)
    ledger = span_ledger(main_thread(ctx.span[:at]), cwd=ctx.cwd, carry=ctx.carry)
    room = _summary_chars(ctx.env, _model(ctx.tail), prepared.window if prepared else 0)
    if prepared is not None:
        summary, _ = complete_summary(
            prepared.summary, ledger, max(0, room - len(prepared.summary))
        )
        source = "prepared"
    else:
        instructions = (
            [event.instructions] if event.instructions and event.instructions.strip() else []
        )
        summary = offline_summary(ledger, limit=room, instructions=instructions)
        source = "offline"
    kept = rows[at:]
    message = agent_summary_message(
        summary,
        transcript_path=str(ctx.path) if ctx.path else None,
        trigger=event.trigger,
        recent_messages_kept=bool(kept),
    )
    out = [text_row("user", message), *(new_row(r) for r in kept)]
    counts = (len(ledger.human), len(ledger.commands), len(ledger.files))
    ctx.record(
        state.Restored(
            after=ctx.after or "",
            at=now,
            messages=counts[0],
            commands=counts[1],
            files=counts[2],
            chars=len(summary),
            post_tokens=_post_tokens(ctx.tail, rows, out),
            source=source,
            answer_ms=int((time.monotonic() - started) * 1000),
            answered_by=ctx.answered_by,
        ),
        carry_of(ledger),
        now,
    )
    return Answer(
        {"messages": out},
        source,
        out,
        tokens_before=rows_tokens(rows),
        tokens_kept=rows_tokens(kept),
        summary_chars=len(summary),
    )


def _with_claude_code(
    ctx: _Context, cc: ClaudeCodeAnswer, given: dict[str, Any], now: float, started: float
) -> Answer:
    """Claude Code's compaction, with compactd's row of what its summary left out."""
    rows = ctx.rows
    handles = {r.handle for r in rows if r.handle}
    # Rows Claude Code kept verbatim are given back by it under their own handles.
    kept_handles = {r.handle for r in cc.messages if r.handle in handles}
    written = [r for r in cc.messages if r.handle not in handles]
    summary = "\n\n".join(r.text for r in written if r.text.strip())
    replaced = [
        rec for rec, row in zip(ctx.span, rows, strict=True) if row.handle not in kept_handles
    ]
    compaction = Compaction(
        boundary_id="",
        trigger=ctx.inp.event.trigger,
        summary=summary,
        replaced=main_thread(replaced),
        previous_boundary_id=ctx.after or None,
    )
    room = _summary_chars(ctx.env, _model(ctx.tail))
    back = hand_back(
        compaction, limit=max(CONTEXT_LIMIT, room - len(summary)), cwd=ctx.cwd, carry=ctx.carry
    )
    m, k, f = back.counts
    if back.text:
        out = [*(new_row(r) for r in cc.messages), text_row("user", back.text)]
        body: dict[str, Any] = {"messages": out}
        source = "claude-code"
    else:
        # Nothing left out: Claude Code's compaction exactly as next(e) gave it.
        body = {"messages": given["messages"]}
        out = body["messages"]
        source = "unchanged"
    ctx.record(
        state.Restored(
            after=ctx.after or "",
            at=now,
            kept=back.kept_line(),
            messages=m,
            commands=k,
            files=f,
            chars=len(back.text),
            post_tokens=_post_tokens(ctx.tail, rows, out),
            source="claude-code",
            answer_ms=int((time.monotonic() - started) * 1000),
            answered_by=ctx.answered_by,
        ),
        back.carry,
        now,
    )
    kept_rows = [r for r in cc.messages if r.handle in kept_handles]
    return Answer(
        body,
        source,
        out,
        tokens_before=rows_tokens(rows),
        tokens_kept=rows_tokens(kept_rows),
        summary_chars=len(summary) + len(back.text),
    )


def answer(
    raw: bytes,
    data_dir: Path,
    env: Mapping[str, str],
    *,
    transcript: Path | None = None,
    offline: bool = False,
    now: float | None = None,
    answered_by: str = "",
) -> Answer:
    """compactd's answer to the session.compact request ``raw`` (see the module docstring).
    Raises ``CompactInputError`` for input that is not such a request."""
    started = time.monotonic()
    inp, cc = _decode(raw)
    if env.get(ENV_BLOCK, "").strip() not in ("", "0"):
        return Answer({"skip": f"compactd blocks compactions ({ENV_BLOCK} is set)"}, "skip")
    when = time.time() if now is None else now
    ctx = _Context(inp, data_dir, env, transcript)
    ctx.answered_by = answered_by
    if cc is not None:
        assert inp.claude_code is not None
        return _with_claude_code(ctx, cc, inp.claude_code, when, started)
    choice = summarizer_choice(env)
    if offline or choice.name == "offline":
        return _compactd(ctx, None, when, started)
    if choice.prepares:
        prepared = read_prepared(data_dir, ctx.sid) if ctx.sid else None
        why = _unfit(prepared, ctx)
        if why is None:
            return _compactd(ctx, prepared, when, started)
    else:
        why = choice.problem or (
            "no summarizer is configured (COMPACTD_SUMMARIZER=none): Claude Code writes the "
            "summary and compactd adds what it leaves out"
        )
    ctx.pending(when)
    # Claude Code's own summary, steered toward what the ledger checks (the module adds these to
    # the event's instructions: no PreCompact hook prints them to the user).
    return Answer({"next": why, "instructions": PRECOMPACT_INSTRUCTIONS}, "next")
