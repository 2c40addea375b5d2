"""Watching files on disk with watchfiles: one watcher for the daemon, debounced per path.

Sessions say which directories they care about (``DirWatcher.set_dirs``); one ``awatch`` runs
over the union of them, non-recursively, and is restarted when the union changes. One watcher
for the whole daemon keeps to one worker thread however many sessions are open (each
``awatch`` holds a thread while it waits). Raw events are filtered by ``interest`` and
debounced per path: a path is reported once it has been quiet for ``quiet`` seconds, or at the
latest ``max_wait`` seconds after its first event, so a burst of writes (an editor saving
twice, a formatter, a script) becomes one report. Reports go to ``on_flush`` one at a time.

Both loops run inside ``DirWatcher.run``, which the owner starts in the daemon's task group;
a failing watch or handler is logged and never ends the loop.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Final, Generic, TypeVar

import anyio
import watchfiles

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

# A path is reported after this long without a new event for it (compactd's choice: long
# enough to swallow an editor's save sequence, short enough to report well within 2 s).
WATCH_QUIET_SECONDS: Final = 0.3
# ... but no later than this after its first event, so a file rewritten continuously is still
# reported now and then.
WATCH_MAX_WAIT_SECONDS: Final = 2.0
# watchfiles groups raw events for up to ``debounce`` ms and waits ``step`` ms for more; the
# per-path debouncer above does the real coalescing, so keep these short.
_AWATCH_DEBOUNCE_MS: Final = 200
_AWATCH_STEP_MS: Final = 30
# After a watch fails (a directory vanished, too many watches), wait before trying again.
_RETRY_SECONDS: Final = 1.0
# Upper bound on watched directories: beyond it the least important are left out (the owner
# passes them in priority order).
MAX_WATCHED_DIRS: Final = 512


class Debouncer(Generic[K]):
    """Trailing-edge debounce per key, with a cap on how long a key can be held back."""

    def __init__(self, quiet: float, max_wait: float) -> None:
        self.quiet = quiet
        self.max_wait = max_wait
        self._pending: dict[K, tuple[float, float]] = {}  # key -> (first event, last event)

    def __len__(self) -> int:
        return len(self._pending)

    def push(self, key: K, now: float) -> None:
        first, _ = self._pending.get(key, (now, now))
        self._pending[key] = (first, now)

    def _due_at(self, first: float, last: float) -> float:
        return min(last + self.quiet, first + self.max_wait)

    def next_due(self) -> float | None:
        if not self._pending:
            return None
        return min(self._due_at(f, last) for f, last in self._pending.values())

    def pop_due(self, now: float) -> list[K]:
        due = [k for k, (f, last) in self._pending.items() if self._due_at(f, last) <= now]
        for k in due:
            del self._pending[k]
        return due

    def discard(self, key: K) -> None:
        self._pending.pop(key, None)


class DirWatcher:
    """One ``awatch`` over the directories every owner asked for, with per-path debouncing."""

    def __init__(
        self,
        on_flush: Callable[[str], Awaitable[None]],
        interest: Callable[[str], bool],
        *,
        quiet: float = WATCH_QUIET_SECONDS,
        max_wait: float = WATCH_MAX_WAIT_SECONDS,
    ) -> None:
        self._on_flush = on_flush
        self._interest = interest
        self._owners: dict[str, tuple[str, ...]] = {}
        self._debouncer: Debouncer[str] = Debouncer(quiet, max_wait)
        self._changed = anyio.Event()
        self._wake = anyio.Event()
        # Directories the running ``awatch`` covers; empty while none runs.
        self.active: frozenset[str] = frozenset()
        # Set (and replaced) whenever a new ``awatch`` starts covering ``active``.
        self._activated = anyio.Event()

    # -- what to watch --------------------------------------------------------------------------

    def set_dirs(self, owner: str, dirs: list[str]) -> None:
        """Replace ``owner``'s directories (most important first)."""
        new = tuple(dict.fromkeys(dirs))
        if self._owners.get(owner) == new:
            return
        before = self.wanted()
        self._owners[owner] = new
        if self.wanted() != before:
            self._changed.set()

    def drop(self, owner: str) -> None:
        if self._owners.pop(owner, None) is not None:
            self._changed.set()

    def wanted(self) -> frozenset[str]:
        merged: dict[str, None] = {}
        for dirs in self._owners.values():
            merged.update(dict.fromkeys(dirs))
        return frozenset(list(merged)[:MAX_WATCHED_DIRS])

    def covers(self, path: str) -> bool:
        """Whether a change of ``path`` would be seen by the running watch now."""
        return os.path.dirname(path) in self.active

    async def until_covers(self, path: str) -> None:
        """Return once a change of ``path`` would be seen (the caller bounds the wait)."""
        while not self.covers(path):
            await self._activated.wait()

    # -- loops ----------------------------------------------------------------------------------

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_loop)
            tg.start_soon(self._flush_loop)

    async def _watch_loop(self) -> None:
        while True:
            changed = self._changed = anyio.Event()
            dirs = sorted(d for d in self.wanted() if os.path.isdir(d))
            if not dirs:
                await changed.wait()
                continue
            try:
                await self._watch(dirs, changed)
            except Exception:
                log.exception("watching %d directories failed; retrying", len(dirs))
                with anyio.move_on_after(_RETRY_SECONDS):
                    await changed.wait()

    async def _watch(self, dirs: list[str], changed: anyio.Event) -> None:
        stop = anyio.Event()

        async def stop_on_change() -> None:
            # ``finally``: when the daemon shuts down this task is cancelled while the watch
            # thread is blocked; setting the stop event is what lets that thread return (it
            # checks the event every step), so shutdown is not held up.
            try:
                await changed.wait()
            finally:
                stop.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_change)
            try:
                # ``awatch`` registers its watches before it first suspends, so other tasks
                # that see ``active`` can rely on events being caught from then on.
                self.active = frozenset(dirs)
                # Waiters run once this task suspends inside ``awatch``: after it registered.
                self._activated.set()
                self._activated = anyio.Event()
                async for batch in watchfiles.awatch(
                    *dirs,
                    stop_event=stop,
                    recursive=False,
                    watch_filter=None,
                    debounce=_AWATCH_DEBOUNCE_MS,
                    step=_AWATCH_STEP_MS,
                    ignore_permission_denied=True,
                ):
                    self._take(batch)
            finally:
                self.active = frozenset()
                tg.cancel_scope.cancel()

    def _take(self, batch: set[tuple[watchfiles.Change, str]]) -> None:
        now = time.monotonic()
        pushed = False
        for _change, path in batch:
            if self._interest(path):
                self._debouncer.push(path, now)
                pushed = True
        if pushed:
            self._wake.set()

    async def _flush_loop(self) -> None:
        while True:
            due = self._debouncer.next_due()
            if due is None:
                await self._wake.wait()
            else:
                with anyio.move_on_after(max(0.0, due - time.monotonic())):
                    await self._wake.wait()
            self._wake = anyio.Event()
            for path in self._debouncer.pop_due(time.monotonic()):
                try:
                    await self._on_flush(path)
                except Exception:  # one failing handler must not stop the others
                    log.exception("handling a change of %s failed", path)
