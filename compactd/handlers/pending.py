"""Methods of the v1 table whose behaviour has not landed yet: they answer ``notImplemented``.

Every method of the table is implemented now; the list stays as the place to park a new one.
"""

from __future__ import annotations

from compactd.handlers.base import Handler, not_implemented

_PENDING: list[str] = []

HANDLERS: dict[str, Handler] = {m: not_implemented(m) for m in _PENDING}
