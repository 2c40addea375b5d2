"""How full another agent's context is, against its auto-compact threshold, in a few words.

The Claude Code status line and the threshold warning hook know a token count (the latest
response's usage, or the count Claude Code recorded right after a compaction) and a model; this
module measures it against the same levels compactd uses for its own sessions
(docs/thresholds.md): the effective window, the auto-compact threshold (with
``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`` and ``CLAUDE_CODE_AUTO_COMPACT_WINDOW``), the warning and
error levels. A count above the model's table window means the session runs with the 1M-token
window (docs/claude-code.md#status-line). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from compactd.core import constants as c
from compactd.core.tokens import Thresholds, flags, model_limits, thresholds
from compactd.core.tokens.limits import Limits

__all__ = ["Gauge", "gauge", "status_line", "warning_text"]

# A context that right after a compaction is still above this share of the auto-compact
# threshold leaves little room before the next one (the same share compactd's own automatic
# compaction asks of what a mechanism leaves: ``AUTO_COMPACT_HEADROOM``).
CROWDED_SHARE: Final = c.AUTO_COMPACT_HEADROOM


@dataclass(frozen=True, slots=True)
class Gauge:
    tokens: int
    window: int
    levels: Thresholds
    auto_compact: bool

    @property
    def limit(self) -> int:
        """The auto-compact threshold, or the effective window when auto-compact is off."""
        levels = self.levels
        return levels.auto_compact_threshold if self.auto_compact else levels.effective_window

    @property
    def share(self) -> float:
        return self.tokens / self.limit if self.limit > 0 else 1.0

    @property
    def level(self) -> str | None:
        """The highest level reached: ``autoCompact``, ``error``, ``warning`` or None."""
        if self.auto_compact and self.tokens >= self.levels.auto_compact_threshold:
            return "autoCompact"
        if self.tokens >= self.levels.error_threshold:
            return "error"
        if self.tokens >= self.levels.warning_threshold:
            return "warning"
        return None


def gauge(
    tokens: int, model: str | None, env: Mapping[str, str], window: int | None = None
) -> Gauge:
    """``tokens`` against ``model``'s levels (``window``: the client's own figure, if known)."""
    table = model_limits(model or c.DEFAULT_MODEL)
    size = window or table.context_window
    if window is None and tokens > size:
        size = c.ONE_MILLION_CONTEXT_WINDOW
    on = flags(env).auto_compact_enabled
    levels = thresholds(Limits(size, table.max_output_tokens), env, auto_compact_enabled=on)
    return Gauge(tokens, size, levels, on)


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
