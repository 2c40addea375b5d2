"""Compaction hooks: user commands run before and after a compaction, in Claude Code's format.

The settings file named by ``initializationOptions.hooksSettingsPath`` holds hooks the way
Claude Code's settings do::

    {"hooks": {"PreCompact": [{"matcher": "manual|auto|*",
                               "hooks": [{"type": "command", "command": "...", "timeout": 60}]}]}}

``run_hooks`` runs every command of an event whose matcher fits (``*`` or an empty matcher fits
everything, otherwise the matcher is a regular expression matched against the whole trigger /
source), one after the other, each in its own process group with the event's JSON on stdin and
a timeout. Output is captured. A hook that fails (non-zero exit, timeout, a command that does
not exist, an unreadable settings file) is reported in its ``HookResult`` and never fails the
compaction (docs/compaction.md#hooks). The file is read at each run, so edits apply without a
restart.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import anyio
import anyio.abc
from anyio.streams.text import TextReceiveStream

from compactd import protocol as p
from compactd.core import constants as c

__all__ = [
    "HookCommand",
    "HookEvent",
    "additional_context",
    "load_hooks",
    "run_hooks",
]

log = logging.getLogger(__name__)

HookEvent = Literal["PreCompact", "SessionStart", "PostCompact"]

# Captured output beyond this many characters is dropped (compactd's choice: hook output is
# added to a prompt or to the context, so it must stay small).
HOOK_OUTPUT_MAX_CHARS: Final = 10_000

# The settings file is configuration, not data: refuse anything larger.
_MAX_SETTINGS_BYTES: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class HookCommand:
    command: str
    timeout_s: float


class _SettingsError(Exception):
    pass


def _matches(matcher: Any, value: str) -> bool:
    if matcher is None or matcher == "" or matcher == "*":
        return True
    if not isinstance(matcher, str):
        return False
    try:
        return re.fullmatch(matcher, value) is not None
    except re.error:
        return matcher == value


def load_hooks(path: Path, event: HookEvent, match_value: str) -> list[HookCommand]:
    """The commands configured for ``event`` whose matcher fits ``match_value``.

    Raises ``_SettingsError`` when the file cannot be read or is not in the expected shape.
    """
    try:
        if path.stat().st_size > _MAX_SETTINGS_BYTES:
            raise _SettingsError(f"hooks settings file {path} is too large")
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise _SettingsError(f"hooks settings file {path} does not exist") from exc
    except OSError as exc:
        raise _SettingsError(f"cannot read hooks settings file {path}: {exc.strerror}") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise _SettingsError(f"hooks settings file {path} is not valid JSON: {exc}") from exc
    hooks = data.get("hooks") if isinstance(data, dict) else None
    if hooks is None:
        return []
    if not isinstance(hooks, dict):
        raise _SettingsError(f"'hooks' in {path} must be an object")
    groups = hooks.get(event) or []
    if not isinstance(groups, list):
        raise _SettingsError(f"'hooks.{event}' in {path} must be a list")
    out: list[HookCommand] = []
    for group in groups:
        if not isinstance(group, dict) or not _matches(group.get("matcher"), match_value):
            continue
        for hook in group.get("hooks") or []:
            if not isinstance(hook, dict) or hook.get("type", "command") != "command":
                continue
            command = hook.get("command")
            if not isinstance(command, str) or not command.strip():
                continue
            timeout = hook.get("timeout")
            seconds = (
                float(timeout)
                if isinstance(timeout, (int, float))
                and not isinstance(timeout, bool)
                and timeout > 0
                else float(c.HOOK_TIMEOUT_S)
            )
            out.append(HookCommand(command=command, timeout_s=seconds))
    return out


def additional_context(stdout: str) -> str:
    """What a hook's stdout adds: ``hookSpecificOutput.additionalContext`` of a JSON answer
    (Claude Code's structured hook output), else the text itself."""
    text = stdout.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            return text
        if isinstance(data, dict):
            specific = data.get("hookSpecificOutput")
            if isinstance(specific, dict) and isinstance(specific.get("additionalContext"), str):
                return str(specific["additionalContext"]).strip()
            if isinstance(data.get("additionalContext"), str):
                return str(data["additionalContext"]).strip()
    return text


async def run_hooks(
    settings_path: str | None,
    event: HookEvent,
    match_value: str,
    payload: Mapping[str, Any],
    *,
    cwd: str | None,
    env: Mapping[str, str],
) -> list[p.HookResult]:
    """Run the hooks of ``event``; one ``HookResult`` per command (never raises for a hook)."""
    if not settings_path:
        return []
    path = Path(settings_path).expanduser()
    try:
        commands = await anyio.to_thread.run_sync(load_hooks, path, event, match_value)
    except _SettingsError as exc:
        log.warning("hooks: %s", exc)
        return [
            p.HookResult(event=event, command=str(path), exit_code=None, ok=False, stderr=str(exc))
        ]
    data = json.dumps({**payload, "hook_event_name": event}).encode()
    results = []
    for hook in commands:
        results.append(await _run_one(event, hook, data, cwd=cwd, env=env))
    return results


async def _drain(stream: anyio.abc.ByteReceiveStream | None, sink: list[str]) -> None:
    if stream is None:
        return
    size = 0
    async for chunk in TextReceiveStream(stream, errors="replace"):
        if size < HOOK_OUTPUT_MAX_CHARS:
            sink.append(chunk[: HOOK_OUTPUT_MAX_CHARS - size])
            size += len(chunk)


def _kill_group(process: anyio.abc.Process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _run_one(
    event: HookEvent, hook: HookCommand, data: bytes, *, cwd: str | None, env: Mapping[str, str]
) -> p.HookResult:
    started = time.perf_counter()
    workdir = cwd if cwd and Path(cwd).is_dir() else None
    hook_env = {**env, "CLAUDE_PROJECT_DIR": workdir or os.getcwd()}
    out: list[str] = []
    err: list[str] = []
    timed_out = False
    try:
        process = await anyio.open_process(
            hook.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=hook_env,
            # Its own process group: a timeout kills the shell and whatever it started.
            start_new_session=True,
        )
    except OSError as exc:
        return p.HookResult(
            event=event,
            command=hook.command,
            exit_code=None,
            ok=False,
            stderr=f"cannot start the hook: {exc}",
            duration_ms=int((time.perf_counter() - started) * 1000),
        )
    try:
        with anyio.move_on_after(hook.timeout_s) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_drain, process.stdout, out)
                tg.start_soon(_drain, process.stderr, err)
                if process.stdin is not None:
                    try:
                        await process.stdin.send(data)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        pass  # the hook does not read its stdin
                    await process.stdin.aclose()
                await process.wait()
        timed_out = scope.cancelled_caught
    finally:
        if process.returncode is None or timed_out:
            # Also when the shell exited but a child it started still holds the output pipe.
            _kill_group(process)
            with anyio.CancelScope(shield=True):
                await process.wait()
        with anyio.CancelScope(shield=True):
            await process.aclose()
    code = process.returncode
    stderr = "".join(err)
    if timed_out:
        stderr = (stderr + f"\n(the hook timed out after {hook.timeout_s:g} s)").strip()
    ok = not timed_out and code == 0
    if not ok:
        log.warning("hooks: %s hook %r failed (exit %s)", event, hook.command, code)
    return p.HookResult(
        event=event,
        command=hook.command,
        exit_code=None if timed_out else code,
        ok=ok,
        stdout="".join(out),
        stderr=stderr,
        duration_ms=int((time.perf_counter() - started) * 1000),
        timed_out=timed_out,
    )
