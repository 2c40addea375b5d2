"""The progress an operation reports while it runs: one type for every long operation.

The server implements it with LSP work-done progress (``$/progress``); an operation started
without a client that supports it gets None and reports nothing. ``CompactionRun`` is one
compaction's reporting: its ``compact/status`` notifications and its progress bar, and where
its time goes (``Stages``, docs/background.md#where-the-wait-goes).
"""

from __future__ import annotations

import gc
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol, TypeAlias

from compactd import protocol as p

if TYPE_CHECKING:
    from compactd.engine.plan import CompactionSpec
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session


class WorkDone(Protocol):
    """A work-done progress the server started on the client (``$/progress``)."""

    def report(self, message: str, percentage: int | None = None) -> None: ...

    def end(self, message: str) -> None:
        """Finish the progress (idempotent) and forget its token."""

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the client cancels this progress."""


# How an operation starts its progress: with a title; None when the client has no progress.
BeginProgress: TypeAlias = Callable[[str], Awaitable[WorkDone | None]]


class _Collections:
    """The time the garbage collector has taken since the daemon started (it stops every
    thread while it runs): a stage's time may be partly its."""

    def __init__(self) -> None:
        self.total_ms = 0.0
        self._began = 0.0
        self._installed = False

    def install(self) -> None:
        if not self._installed:
            self._installed = True
            gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        elif self._began:
            self.total_ms += (time.perf_counter() - self._began) * 1000
            self._began = 0.0


_COLLECTIONS = _Collections()


class Stages:
    """Where a compaction's time goes: the milliseconds since the previous mark, by stage,
    from when the agent started waiting, and how much of it the garbage collector took
    (docs/background.md#where-the-wait-goes)."""

    def __init__(self, start: float | None = None) -> None:
        self.start = self._last = time.monotonic() if start is None else start
        self.marks: list[tuple[str, float]] = []
        _COLLECTIONS.install()
        self._gc_at_start = _COLLECTIONS.total_ms

    def mark(self, name: str) -> None:
        """Close the stage ``name``: the time since the previous mark (or the start)."""
        now = time.monotonic()
        self.marks.append((name, (now - self._last) * 1000))
        self._last = now

    def total_ms(self) -> float:
        return (self._last - self.start) * 1000

    def describe(self) -> str:
        """``total 12.3 ms: decide 1.0, rebase 0.2, ...`` (what the log line says)."""
        parts = ", ".join(f"{name} {ms:.1f}" for name, ms in self.marks)
        collected = _COLLECTIONS.total_ms - self._gc_at_start
        return f"total {self.total_ms():.1f} ms (gc {collected:.1f}): {parts}"


# The stages of the request being served (``timing``): set by compact/auto, so that its
# decision's stages and the compaction's are one account of the agent's wait.
_CURRENT: ContextVar[Stages | None] = ContextVar("compactd_stages", default=None)


@contextmanager
def timing(start: float) -> Iterator[Stages]:
    """The stages of the work done in this block (and in the tasks it awaits), from ``start``."""
    stages = Stages(start)
    token = _CURRENT.set(stages)
    try:
        yield stages
    finally:
        _CURRENT.reset(token)


def mark(name: str) -> None:
    """Close the stage ``name`` of the request being timed, if one is (``timing``)."""
    stages = _CURRENT.get()
    if stages is not None:
        stages.mark(name)


class CompactionRun:
    """One compaction as it runs: its runtime, session and spec, its id and clock, and the
    ``compact/status`` notifications and progress bar it reports through."""

    def __init__(
        self,
        runtime: Runtime,
        session: Session,
        spec: CompactionSpec,
        progress: WorkDone | None,
    ) -> None:
        self.runtime = runtime
        self.session = session
        self.spec = spec
        self.progress = progress
        self.compaction_id = str(uuid.uuid4())
        self.started = time.monotonic()
        # Within compact/auto, its account (``timing``); else the compaction's own.
        self.stages = _CURRENT.get() or Stages(self.started)

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def status(self, phase: p.Phase, message: str | None = None) -> None:
        self.runtime.notify(
            p.NOTIFY_COMPACT_STATUS,
            p.StatusNotification(
                session_id=self.session.session_id,
                compaction_id=self.compaction_id,
                phase=phase,
                trigger=self.spec.trigger,
                elapsed_ms=self.elapsed_ms(),
                message=message,
            ),
        )
        if self.progress is None:
            return
        text = message or phase
        if phase in ("completed", "failed", "cancelled"):
            self.progress.end(text)
        else:
            self.progress.report(text)
