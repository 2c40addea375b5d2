"""``compactd replay``: stream a transcript into a fresh daemon as an agent would, calling
``compact/auto`` before every request, and report the compactions the daemon made."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compactd_client import Client
from compactd_client import protocol as p
from rich.console import RenderableType
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskID, TextColumn
from rich.text import Text

import compactd.cli.report as report
from compactd import __version__, port
from compactd.cli.inputs import DEFAULT_MODEL, daemon_args, scratch_data_dir, unreadable
from compactd.cli.providers import OFFLINE, SummarizerChoice
from compactd.cli.report import ReplayEvent
from compactd.cli.synthetic import make_session, to_jsonl
from compactd.cli.term import Terminal, gauge
from compactd.core.split import group_rounds
from compactd.core.tokens import recorded_model
from compactd.transcript.model import ParseReport

# The window the replay of the synthetic session uses: small enough that its ~180K tokens are
# compacted more than once, large enough to be a real model's
# (docs/thresholds.md#auto-compact-threshold).
REPLAY_SYNTHETIC_WINDOW = 100_000
# Progress lines printed over a replay in plain text (one per step of 10%).
_PLAIN_PROGRESS_STEPS = 10
# Largest append batch of a replay: a round longer than this (an inline sub-agent run inside
# one response) is appended in pieces, as an agent streams it, with compact/auto in between.
REPLAY_MAX_BATCH = 20
# The live line holds two bars: the context's is shorter than a report's, so both fit 100
# columns.
_LIVE_GAUGE_WIDTH = 12


@dataclass(slots=True)
class ReplayPlan:
    """A transcript cut into append batches (API rounds), without its original compactions."""

    batches: list[list[dict[str, Any]]]
    entries: int
    skipped_artefacts: int
    corrupt_lines: int
    # The model the transcript's latest response names, when its window is known.
    model: str | None = None


def plan_replay(
    lines: list[bytes], rounds_per_batch: int = 1, max_batch: int = REPLAY_MAX_BATCH
) -> ReplayPlan:
    """Group a transcript's entries by API round, as an agent appends them turn by turn.

    A batch holds ``rounds_per_batch`` rounds, cut into pieces of at most ``max_batch``
    entries.

    The original compaction boundaries and summaries are left out: the point of a replay is to
    see which compactions this daemon makes on its own.
    """
    parsed = ParseReport()
    records = [
        r
        for r in port.read_lines(lines, parsed)
        if not (
            r.entry.is_compact_boundary
            or r.entry.is_microcompact_boundary
            or r.entry.is_compact_summary
        )
    ]
    kept = len(records)
    skipped = parsed.lines - parsed.skipped - kept
    rounds = group_rounds([r.entry for r in records])
    batches: list[list[dict[str, Any]]] = []
    step = max(1, rounds_per_batch)
    size = max(1, max_batch)
    for i in range(0, len(rounds), step):
        group = rounds[i : i + step]
        span = [r.to_builtins() for r in records[group[0].start : group[-1].end]]
        batches += [span[j : j + size] for j in range(0, len(span), size)]
    model = recorded_model(r.entry for r in reversed(records))
    return ReplayPlan(batches, kept, skipped, parsed.skipped, model)


def _events(done: int, result: p.AutoResult) -> list[ReplayEvent]:
    """The boundaries one ``compact/auto`` answer wrote (a microcompact may precede a full)."""
    out: list[ReplayEvent] = []
    micro = result.micro
    if micro is not None and micro.tokens_saved > 0 and micro.boundary is not None:
        out.append(
            ReplayEvent(
                done, "micro", micro.pre_tokens, micro.post_tokens, micro.boundary.get("uuid")
            )
        )
    full = result.result
    if full is not None:
        out.append(
            ReplayEvent(
                done,
                result.mechanism or "full",
                full.pre_compact_tokens,
                full.post_compact_tokens,
                full.boundary.get("uuid"),
                model_call=full.usage is not None,
            )
        )
    return out


_INPUT_FIELDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def _rescaled(entry: dict[str, Any], removed: int, floor: int) -> dict[str, Any]:
    """``entry`` with its API usage as the replayed, compacted session would have reported it.

    The recorded usage measured the original context; the replay's compactions took
    ``removed`` tokens out of it, so the input is scaled down by that much, never below
    ``floor`` (what the replayed context holds now, fixed prefix included).
    """
    message = entry.get("message")
    usage = message.get("usage") if isinstance(message, dict) else None
    if not isinstance(usage, dict) or removed <= 0:
        return entry
    fields = {k: v for k in _INPUT_FIELDS if isinstance(v := usage.get(k), int) and v > 0}
    recorded = sum(fields.values())
    if recorded <= 0:
        return entry
    target = max(floor, recorded - removed)
    if target >= recorded:
        return entry
    scaled = {k: v * target // recorded for k, v in fields.items()}
    # Integer division loses a few tokens: give them back to the first field.
    first = next(iter(scaled))
    scaled[first] += target - sum(scaled.values())
    assert isinstance(message, dict)
    return {**entry, "message": {**message, "usage": {**usage, **scaled}}}


class _GaugeColumn(ProgressColumn):
    """The context's gauge beside the replay's own bar."""

    def render(self, task: Task) -> RenderableType:
        value = task.fields.get("context")
        return value if value is not None else Text("")


class _Progress:
    """The replay's progress: a live bar on a terminal, a line per tenth in plain text."""

    def __init__(self, term: Terminal, total: int, quiet: bool) -> None:
        self.term = term
        self.total = total
        self.quiet = quiet
        self._next_step = 1
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> _Progress:
        if not self.quiet and not self.term.plain:
            self._bar = Progress(
                TextColumn("replayed {task.completed:,.0f}/{task.total:,.0f} entries"),
                BarColumn(bar_width=10),
                TextColumn("· context"),
                _GaugeColumn(),
                console=self.term.console,
            )
            self._task = self._bar.add_task("replay", total=self.total, context="")
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def say(self, text: str) -> None:
        if not self.quiet:
            self.term.say(text)

    def update(self, done: int, status: p.TokenStatus) -> None:
        if self.quiet:
            return
        if self._bar is not None and self._task is not None:
            context = gauge(self.term, status, width=_LIVE_GAUGE_WIDTH)
            self._bar.update(self._task, completed=done, context=context)
            return
        if done * _PLAIN_PROGRESS_STEPS >= self._next_step * self.total or done == self.total:
            while done * _PLAIN_PROGRESS_STEPS >= self._next_step * self.total:
                self._next_step += 1
            share = f"{done / self.total:.0%}" if self.total else "100%"
            before = f"replayed {done:,} of {self.total:,} entries ({share}) · context "
            self.term.show(gauge(self.term, status, before=before))


@dataclass(slots=True)
class ReplayOutcome:
    session_id: str
    transcript_path: str
    events: list[ReplayEvent]
    status: p.TokenStatus
    # Reasons compact/auto gave for not compacting above the threshold.
    refusals: int = 0

    @property
    def saved(self) -> int:
        return sum(ev.pre_tokens - ev.post_tokens for ev in self.events)

    @property
    def model_calls(self) -> int:
        """Summaries a model wrote (one request per summarizing compaction)."""
        return sum(1 for ev in self.events if ev.model_call)

    @property
    def offline_summaries(self) -> int:
        """Full compactions whose summary was built offline: no model was asked."""
        return sum(1 for ev in self.events if ev.mechanism == "full" and not ev.model_call)

    def input_tokens(self, *, model_call: bool) -> int:
        """The input the summary requests carried (``model_call``), or would have carried had
        a model written the offline ones: each sends the context it summarizes."""
        return sum(
            ev.pre_tokens
            for ev in self.events
            if ev.mechanism == "full" and ev.model_call == model_call
        )


async def replay_session(
    client: Client,
    plan: ReplayPlan,
    *,
    model: str,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    term: Terminal | None = None,
    quiet: bool = False,
) -> ReplayOutcome:
    """Append ``plan`` to a new session batch by batch, calling ``compact/auto`` after each
    append exactly as an agent does before its next request; show progress unless quiet."""
    term = term if term is not None else Terminal()
    opened = await client.open_session(
        cwd=str(Path.cwd()),
        model=model,
        context_window=context_window,
        max_output_tokens=max_output_tokens,
    )
    sid = opened.session_id
    events: list[ReplayEvent] = []
    done = 0
    reasons: set[str] = set()
    status = opened.status
    with _Progress(term, plan.entries, quiet) as progress:
        progress.say(
            f"replaying {plan.entries:,} entries in {len(plan.batches):,} batches into a "
            f"{status.context_window:,}-token window "
            f"(auto-compact at {status.auto_compact_threshold:,})"
        )
        if plan.skipped_artefacts:
            progress.say(f"  left out {plan.skipped_artefacts} compaction entries of the original")
        for batch in plan.batches:
            removed = sum(ev.pre_tokens - ev.post_tokens for ev in events)
            if removed:
                # The recorded usage measured the original, uncompacted context: rescaled, it
                # is what this replay's compacted context would have reported.
                batch = [_rescaled(e, removed, status.tokens) for e in batch]
            await client.append(sid, batch)
            done += len(batch)
            auto = await client.compact_auto(sid)
            status = auto.status or await client.tokens_status(sid)
            new = _events(done, auto)
            events += new
            for ev in new:
                progress.say(
                    f"  compacted at entry {ev.entry:,}: {ev.mechanism} "
                    f"{ev.pre_tokens:,} -> {ev.post_tokens:,} tokens"
                )
            if not auto.was_compacted and status.is_above_auto_compact_threshold:
                reason = auto.reason or "no reason given"
                if reason not in reasons:
                    reasons.add(reason)
                    progress.say(f"  not compacted at entry {done:,}: {reason}")
            progress.update(done, status)
    return ReplayOutcome(sid, opened.transcript_path, events, status, len(reasons))


def outcome_json(outcome: ReplayOutcome, plan: ReplayPlan, *, kept: bool) -> dict[str, Any]:
    """The replay as JSON; ``transcriptPath`` only when the data dir outlives the command."""
    return {
        "sessionId": outcome.session_id,
        "transcriptPath": outcome.transcript_path if kept else None,
        "entries": plan.entries,
        "batches": len(plan.batches),
        "skippedArtefacts": plan.skipped_artefacts,
        "compactions": [
            {
                "entry": ev.entry,
                "mechanism": ev.mechanism,
                "preTokens": ev.pre_tokens,
                "postTokens": ev.post_tokens,
                "boundaryUuid": ev.boundary_uuid,
            }
            for ev in outcome.events
        ],
        "tokensSaved": outcome.saved,
        "modelCalls": outcome.model_calls,
        "billedInputTokens": outcome.input_tokens(model_call=True),
        "offlineSummaries": outcome.offline_summaries,
        "status": outcome.status,
    }


def show_outcome(term: Terminal, outcome: ReplayOutcome) -> None:
    term.say()
    report.timeline(term, outcome.events, outcome.saved, refused=outcome.refusals > 0)
    if outcome.model_calls:
        term.say(
            f"model calls: {outcome.model_calls} (summaries), billing about "
            f"{outcome.input_tokens(model_call=True):,} input tokens"
        )
    if outcome.offline_summaries:
        term.say(
            f"summaries built offline: {outcome.offline_summaries}, no model call (a model "
            f"would have read about {outcome.input_tokens(model_call=False):,} input tokens)"
        )
    if not outcome.model_calls and not outcome.offline_summaries:
        term.say("model calls: none (microcompact and session memory need no model)")
    term.say()
    term.say("after the replay", style="bold")
    report.status_lines(term, outcome.status)
    term.say(report.parts_line(outcome.status), style="dim")


async def replay(
    term: Terminal,
    transcript: str | None,
    *,
    model: str | None = None,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    summarizer: SummarizerChoice | str | None = None,
    auto_compact_tokens: int | None = None,
    data_dir: str | None = None,
    rounds_per_batch: int = 1,
    as_json: bool = False,
) -> int:
    """``compactd replay``: stream a transcript (default: a synthetic session in a 100K window)
    into a fresh daemon and end with the timeline of the compactions it made."""
    if transcript is None:
        lines = to_jsonl(make_session()).splitlines()
        name = "a synthetic session"
        if context_window is None:
            context_window = REPLAY_SYNTHETIC_WINDOW
    else:
        path = Path(transcript)
        problem = unreadable(path)
        if problem is not None:
            term.error(f"{transcript}: {problem}")
            return 1
        # An agent's file (a compressed one too) as compactd's own lines (docs/agents.md#reading).
        lines = port.transcript(path.read_bytes()).splitlines()
        name = path.name
    choice = summarizer if summarizer is not None else OFFLINE
    if isinstance(choice, str):
        term.error(choice)
        return 2
    plan = plan_replay(lines, rounds_per_batch)
    options: dict[str, Any] = {
        "summarizer": choice.options,
        # A replay appends as fast as the daemon takes entries, not at an agent's pace: a
        # summary prepared in the background would rarely be ready before the next append, and
        # compact/auto would let the replay go on to its end uncompacted (summaryPreparing).
        # Each compaction is therefore made when compact/auto decides it
        # (docs/background.md#options).
        "backgroundCompaction": {"enabled": False},
    }
    if auto_compact_tokens is not None:
        options["autoCompactTokens"] = auto_compact_tokens
    with scratch_data_dir() as tmp:
        async with Client.spawn(
            daemon_args(data_dir or tmp), initialization_options=options
        ) as client:
            if not as_json:
                term.say(f"compactd {__version__} replay of {name}, compacting with {choice.label}")
            outcome = await replay_session(
                client,
                plan,
                # A replay appends rather than imports: the transcript's model is read here.
                model=model or plan.model or DEFAULT_MODEL,
                context_window=context_window,
                max_output_tokens=max_output_tokens,
                term=term,
                quiet=as_json,
            )
    if as_json:
        term.json(outcome_json(outcome, plan, kept=data_dir is not None))
        return 0
    show_outcome(term, outcome)
    if data_dir:
        term.say(f"the replayed session is kept in {outcome.transcript_path}")
    return 0
