"""``compactd codex hook|install|uninstall``: compactd inside Codex CLI (docs/codex.md#compactd-inside-codex).

``hook`` is what Codex runs for each hook event, in a short process: it imports only what it
needs, reads the event on stdin and prints the answer. It never fails the user's session: any
error is one line on stderr and exit 0. ``install`` and ``uninstall`` edit Codex's
``config.toml`` and ``hooks.json`` (``services.install``) and print what they changed.
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compactd codex",
        description="compactd inside a running Codex CLI session: hooks that give the model "
        "back what Codex's compaction dropped, the recall MCP server, and their installation.",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    hook = sub.add_parser("hook", help="answer a Codex hook event (JSON on stdin)")
    hook.add_argument("--data-dir", help="compactd's data dir (default: the user data dir)")
    add_install_commands(
        sub,
        files="Codex's config.toml and hooks.json",
        scope_help="user: $CODEX_HOME (~/.codex); project: the project's .codex/ (default: user)",
        warning_help="no warning to the model before Codex's automatic compaction",
    )
    return parser


def _data_dir(arg: str | None) -> Path:
    from compactd.services.data_dir import data_dir_of

    return data_dir_of(arg)


_out, _err = hook_events.out, hook_events.err


def _hook(args: argparse.Namespace) -> tuple[str, int]:
    from compactd.agents.codex.services.hooks import answer

    raw = hook_events.read_stdin(_STARTED, HOOK_DEADLINE_S)
    reply = answer(raw, _data_dir(args.data_dir), os.environ)
    return reply.stdout, reply.exit_code


def _install(args: argparse.Namespace) -> int:
    from compactd.agents.codex.services import install as ci

    project = Path(args.project).resolve()
    try:
        if args.action == "install":
            plan = ci.install(
                args.scope, project, sys.executable, _data_dir(args.data_dir),
                dry_run=args.dry_run, warning=not args.no_threshold_warning,
                data_dir_arg=args.data_dir,
            )  # fmt: skip
        else:
            plan = ci.uninstall(args.scope, project, _data_dir(args.data_dir), dry_run=args.dry_run)
    except ci.InstallError as exc:
        _err(f"compactd: {exc}")
        return 1
    verb = "would change" if args.dry_run else "changed"
    if not plan.changes:
        _out(f"compactd codex {args.action}: nothing to change ({args.scope} scope)")
    for change in plan.changes:
        _out(f"{verb}: {change}")
    for note in plan.notes:
        _out(f"note: {note}")
    return 0


def main(argv: list[str]) -> int:
    from compactd.core.outbound import remember_secret, secrets_from_env

    for secret in secrets_from_env(os.environ):
        remember_secret(secret)
    args = _parser().parse_args(argv)
    if args.action in ("install", "uninstall"):
        return _install(args)
    # What Codex runs: any failure is one line on stderr, and the session goes on; past its
    # deadline the process ends wherever it is waiting.
    return hook_events.run_bounded(
        f"compactd codex {args.action}", _STARTED, HOOK_DEADLINE_S, lambda: _hook(args)
    )
