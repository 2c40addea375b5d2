"""The reports a person reads: a session's accounting, its tools, its compactions, what
``compact/auto`` would do next, and a replay's timeline. Each takes the protocol's own results,
so the CLI shows exactly the figures the daemon answers (docs/thresholds.md#accounting)."""

from __future__ import annotations

from dataclasses import dataclass

from compactd_client import protocol as p

from compactd.cli.term import Terminal, gauge, gauge_limit
from compactd.core import tokens as tk

# What each breakdown category is, in words (compactd/core/tokens.py names them).
CATEGORY_LABELS = {
    tk.CATEGORY_FIXED_PREFIX: "system prompt and tools",
    tk.CATEGORY_HUMAN: "user messages",
    tk.CATEGORY_ASSISTANT: "assistant text",
    tk.CATEGORY_LOCAL_COMMAND_OUTPUT: "local command output",
    tk.CATEGORY_META: "harness messages and summaries",
    tk.CATEGORY_TOOL_REQUESTS: "tool calls",
    tk.CATEGORY_TOOL_RESULTS: "tool results",
    tk.CATEGORY_ATTACHMENTS: "attachments",
    tk.CATEGORY_CLEARED: "cleared by microcompact",
}

# What compact/auto may run, in words (the PreviewResult mechanisms).
MECHANISMS = {
    "micro": "microcompact",
    "sessionMemory": "a session-memory compaction",
    "full": "a full compaction",
}

# How many rows the longer lists keep, so that a status fits one screen (40 x 100).
TOP_TOOLS = 5
TOP_DUPLICATES = 3
LAST_COMPACTIONS = 4


def label(category: str) -> str:
    return CATEGORY_LABELS.get(category, category)


# Which level sets the auto-compact threshold, as the status line says it
# (docs/thresholds.md#absolute-level); the share of the window goes without saying.
LEVEL_SOURCES: dict[str, str] = {
    "window": "",
    "tokens": " (the absolute level)",
    "env": " (set by the environment)",
}


def status_lines(term: Terminal, status: p.TokenStatus) -> None:
    """The gauge and the limits it is measured against, in two lines."""
    what = "before auto-compact" if status.auto_compact_enabled else "of the effective window"
    term.show(
        gauge(term, status, before="next request ", after=f", {status.percent_left}% left {what}")
    )
    reserve = status.context_window - status.effective_window
    auto = (
        f"; auto-compact at {status.auto_compact_threshold:,}{LEVEL_SOURCES[status.auto_compact_source]}"
        if status.auto_compact_enabled
        else "; auto-compact is off"
    )
    term.say(
        f"window {status.context_window:,} - {reserve:,} reserved for output = "
        f"{status.effective_window:,} effective{auto}",
        style="dim",
    )
    line = preparation_line(status)
    if line is not None:
        term.say(line, style="dim")


def preparation_line(status: p.TokenStatus) -> str | None:
    """What is prepared in the background (docs/background.md#visible), or None."""
    prep = status.preparation
    if prep is None:
        return None
    if prep.state == "ready" and prep.refreshing:
        return (
            f"a summary is ready (prepared in the background, covering {prep.entries_covered:,} "
            "entries) and a fresher one is being written: the next compaction applies that one "
            "when it is ready, this one at the blocking limit"
        )
    if prep.state == "ready":
        return (
            f"a summary is ready (prepared in the background, covering {prep.entries_covered:,} "
            "entries): the next compaction applies it at once"
        )
    return "a summary is being prepared in the background"


def parts_line(status: p.TokenStatus) -> str:
    """The status's total in its parts, on one line (docs/thresholds.md#accounting)."""
    out = f"system prompt and tools {status.fixed_prefix_tokens:,} + messages {status.message_tokens:,}"
    if status.attachment_tokens:
        out += f" + attachments {status.attachment_tokens:,}"
    if status.cleared_tokens:
        out += f" - cleared by microcompact {status.cleared_tokens:,}"
    return out


def accounting(term: Terminal, status: p.TokenStatus, bd: p.BreakdownResult) -> None:
    """What the next request carries, by part, adding up to the status's total.

    Empty rows are left out; the rows shown still add up, since an empty row adds nothing.
    """
    table = term.table("the next request carries", "tokens", "share")
    prefix = tk.CATEGORY_FIXED_PREFIX
    if not any(row.name == prefix for row in bd.categories):
        table.add_row(f"{label(prefix)} (no usage yet)", "0", "-")
    for row in bd.categories:
        if row.tokens or row.name == prefix:
            table.add_row(label(row.name), f"{row.tokens:,}", f"{row.percent:.1f}%")
    term.total(table, "total", f"{status.tokens:,}", "100.0%" if status.tokens else "-")
    term.show(table)


@dataclass(slots=True)
class _ToolRow:
    name: str
    uses: int = 0
    calls: int = 0
    results: int = 0


def tools(term: Terminal, bd: p.BreakdownResult) -> None:
    """The tools whose calls and results weigh most, with what the others add up to."""
    rows: dict[str, _ToolRow] = {}
    for c in bd.tool_requests:
        row = rows.setdefault(c.name, _ToolRow(c.name))
        row.calls += c.tokens
        row.uses += c.count
    for c in bd.tool_results:
        rows.setdefault(c.name, _ToolRow(c.name)).results += c.tokens
    if not rows:
        return
    term.say()
    ranked = sorted(rows.values(), key=lambda r: (-(r.calls + r.results), r.name))
    table = term.table("by tool", "uses", "call tokens", "result tokens")
    for row in ranked[:TOP_TOOLS]:
        table.add_row(row.name, f"{row.uses:,}", f"{row.calls:,}", f"{row.results:,}")
    rest = ranked[TOP_TOOLS:]
    if rest:
        table.add_row(
            f"{len(rest)} other tool(s)",
            f"{sum(r.uses for r in rest):,}",
            f"{sum(r.calls for r in rest):,}",
            f"{sum(r.results for r in rest):,}",
            style=term.style("dim"),
        )
    term.show(table)


def duplicates(term: Terminal, bd: p.BreakdownResult) -> None:
    if not bd.duplicate_reads:
        return
    term.say()
    term.say(
        f"files read more than once: {len(bd.duplicate_reads)}, wasting "
        f"{bd.duplicate_read_tokens:,} tokens"
    )
    for d in bd.duplicate_reads[:TOP_DUPLICATES]:
        term.say(f"  {d.path}: {d.reads} reads, {d.wasted_tokens:,} tokens wasted")
    if len(bd.duplicate_reads) > TOP_DUPLICATES:
        term.say(f"  and {len(bd.duplicate_reads) - TOP_DUPLICATES} more (--json lists them all)")


def compactions(term: Terminal, st: p.StatsResult) -> None:
    """The compactions already in the transcript (the last few), and microcompact's savings."""
    if st.compactions:
        term.say()
        shown = st.compactions[-LAST_COMPACTIONS:]
        earlier = len(st.compactions) - len(shown)
        title = f"compactions in the transcript: {len(st.compactions)}"
        if earlier:
            title += f" (the last {len(shown)})"
        term.say(title, style="bold")
        table = term.table(
            "#", "trigger", "mechanism", "before", "after", "entries summarized", text_columns=3
        )
        for i, c in enumerate(shown, earlier + 1):
            after = f"~{c.post_tokens:,}" if c.post_tokens_estimated else f"{c.post_tokens:,}"
            mechanism = c.mechanism + (" (undone)" if c.undone else "")
            mechanism += " (thrash)" if c.thrash else ""
            table.add_row(
                str(i),
                c.trigger,
                mechanism,
                f"{c.pre_tokens:,}",
                after,
                f"{c.entries_summarized:,}",
            )
        term.show(table)
    if st.microcompactions:
        term.say(
            f"microcompact ran {st.microcompactions} time(s), "
            f"saving {st.microcompact_tokens_saved:,} tokens"
        )


def next_step(
    term: Terminal,
    status: p.TokenStatus,
    auto: p.PreviewResult,
    full: p.PreviewResult | str,
) -> None:
    """What ``compact/auto`` would do before the next request, and what compacting now gives.

    ``full`` is the preview of ``compact/full``, or why it cannot run.
    """
    term.say()
    if auto.would_compact:
        term.say(
            f"next: compact/auto would run {MECHANISMS.get(auto.mechanism, auto.mechanism)}, "
            f"{auto.pre_tokens:,} -> about {auto.estimated_post_tokens:,} tokens",
            style="bold",
        )
    elif auto.reason_code == "belowThreshold":
        to_go = gauge_limit(status) - status.tokens
        term.say(f"next: nothing to do, {to_go:,} tokens below the auto-compact threshold")
    else:
        term.say(f"next: compact/auto would not compact: {auto.reason or auto.reason_code}")
    if auto.would_compact and auto.mechanism == "full":
        return  # the line above is that compaction; a manual one would differ only in wording
    if isinstance(full, str):
        term.say(f"compacting now (compact/full) cannot run: {full}", style="dim")
    elif full.would_compact:
        prefix = status.fixed_prefix_tokens
        term.say(
            f"compacting now (compact/full): about {full.estimated_post_tokens:,} tokens after"
            + (f", {prefix:,} of them system prompt and tools" if prefix else ""),
            style="dim",
        )
    else:
        term.say(f"compacting now (compact/full) would not help: {full.reason}", style="dim")


@dataclass(slots=True)
class ReplayEvent:
    """One compaction the daemon made during a replay."""

    entry: int  # entries appended when it happened (1-based index of the last one)
    mechanism: str
    pre_tokens: int
    post_tokens: int
    boundary_uuid: str | None
    # A summary a model wrote (the compaction reports the request's usage); False for one
    # built offline and for a microcompact.
    model_call: bool = False


def timeline(term: Terminal, events: list[ReplayEvent], saved: int, refused: bool) -> None:
    if not events:
        term.say(
            "no compactions: each one was refused (reasons above)"
            if refused
            else "no compactions: the conversation stayed below the auto-compact threshold"
        )
        return
    term.say(f"timeline: {len(events)} compaction(s)", style="bold")
    table = term.table("mechanism", "at entry", "before", "after")
    for ev in events:
        table.add_row(ev.mechanism, f"{ev.entry:,}", f"{ev.pre_tokens:,}", f"{ev.post_tokens:,}")
    term.show(table)
    term.say(f"tokens saved in all: {saved:,}")
