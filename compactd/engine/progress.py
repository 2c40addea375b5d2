"""The progress an operation reports while it runs: one type for every long operation.

The server implements it with LSP work-done progress (``$/progress``); an operation started
without a client that supports it gets None and reports nothing. ``CompactionRun`` is one
compaction's reporting: its ``compact/status`` notifications and its progress bar.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
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
