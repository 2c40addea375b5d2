"""Protocol method handlers, one module per wire prefix; ``HANDLERS`` maps each method to one.

A handler takes the ``App``, its decoded params Struct and a request context, and returns a
result Struct: a thin decode -> engine / core -> encode. It raises ``protocol.CompactdError``
for errors the client should see.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from compactd import protocol as p
from compactd.handlers import (
    attachments,
    cache,
    claude_code,
    compact,
    file_state,
    recall,
    session,
    session_memory,
    stats,
    tokens,
)
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App

HANDLERS: dict[str, Handler] = {
    **session.HANDLERS,
    **tokens.HANDLERS,
    **compact.HANDLERS,
    **recall.HANDLERS,
    **attachments.HANDLERS,
    **file_state.HANDLERS,
    **cache.HANDLERS,
    **stats.HANDLERS,
    **session_memory.HANDLERS,
    **claude_code.HANDLERS,
}


async def invoke(
    app: App, method: str, params: Any, ctx: Context, handler: Handler | None = None
) -> Any:
    """Run ``method`` with its JSON ``params``: decode, call the handler, encode the result.

    The one step between a transport and the handlers: the server calls it for every request
    and the in-process test harness calls it without the wire. Bad params raise
    ``CompactdError(invalidParams)`` before the handler runs, so they change nothing.
    """
    if handler is None:
        handler = HANDLERS.get(method)
        if handler is None:
            raise p.CompactdError(p.ErrorCode.METHOD_NOT_FOUND, f"unknown method {method!r}")
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
        decoded = msgspec.convert(params, p.REQUESTS[method][0])
    except RecursionError as exc:
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS, f"invalid params for {method}: nested too deeply"
        ) from exc
    except msgspec.ValidationError as exc:
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS, f"invalid params for {method}: {exc}"
        ) from exc
    if method not in p.READ_ONLY_METHODS:
        # A session opened read-only answers reads only (docs/durability.md#ownership); the
        # writers check again (``Session.check_writable``), this refuses before any work.
        session = app.sessions.get(getattr(decoded, "session_id", None) or "")
        if session is not None:
            session.check_writable()
            if method != p.SESSION_CLOSE and app.follow.following(session.session_id):
                raise p.CompactdError(
                    p.ErrorCode.SESSION_FOLLOWED,
                    f"{method}: session {session.session_id!r} follows "
                    f"{session.meta.imported_from}, which its agent writes; a change made here "
                    "would never reach that agent. To compact a Claude Code session, use "
                    "claudeCode/compact (`compactd compact FILE`) and resume the new session; "
                    "or reopen this one with follow: false to work on compactd's copy",
                    sessionId=session.session_id,
                )
    result = await handler(app, decoded, ctx)
    return msgspec.to_builtins(result)


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


__all__ = ["HANDLERS", "Context", "Handler", "invoke"]
