"""The ``compactd`` command: ``serve`` for editors, and tools for people (``demo``, ``status``).

Only this module prints; the daemon itself (``serve``) writes protocol frames to stdout and
nothing else, and logs to stderr or ``--log-file``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
from pathlib import Path

import msgspec
from compactd_client import Client, RpcError

from compactd import __version__
from compactd import protocol as p
from compactd.synthetic import make_session, to_jsonl


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
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the daemon on stdio (what an editor spawns)")
    serve.add_argument("--data-dir", help="where sessions are stored (default: user data dir)")
    serve.add_argument("--log-file", help="log here instead of stderr")
    serve.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv)")

    demo = sub.add_parser("demo", help="the offline demo that `make demo` runs")
    demo.add_argument("transcript", nargs="?", help="a Claude Code transcript (.jsonl)")
    demo.add_argument("--data-dir", help="keep the demo's sessions here (default: a temp dir)")

    status = sub.add_parser("status", help="token status and breakdown of a transcript")
    status.add_argument("transcript", help="a Claude Code transcript (.jsonl)")
    status.add_argument("--model", default=None, help="model whose window applies")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")

    replay = sub.add_parser("replay", help="stream a transcript into a daemon and compact")
    replay.add_argument("transcript", help="a Claude Code transcript (.jsonl)")
    replay.add_argument("--model", default=None, help="model whose window applies")
    replay.add_argument("--context-window", type=int, default=None)
    replay.add_argument("--online", action="store_true", help="use the Anthropic API (needs a key)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    if args.command == "serve":
        _setup_logging(args.verbose, args.log_file)
        from compactd.server import run_stdio

        return run_stdio(Path(args.data_dir) if args.data_dir else None)
    _setup_logging(0, None)
    try:
        if args.command == "demo":
            return asyncio.run(demo(args.transcript, args.data_dir))
        if args.command == "status":
            return asyncio.run(status(args.transcript, args.model, args.json))
    except RpcError as exc:
        print(f"compactd: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    print(f"compactd: '{args.command}' is not available yet", file=sys.stderr)
    return 2


# -- people-facing tools ----------------------------------------------------------------------

SHARED_FIXTURES = (
    Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "transcripts"
)
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
    print(f"  context   {_gauge(status)}")
    print(
        f"  exact {status.exact_tokens:,} + estimated {status.estimated_tokens:,}; "
        f"window {status.context_window:,}, effective {status.effective_window:,}, "
        f"auto-compact at {status.auto_compact_threshold:,}, {status.percent_left}% left"
    )


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
    source = Path(transcript) if transcript else SHARED_FIXTURES / DEMO_FIXTURE
    with tempfile.TemporaryDirectory(prefix="compactd-demo-") as tmp:
        work = Path(data_dir) if data_dir else Path(tmp)
        if not source.is_file():
            source = work / "synthetic-session.jsonl"
            source.write_bytes(to_jsonl(make_session()))
            print(f"(no fixture transcript found; using a synthetic session at {source})")
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
            print(f"  stored at {opened.transcript_path}")
            _print_status(opened.status)
            _print_breakdown(await client.tokens_breakdown(opened.session_id))
            msgs = await client.messages(opened.session_id)
            print(f"  API view: {len(msgs.messages)} messages after normalization")
            await _demo_compaction(client, opened.session_id)
            listed = await client.list_sessions()
            print(f"daemon holds {len(listed.sessions)} session(s)")
    return 0


# How many lines of the summary the demo prints.
_DEMO_SUMMARY_LINES = 14


async def _demo_compaction(client: Client, session_id: str) -> None:
    """Compact with the offline summarizer and show what changed."""
    print("compacting offline (no API key: a structured summary built from the transcript)")
    try:
        result = await client.compact_full(session_id)
    except RpcError as exc:
        print(f"  not compacted: {exc}")
        return
    summary = result.summary["message"]["content"]
    print(
        f"  {result.pre_compact_tokens:,} -> {result.post_compact_tokens:,} tokens in "
        f"{result.duration_ms:,} ms ({result.summarizer} summary, {len(summary):,} characters; "
        f"{len(result.attachments)} attachment(s) re-injected)"
    )
    shown = summary.splitlines()[:_DEMO_SUMMARY_LINES]
    for line in shown:
        print(f"  | {line}")
    print("  | ...")
    _print_status(await client.tokens_status(session_id))
    after = await client.messages(session_id)
    print(f"  API view after compaction: {len(after.messages)} message(s)")


async def status(transcript: str, model: str | None, as_json: bool) -> int:
    """Token status and breakdown of a transcript, through a throwaway daemon."""
    path = Path(transcript)
    if not path.is_file():
        print(f"compactd: no such file: {transcript}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="compactd-status-") as tmp:
        async with Client.spawn(_daemon_args(tmp)) as client:
            opened = await client.open_session(
                cwd=str(Path.cwd()), model=model or "claude-sonnet-4-5", transcript_path=str(path)
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
