"""compactd's summary for a running Claude Code session, prepared in the background.

``compactd mcp``, the process Claude Code starts with every session (the compactd plugin
declares it) and stops with it, runs this beside its MCP tools when ``COMPACTD_SUMMARIZER``
chooses a model (docs/claude-code.md#prepared-in-the-background). It opens the session's
transcript in compactd's engine as a followed session (docs/follow.md), lets the engine's
background preparation work on it as on compactd's own sessions (docs/background.md: the start
level, the refresh and the catch-up that keep the tail short, the persisted summary), and each
time a summary is ready it keeps what ``compactd claude-code session-compact`` needs to answer
the next compaction at once (``services.prepared``): the summary, the last line it covers
and the compaction whose span it summarizes. No hook ever starts this: only the process that
lives as long as the session.

Which session: the one the plugin's hooks record for the project folder (``services.state``:
every hook event names the session and its transcript), else ``CLAUDE_CODE_SESSION_ID``, which
Claude Code passes to the MCP servers it starts. That variable alone does not do: Observed
(2.1.332), ``claude --continue`` passes a new id while it goes on writing the continued session's
transcript. When a hook records another session later (``/clear``, ``/resume``), the preparation
moves to it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio
import msgspec

from compactd import protocol as p
from compactd.agents.claude_code.services import state as claude_state
from compactd.agents.claude_code.services.choice import summarizer_choice
from compactd.agents.claude_code.services.prepared import Prepared, write_prepared
from compactd.app import App
from compactd.core.prompts import format_summary
from compactd.engine.background import preparation_of

__all__ = ["ENV_SESSION_ID", "Target", "prepare", "target_of"]

log = logging.getLogger(__name__)

#: What Claude Code names its session by in the environment of the MCP servers it starts
#: (Observed (2.1.332)).
ENV_SESSION_ID: Final = "CLAUDE_CODE_SESSION_ID"
# How often to look for the session (a hook's record, its transcript) and for a change of it.
_WAIT_S: Final = 1.0
# A hook's record of the current session counts when it is this recent at the process's start
# (the hooks of the session that starts this process run about when it starts).
_RECENT_S: Final = 30.0
# compactd's own id for its copy of a Claude Code session.
_PREFIX: Final = "claude-code-"


@dataclass(frozen=True, slots=True)
class Target:
    """The Claude Code session to prepare for."""

    session_id: str
    transcript: Path
    cwd: str


def target_of(env: Mapping[str, str], data_dir: Path, cwd: str, since: float) -> Target | None:
    """The session this process serves, once its transcript exists (see the module
    docstring); None while none is known."""
    current = claude_state.find_current(data_dir, cwd)
    if current is not None and current.found_by == "hook" and current.updated_at >= since:
        return Target(current.session_id, Path(current.transcript_path), cwd)
    sid = env.get(ENV_SESSION_ID, "").strip()
    if sid:
        path = claude_state.project_dir(cwd) / f"{sid}.jsonl"
        if path.is_file():
            return Target(sid, path, cwd)
    return None


class _Exporter:
    """Keeps each summary the engine gets ready for Claude Code's side (the notification sink of
    the engine in this process)."""

    def __init__(self, app: App, data_dir: Path, target: Target, sid: str) -> None:
        self.app = app
        self.data_dir = data_dir
        self.target = target
        self.sid = sid

    def __call__(self, method: str, params: msgspec.Struct) -> None:
        if (
            method == p.NOTIFY_COMPACT_STATUS
            and isinstance(params, p.StatusNotification)
            and params.session_id == self.sid
            and params.phase == "prepared"
            and self.app.task_group is not None
        ):
            self.app.task_group.start_soon(self.export)

    async def export(self) -> None:
        session = self.app.sessions.get(self.sid)
        feature = preparation_of(session) if session is not None else None
        job = feature.ready(session) if feature is not None and session is not None else None
        if job is None or job.plan is None or job.outcome is None:
            return
        snap = job.plan.snapshot
        after = next((r.uuid for r in snap.context if r.entry.is_compact_boundary and r.uuid), "")
        if not snap.last_uuid:
            return
        outcome = job.outcome
        prepared = Prepared(
            session_id=self.target.session_id,
            after=after,
            snapshot_uuid=snap.last_uuid,
            summary=format_summary(outcome.text),
            summarizer=f"{outcome.mode} {outcome.model}".strip(),
            covered_tokens=job.covered_tokens,
            duration_ms=job.duration_ms,
            usage=outcome.usage,
            prepared_at=time.time(),
            window=snap.status.effective_window,
        )
        await anyio.to_thread.run_sync(write_prepared, self.data_dir, prepared)
        log.info(
            "claude code session %s: a summary is ready (covers %d tokens, %d ms)",
            self.target.session_id,
            job.covered_tokens,
            job.duration_ms,
        )


async def prepare(data_dir: Path, cwd: str, env: Mapping[str, str]) -> None:
    """Follow the Claude Code session and prepare its summaries until cancelled (see the
    module docstring). Returns at once when no model is chosen."""
    choice = summarizer_choice(env)
    if not choice.prepares:
        if choice.problem:
            log.warning("compactd: %s", choice.problem)
        return
    assert choice.options is not None
    since = time.time() - _RECENT_S
    target: Target | None = None
    while True:
        found = target_of(env, data_dir, cwd, since)
        if found is None or found == target:
            await anyio.sleep(_WAIT_S)  # noqa: ASYNC110 - a file or a record appearing: no event
            continue
        target = found
        async with anyio.create_task_group() as tg:
            tg.start_soon(_follow, data_dir, cwd, env, choice.options, target)
            # The session this process serves may change (/clear, /resume): a hook records
            # the new one, and the preparation moves to it.
            while target_of(env, data_dir, cwd, since) in (None, target):  # noqa: ASYNC110
                await anyio.sleep(_WAIT_S)  # a record changing: no event to wait on
            tg.cancel_scope.cancel()


async def _follow(
    data_dir: Path,
    cwd: str,
    env: Mapping[str, str],
    summarizer: dict[str, object],
    target: Target,
) -> None:
    """Follow ``target`` in compactd's engine and keep what it prepares, until cancelled."""
    options = msgspec.convert(
        {"summarizer": summarizer, "dataDir": str(data_dir)}, p.InitializationOptions
    )
    app = App(options, base_env=env)
    app.background.followed = True
    sid = _PREFIX + target.session_id
    async with anyio.create_task_group() as tg:
        app.task_group = tg
        app.notifier = _Exporter(app, data_dir, target, sid)
        try:
            await app.open_session(
                p.OpenParams(
                    session_id=sid, cwd=cwd, transcript_path=str(target.transcript), follow=True
                )
            )
        except p.CompactdError as exc:
            log.warning("compactd: cannot follow %s: %s", target.transcript, exc.message)
            tg.cancel_scope.cancel()
            return
        log.info("compactd: preparing summaries for Claude Code session %s", target.session_id)
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await app.close_session(sid)
