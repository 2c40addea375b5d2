"""``compactd claude-code hook|statusline|install|uninstall``: compactd inside Claude Code.

``hook`` and ``statusline`` are what Claude Code runs, often and in short processes: they import
only what they need (``python -m compactd`` reaches this module without the rest of the CLI),
read the event on stdin, and print the answer. They never fail the user's session: any error is
one line on stderr and exit 0 (docs/claude-code.md#hooks). Each has a deadline of its own, well
under the timeout Claude Code is given for it: standard input is read until it ends or holds a
whole event, and past the deadline the process says so on stderr and exits 0 without an answer
(``compactd.services.safe_io``, docs/safe-io.md). ``install`` and ``uninstall`` edit Claude
Code's settings (``services.settings``) and print what they changed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Final

from compactd.services import hook_events

__all__ = ["HOOK_DEADLINE_S", "STATUS_DEADLINE_S", "main"]

# When this process started (near enough: this module is the first of compactd's it imports).
_STARTED: Final = time.monotonic()

# The most the status line reads from stdin (its input is a few KB; a hook's is
# hook_events.MAX_EVENT_BYTES).
MAX_STATUS_BYTES: Final = 1024 * 1024
# A hook's and the status line's own deadlines, from the process's start (compactd's choice:
# a third of the timeout install gives Claude Code for them, HOOK_TIMEOUT_S and
# STATUS_TIMEOUT_S in services/settings.py; generous beside the tenth of a second they
# usually take, so that a busy machine does not cut them: the hand-back of a 32 MB tail takes
# some 9 s on a shared 2-core machine). Reading standard input gets half of it.
HOOK_DEADLINE_S: Final = 20.0
STATUS_DEADLINE_S: Final = 5.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compactd claude-code",
        description="compactd inside a running Claude Code session: hooks that give the model "
        "back what Claude Code's summary dropped, a status line, and their installation.",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    hook = sub.add_parser("hook", help="answer a Claude Code hook event (JSON on stdin)")
    hook.add_argument("--data-dir", help="compactd's data dir (default: the user data dir)")
    hook.add_argument(
        "--block-compaction",
        action="store_true",
        help="PreCompact blocks Claude Code's compaction instead of steering it",
    )
    status = sub.add_parser("statusline", help="print the status line (statusLine JSON on stdin)")
    status.add_argument("--data-dir", help="compactd's data dir (default: the user data dir)")
    for name, what in (("install", "put compactd into"), ("uninstall", "take compactd out of")):
        cmd = sub.add_parser(name, help=f"{what} Claude Code's settings")
        cmd.add_argument("--scope", choices=("user", "project", "local"), default="project")
        cmd.add_argument(
            "--dry-run", action="store_true", help="say what would change, change nothing"
        )
        cmd.add_argument("--project", default=".", help="the project folder (default: here)")
        cmd.add_argument("--data-dir", help="compactd's data dir (default: the user data dir)")
        if name == "install":
            cmd.add_argument(
                "--no-threshold-warning",
                action="store_true",
                help="no warning to the model before Claude Code's automatic compaction",
            )
            cmd.add_argument(
                "--replace-compaction",
                action="store_true",
                help="not available yet (docs/claude-code.md#replacing-claude-codes-compaction)",
            )
    return parser


def _data_dir(arg: str | None) -> Path:
    from compactd.agents.claude_code.services.state import default_data_dir

    return Path(arg) if arg else default_data_dir()


def _stdin(deadline_s: float, limit: int = hook_events.MAX_EVENT_BYTES) -> bytes:
    return hook_events.read_stdin(_STARTED, deadline_s, limit)


_out, _err = hook_events.out, hook_events.err


def _hook(args: argparse.Namespace) -> tuple[str, int]:
    from compactd.agents.claude_code.services.hooks import answer

    reply = answer(
        _stdin(HOOK_DEADLINE_S),
        _data_dir(args.data_dir),
        os.environ,
        block_compaction=args.block_compaction,
    )
    return reply.stdout, reply.exit_code


def _statusline(args: argparse.Namespace) -> tuple[str, int]:
    from compactd.agents.claude_code.services.status import status_line_for

    raw = _stdin(STATUS_DEADLINE_S, MAX_STATUS_BYTES)
    return status_line_for(raw, _data_dir(args.data_dir), os.environ), 0


def _settings(args: argparse.Namespace) -> int:
    from compactd.agents.claude_code.services import settings as cs

    project = Path(args.project).resolve()
    # Absolute: the commands install writes run in whatever folder Claude Code starts them.
    data_dir = Path(os.path.abspath(_data_dir(args.data_dir).expanduser()))
    try:
        if args.action == "install":
            if args.replace_compaction:
                _err(
                    "compactd: --replace-compaction is not available yet "
                    "(docs/claude-code.md#replacing-claude-codes-compaction); nothing was changed"
                )
                return 1
            plan = cs.install(
                args.scope, project, sys.executable, data_dir,
                dry_run=args.dry_run, warning=not args.no_threshold_warning,
                pass_data_dir=args.data_dir is not None,
            )  # fmt: skip
        else:
            plan = cs.uninstall(args.scope, project, data_dir, dry_run=args.dry_run)
    except cs.InstallError as exc:
        _err(f"compactd: {exc}")
        return 1
    verb = "would change" if args.dry_run else "changed"
    if not plan.changes:
        _out(f"compactd claude-code {args.action}: nothing to change ({args.scope} scope)")
    for change in plan.changes:
        _out(f"{verb}: {change}")
    return 0


def main(argv: list[str]) -> int:
    from compactd.core.outbound import remember_secret, secrets_from_env

    for secret in secrets_from_env(os.environ):
        remember_secret(secret)
    args = _parser().parse_args(argv)
    if args.action in ("install", "uninstall"):
        return _settings(args)
    # What Claude Code runs: any failure is one line on stderr, and the session goes on; past
    # its deadline the process ends wherever it is waiting.
    deadline = HOOK_DEADLINE_S if args.action == "hook" else STATUS_DEADLINE_S
    return hook_events.run_bounded(
        f"compactd claude-code {args.action}",
        _STARTED,
        deadline,
        lambda: _hook(args) if args.action == "hook" else _statusline(args),
    )
