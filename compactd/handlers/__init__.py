"""Protocol method handlers, one module per wire prefix; ``HANDLERS`` maps each method to one.

A handler takes the ``App``, its decoded params Struct and a request context, and returns a
result Struct: a thin decode -> engine / core -> encode. It raises ``protocol.CompactdError``
for errors the client should see.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from compactd import port
from compactd import protocol as p
from compactd.handlers import (
    attachments,
    cache,
    compact,
    file_state,
    recall,
    session,
    session_memory,
    stats,
    tokens,
)
from compactd.handlers.base import Context, Handler, check_writable, decode_params

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
    # The agents' own methods (``claudeCode/*``), through the port (docs/agents.md).
    **port.handlers(),
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
    decoded = decode_params(method, params)
    check_writable(app, method, decoded)
    result = await handler(app, decoded, ctx)
    return msgspec.to_builtins(result)


__all__ = ["HANDLERS", "Context", "Handler", "invoke"]
