"""Zero-wait compaction: a summary prepared in the background before the agent needs it.

The per-session feature (``feature.py``, docs/engine.md#features) prepares a summary of a
snapshot once the count reaches the start level (``core.background``) or the session has been
idle long enough (``idle.py``), in the daemon's task group, one per session, cancelled when the
session closes; a ready summary is kept in the session directory so that a restarted daemon
can reuse it (``store.py``); ``apply.py`` is the one place a compaction takes it and carries it
out (docs/background.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compactd.engine.background.apply import apply_idle, carry_out, run_full
from compactd.engine.background.feature import (
    BackgroundPreparation,
    Job,
    preparation_of,
)
from compactd.engine.background.service import BackgroundCompaction

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime

__all__ = [
    "BackgroundCompaction",
    "BackgroundPreparation",
    "Job",
    "carry_out",
    "preparation_of",
    "run_full",
    "setup",
]


def setup(runtime: Runtime) -> BackgroundCompaction:
    """``initializationOptions.backgroundCompaction`` for ``runtime``, its feature registered
    when enabled and its idle application wired to the apply step."""
    service = BackgroundCompaction(runtime, apply_idle)
    if service.enabled:
        runtime.features.register(
            BackgroundPreparation, lambda session: BackgroundPreparation(service=service)
        )
    return service
