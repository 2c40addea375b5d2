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
# The hook's deadline is every agent's (hook_events.HOOK_DEADLINE_S); the status line's, from
# the process's start, is a third of the timeout install gives Claude Code for it
# (STATUS_TIMEOUT_S in services/settings.py, docs/safe-io.md#deadlines).
HOOK_DEADLINE_S: Final = hook_events.HOOK_DEADLINE_S
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
    seam = sub.add_parser(
        "session-compact",
        help="answer Claude Code's session.compact (the plugin's module runs it; JSON on stdin)",
        description="Read a session.compact request on stdin ({event, sessionId, "
        'transcriptPath, claudeCode?}) and print compactd\'s answer: {"messages": [...]} (its '
        "compaction, or Claude Code's with compactd's rows added) or {\"next\": why} "
        "(docs/claude-code.md#the-seam).",
    )
    seam.add_argument("--transcript", help="the session's transcript (default: transcriptPath)")
    seam.add_argument("--data-dir", help="compactd's data dir (default: the user data dir)")
    seam.add_argument(
        "--offline",
        action="store_true",
        help="answer with compactd's offline summary (no model, instant) whatever is configured",
    )
    status = sub.add_parser("statusline", help="print the status line (statusLine JSON on stdin)")
    status.add_argument("--data-dir", help="compactd's data dir (default: the user data dir)")
    scopes = (
        "where it goes: project (default: this project's .claude/settings.json, shared with "
        "whoever commits it; the plugin is copied into .claude/compactd-plugin and named by a "
        "relative path), user (your settings in Claude Code's folder, for every project), "
        "local (this project, for you only: .claude/settings.local.json)"
    )
    install = sub.add_parser(
        "install",
        help="put compactd's plugin into Claude Code",
        description="Install compactd's Claude Code plugin (its compaction, hooks and recall MCP "
        "server) through Claude Code's own plugin commands when the claude program is found, "
        "else by writing the settings keys they write; Claude Code runs `compactd` from PATH. "
        "With --settings-hooks, or a Claude Code older than 2.1.330, the hooks and the MCP "
        "server go into the settings files instead. --dry-run says which and what would change "
        "(docs/claude-code.md#install).",
    )
    uninstall = sub.add_parser(
        "uninstall",
        help="take compactd out of Claude Code, leaving its settings files as they were",
        description="Take out what install put in: every settings file it changed is put back "
        "byte for byte when nobody changed it since (else only compactd's entries go), the "
        "plugin's copy in the project is removed (docs/claude-code.md#install).",
    )
    for cmd in (install, uninstall):
        cmd.add_argument(
            "--scope", choices=("project", "user", "local"), default="project", help=scopes
        )
        cmd.add_argument(
            "--dry-run", action="store_true", help="say what would change and how, change nothing"
        )
        cmd.add_argument("--project", default=".", help="the project folder (default: here)")
        cmd.add_argument("--data-dir", help="compactd's data dir (default: the user data dir)")
        cmd.add_argument(
            "--claude",
            help="the claude program whose plugin commands to use (default: claude on PATH)",
        )
    install.add_argument(
        "--summarizer",
        choices=("none", "offline", "anthropic", "openai"),
        help="who writes compactd's summary (COMPACTD_SUMMARIZER in the scope's settings "
        "env): none (default: Claude Code's summary, compactd adds to it), offline (compactd's, "
        "no model), anthropic or openai (prepared in the background; costs a summary request: "
        "docs/claude-code.md#which-summarizer)",
    )
    install.add_argument(
        "--settings-hooks",
        action="store_true",
        help="put the hooks and the MCP server into the settings files instead of the plugin "
        "(where plugins are not available); no compaction answered by compactd then",
    )
    install.add_argument(
        "--no-threshold-warning",
        action="store_true",
        help="no warning to the model before Claude Code's automatic compaction",
    )
    return parser


def _data_dir(arg: str | None) -> Path:
    from compactd.services.data_dir import data_dir_of

    return data_dir_of(arg)


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


def _session_compact(args: argparse.Namespace, request: bytes | None = None) -> int:
    """The plugin's module reads the one JSON object on stdout; anything else is a failure to
    it, and Claude Code then compacts by itself (docs/claude-code.md#the-seam). ``request``:
    the call, when it was read already (a warm ``compactd mcp`` did not answer it)."""
    from compactd.agents.claude_code.services.compact import CompactInputError
    from compactd.agents.claude_code.services.warm import MAX_INPUT_BYTES, answer_bytes

    data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1) if request is None else request
    if len(data) > MAX_INPUT_BYTES:
        _err(f"compactd claude-code session-compact: more than {MAX_INPUT_BYTES:,} bytes on stdin")
        return 2
    try:
        out = answer_bytes(
            data,
            _data_dir(args.data_dir),
            os.environ,
            transcript=Path(args.transcript) if args.transcript else None,
            offline=args.offline,
        )
    except CompactInputError as exc:
        _err(f"compactd claude-code session-compact: {exc}")
        return 2
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    return 0


def _statusline(args: argparse.Namespace) -> tuple[str, int]:
    from compactd.agents.claude_code.services.status import status_line_for

    raw = _stdin(STATUS_DEADLINE_S, MAX_STATUS_BYTES)
    return status_line_for(raw, _data_dir(args.data_dir), os.environ), 0


def _program() -> tuple[str, bool, str | None]:
    """This compactd as Claude Code would run it: its console script (None when it has none),
    whether ``compactd`` on PATH is that one, and the interpreter fallback."""
    import shutil

    script = Path(sys.executable).absolute().parent / "compactd"
    path = str(script) if script.is_file() else None
    found = shutil.which("compactd")
    on_path = False
    if found is not None and path is not None:
        try:
            on_path = os.path.samefile(found, path)
        except OSError:
            on_path = False
    return sys.executable, on_path, path


def _settings(args: argparse.Namespace) -> int:
    from compactd.agents.claude_code.services import plugin
    from compactd.agents.claude_code.services import settings as cs

    project = Path(args.project).resolve()
    # Absolute: the commands install writes run in whatever folder Claude Code starts them.
    data_dir = Path(os.path.abspath(_data_dir(args.data_dir).expanduser()))
    python, on_path, script = _program()
    program = plugin.Program(on_path, script)
    notes: list[str] = []
    try:
        claude = plugin.find_claude(args.claude)
        if args.claude and claude is None:
            raise cs.InstallError(f"{args.claude} is not a program that can be run")
        if args.action == "install":
            old = claude is not None and not claude.has_modules
            if old and claude is not None:
                notes.append(
                    f"Claude Code {'.'.join(map(str, claude.version or ()))} is older than "
                    f"{'.'.join(map(str, plugin.MIN_VERSION))}: its plugins cannot answer "
                    "compactions, so the hooks and the MCP server go into the settings files"
                )
            if args.settings_hooks or old:
                runs = "compactd" if args.scope == "project" or on_path else (script or python)
                plan = cs.install(
                    args.scope, project, runs, data_dir,
                    dry_run=args.dry_run, warning=not args.no_threshold_warning,
                    pass_data_dir=args.data_dir is not None,
                )  # fmt: skip
            elif cs.installed_settings(args.scope, project, data_dir):
                raise cs.InstallError(
                    f"compactd is in this scope's settings files from an earlier install: take it "
                    f"out first (compactd claude-code uninstall --scope {args.scope}); nothing was "
                    "changed"
                )
            else:
                plan = plugin.install_plugin(
                    args.scope, project, data_dir, program, claude=claude,
                    summarizer=args.summarizer, dry_run=args.dry_run,
                    quiet_warning=args.no_threshold_warning,
                )  # fmt: skip
            if not on_path:
                notes.append(
                    "compactd is not on PATH here: Claude Code runs `compactd`"
                    + (
                        "; add its folder to PATH (the project's files name no path of this "
                        "machine)"
                        if args.scope == "project"
                        else f"; COMPACTD_COMMAND in the settings' env names {script or python}"
                    )
                )
        else:
            found = plugin.uninstall_plugin(
                args.scope, project, data_dir, claude=claude, dry_run=args.dry_run
            )
            plan = found or cs.uninstall(args.scope, project, data_dir, dry_run=args.dry_run)
    except cs.InstallError as exc:
        _err(f"compactd: {exc}")
        return 1
    verb = "would change" if args.dry_run else "changed"
    if not plan.changes:
        _out(f"compactd claude-code {args.action}: nothing to change ({args.scope} scope)")
    for change in plan.changes:
        _out(change if change.startswith("(") else f"{verb}: {change}")
    for note in [*plan.notes, *notes]:
        _out(f"note: {note}")
    return 0


# What the plugin's module runs at every compaction, exactly, as the parser reads it: Claude Code
# waits for the answer, and building every subcommand's parser (help formatter, gettext, shutil)
# is a tenth of the command's time (docs/claude-code.md#the-seam). A test keeps it equal.
PLUGIN_CALL: Final = argparse.Namespace(
    action="session-compact", transcript=None, data_dir=None, offline=False
)


def main(argv: list[str], request: bytes | None = None) -> int:
    """``request``: the plugin's call (``session-compact``), read already by the warm path."""
    from compactd.core.outbound import remember_secret, secrets_from_env

    for secret in secrets_from_env(os.environ):
        remember_secret(secret)
    args = PLUGIN_CALL if argv == ["session-compact"] else _parser().parse_args(argv)
    if args.action in ("install", "uninstall"):
        return _settings(args)
    if args.action == "session-compact":
        try:
            return _session_compact(args, request)
        except Exception as exc:  # noqa: BLE001 - the module falls back to Claude Code's own
            _err(f"compactd claude-code session-compact: {exc}")
            return 1
    # What Claude Code runs: any failure is one line on stderr, and the session goes on; past
    # its deadline the process ends wherever it is waiting.
    deadline = HOOK_DEADLINE_S if args.action == "hook" else STATUS_DEADLINE_S
    return hook_events.run_bounded(
        f"compactd claude-code {args.action}",
        _STARTED,
        deadline,
        lambda: _hook(args) if args.action == "hook" else _statusline(args),
    )
