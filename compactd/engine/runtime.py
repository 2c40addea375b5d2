"""What every operation needs, handed to it explicitly: the daemon's runtime.

A ``Runtime`` holds the options, the environment and its compaction switches, the store, the
summarizer, the microcompact settings, the notification sink, the task group and the registry
of per-session features, and it is the one writer of transcript lines (``commit``, which then
calls the features' hooks). The engine's operations take a Runtime and the session they work
on; ``App`` (the wiring) is a Runtime with the sessions and services added, so nothing in the
engine imports the app, the handlers or the server. "Runtime" names this and nothing else.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path

import anyio
import anyio.abc
import msgspec

from compactd import protocol as p
from compactd.core import constants, tokens
from compactd.core.microcompact import MicroConfig, micro_config
from compactd.engine.cancellation import point_of_no_return
from compactd.engine.features import Features
from compactd.engine.session import Session
from compactd.engine.snapshot import Snapshot
from compactd.services.fs import valid_memory_names
from compactd.services.store import SessionMeta, Store
from compactd.services.summarizer import Summarizer
from compactd.transcript.model import Record

log = logging.getLogger(__name__)

Notifier = Callable[[str, msgspec.Struct], None]


class Runtime:
    def __init__(
        self,
        options: p.InitializationOptions,
        data_dir: Path,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        self.options = options
        env = dict(os.environ if base_env is None else base_env)
        env.update(options.env or {})
        self.env: dict[str, str] = env
        # Which compaction mechanisms the environment leaves on; the environment is fixed for
        # the life of the daemon, so this is read once, not on every tokens/status.
        self.flags = tokens.flags(env)
        self.store = Store(data_dir)
        self.notifier: Notifier = lambda method, params: None
        self.task_group: anyio.abc.TaskGroup | None = None
        # The summarizer: one SDK client for the life of the process.
        self.summarizer = Summarizer(options.summarizer, self.env)
        # ``initializationOptions.microcompact`` over the defaults.
        self.micro_config: MicroConfig = micro_config(options.microcompact)
        # Memory file names looked for near the files the agent reads (CLAUDE.md, ...).
        self.memory_names = valid_memory_names(options.memory_file_names)
        # Per-session features (docs/engine.md#features): registered by the wiring (App).
        self.features: Features[Session] = Features()

    def roots(self, session: Session) -> list[str]:
        """The directories a session's file access is confined to."""
        return self.roots_of(session.meta.cwd)

    def roots_of(self, cwd: str) -> list[str]:
        """The directories file access is confined to for a session working in ``cwd``."""
        return [cwd, *(self.options.workspace_roots or [])]

    async def snapshot(self, session: Session) -> Snapshot:
        """An immutable view of ``session`` now, taken under its lock (docs/engine.md#snapshot)."""
        async with session.lock:
            return session.snapshot(self.status(session))

    def notify(self, method: str, params: msgspec.Struct) -> None:
        try:
            self.notifier(method, params)
        except Exception:  # a closed pipe must not take a handler down
            log.exception("failed to send %s", method)

    def status(self, session: Session) -> p.TokenStatus:
        status = session.status(
            self.env, self.flags, constants.MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES
        )
        return self.features.status(session, status)

    def check_thresholds(self, session: Session, status: p.TokenStatus) -> None:
        """Send ``tokens/threshold`` once per upward crossing of each level."""
        levels = {
            "warning": status.warning_threshold,
            "error": status.error_threshold,
            "autoCompact": status.auto_compact_threshold,
            "blocking": status.blocking_limit,
        }
        for level in session.threshold_tracker.update(status):
            self.notify(
                p.NOTIFY_TOKENS_THRESHOLD,
                p.ThresholdNotification(
                    session_id=session.session_id,
                    level=level,
                    tokens=status.tokens,
                    threshold=levels[level],
                    status=status,
                ),
            )

    async def append_records(self, session: Session, records: list[Record]) -> list[Record]:
        """``session/append``: commit the records whose uuid the session does not hold yet
        (appends are idempotent by uuid, so a client may safely retry one that timed out);
        returns those committed."""
        async with session.lock:
            seen: set[str] = set()
            fresh = []
            for r in records:
                if r.uuid is not None and (
                    r.uuid in seen or session.records.index_of(r.uuid) is not None
                ):
                    continue
                if r.uuid is not None:
                    seen.add(r.uuid)
                fresh.append(r)
            await self.commit(session, fresh)
        return fresh

    async def update_meta(self, session: Session, meta: SessionMeta) -> None:
        """Store a reopened session's new settings; its read-file state is rebuilt when its
        working directory moved (paths are relative to it)."""
        async with session.lock:
            if meta == session.meta:
                return
            session.check_writable()
            old_cwd = session.meta.cwd
            await point_of_no_return()
            await anyio.to_thread.run_sync(self.store.write_meta, meta)
            session.meta = meta
            if meta.cwd != old_cwd:
                await session.refresh()

    async def commit(
        self,
        session: Session,
        records: list[Record],
        *,
        mark: Callable[[str], None] | None = None,
    ) -> None:
        """Write records durably, then add them to the session. Caller holds the lock.

        The one writer of transcript lines: appends, compactions, microcompacts, undos and
        file-state lines all come through here. ``mark``: told when the write, the rebuild
        and the features are done (a compaction's ``Stages``).
        """
        if not records:
            return
        session.check_writable()
        await point_of_no_return()
        await session.add(
            records, partial(self.store.append, session.session_id, records), mark=mark
        )
        self.features.appended(session, records)
        if mark is not None:
            mark("features")
