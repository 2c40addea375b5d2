"""What ``compactd codex hook`` answers to each Codex hook event (docs/codex.md#the-hooks).

Codex runs it with the event as JSON on stdin. ``answer`` records the session as the current
one of its folder (``services/hook_state``, read by ``compactd mcp``), then by event:

- ``SessionStart`` with source ``compact`` (right after Codex's compaction, which Codex has
  already written to the rollout) or ``resume``: the latest compaction's dropped items, once
  (``core.handback``): the commands and files of the span it replaced and the user messages
  Codex did not keep (it keeps most of them word for word, and the hand-back checks what it
  kept); the state remembers which compactions were handed back, so none is twice. The text
  becomes a developer message right after Codex's summary.
- ``UserPromptSubmit``: a warning to the model when the context nears Codex's automatic
  compaction (once per level and compaction; off with ``COMPACTD_NO_THRESHOLD_WARNING=1``).
- every other event: nothing.

The rollout is only read, from its end. Nothing here imports a model SDK or the daemon.
"""

from __future__ import annotations

import os
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

from compactd.agents.codex.services.sessions import AGENT_DIR, codex_home
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

__all__ = ["CONTEXT_LIMIT", "EVENTS", "answer"]

AGENT: Final = "Codex"
# The most characters handed back at once (compactd's own bound, as for Claude Code: a few
# thousand tokens, a small share of the window Codex has just freed).
CONTEXT_LIMIT: Final = 9_000
# The events Codex sends (docs/codex.md#hooks); those compactd has nothing to say to get nothing.
EVENTS: Final = frozenset(
    {"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "PreCompact",
     "PostCompact", "Stop"}
)  # fmt: skip
# Codex writes its ``compacted`` line before it runs SessionStart(compact); the line may still be
# on its way to the file: the hook looks again for this long (compactd's bound).
_FILED_WAIT_S: Final = 3.0
_FILED_POLL_S: Final = 0.05
# Codex compacts at ``model_auto_compact_token_limit``, else at this share of the window
# (docs/codex.md#the-compaction); compactd warns at the first share of it, then at the second.
CODEX_AUTO_SHARE: Final = 0.9
WARN_SHARES: Final = (("warning", 0.8), ("near", 0.95))
# How much of the rollout's end is read for the latest usage and window.
_USAGE_TAIL: Final = 4 * 1024 * 1024


def answer(raw: bytes, data_dir: Path, env: Mapping[str, str]) -> HookAnswer:
    """The answer to the hook event ``raw`` (raises ``HookInputError`` or ``TailError``)."""
    event = parse_event(raw, AGENT)
    # Only a regular file is recorded as the session's rollout (a FIFO named there would be
    # handed to the MCP server as the current session; docs/safe-io.md).
    if (
        event.session_id
        and event.transcript_path
        and event.cwd
        and is_regular_file(event.transcript_path)
    ):
        state.record_current(
            data_dir,
            AGENT_DIR,
            state.CurrentSession(
                session_id=event.session_id, transcript_path=event.transcript_path, cwd=event.cwd
            ),
        )
    name = event.hook_event_name
    if name == "SessionStart":
        return session_start(event, data_dir)
    if name == "UserPromptSubmit":
        return _warning(event, data_dir, env)
    if name in EVENTS:
        return HookAnswer()
    raise HookInputError(f"compactd does not handle the Codex hook event {name!r}")


# -- the hand-back ---------------------------------------------------------------------------------


def _due(event: HookEvent, kept: state.SessionState) -> Any:
    """The latest compaction filed in the rollout when it was not handed back yet, else None.

    After a compaction (``compact``) Codex has just written it: when the latest one in the file
    is one already handed back, the hook looks again for a moment."""
    from compactd.core.handback import last_compaction
    from compactd.services.agent_tail import read_tail

    done = {c.boundary_id for c in kept.handed_back}
    deadline = time.monotonic() + (_FILED_WAIT_S if event.source == "compact" else 0.0)
    while True:
        tail = read_tail(transcript_of(event))
        found = last_compaction(tail.records, whole=tail.whole)
        if found is not None and found.boundary_id not in done:
            return found
        if time.monotonic() >= deadline:
            return None
        time.sleep(_FILED_POLL_S)


def session_start(event: HookEvent, data_dir: Path) -> HookAnswer:
    if event.source not in ("compact", "resume"):
        return HookAnswer()
    from compactd.core.handback import hand_back

    kept = state.load_session(data_dir, AGENT_DIR, event.session_id)
    compaction = _due(event, kept)
    if compaction is None:
        return HookAnswer()
    after = compaction.previous_boundary_id or ""
    carry = kept.carry if kept.carry and kept.carry_after == after else None
    back = hand_back(
        compaction, limit=CONTEXT_LIMIT, cwd=event.cwd or None, carry=carry, agent=AGENT
    )
    m, k, f = back.counts
    kept.handed_back.append(state.Compacted(boundary_id=compaction.boundary_id, after=after))
    kept.last = state.Restored(
        boundary_id=compaction.boundary_id, after=after, at=time.time(), kept=back.kept_line(),
        messages=m, commands=k, files=f, chars=len(back.text),
    )  # fmt: skip
    # The next compaction's span opens with this one's summary: its carry is checked there.
    kept.carry, kept.carry_after = back.carry, compaction.boundary_id
    state.save_session(data_dir, AGENT_DIR, kept)
    if not back.text:
        return HookAnswer()
    return HookAnswer(context_json("SessionStart", back.text))


# -- the threshold warning ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Level:
    tokens: int
    limit: int  # Codex's automatic compaction
    window: int | None
    name: str | None  # the highest warning share reached

    @property
    def share(self) -> float:
        return self.tokens / self.limit if self.limit > 0 else 1.0


def _config_limit(env: Mapping[str, str]) -> int | None:
    """``model_auto_compact_token_limit`` from Codex's config.toml, when set."""
    home = Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else codex_home()
    try:
        with open(home / "config.toml", "rb") as fh:
            config = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError):
        return None
    limit = config.get("model_auto_compact_token_limit")
    return limit if isinstance(limit, int) and limit > 0 else None


def _latest(path: Path) -> tuple[int, int | None, str]:
    """The latest context size the rollout records (the last response's usage), its window,
    and the latest compaction's line (empty: none), read from its end."""
    from compactd.services.agent_tail import read_tail

    tail = read_tail(path, need="usage", limit=_USAGE_TAIL)
    tokens, boundary = 0, ""
    for record in reversed(tail.records):
        entry = record.entry
        if entry.is_compact_boundary:
            boundary = boundary or entry.uuid or ""
            break
        usage = entry.message.usage if entry.type == "assistant" and entry.message else None
        if usage is not None and not tokens:
            tokens = usage.total()
    return tokens, _window(path), boundary


def _window(path: Path) -> int | None:
    """The window the rollout's latest turn reports (``model_context_window``)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - _USAGE_TAIL))
            data = fh.read(_USAGE_TAIL)
    except OSError:
        return None
    at = data.rfind(b'"model_context_window"')
    if at < 0:
        return None
    start = data.rfind(b"\n", 0, at) + 1
    end = data.find(b"\n", at)
    try:
        line = msgspec.json.decode(data[start : end if end >= 0 else len(data)])
    except msgspec.DecodeError:
        return None
    found: list[int] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            window = value.get("model_context_window")
            if isinstance(window, int) and window > 0:
                found.append(window)
            for v in value.values():
                walk(v)

    walk(line)
    return found[0] if found else None


def level(tokens: int, window: int | None, configured: int | None) -> Level:
    """``tokens`` against Codex's automatic compaction: its configured limit, else 90% of the
    window (none known: nothing to measure against)."""
    limit = configured or (int(window * CODEX_AUTO_SHARE) if window else 0)
    name = None
    for level_name, share in WARN_SHARES:
        if limit and tokens >= share * limit:
            name = level_name
    return Level(tokens, limit, window, name)


def warning_text(g: Level) -> str:
    window = f" of a {g.window:,}-token window" if g.window else ""
    return (
        f"compactd: the context holds {g.tokens:,} tokens, {g.share:.0%} of the size at which "
        f"Codex compacts it ({g.limit:,}{window}). Codex will compact soon, and its summary "
        "drops every command, output and patch of the conversation so far. If you are in the "
        "middle of something, write down now where you are (the files, the commands and their "
        "results, the next step). After the compaction compactd gives back the commands and "
        "files Codex dropped, and the `recall` tool of the compactd MCP server finds the rest."
    )


def _warning(event: HookEvent, data_dir: Path, env: Mapping[str, str]) -> HookAnswer:
    if env.get(ENV_NO_WARNING, "").strip() not in ("", "0"):
        return HookAnswer()
    tokens, window, boundary = _latest(transcript_of(event))
    g = level(tokens, window, _config_limit(env))
    if g.name is None:
        return HookAnswer()
    kept = state.load_session(data_dir, AGENT_DIR, event.session_id)
    mark = f"{boundary}:{g.name}"
    if kept.warned == mark:
        return HookAnswer()
    kept.warned = mark
    state.save_session(data_dir, AGENT_DIR, kept)
    line = f"compactd: context at {g.share:.0%} of Codex's auto-compact limit ({g.tokens:,} tokens)"
    return HookAnswer(context_json("UserPromptSubmit", warning_text(g), line))
