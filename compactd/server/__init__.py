"""The transport: LSP lifecycle, dispatch and the one writer of stdout. No behaviour lives here.

compactd owns its transport. ``compactd/framing.py`` splits stdin into messages; ``daemon``
routes each one (the lifecycle as LSP states it, ``$/cancelRequest``, the replies to compactd's
own requests, work-done progress) and ``stdio`` writes every outgoing frame through one
``Connection``.
Each protocol method is run by ``compactd.handlers.invoke``, which decodes its params with
msgspec, calls the handler and encodes the result; ``CompactdError`` becomes a JSON-RPC error
whose ``data.code`` is stable. pygls serves where it fits: its LSP converter (lsprotocol's types
with pygls' hooks, public API) reads ``initialize`` and builds its result and the progress
values. Why the rest is not pygls': docs/pygls.md.
"""

from __future__ import annotations

from compactd.server.daemon import CompactdServer, RequestContext, run_stdio
from compactd.server.stdio import ClientRefused, Connection, StdinSource, WorkDone

__all__ = [
    "ClientRefused",
    "CompactdServer",
    "Connection",
    "RequestContext",
    "StdinSource",
    "WorkDone",
    "run_stdio",
]
