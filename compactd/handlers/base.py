"""Types shared by handler modules."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from compactd.engine.progress import WorkDone

if TYPE_CHECKING:
    from compactd.app import App


class Context(Protocol):
    """What the server offers a handler besides its params."""

    @property
    def supports_work_done_progress(self) -> bool: ...

    async def begin_progress(self, title: str, message: str | None = None) -> WorkDone | None:
        """Create and begin a cancellable work-done progress; None if the client has none."""


Handler = Callable[["App", Any, Context], Awaitable[msgspec.Struct]]
