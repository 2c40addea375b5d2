"""What ``compactd gemini hook`` answers to each Gemini CLI hook event (docs/gemini.md#the-hooks).

Gemini CLI runs it with the event as JSON on stdin, and reads its stdout as JSON (or nothing).

- ``BeforeModel`` (before each request to the model, not the compression's own calls): when the
  request holds a compression's ``<state_snapshot>``, the request's messages as they came with
  one message more, appended: what that compression dropped (``core.handback``: the user's
  words, the commands, the files), within ``CONTEXT_LIMIT`` characters. Gemini CLI forgets a
  rewritten request after sending it, so the same text goes with every request until the next
  compression; it is worked out once, at the first request that holds a snapshot compactd has
  not seen (the chat is read then, from its end), and kept in the session's state for the
  requests after it. A request without a snapshot gets nothing (nothing is printed).
- ``BeforeAgent`` (once per prompt): records the session as the current one of its folder
  (``services/hook_state``, read by ``compactd mcp``), and warns the model when the context
  nears the size at which Gemini CLI compresses (once per level and compression; off with
  ``--no-threshold-warning`` or ``COMPACTD_NO_THRESHOLD_WARNING=1``).
- every other event: nothing.

The chat is only read. Nothing here imports a model SDK or the daemon.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

from compactd.agents.gemini.format import COMPRESSION_SHARE, SNAPSHOT_OPEN, window_of
from compactd.agents.gemini.services.sessions import AGENT_DIR
from compactd.agents.gemini.services.settings import compression_threshold
from compactd.services import hook_state as state
from compactd.services.hook_events import (
    ENV_NO_WARNING,
    HookAnswer,
    HookEvent,
    HookInputError,
    context_json,
    parse_event,
    transcript_of,
)
from compactd.services.safe_io import is_regular_file

__all__ = ["CONTEXT_LIMIT", "EVENTS", "answer", "handback_request", "snapshot_of", "warning_text"]

AGENT: Final = "Gemini CLI"
# The most characters given back with each request: about 1,500 tokens by Gemini CLI's own
# estimate (4 characters a token), paid on every request until the next compression
# (docs/gemini.md#budget-and-cost). compactd's choice, below Claude Code's and Codex's 9,000,
# which are paid once.
CONTEXT_LIMIT: Final = 6_000
# The events Gemini CLI 0.61.0 sends (docs/gemini.md#hook-events).
EVENTS: Final = frozenset(
    {
        "SessionStart", "SessionEnd", "BeforeAgent", "AfterAgent", "BeforeModel", "AfterModel",
        "BeforeToolSelection", "BeforeTool", "AfterTool", "PreCompress", "Notification",
    }
)  # fmt: skip
# Gemini CLI writes the compression to the chat before it builds the next request; should the
# line still be on its way, the hook looks again for this long (compactd's bound).
_FILED_WAIT_S: Final = 3.0
_FILED_POLL_S: Final = 0.05
# The shares of Gemini CLI's compression size at which the model is warned (compactd's choice,
# as for Codex); at the size itself the CLI compresses before the prompt is sent.
WARN_SHARES: Final = (("warning", 0.8), ("near", 0.95))
_SNAPSHOT_CLOSE: Final = "</state_snapshot>"


class _Request(msgspec.Struct):
    messages: list[dict[str, Any]] = msgspec.field(default_factory=list)


class _ModelEvent(msgspec.Struct):
    llm_request: _Request | None = None


def answer(
    raw: bytes, data_dir: Path, env: Mapping[str, str], *, warning: bool = True
) -> HookAnswer:
    """The answer to the hook event ``raw`` (raises ``HookInputError`` or ``TailError``)."""
    event = parse_event(raw, AGENT)
    name = event.hook_event_name
    if name == "BeforeModel":
        return before_model(raw, event, data_dir)
    if name == "BeforeAgent":
        _record(event, data_dir)
        enabled = warning and env.get(ENV_NO_WARNING, "").strip() in ("", "0")
        return _warning(event, data_dir) if enabled else HookAnswer()
    if name in EVENTS:
        return HookAnswer()
    raise HookInputError(f"compactd does not handle the Gemini CLI hook event {name!r}")


def _record(event: HookEvent, data_dir: Path) -> None:
    # Only a regular file is recorded as the session's chat (a FIFO named there would be
    # handed to the MCP server as the current session; docs/safe-io.md).
    if (
        event.session_id
        and event.transcript_path
        and event.cwd
        and is_regular_file(event.transcript_path)
    ):
        current = state.CurrentSession(
            session_id=event.session_id, transcript_path=event.transcript_path, cwd=event.cwd
        )
        state.record_current(data_dir, AGENT_DIR, current)


# -- the hand-back ---------------------------------------------------------------------------------


def snapshot_of(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The ``<state_snapshot>`` a request opens with (its first message holds the session
    context and the snapshot), or None."""
    for message in messages[:2]:
        content = message.get("content")
        if not isinstance(content, str):
            continue
        at = content.find(SNAPSHOT_OPEN)
        if at < 0:
            continue
        end = content.find(_SNAPSHOT_CLOSE, at)
        return content[at : end + len(_SNAPSHOT_CLOSE) if end >= 0 else len(content)].strip()
    return None


def _key(snapshot: str) -> str:
    return "snapshot:" + hashlib.sha256(snapshot.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def handback_request(messages: Sequence[Any], text: str) -> str:
    """BeforeModel's answer: the messages as they came, and ``text`` appended as one more
    (docs/gemini.md#beforemodel: returned messages replace the texts by position, and the
    ones past the end are appended)."""
    out = {
        "hookSpecificOutput": {
            "hookEventName": "BeforeModel",
            "llm_request": {"messages": [*messages, {"role": "user", "content": text}]},
        }
    }
    return msgspec.json.encode(out).decode()


def before_model(raw: bytes, event: HookEvent, data_dir: Path) -> HookAnswer:
    try:
        request = msgspec.json.decode(raw, type=_ModelEvent).llm_request
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise HookInputError(
            f"BeforeModel's llm_request is not one Gemini CLI sends: {exc}"
        ) from None
    messages = request.messages if request is not None else []
    snapshot = snapshot_of(messages)
    if snapshot is None or _handed(messages):
        return HookAnswer()
    key = _key(snapshot)
    kept = state.load_session(data_dir, AGENT_DIR, event.session_id)
    last = kept.last
    if last is None or last.boundary_id != key:
        last = _hand_back(event, kept, snapshot, key, data_dir)
    if last is None or not last.text:
        return HookAnswer()
    return HookAnswer(handback_request(messages, last.text))


def _handed(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the request already carries a hand-back (compactd installed twice: for the user
    and for the project; the first hook's answer is the one the second is given)."""
    from compactd.core.handback import handback_title

    title = handback_title(AGENT)
    return any(str(m.get("content", "")).startswith(title) for m in messages[2:])


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def _compaction_of(records: Sequence[Any], snapshot: str, *, whole: bool) -> Any:
    """The compaction in ``records`` whose summary is ``snapshot``, else None."""
    from compactd.core.handback import last_compaction
    from compactd.core.tools import blocks_text

    for i in range(len(records) - 1, -1, -1):
        entry = records[i].entry
        if entry.type == "user" and entry.is_compact_summary:
            if _same(blocks_text(entry.blocks), snapshot):
                return last_compaction(records[: i + 1], whole=whole)
    return None


def _hand_back(
    event: HookEvent, kept: state.SessionState, snapshot: str, key: str, data_dir: Path
) -> state.Restored | None:
    """Work out and keep what the compression whose snapshot is ``snapshot`` dropped; None
    when the chat does not hold it (then nothing is kept, and the next request looks again)."""
    from compactd.core.handback import hand_back
    from compactd.services.agent_tail import read_tail

    deadline = time.monotonic() + _FILED_WAIT_S
    while True:
        tail = read_tail(transcript_of(event))
        compaction = _compaction_of(tail.records, snapshot, whole=tail.whole)
        if compaction is not None or time.monotonic() >= deadline:
            break
        time.sleep(_FILED_POLL_S)
    if compaction is None:
        return None
    after = compaction.previous_boundary_id or ""
    carry = kept.carry if kept.carry and kept.carry_after == after else None
    back = hand_back(
        compaction, limit=CONTEXT_LIMIT, cwd=event.cwd or None, carry=carry, agent=AGENT
    )
    m, k, f = back.counts
    kept.last = state.Restored(
        boundary_id=key, after=after, at=time.time(), kept=back.kept_line(), messages=m,
        commands=k, files=f, chars=len(back.text), text=back.text,
    )  # fmt: skip
    kept.handed_back.append(state.Compacted(boundary_id=compaction.boundary_id, after=after))
    # The next compression's span opens with this one's snapshot: its carry is checked there.
    kept.carry, kept.carry_after = back.carry, compaction.boundary_id
    state.save_session(data_dir, AGENT_DIR, kept)
    _record(event, data_dir)
    return kept.last


# -- the threshold warning -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Level:
    tokens: int
    limit: int  # Gemini CLI's compression size
    window: int
    threshold: float
    name: str | None  # the highest warning share reached

    @property
    def share(self) -> float:
        return self.tokens / self.limit if self.limit > 0 else 1.0


def level(tokens: int, model: str | None, threshold: float | None) -> Level:
    """``tokens`` against the size at which Gemini CLI compresses: its threshold (0.5 by
    default) of the model's window."""
    window = window_of(model)
    share = threshold or COMPRESSION_SHARE
    limit = int(window * share)
    name = None
    for level_name, at in WARN_SHARES:
        if tokens >= at * limit:
            name = level_name
    return Level(tokens, limit, window, share, name)


def warning_text(g: Level) -> str:
    return (
        f"compactd: the context holds {g.tokens:,} tokens, {g.share:.0%} of the size at which "
        f"Gemini CLI compresses it ({g.limit:,}: {g.threshold:.0%} of a {g.window:,}-token "
        "window). When it does, every earlier message, command and result is replaced by the "
        "CLI's own summary (a state snapshot). If you are in the middle of something, write "
        "down now where you are (the files, the commands and their results, the next step). "
        "After the compression compactd gives back what the summary left out, and the `recall` "
        "tool of the compactd MCP server finds the rest."
    )


def _latest(path: Path) -> tuple[int, str | None, str]:
    """The latest usage the chat records (its last answer's total), that answer's model, and
    the latest compression's id (empty: none), read from the chat's end."""
    from compactd.services.agent_tail import read_tail

    tail = read_tail(path, need="usage")
    tokens, model, boundary = 0, None, ""
    for record in reversed(tail.records):
        entry = record.entry
        if entry.is_compact_boundary:
            boundary = entry.uuid or ""
            break
        message = entry.message if entry.type == "assistant" else None
        if message is not None and message.usage is not None and not tokens:
            tokens, model = message.usage.total(), message.model
    return tokens, model, boundary


def _warning(event: HookEvent, data_dir: Path) -> HookAnswer:
    tokens, model, boundary = _latest(transcript_of(event))
    g = level(tokens, model, compression_threshold(event.cwd or None))
    # At the size itself Gemini CLI compresses before the model sees the prompt.
    if g.name is None or g.share >= 1.0:
        return HookAnswer()
    kept = state.load_session(data_dir, AGENT_DIR, event.session_id)
    mark = f"{boundary}:{g.name}"
    if kept.warned == mark:
        return HookAnswer()
    kept.warned = mark
    state.save_session(data_dir, AGENT_DIR, kept)
    line = (
        f"compactd: context at {g.share:.0%} of Gemini CLI's compression size ({g.tokens:,} tokens)"
    )
    return HookAnswer(context_json("BeforeAgent", warning_text(g), line))
