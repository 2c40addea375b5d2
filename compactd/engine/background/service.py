"""What every session's background preparation shares (docs/background.md): the options of
``initializationOptions.backgroundCompaction``, the runtime, the summarizer's last measured
duration (the per-session feature, ``feature.py``, is registered by ``setup``)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.core import background as bg

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime

__all__ = ["ApplyIdle", "BackgroundCompaction"]

log = logging.getLogger(__name__)


# What the apply step does with a summary prepared while the session was idle: ``apply_idle``
# of ``engine/background/apply.py`` (session, preparation, job), given by the wiring
# (``engine/background/__init__.setup``, which registers the per-session feature too).
ApplyIdle = Callable[..., Awaitable[None]]


class BackgroundCompaction:
    """``initializationOptions.backgroundCompaction`` and what every session's preparation
    shares: the runtime and the summarizer's last measured duration."""

    def __init__(self, runtime: Runtime, apply_idle: ApplyIdle | None = None) -> None:
        self.runtime = runtime
        self.apply_idle = apply_idle
        opts = runtime.options.background_compaction or p.BackgroundCompactionOptions()
        self.enabled = opts.enabled is not False
        self.start_at = opts.start_at or bg.DEFAULT_START_AT
        self.idle_s = (opts.idle_minutes or bg.DEFAULT_IDLE_MINUTES) * 60
        self.apply_when_idle = bool(opts.apply_when_idle)
        self.refresh = opts.refresh is not False
        # Seconds the summarizer's API took for the last preparation: the growth rule.
        self.last_duration_s: float | None = None
        # Whether followed sessions prepare too: a followed transcript's agent compacts it
        # itself, unless it takes compactd's summary (the Claude Code plugin's process sets
        # this: docs/claude-code.md#prepared-in-the-background).
        self.followed = False
        self.warmed = False

    def warm(self) -> None:
        """Load the summarizer's SDK in the background once a session opens: the first
        preparation should take the model's time, not an import's (seconds on a busy machine)."""
        runtime = self.runtime
        if self.warmed or runtime.task_group is None or runtime.summarizer.offline:
            return
        self.warmed = True
        runtime.task_group.start_soon(self._warm)

    async def _warm(self) -> None:
        try:
            await self.runtime.summarizer.warm()
        except Exception:  # the first summary loads it again, and says why it cannot
            log.warning("loading the summarizer's SDK failed", exc_info=True)
