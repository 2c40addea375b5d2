"""``compactd gemini hook|install|uninstall``: compactd inside Gemini CLI (docs/gemini.md#compactd-inside-gemini-cli).

``hook`` is what Gemini CLI runs for its hook events, in a short process: it imports only what
it needs, reads the event on stdin and prints the answer (JSON, or nothing). It never fails the
user's session: any error is one line on stderr and exit 0 (exit 2 would block the model call,
docs/gemini.md#hook-output), and past its deadline it ends with no answer. ``install`` and
``uninstall`` edit Gemini CLI's ``settings.json`` (``services.install``) and print what they
changed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Final

from compactd.services import hook_events
from compactd.services.installed import add_install_commands

__all__ = ["HOOK_DEADLINE_S", "main"]

# When this process started (near enough: this module is the first of compactd's it imports).
_STARTED: Final = time.monotonic()
HOOK_DEADLINE_S: Final = hook_events.HOOK_DEADLINE_S  # every agent's (docs/safe-io.md#deadlines)
# What a request that follows a compression holds, and the event that carries requests.
_SNAPSHOT: Final = b"<state_snapshot>"
_MODEL_EVENT: Final = b"BeforeModel"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compactd gemini",
        description="compactd inside a running Gemini CLI session: hooks that give the model "
        "back what Gemini CLI's compression dropped, the recall MCP server, and their "
        "installation.",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    hook = sub.add_parser("hook", help="answer a Gemini CLI hook event (JSON on stdin)")
    hook.add_argument("--data-dir", help="compactd's data dir (default: the user data dir)")
    hook.add_argument(
        "--no-threshold-warning", action="store_true", help="no warning before a compression"
    )
    add_install_commands(
        sub,
        files="Gemini CLI's settings.json",
        scope_help="user: ~/.gemini/settings.json; project: the project's .gemini/settings.json "
        "(default: user)",
        warning_help="no warning to the model before Gemini CLI's compression",
    )
    return parser


def _data_dir(arg: str | None) -> Path:
    from compactd.services.data_dir import data_dir_of

    return data_dir_of(arg)


def _hook(args: argparse.Namespace) -> tuple[str, int]:
    raw = hook_events.read_stdin(_STARTED, HOOK_DEADLINE_S)
    # Most requests hold no snapshot: answered with nothing, before the reader is imported
    # (every model request waits for this process; docs/gemini.md#budget-and-cost).
    if _SNAPSHOT not in raw and _MODEL_EVENT in raw:
        event = hook_events.parse_event(raw, "Gemini CLI")
        if event.hook_event_name == "BeforeModel":
            return "", 0
    from compactd.agents.gemini.services.hooks import answer

    reply = answer(raw, _data_dir(args.data_dir), os.environ, warning=not args.no_threshold_warning)
    # Gemini CLI reads any exit status but 0 as a failure (2 blocks the model call).
    return reply.stdout, 0


def _install(args: argparse.Namespace) -> int:
    from compactd.agents.gemini.services import install as gi

    project = Path(args.project).resolve()
    data_dir_arg = str(Path(args.data_dir).absolute()) if args.data_dir else None
    try:
        if args.action == "install":
            plan = gi.install(
                args.scope, project, sys.executable, _data_dir(args.data_dir),
                dry_run=args.dry_run, warning=not args.no_threshold_warning,
                data_dir_arg=data_dir_arg,
            )  # fmt: skip
        else:
            plan = gi.uninstall(args.scope, project, _data_dir(args.data_dir), dry_run=args.dry_run)
    except gi.InstallError as exc:
        hook_events.err(f"compactd: {exc}")
        return 1
    verb = "would change" if args.dry_run else "changed"
    if not plan.changes:
        hook_events.out(f"compactd gemini {args.action}: nothing to change ({args.scope} scope)")
    for change in plan.changes:
        hook_events.out(f"{verb}: {change}")
    for note in plan.notes:
        hook_events.out(f"note: {note}")
    return 0


def main(argv: list[str]) -> int:
    from compactd.core.outbound import remember_secret, secrets_from_env

    for secret in secrets_from_env(os.environ):
        remember_secret(secret)
    args = _parser().parse_args(argv)
    if args.action in ("install", "uninstall"):
        return _install(args)
    # What Gemini CLI runs: any failure is one line on stderr, and the session goes on; past
    # its deadline the process ends wherever it is waiting.
    return hook_events.run_bounded(
        f"compactd gemini {args.action}", _STARTED, HOOK_DEADLINE_S, lambda: _hook(args)
    )
