"""How full an agent's context is: a token count against its model's levels, in a few words.

The one place that measures a count another agent's client reports or that compactd reads from a
transcript. The Claude Code status line and the threshold warning hook know a token count (the
latest response's usage, or the count Claude Code recorded right after a compaction) and a
model; the MCP ``context`` tool counts a transcript (``core.outlook``). Both are measured here
against the levels compactd uses for its own sessions (docs/thresholds.md): the effective
window, the auto-compact threshold (with ``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`` and
``CLAUDE_CODE_AUTO_COMPACT_WINDOW``), the warning, error and blocking levels, through the same
``tokens/status`` view (``TokenStatus``). A count above the model's table window, with no window
given, means the session runs with the 1M-token window (docs/claude-code.md#status-line).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from compactd.core import constants as c
from compactd.core.tokens import (
    TokenCount,
    flags,
    model_limits,
    resolve_limits,
    thresholds,
    token_status,
)
from compactd.protocol import TokenStatus

__all__ = ["Gauge", "gauge", "measure", "status_line", "warning_text"]

# A context that right after a compaction is still above this share of the auto-compact
# threshold leaves little room before the next one (the same share compactd's own automatic
# compaction asks of what a mechanism leaves: ``AUTO_COMPACT_HEADROOM``).
CROWDED_SHARE: Final = c.AUTO_COMPACT_HEADROOM


@dataclass(frozen=True, slots=True)
class Gauge:
    status: TokenStatus

    @property
    def tokens(self) -> int:
        return self.status.tokens

    @property
    def window(self) -> int:
        return self.status.context_window

    @property
    def auto_compact(self) -> bool:
        return self.status.auto_compact_enabled

    @property
    def limit(self) -> int:
        """The auto-compact threshold, or the effective window when auto-compact is off."""
        s = self.status
        return s.auto_compact_threshold if s.auto_compact_enabled else s.effective_window

    @property
    def share(self) -> float:
        """The share of ``limit`` the count takes (1.0 when there is no room at all)."""
        return self.tokens / self.limit if self.limit > 0 else 1.0

    @property
    def share_of_window(self) -> float:
        return self.tokens / self.window if self.window > 0 else 1.0

    @property
    def level(self) -> str | None:
        """The highest level reached: ``autoCompact``, ``error``, ``warning`` or None."""
        s = self.status
        if s.is_above_auto_compact_threshold:
            return "autoCompact"
        if s.is_above_error_threshold:
            return "error"
        if s.is_above_warning_threshold:
            return "warning"
        return None

    @property
    def next_step(self) -> str:
        """What comes next for the context, in a few words."""
        s = self.status
        room = max(0, s.auto_compact_threshold - s.tokens)
        if s.is_at_blocking_limit:
            return (
                "at the blocking limit: the next request is refused until the context is compacted"
            )
        if not s.auto_compact_enabled:
            return f"auto-compaction is off; {max(0, s.blocking_limit - s.tokens):,} tokens before the blocking limit"
        if s.is_above_auto_compact_threshold:
            return "an automatic compaction is due now: the next turn compacts first"
        if s.is_above_error_threshold:
            return f"a compaction is near: {room:,} tokens before the automatic compaction"
        if s.is_above_warning_threshold:
            return f"past the warning level: {room:,} tokens before the automatic compaction"
        return f"nothing to do yet: {room:,} tokens before the automatic compaction"


def measure(
    count: TokenCount, model: str | None, env: Mapping[str, str], window: int | None = None
) -> Gauge:
    """``count`` against ``model``'s levels (``window``: the client's own figure, if known)."""
    name = model or c.DEFAULT_MODEL
    if window is None and count.tokens > model_limits(name).context_window:
        window = c.ONE_MILLION_CONTEXT_WINDOW
    limits = resolve_limits(name, context_window=window, env=env)
    on = flags(env)
    levels = thresholds(limits, env, auto_compact_enabled=on.auto_compact_enabled)
    return Gauge(token_status(count, limits, levels, on))


def gauge(
    tokens: int, model: str | None, env: Mapping[str, str], window: int | None = None
) -> Gauge:
    """A count a client reported (all of it from usage) against ``model``'s levels."""
    return measure(TokenCount(tokens=tokens, exact=tokens, estimated=0), model, env, window)


def _k(n: int) -> str:
    return f"{n / 1000:.0f}K" if n < 1_000_000 else f"{n / 1_000_000:g}M"


def warning_text(g: Gauge) -> str:
    """What the model is told when the count reaches a level before Claude Code compacts."""
    what = "auto-compact threshold" if g.auto_compact else "usable window"
    return (
        f"compactd: the context holds {g.tokens:,} tokens, {g.share:.0%} of Claude Code's "
        f"{what} ({g.limit:,} of a {_k(g.window)} window). Claude Code will compact it "
        "soon and its summary keeps only part of the details. If you are in the middle of "
        "something, write down now where you are (the files, the commands and their results, "
        "the next step). After the compaction compactd gives back what the summary left out, "
        "and the `recall` tool of the compactd MCP server finds the rest."
    )


def status_line(g: Gauge | None, restored: str | None, post_tokens: int | None) -> str:
    """The status line: the count and its share of the threshold, what compactd restored at
    the last compaction, and a warning when a compaction leaves the context crowded."""
    parts = ["compactd"]
    if g is not None:
        what = "auto-compact" if g.auto_compact else "window"
        parts.append(
            f"{g.tokens:,} tok · {g.share:.0%} of {what} ({_k(g.limit)} of {_k(g.window)})"
        )
    if restored:
        parts.append(restored)
    if g is not None and post_tokens is not None and post_tokens >= CROWDED_SHARE * g.limit:
        parts.append(
            f"⚠ {post_tokens:,} tok right after compacting: system prompt, tools and memory "
            "files crowd the window"
        )
    return " · ".join(parts)
