"""Typed subscriptions: the notifications of one method, decoded, as an async iterator."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec

if TYPE_CHECKING:
    from compactd_client._transport import Transport

__all__ = ["Subscription"]

N = TypeVar("N", bound=msgspec.Struct)


class Subscription(Generic[N]):
    """The notifications of one method, decoded into a Struct, as an async iterator.

    Listening starts when the subscription is created (so nothing sent between creating it and
    iterating is lost) and stops at ``close()`` or at the end of ``async with``. Iteration ends
    when the connection closes. With a ``session_id``, other sessions' notifications are
    skipped.
    """

    def __init__(
        self, client: Transport, method: str, kind: type[N], session_id: str | None = None
    ) -> None:
        self.method = method
        self._client = client
        self._kind = kind
        self._session_id = session_id
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._entry: tuple[str | None, asyncio.Queue[tuple[str, Any]]] = (method, self._queue)
        self._active = True
        client._subscribers.append(self._entry)
        if client._closed.is_set():
            self._queue.put_nowait(("", None))

    def close(self) -> None:
        if self._active:
            self._active = False
            self._client._subscribers.remove(self._entry)

    async def __aenter__(self) -> Subscription[N]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __aiter__(self) -> Subscription[N]:
        return self

    def _decode(self, params: Any) -> N | None:
        note = msgspec.convert(params, self._kind)
        if self._session_id is not None and getattr(note, "session_id", None) != self._session_id:
            return None
        return note

    async def __anext__(self) -> N:
        while True:
            name, params = await self._queue.get()
            if not name:
                # Leave the end marker for any later call, then stop.
                self._queue.put_nowait(("", None))
                raise StopAsyncIteration
            note = self._decode(params)
            if note is not None:
                return note

    async def next(self, within: float | None = None) -> N:
        """The next notification; ``TimeoutError`` after ``within`` seconds without one."""
        return await asyncio.wait_for(self.__anext__(), within)

    def drain(self) -> list[N]:
        """Every notification received so far and not yet consumed, without waiting."""
        out: list[N] = []
        while not self._queue.empty():
            name, params = self._queue.get_nowait()
            if not name:
                self._queue.put_nowait(("", None))
                break
            note = self._decode(params)
            if note is not None:
                out.append(note)
        return out
