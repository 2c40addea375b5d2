"""How full a transcript's context is and what comes next, read from the transcript alone.

The MCP ``context`` tool (docs/recall.md#context) answers for a session compactd does not run:
a Claude Code transcript, or a compactd session's file read by another process. The count is
the one ``tokens/status`` gives (``core.tokens``: the latest response's usage plus an estimate of
what came after, over the records after the last compaction), against the limits of the model
the transcript last names (or one given); the next step is read from the levels it crosses.

Pure: the caller reads the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from compactd.core import tokens
from compactd.core.view import context_records
from compactd.protocol import TokenStatus
from compactd.transcript.model import Record

__all__ = ["Outlook", "outlook"]

# The model assumed when the transcript names none (no response yet) and the caller gives none.
FALLBACK_MODEL = "claude-sonnet-4-5"


@dataclass(frozen=True, slots=True)
class Outlook:
    status: TokenStatus
    model: str
    next_step: str

    @property
    def share_of_threshold(self) -> float:
        limit = self.status.auto_compact_threshold or self.status.effective_window
        return self.status.tokens / limit if limit else 0.0

    @property
    def share_of_window(self) -> float:
        window = self.status.context_window
        return self.status.tokens / window if window else 0.0

    @property
    def near(self) -> bool:
        """Whether a compaction is near: the warning level is crossed."""
        return self.status.is_above_warning_threshold


def _next_step(s: TokenStatus) -> str:
    room = max(0, s.auto_compact_threshold - s.tokens)
    if s.is_at_blocking_limit:
        return "at the blocking limit: the next request is refused until the context is compacted"
    if not s.auto_compact_enabled:
        return f"auto-compaction is off; {max(0, s.blocking_limit - s.tokens):,} tokens before the blocking limit"
    if s.is_above_auto_compact_threshold:
        return "an automatic compaction is due now: the next turn compacts first"
    if s.is_above_error_threshold:
        return f"a compaction is near: {room:,} tokens before the automatic compaction"
    if s.is_above_warning_threshold:
        return f"past the warning level: {room:,} tokens before the automatic compaction"
    return f"nothing to do yet: {room:,} tokens before the automatic compaction"


def outlook(
    records: Sequence[Record],
    env: Mapping[str, str],
    *,
    model: str | None = None,
    context_window: int | None = None,
) -> Outlook:
    """The token status of ``records`` (a whole transcript) and the step that comes next."""
    view = [r.entry for r in context_records(records)]
    named = model or tokens.recorded_model(r.entry for r in reversed(records)) or FALLBACK_MODEL
    limits = tokens.resolve_limits(named, context_window=context_window, env=env)
    flags = tokens.flags(env)
    levels = tokens.thresholds(limits, env, flags.auto_compact_enabled)
    status = tokens.token_status(tokens.count_tokens(view), limits, levels, flags)
    return Outlook(status, named, _next_step(status))
