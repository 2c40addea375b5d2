"""Types shared by handler modules."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from compactd import protocol as p

if TYPE_CHECKING:
    from compactd.app import App


class Context(Protocol):
    """What the server offers a handler besides its params."""

    @property
    def supports_work_done_progress(self) -> bool: ...


Handler = Callable[["App", Any, Context], Awaitable[msgspec.Struct]]


def not_implemented(method: str) -> Handler:
    async def handler(app: App, params: Any, ctx: Context) -> msgspec.Struct:
        raise p.CompactdError(
            p.ErrorCode.NOT_IMPLEMENTED, f"{method} is not implemented in this version"
        )

    return handler
