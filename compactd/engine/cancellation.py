"""Cancellation of a request up to its point of no return, and not after.

A client that cancels a request (``$/cancelRequest``) must be able to trust the answer: an
error with ``data.code: cancelled`` means nothing was written, and any other answer is what
happened. So each request runs under a ``Guard``. The first durable write a request makes
calls ``point_of_no_return()``: from then on a cancel is ignored and the request answers with
its real result. A cancel that came before that moment stops the request before it writes.

The guard of the running request is found through a context variable, so the code that writes
(``Runtime.commit`` and the few other writers) needs no extra parameter.
"""

from __future__ import annotations

from contextvars import ContextVar, Token

import anyio


class Guard:
    """The cancellation state of one request."""

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.committed = False

    def cancel(self) -> bool:
        """Cancel the request if it has not written anything yet; True when it was cancelled."""
        if self.committed:
            return False
        self.scope.cancel()
        return True


_current: ContextVar[Guard | None] = ContextVar("compactd_request_guard", default=None)


def activate(guard: Guard) -> Token[Guard | None]:
    return _current.set(guard)


def deactivate(token: Token[Guard | None]) -> None:
    _current.reset(token)


async def point_of_no_return() -> None:
    """Await right before a request's first durable write.

    Raises the cancellation if the request was cancelled already (nothing is written then);
    otherwise later cancels are ignored. Outside a request (background work) it does nothing.
    """
    guard = _current.get()
    if guard is None or guard.committed:
        return
    if guard.scope.cancel_called:
        await anyio.lowlevel.checkpoint()  # delivers the pending cancellation
        # Still here: this runs in a helper task outside the request's scope (a commit that
        # is shielded from cancellation once it starts). It must not start.
        raise anyio.get_cancelled_exc_class()()
    guard.committed = True
