"""The progress an operation reports while it runs: one type for every long operation.

The server implements it with LSP work-done progress (``$/progress``); an operation started
without a client that supports it gets None and reports nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeAlias


class WorkDone(Protocol):
    """A work-done progress the server started on the client (``$/progress``)."""

    def report(self, message: str, percentage: int | None = None) -> None: ...

    def end(self, message: str) -> None:
        """Finish the progress (idempotent) and forget its token."""

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the client cancels this progress."""


# How an operation starts its progress: with a title; None when the client has no progress.
BeginProgress: TypeAlias = Callable[[str], Awaitable[WorkDone | None]]
