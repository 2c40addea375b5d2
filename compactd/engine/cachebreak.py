"""Prompt-cache break detection as a per-session feature (docs/engine.md#features).

The state is the session's ``CacheBreakDetector`` (``core.cachebreak``): a baseline per query
source and the breaks found, in memory only (a restarted daemon starts new baselines). The
``cache/*`` handlers feed it the client's reports and ``session/stats`` lists its breaks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from compactd.core.cachebreak import CacheBreakDetector
from compactd.engine.features import Feature

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session

__all__ = ["CacheBreaks", "detector"]


@dataclass(eq=False)
class CacheBreaks(Feature["Session"]):
    """The cache-break detector of one session."""

    detector: CacheBreakDetector = field(default_factory=CacheBreakDetector)


def detector(runtime: Runtime, session: Session) -> CacheBreakDetector:
    """``session``'s detector (registered by the wiring with ``CacheBreaks``)."""
    return runtime.features.state(session, CacheBreaks).detector
