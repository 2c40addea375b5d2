"""The ``compactd`` command: ``serve`` for editors, and tools for people (``demo``, ``status``).

Only this module prints; the daemon itself (``serve``) writes protocol frames to stdout and
nothing else, and logs to stderr or ``--log-file``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from compactd_client import Client, RpcError

from compactd import __version__
from compactd import protocol as p
from compactd.core.split import group_rounds
from compactd.core.synthetic import make_session, to_jsonl
from compactd.core.tokens import known_model, model_limits
from compactd.services.summarizer import ENV_API_KEY, ENV_AUTH_TOKEN
from compactd.transcript.model import ParseReport, parse_lines


def _setup_logging(verbosity: int, log_file: str | None) -> None:
    level = logging.WARNING - 10 * min(verbosity, 2)
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8")
        if log_file
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # pygls logs whole message bodies (prompts, file contents) at INFO: keep it quiet.
    for name in ("pygls", "pygls.protocol", "pygls.server", "pygls.feature_manager"):
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    # pygls also logs a traceback for every error answer (bad params, unknown sessions); those
    # are normal answers here, and compactd logs real failures itself.
    logging.getLogger("pygls.protocol.json_rpc").setLevel(logging.CRITICAL)
    # The HTTP stack logs request details at INFO/DEBUG; only errors are useful here.
    for name in ("httpx", "httpx2", "httpcore", "anthropic"):
        logging.getLogger(name).setLevel(max(level, logging.WARNING))


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compactd", description="Context-window manager daemon for AI coding agents."
    )
    parser.add_argument("--version", action="version", version=f"compactd {__version__}")
    sub = parser.add_subparsers(dest="command")

    serve = sub.add_parser(
        "serve",
        help="run the daemon on stdio (what an editor spawns)",
        description="Run the daemon. It speaks JSON-RPC 2.0 with LSP base-protocol framing "
        "(Content-Length headers) on stdin and stdout, and logs to stderr or --log-file. The "
        "protocol is described in protocol/README.md (methods, errors, lifecycle) and "
        "protocol/schema.json (every params and result shape).",
    )
    serve.add_argument("--data-dir", help="where sessions are stored (default: user data dir)")
    serve.add_argument("--log-file", help="log here instead of stderr")
    serve.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv)")

    demo = sub.add_parser("demo", help="the offline demo that `make demo` runs")
    demo.add_argument("transcript", nargs="?", help="a Claude Code transcript (.jsonl)")
    demo.add_argument("--data-dir", help="keep the demo's sessions here (default: a temp dir)")

    status = sub.add_parser("status", help="token status and breakdown of a transcript")
    status.add_argument("transcript", help="a Claude Code transcript (.jsonl)")
    status.add_argument(
        "--model", default=None, help="model whose window applies (default: claude-sonnet-4-5)"
    )
    status.add_argument(
        "--context-window", type=int, default=None, help="window in tokens (default: the model's)"
    )
    status.add_argument(
        "--max-output-tokens",
        type=int,
        default=None,
        help="output tokens reserved per request (default: the model's)",
    )
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")

    replay = sub.add_parser("replay", help="stream a transcript into a daemon and compact")
    replay.add_argument(
        "transcript", nargs="?", help="a Claude Code transcript (default: a synthetic session)"
    )
    replay.add_argument("--model", default=None, help="model whose window applies")
    replay.add_argument(
        "--context-window",
        type=int,
        default=None,
        help="window in tokens (default: the model's; 100,000 for the synthetic session)",
    )
    replay.add_argument(
        "--max-output-tokens",
        type=int,
        default=None,
        help="output tokens reserved per request (default: the model's)",
    )
    replay.add_argument(
        "--online",
        action="store_true",
        help=f"summarize with the Anthropic API ({ENV_API_KEY} from the environment)",
    )
    replay.add_argument("--data-dir", help="keep the replayed session here (default: a temp dir)")
    replay.add_argument(
        "--rounds-per-batch", type=int, default=1, help="API rounds appended per batch"
    )
    replay.add_argument("--json", action="store_true", help="print the timeline as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "serve":
        _setup_logging(args.verbose, args.log_file)
        from compactd.server import run_stdio

        return run_stdio(Path(args.data_dir) if args.data_dir else None)
    _setup_logging(0, None)
    # A report piped into `head` ends quietly when the pipe closes, as other tools do.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if getattr(args, "model", None) and not known_model(args.model):
        window = getattr(args, "context_window", None)
        assumed = f"{window:,}" if window else f"{model_limits(args.model).context_window:,}"
        print(
            f"compactd: unknown model {args.model!r}: assuming a {assumed}-token window; "
            "set it with --context-window",
            file=sys.stderr,
        )
    try:
        if args.command == "demo":
            return asyncio.run(demo(args.transcript, args.data_dir))
        if args.command == "status":
            return asyncio.run(
                status(
                    args.transcript,
                    args.model,
                    args.json,
                    context_window=args.context_window,
                    max_output_tokens=args.max_output_tokens,
                )
            )
        if args.command == "replay":
            return asyncio.run(
                replay(
                    args.transcript,
                    model=args.model,
                    context_window=args.context_window,
                    max_output_tokens=args.max_output_tokens,
                    online=args.online,
                    data_dir=args.data_dir,
                    rounds_per_batch=args.rounds_per_batch,
                    as_json=args.json,
                )
            )
    except RpcError as exc:
        print(f"compactd: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    print(f"compactd: '{args.command}' is not available yet", file=sys.stderr)
    return 2


# -- people-facing tools ----------------------------------------------------------------------

# The demo's default transcript is one of the test fixtures (tests/data/README.md); an
# installed package without the tests falls back to a synthetic session.
FIXTURE_TRANSCRIPTS = Path(__file__).resolve().parent.parent / "tests" / "data" / "transcripts"
DEMO_FIXTURE = "d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"


def _daemon_args(data_dir: str) -> list[str]:
    return [sys.executable, "-m", "compactd", "serve", "--data-dir", data_dir]


def _gauge(status: p.TokenStatus, width: int = 40) -> str:
    limit = (
        status.auto_compact_threshold if status.auto_compact_enabled else status.effective_window
    )
    frac = min(1.0, status.tokens / limit) if limit else 0.0
    filled = int(frac * width)
    return "[" + "#" * filled + "." * (width - filled) + f"] {status.tokens:,} / {limit:,} tokens"


def _print_status(status: p.TokenStatus) -> None:
    print(f"  next request {_gauge(status)}")
    print(f"  {_parts(status)}")
    print(
        f"  window {status.context_window:,}, effective {status.effective_window:,}, "
        f"auto-compact at {status.auto_compact_threshold:,}, {status.percent_left}% left"
    )


def _parts(status: p.TokenStatus) -> str:
    """The status's total in its parts (docs/thresholds.md#accounting)."""
    out = (
        f"system prompt and tools {status.fixed_prefix_tokens:,} + messages "
        f"{status.message_tokens:,}"
    )
    if status.attachment_tokens:
        out += f" + attachments {status.attachment_tokens:,}"
    if status.cleared_tokens:
        out += f" - cleared by microcompact {status.cleared_tokens:,}"
    return out


def _print_breakdown(bd: p.BreakdownResult) -> None:
    rows: list[tuple[str, int, float]] = [(c.name, c.tokens, c.percent) for c in bd.categories]
    rows += [(f"  tool use: {c.name}", c.tokens, c.percent) for c in bd.tool_requests]
    rows += [(f"  tool result: {c.name}", c.tokens, c.percent) for c in bd.tool_results]
    rows += [(f"  attachment: {c.name}", c.tokens, c.percent) for c in bd.attachments]
    print(f"  {'category':<34} {'tokens':>10} {'share':>7}")
    for name, tok, pct in rows:
        print(f"  {name:<34} {tok:>10,} {pct:>6.1f}%")
    if bd.duplicate_reads:
        print(f"  duplicate file reads waste {bd.duplicate_read_tokens:,} tokens:")
        for d in bd.duplicate_reads[:5]:
            print(f"    {d.path} read {d.reads}x ({d.wasted_tokens:,} tokens wasted)")


def _print_stats(st: p.StatsResult) -> None:
    """Compaction history (only called when there is one), microcompact savings, cache breaks."""
    print(f"  {len(st.compactions)} compaction(s):")
    for i, c in enumerate(st.compactions, 1):
        post = f"~{c.post_tokens:,}" if c.post_tokens_estimated else f"{c.post_tokens:,}"
        again = f", re-compaction after {c.turns_since_previous} turn(s)" if c.recompaction else ""
        print(
            f"    #{i} {c.trigger} {c.mechanism}: {c.pre_tokens:,} -> {post} tokens "
            f"({c.dropped_tokens:,} dropped, {c.entries_summarized} entries summarized, "
            f"{c.duration_ms:,} ms{again})"
        )
        if c.thrash:
            print(f"       thrash: refilled past the threshold within {c.refill_turns} turn(s)")
            for name in c.refill_contributors or []:
                print(f"         {name}")
    if st.microcompactions:
        print(
            f"  microcompact ran {st.microcompactions} time(s), "
            f"saving {st.microcompact_tokens_saved:,} tokens"
        )


async def demo(transcript: str | None, data_dir: str | None) -> int:
    """Import a transcript into a fresh daemon, show its status, compact it offline, show again."""
    source = Path(transcript) if transcript else FIXTURE_TRANSCRIPTS / DEMO_FIXTURE
    with tempfile.TemporaryDirectory(prefix="compactd-demo-") as tmp:
        work = Path(data_dir) if data_dir else Path(tmp)
        if not source.is_file():
            source = work / "synthetic-session.jsonl"
            source.write_bytes(to_jsonl(make_session()))
            print("(no fixture transcript found; using a synthetic session)")
        print(f"compactd {__version__} demo: {source.name}")
        async with Client.spawn(
            _daemon_args(str(work / "data")),
            initialization_options={"summarizer": {"offline": True}},
        ) as client:
            opened = await client.open_session(
                cwd=str(Path.cwd()), model="claude-sonnet-4-5", transcript_path=str(source)
            )
            print(
                f"imported {opened.entry_count} entries as session {opened.session_id}"
                + (
                    f" ({opened.skipped_lines} corrupt lines skipped)"
                    if opened.skipped_lines
                    else ""
                )
            )
            print(
                f"  stored at {opened.transcript_path}"
                if data_dir
                else "  stored in a temporary folder, deleted at exit (--data-dir keeps it)"
            )
            _print_status(opened.status)
            _print_breakdown(await client.tokens_breakdown(opened.session_id))
            msgs = await client.messages(opened.session_id)
            print(f"  API view: {len(msgs.messages)} messages after normalization")
            await _demo_compaction(client, opened.session_id)
            await _demo_auto(client)
            listed = await client.list_sessions()
            print(f"daemon holds {len(listed.sessions)} session(s)")
    return 0


async def _demo_compaction(client: Client, session_id: str) -> None:
    """Compact with the offline summarizer and show what changed."""
    print("compacting offline (no API key: a structured summary built from the transcript)")
    try:
        result = await client.compact_full(session_id)
    except RpcError as exc:
        print(f"  not compacted: {exc}")
        return
    summary = result.summary["message"]["content"]
    status = await client.tokens_status(session_id)
    print(
        f"  {result.pre_compact_tokens:,} -> {result.post_compact_tokens:,} tokens (the system "
        f"prompt and tools, {status.fixed_prefix_tokens:,}, are sent either way) in "
        f"{result.duration_ms:,} ms ({result.summarizer} summary, {len(summary):,} characters; "
        f"{len(result.attachments)} attachment(s) re-injected)"
    )
    # The whole of it: the survival ledger keeps it within the view budget.
    for line in summary.splitlines():
        print(f"  | {line}".rstrip())
    _print_status(status)
    after = await client.messages(session_id)
    print(f"  API view after compaction: {len(after.messages)} message(s)")


# The synthetic session the demo replays: big enough to cross the 100K window's auto-compact
# threshold more than once, small enough to replay in a few seconds.
_DEMO_REPLAY_ENTRIES = 1_000
_DEMO_REPLAY_TOKENS = 150_000


async def _demo_auto(client: Client) -> None:
    """Replay a synthetic session as an agent would, letting compact/auto decide, and show
    that the stored transcript still holds every original entry."""
    entries = make_session(entries=_DEMO_REPLAY_ENTRIES, target_tokens=_DEMO_REPLAY_TOKENS)
    print(
        f"automatic compaction: an agent appends a synthetic session of {len(entries)} entries "
        f"round by round and calls compact/auto before each request"
    )
    plan = plan_replay(to_jsonl(entries).splitlines())
    outcome = await replay_session(
        client, plan, model="claude-sonnet-4-5", context_window=REPLAY_SYNTHETIC_WINDOW
    )
    _print_timeline(outcome.events, outcome.saved, refused=outcome.refusals > 0)
    print(
        f"model calls: {outcome.model_calls} (summaries), billing about "
        f"{outcome.billed_input_tokens:,} input tokens"
    )
    print("status after:")
    _print_status(await client.tokens_status(outcome.session_id))
    stored = [r.entry for r in parse_lines(Path(outcome.transcript_path).read_bytes().splitlines())]
    uuids = {e.uuid for e in stored}
    kept = sum(1 for e in entries if e.get("uuid") in uuids)
    boundaries = sum(1 for e in stored if e.is_compact_boundary or e.is_microcompact_boundary)
    print(
        f"  the transcript still holds {kept} of {len(entries)} original entries, plus "
        f"{boundaries} compaction boundary entries"
    )


async def status(
    transcript: str,
    model: str | None,
    as_json: bool,
    *,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
) -> int:
    """Token status and breakdown of a transcript, through a throwaway daemon."""
    path = Path(transcript)
    problem = _unreadable(path)
    if problem is not None:
        print(f"compactd: {transcript}: {problem}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="compactd-status-") as tmp:
        async with Client.spawn(_daemon_args(tmp)) as client:
            opened = await client.open_session(
                cwd=str(Path.cwd()),
                model=model or "claude-sonnet-4-5",
                transcript_path=str(path),
                context_window=context_window,
                max_output_tokens=max_output_tokens,
            )
            bd = await client.tokens_breakdown(opened.session_id)
            st = await client.stats(opened.session_id)
            if as_json:
                print(
                    msgspec.json.encode(
                        {"status": opened.status, "breakdown": bd, "stats": st}
                    ).decode()
                )
                return 0
            print(f"{path.name}: {opened.entry_count} entries")
            _print_status(opened.status)
            _print_breakdown(bd)
            if st.compactions:
                _print_stats(st)
    return 0


def _unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be a transcript, said for a person; None when it may be one."""
    if path.is_dir():
        return "is a directory; give a Claude Code transcript file (.jsonl)"
    if not path.exists():
        return "no such file"
    if path.stat().st_size == 0:
        return "is empty: a transcript has one JSON entry per line"
    return None


# -- replay -------------------------------------------------------------------------------------

# The window the replay of the synthetic session uses: small enough that its ~180K tokens are
# compacted more than once, large enough to be a real model's
# (docs/thresholds.md#auto-compact-threshold).
REPLAY_SYNTHETIC_WINDOW = 100_000
# Progress lines printed over a replay when stdout is not a terminal (one per step of 10%).
_REPLAY_PROGRESS_STEPS = 10
_BAR_WIDTH = 24
# Largest append batch of a replay: a round longer than this (an inline sub-agent run inside
# one response) is appended in pieces, as an agent streams it, with compact/auto in between.
REPLAY_MAX_BATCH = 20


@dataclass(slots=True)
class ReplayEvent:
    """One compaction the daemon made during a replay."""

    entry: int  # entries appended when it happened (1-based index of the last one)
    mechanism: str
    pre_tokens: int
    post_tokens: int
    boundary_uuid: str | None


@dataclass(slots=True)
class ReplayPlan:
    """A transcript cut into append batches (API rounds), without its original compactions."""

    batches: list[list[dict[str, Any]]]
    entries: int
    skipped_artefacts: int
    corrupt_lines: int


def plan_replay(
    lines: list[bytes], rounds_per_batch: int = 1, max_batch: int = REPLAY_MAX_BATCH
) -> ReplayPlan:
    """Group a transcript's entries by API round, as an agent appends them turn by turn.

    A batch holds ``rounds_per_batch`` rounds, cut into pieces of at most ``max_batch``
    entries.

    The original compaction boundaries and summaries are left out: the point of a replay is to
    see which compactions this daemon makes on its own.
    """
    report = ParseReport()
    records = [
        r
        for r in parse_lines(lines, report)
        if not (
            r.entry.is_compact_boundary
            or r.entry.is_microcompact_boundary
            or r.entry.is_compact_summary
        )
    ]
    kept = len(records)
    skipped = report.lines - report.skipped - kept
    rounds = group_rounds([r.entry for r in records])
    batches: list[list[dict[str, Any]]] = []
    step = max(1, rounds_per_batch)
    size = max(1, max_batch)
    for i in range(0, len(rounds), step):
        group = rounds[i : i + step]
        span = [r.to_builtins() for r in records[group[0].start : group[-1].end]]
        batches += [span[j : j + size] for j in range(0, len(span), size)]
    return ReplayPlan(batches, kept, skipped, report.skipped)


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


def _bar(done: int, total: int, width: int = _BAR_WIDTH) -> str:
    frac = done / total if total else 1.0
    filled = int(frac * width)
    return "[" + "=" * filled + " " * (width - filled) + f"] {frac:4.0%}"


class _Progress:
    """A live gauge: rewritten in place on a terminal, a line per 10% otherwise."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.tty = sys.stdout.isatty()
        self._next_step = 1
        self._open_line = False

    def update(self, done: int, status: p.TokenStatus) -> None:
        line = f"entries {done:>6}/{self.total} {_bar(done, self.total)}  context {_gauge(status)}"
        if self.tty:
            sys.stdout.write("\r" + line + "\x1b[K")
            sys.stdout.flush()
            self._open_line = True
            return
        if done * _REPLAY_PROGRESS_STEPS >= self._next_step * self.total or done == self.total:
            while done * _REPLAY_PROGRESS_STEPS >= self._next_step * self.total:
                self._next_step += 1
            print(line, flush=True)

    def say(self, text: str) -> None:
        if self._open_line:
            sys.stdout.write("\n")
            self._open_line = False
        print(text, flush=True)

    def finish(self) -> None:
        if self._open_line:
            sys.stdout.write("\n")
            self._open_line = False


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
        """Summary requests a model would have answered (one per summarizing compaction)."""
        return sum(1 for ev in self.events if ev.mechanism == "full")

    @property
    def billed_input_tokens(self) -> int:
        """Input those requests would have carried: each sends the context it summarizes."""
        return sum(ev.pre_tokens for ev in self.events if ev.mechanism == "full")


async def replay_session(
    client: Client,
    plan: ReplayPlan,
    *,
    model: str,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    quiet: bool = False,
) -> ReplayOutcome:
    """Append ``plan`` to a new session batch by batch, calling ``compact/auto`` after each
    append exactly as an agent does before its next request; show a live gauge unless quiet."""
    opened = await client.open_session(
        cwd=str(Path.cwd()),
        model=model,
        context_window=context_window,
        max_output_tokens=max_output_tokens,
    )
    sid = opened.session_id
    progress = _Progress(plan.entries)
    say = (lambda text: None) if quiet else progress.say
    say(
        f"replaying {plan.entries} entries in {len(plan.batches)} batches into a "
        f"{opened.status.context_window:,}-token window "
        f"(auto-compact at {opened.status.auto_compact_threshold:,})"
    )
    if plan.skipped_artefacts:
        say(f"  left out {plan.skipped_artefacts} compaction entries of the original")
    events: list[ReplayEvent] = []
    done = 0
    reasons: set[str] = set()
    status = opened.status
    for batch in plan.batches:
        removed = sum(ev.pre_tokens - ev.post_tokens for ev in events)
        if removed:
            # The recorded usage measured the original, uncompacted context: rescaled, it is
            # what this replay's compacted context would have reported.
            batch = [_rescaled(e, removed, status.tokens) for e in batch]
        await client.append(sid, batch)
        done += len(batch)
        auto = await client.compact_auto(sid)
        status = auto.status or await client.tokens_status(sid)
        new = _events(done, auto)
        events += new
        for ev in new:
            say(
                f"  compacted at entry {ev.entry}: {ev.mechanism} "
                f"{ev.pre_tokens:,} -> {ev.post_tokens:,} tokens"
            )
        if not auto.was_compacted and status.is_above_auto_compact_threshold:
            reason = auto.reason or "no reason given"
            if reason not in reasons:
                reasons.add(reason)
                say(f"  not compacted at entry {done}: {reason}")
        if not quiet:
            progress.update(done, status)
    progress.finish()
    return ReplayOutcome(sid, opened.transcript_path, events, status, len(reasons))


async def replay(
    transcript: str | None,
    *,
    model: str | None = None,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    online: bool = False,
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
        problem = _unreadable(path)
        if problem is not None:
            print(f"compactd: {transcript}: {problem}", file=sys.stderr)
            return 1
        lines = path.read_bytes().splitlines()
        name = path.name
    if online and not (os.environ.get(ENV_API_KEY) or os.environ.get(ENV_AUTH_TOKEN)):
        print(f"compactd: --online needs {ENV_API_KEY} in the environment", file=sys.stderr)
        return 2
    plan = plan_replay(lines, rounds_per_batch)
    options: dict[str, Any] = {} if online else {"summarizer": {"offline": True}}
    with tempfile.TemporaryDirectory(prefix="compactd-replay-") as tmp:
        async with Client.spawn(
            _daemon_args(data_dir or tmp), initialization_options=options
        ) as client:
            if not as_json:
                summarizer = "the Anthropic API" if online else "the offline summarizer"
                print(f"compactd {__version__} replay of {name}, compacting with {summarizer}")
            outcome = await replay_session(
                client,
                plan,
                model=model or "claude-sonnet-4-5",
                context_window=context_window,
                max_output_tokens=max_output_tokens,
                quiet=as_json,
            )
    if as_json:
        out = {
            "sessionId": outcome.session_id,
            # A temporary data dir is gone when this prints: its path would mislead.
            "transcriptPath": outcome.transcript_path if data_dir else None,
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
            "billedInputTokens": outcome.billed_input_tokens,
            "status": outcome.status,
        }
        print(msgspec.json.encode(out).decode())
        return 0
    _print_timeline(outcome.events, outcome.saved, refused=outcome.refusals > 0)
    print(
        f"model calls: {outcome.model_calls} (summaries), billing about "
        f"{outcome.billed_input_tokens:,} input tokens"
    )
    _print_status(outcome.status)
    return 0


def _print_timeline(events: list[ReplayEvent], saved: int, refused: bool = False) -> None:
    if not events:
        print(
            "no compactions: each one was refused (reasons above)"
            if refused
            else "no compactions: the conversation stayed below the auto-compact threshold"
        )
        return
    print(f"timeline: {len(events)} compaction(s)")
    print(f"  {'entry':>7}  {'mechanism':<13} {'before':>10} -> {'after':>10}")
    for ev in events:
        print(f"  {ev.entry:>7}  {ev.mechanism:<13} {ev.pre_tokens:>10,} -> {ev.post_tokens:>10,}")
    print(f"total tokens saved: {saved:,}")
