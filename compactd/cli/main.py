"""The ``compactd`` command: ``serve`` for editors, and reports for people (``status``,
``compact``, ``replay``, ``demo``).

The daemon (``serve``) writes protocol frames to stdout and nothing else, and logs to stderr or
``--log-file``. The reports write through :class:`compactd.cli.term.Terminal` (``rich`` on a
terminal, plain text otherwise, ``--json`` on request).

Each subcommand imports its own modules in the branch that runs it: ``compactd mcp`` and
``compactd claude-code`` are started often by another program and pay only for what they use
(docs/claude-code.md#hooks), and ``--version`` or a usage error imports no subcommand at all.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from compactd import __version__, port
from compactd.cli.providers import add_summarizer_flags, summarizer_choice
from compactd.core.constants import DEFAULT_MODEL

if TYPE_CHECKING:
    from compactd.cli.term import Terminal

# Exit codes: 1 for a failure, 2 for a wrong command line (argparse's own), 128 + the signal
# for an interruption, as shells report it.
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT


class _RedactingFormatter(logging.Formatter):
    """Every log line, traceback included, with keys redacted (core/outbound.py): an upstream's
    error body may repeat the key it was sent."""

    def format(self, record: logging.LogRecord) -> str:
        from compactd.core.outbound import redact

        return redact(super().format(record))


def _setup_logging(verbosity: int, log_file: str | None) -> None:
    level = logging.WARNING - 10 * min(verbosity, 2)
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8")
        if log_file
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(_RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
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

    mcp = sub.add_parser(
        "mcp",
        help="an MCP server on stdio: the recall and context tools for an agent",
        description="Serve the MCP tools `recall` (search this session's whole history) and "
        "`context` (how full its window is) on stdio (docs/recall.md).",
    )
    mcp.add_argument("--data-dir", help="compactd's data dir (default: user data dir)")
    mcp.add_argument("--session", help="serve this session (default: the current Claude Code one)")
    mcp.add_argument(
        "--cwd",
        help="the project folder (default: $CLAUDE_PROJECT_DIR, else the working directory)",
    )
    mcp.add_argument("--log-file", help="log here instead of stderr")
    mcp.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv)")

    # Every report can be asked for as plain text or as JSON.
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument(
        "--plain",
        action="store_true",
        help="plain text: no colour, no box drawing, no live progress (also when NO_COLOR is "
        "set or stdout is not a terminal)",
    )
    output.add_argument("--json", action="store_true", help="print the report as one JSON object")

    demo = sub.add_parser("demo", parents=[output], help="the offline demo that `make demo` runs")
    demo.add_argument("transcript", nargs="?", help="a Claude Code transcript (.jsonl)")
    demo.add_argument("--data-dir", help="keep the demo's sessions here (default: a temp dir)")

    status = sub.add_parser(
        "status",
        parents=[output],
        help="token status, breakdown and next step of a transcript",
        description="Where a Claude Code transcript stands against its model's window: the "
        "parts of the next request (adding up to its total), the heaviest tools, the "
        "compactions already made, and what compact/auto would do next. Read-only: the "
        "transcript is imported into a throwaway daemon.",
    )
    status.add_argument(
        "transcript",
        nargs="?",
        help="a Claude Code transcript (.jsonl), or a folder: one of sessions "
        "(~/.claude/projects/<project>/) or a project's working folder, for its newest session "
        "(default: the newest Claude Code session of the current folder)",
    )
    status.add_argument(
        "--model",
        default=None,
        help="model whose window applies (default: the one the transcript's latest response "
        f"names, else {DEFAULT_MODEL})",
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
    _add_level_flag(status)
    status.add_argument(
        "--follow",
        action="store_true",
        help="then keep reading the transcript as the agent appends to it, a gauge line per "
        "change, until Ctrl-C",
    )

    compact = sub.add_parser(
        "compact",
        parents=[output],
        help="compact a Claude Code transcript into a new session for `claude --resume`",
        description="Compact a Claude Code transcript and write the result as a NEW Claude Code "
        "session beside it (the original is never changed): compactd's summary, every user "
        "message kept, the last assistant turn verbatim. Prints the command that resumes it "
        "(claude --resume <id>).",
    )
    compact.add_argument(
        "transcript",
        nargs="?",
        help="a Claude Code transcript (.jsonl), or a folder for its newest session, as status "
        "takes it (default: the newest Claude Code session of the current folder)",
    )
    add_summarizer_flags(compact)
    compact.add_argument(
        "--instructions", default=None, help="what the summary should focus on (like /compact's)"
    )

    replay = sub.add_parser(
        "replay", parents=[output], help="stream a transcript into a daemon and compact"
    )
    replay.add_argument(
        "transcript", nargs="?", help="a Claude Code transcript (default: a synthetic session)"
    )
    replay.add_argument(
        "--model",
        default=None,
        help="model whose window applies (default: the one the transcript names, else "
        f"{DEFAULT_MODEL})",
    )
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
    # ``--model`` is the session's model here: the summarizer's is ``--summarizer-model``.
    add_summarizer_flags(replay, model_flag="--summarizer-model")
    _add_level_flag(replay)
    replay.add_argument("--data-dir", help="keep the replayed session here (default: a temp dir)")
    replay.add_argument(
        "--rounds-per-batch", type=int, default=1, help="API rounds appended per batch"
    )
    # Each agent's own command line (``compactd claude-code ...``), parsed by its package.
    for agent in port.AGENTS:
        sub.add_parser(agent.command, add_help=False, help=agent.help)
    return parser


def _add_level_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--auto-compact-tokens",
        type=int,
        default=None,
        help="an absolute auto-compact level in tokens: the threshold is the lower of it and "
        "the share of the window (default: none)",
    )


def main(argv: list[str] | None = None) -> int:
    """The general command line; an agent's (``compactd claude-code ...``) never reaches it
    (``compactd.cli.entry``)."""
    argv = sys.argv[1:] if argv is None else argv
    # The keys of the environment are redacted from everything this process says.
    from compactd.core.outbound import remember_secret, secrets_from_env

    for secret in secrets_from_env(os.environ):
        remember_secret(secret)
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    if args.command == "serve":
        _setup_logging(args.verbose, args.log_file)
        from compactd.server import run_stdio

        return run_stdio(Path(args.data_dir) if args.data_dir else None)
    if args.command == "mcp":
        _setup_logging(args.verbose, args.log_file)
        from compactd.cli.mcp_serve import serve
        from compactd.mcp_server import McpConfig
        from compactd.services.data_dir import default_data_dir

        data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
        # The agent names the project where it sets it (CLAUDE_PROJECT_DIR; docs/recall.md).
        cwd = args.cwd or port.project_dir(os.environ) or os.getcwd()
        return serve(McpConfig(data_dir, cwd, args.session), os.environ)
    return _run_report(args)


def _run_report(args: argparse.Namespace) -> int:
    import anyio
    from compactd_client import RpcError

    from compactd.cli.term import Terminal
    from compactd.core.tokens import known_model, model_limits

    _setup_logging(0, None)
    # A report piped into `head` ends quietly when the pipe closes, as other tools do.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    term = Terminal(plain=args.plain)
    if getattr(args, "model", None) and not known_model(args.model):
        window = getattr(args, "context_window", None)
        assumed = f"{window:,}" if window else f"{model_limits(args.model).context_window:,}"
        term.error(
            f"unknown model {args.model!r}: assuming a {assumed}-token window; "
            "set it with --context-window"
        )
    try:
        return anyio.run(_report, term, args)
    except RpcError as exc:
        term.error(_in_flags(str(exc)))
        return EXIT_FAILED
    except KeyboardInterrupt:
        # Ctrl-C: the daemon the report spawned got the signal too and stops on its own.
        term.error("interrupted")
        return EXIT_INTERRUPTED


# The session/open params a report passes on from its options: the daemon's errors name the
# params, the person typed the options.
_PARAM_FLAGS = {
    "contextWindow": "--context-window",
    "maxOutputTokens": "--max-output-tokens",
    "autoCompactTokens": "--auto-compact-tokens",
}


def _in_flags(message: str) -> str:
    for param, flag in _PARAM_FLAGS.items():
        message = message.replace(param, flag)
    return message


async def _report(term: Terminal, args: argparse.Namespace) -> int:
    from compactd.cli.compact import compact
    from compactd.cli.demo import demo
    from compactd.cli.replay import replay
    from compactd.cli.status import status

    if args.command == "demo":
        return await demo(term, args.transcript, args.data_dir, as_json=args.json)
    if args.command == "status":
        return await status(
            term,
            args.transcript,
            model=args.model,
            as_json=args.json,
            context_window=args.context_window,
            max_output_tokens=args.max_output_tokens,
            follow=args.follow,
            auto_compact_tokens=args.auto_compact_tokens,
        )
    if args.command == "compact":
        return await compact(
            term,
            args.transcript,
            summarizer=summarizer_choice(args),
            instructions=args.instructions,
            as_json=args.json,
        )
    assert args.command == "replay"
    return await replay(
        term,
        args.transcript,
        model=args.model,
        context_window=args.context_window,
        max_output_tokens=args.max_output_tokens,
        summarizer=summarizer_choice(args),
        auto_compact_tokens=args.auto_compact_tokens,
        data_dir=args.data_dir,
        rounds_per_batch=args.rounds_per_batch,
        as_json=args.json,
    )
