"""Methods of the v1 table whose behaviour has not landed yet: they answer ``notImplemented``."""

from __future__ import annotations

from compactd import protocol as p
from compactd.handlers.base import Handler, not_implemented

_PENDING = [
    p.SESSION_MEMORY_GET,
    p.SESSION_MEMORY_EXTRACT,
]

HANDLERS: dict[str, Handler] = {m: not_implemented(m) for m in _PENDING}
