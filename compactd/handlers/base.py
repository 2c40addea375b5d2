"""Types shared by handler modules, and the checks every request passes before its handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from compactd import protocol as p
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


def decode_params(method: str, params: Any) -> msgspec.Struct:
    """``params`` as ``method``'s params Struct; ``CompactdError(invalidParams)`` when they are
    not an object, nest too deeply or do not match it."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise p.CompactdError(p.ErrorCode.INVALID_PARAMS, f"{method} takes its params as an object")
    if _nested_deeper(params, p.MAX_PARAMS_DEPTH):
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS,
            f"invalid params for {method}: nested deeper than {p.MAX_PARAMS_DEPTH} levels",
        )
    try:
        return msgspec.convert(params, p.REQUESTS[method][0])
    except RecursionError as exc:
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS, f"invalid params for {method}: nested too deeply"
        ) from exc
    except msgspec.ValidationError as exc:
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS, f"invalid params for {method}: {exc}"
        ) from exc


def check_writable(app: App, method: str, decoded: msgspec.Struct) -> None:
    """Refuse a method that changes a session opened read-only or following a live transcript.

    A session opened read-only answers reads only (docs/durability.md#ownership); the writers
    check again (``Session.check_writable``), this refuses before any work.
    """
    if method in p.READ_ONLY_METHODS:
        return
    session = app.sessions.get(getattr(decoded, "session_id", None) or "")
    if session is None:
        return
    session.check_writable()
    if method != p.SESSION_CLOSE and app.follow.following(session):
        raise p.CompactdError(
            p.ErrorCode.SESSION_FOLLOWED,
            f"{method}: session {session.session_id!r} follows "
            f"{session.meta.imported_from}, which its agent writes; a change made here "
            "would never reach that agent. To compact a Claude Code session, use "
            "claudeCode/compact (`compactd compact FILE`) and resume the new session; "
            "or reopen this one with follow: false to work on compactd's copy",
            sessionId=session.session_id,
        )


def _nested_deeper(value: Any, limit: int) -> bool:
    """Whether ``value`` nests deeper than ``limit``, found without recursion."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth >= limit:
                return True
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            if depth >= limit:
                return True
            stack.extend((v, depth + 1) for v in item if isinstance(v, (dict, list)))
    return False
