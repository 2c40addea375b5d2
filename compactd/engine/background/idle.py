"""Idleness of one session: when it last grew, and a watch that fires once it has been idle.

A session above half its threshold that has had no append for ``idleMinutes`` prepares a
summary then, before a one-hour prompt cache expires, while the summary request still reads
the cached prefix (docs/background.md#idle). The watch runs in the daemon's task group and
fires once per idle spell: it waits for the next append before it can fire again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import anyio.abc

__all__ = ["IdleWatch"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class IdleWatch:
    """When the session last grew, and the watch that calls ``on_idle`` after ``idle_s``."""

    idle_s: float
    last_activity: float = field(default_factory=time.monotonic)
    activity: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope | None = None
    closed: bool = False

    def touch(self, now: float) -> None:
        """The session grew at ``now``."""
        self.last_activity = now
        self.activity.set()
        self.activity = anyio.Event()

    def start(self, task_group: anyio.abc.TaskGroup, on_idle: Callable[[], None]) -> None:
        task_group.start_soon(self._watch, on_idle)

    def close(self) -> None:
        self.closed = True
        if self.scope is not None:
            self.scope.cancel()

    async def _watch(self, on_idle: Callable[[], None]) -> None:
        with anyio.CancelScope() as scope:
            self.scope = scope
            if self.closed:
                return
            while True:
                wait = self.last_activity + self.idle_s - time.monotonic()
                if wait > 0:
                    await anyio.sleep(wait)
                    continue
                try:
                    on_idle()
                except Exception:
                    log.exception("idle preparation failed")
                await self.activity.wait()  # idle again only after the next append
