"""Types shared by handler modules."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

if TYPE_CHECKING:
    from compactd.app import App


class WorkDone(Protocol):
    """A work-done progress the server started on the client (``$/progress``)."""

    def report(self, message: str, percentage: int | None = None) -> None: ...

    def end(self, message: str) -> None:
        """Finish the progress (idempotent) and forget its token."""

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the client cancels this progress."""


class Context(Protocol):
    """What the server offers a handler besides its params."""

    @property
    def supports_work_done_progress(self) -> bool: ...

    async def begin_progress(self, title: str, message: str | None = None) -> WorkDone | None:
        """Create and begin a cancellable work-done progress; None if the client has none."""


Handler = Callable[["App", Any, Context], Awaitable[msgspec.Struct]]
