"""Protocol method handlers, one module per area; ``HANDLERS`` maps each method to its handler.

A handler takes the ``App``, its decoded params Struct and a request context, and returns a
result Struct. It raises ``protocol.CompactdError`` for errors the client should see.
"""

from __future__ import annotations

from compactd.handlers import (
    beyond,
    cache,
    compact,
    files,
    micro,
    partial,
    session_memory,
    sessions,
    tokens,
)
from compactd.handlers.base import Handler

HANDLERS: dict[str, Handler] = {
    **sessions.HANDLERS,
    **tokens.HANDLERS,
    **micro.HANDLERS,
    **cache.HANDLERS,
    **compact.HANDLERS,
    **partial.HANDLERS,
    **files.HANDLERS,
    **session_memory.HANDLERS,
    **beyond.HANDLERS,
}

__all__ = ["HANDLERS", "Handler"]
