"""Protocol method handlers, one module per wire prefix; ``HANDLERS`` maps each method to one.

A handler takes the ``App``, its decoded params Struct and a request context, and returns a
result Struct: a thin decode -> engine / core -> encode. It raises ``protocol.CompactdError``
for errors the client should see.
"""

from __future__ import annotations

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
from compactd.handlers.base import Handler

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
}

__all__ = ["HANDLERS", "Handler"]
