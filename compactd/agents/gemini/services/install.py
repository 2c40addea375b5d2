"""Putting compactd into Gemini CLI's settings.json, and taking it out exactly (docs/gemini.md#install).

``install`` adds, for one scope, to ``settings.json``:

- ``hooks.BeforeModel``: ``compactd gemini hook``, which gives the model back, with every
  request, what Gemini CLI's latest compression dropped (docs/gemini.md#compactd-inside-gemini-cli);
- ``hooks.BeforeAgent``: the same command, which records the session for ``compactd mcp`` and
  warns the model before a compression (``--no-threshold-warning`` in the command turns the
  warning off);
- ``mcpServers.compactd``: ``compactd mcp``, with ``"trust": true`` (without it a headless
  run does not offer the server's tools: docs/gemini.md#mcp).

Scopes: ``user`` edits ``~/.gemini/settings.json`` (``$GEMINI_CLI_HOME/.gemini``) with this
interpreter's compactd; ``project`` edits the project's ``.gemini/settings.json`` with commands
that name no path of this machine (``compactd`` from PATH). Gemini CLI runs a project's hooks and
MCP servers only in a trusted folder.

The file is parsed before anything is written, and nothing changes when it cannot be read or
holds something compactd did not expect where it writes (each refusal is one line naming the
file and the key). Gemini CLI accepts comments in settings.json; compactd would not keep them,
so a file with comments is refused too. Only compactd's own entries are added, found again by
their commands; the file is written whole in one rename (through a symlink to the file it
names). compactd keeps under its data dir the bytes from before (services/installed):
``uninstall`` puts them back while the file is as install left it, and otherwise takes out only
its own entries. Running ``install`` twice changes nothing.
"""

from __future__ import annotations

import json
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from compactd.agents.gemini.services.sessions import AGENT_DIR, gemini_dir
from compactd.agents.gemini.services.settings import without_comments
from compactd.services import installed
from compactd.services.installed import InstallError, read_existing

__all__ = ["HOOK_EVENTS", "InstallError", "Plan", "Scope", "install", "settings_path", "uninstall"]

Scope = Literal["user", "project"]
#: The MCP server's name (its tools are offered as ``mcp_compactd_recall``, ``mcp_compactd_context``).
SERVER_NAME: Final = "compactd"
#: The events compactd's hook answers.
HOOK_EVENTS: Final = ("BeforeModel", "BeforeAgent")
# Milliseconds Gemini CLI waits for one hook run (its default is 60,000): three times the hook's
# own deadline (cli.HOOK_DEADLINE_S, docs/safe-io.md).
HOOK_TIMEOUT_MS: Final = 60_000
# Keys of ``hooks`` that are settings, not events (Gemini CLI 0.61.0 skips them).
_HOOK_SETTINGS: Final = frozenset({"enabled", "disabled", "notifications"})
_HOOK_TAIL: Final = "gemini hook"
NO_WARNING: Final = "--no-threshold-warning"


def settings_path(scope: Scope, project: Path) -> Path:
    return (gemini_dir() if scope == "user" else project / ".gemini") / "settings.json"


def hook_command(
    scope: Scope, python: str, data_dir_arg: str | None, *, warning: bool = True
) -> str:
    """The command Gemini CLI runs for compactd's hooks: this interpreter's compactd for the
    user's own settings, ``compactd`` from PATH in a project's file."""
    base = ["compactd"] if scope == "project" else [python, "-m", "compactd"]
    extra = ["--data-dir", data_dir_arg] if data_dir_arg and scope == "user" else []
    return shlex.join([*base, "gemini", "hook", *extra, *([] if warning else [NO_WARNING])])


def mcp_server(scope: Scope, python: str, data_dir_arg: str | None) -> dict[str, Any]:
    if scope == "project":
        return {"command": "compactd", "args": ["mcp"], "trust": True}
    args = ["-m", "compactd", "mcp"]
    if data_dir_arg:
        args += ["--data-dir", data_dir_arg]
    return {"command": python, "args": args, "trust": True}


def _ours(command: Any) -> bool:
    """Whether a hook's command is compactd's (``... compactd gemini hook [options]``)."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    for i in range(len(words) - 1):
        if words[i : i + 2] == ["gemini", "hook"] and i > 0:
            return words[i - 1] == "compactd" or words[i - 1].endswith("/compactd")
    return False


def _our_server(server: Any) -> bool:
    if not isinstance(server, dict):
        return False
    args = server.get("args")
    command = str(server.get("command") or "")
    runs_mcp = isinstance(args, list) and "mcp" in args
    return runs_mcp and (command.endswith("compactd") or "compactd" in (args or []))


# -- reading the file ------------------------------------------------------------------------------


def _settings(path: Path, raw: bytes | None) -> dict[str, Any]:
    """The settings in ``raw``, checked where compactd writes (InstallError otherwise)."""
    if raw is None or not raw.strip():
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InstallError(f"{path} is not UTF-8 text; nothing was changed") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        stripped, line = without_comments(text)
        if line is not None:
            try:
                json.loads(stripped)
            except ValueError:
                pass
            else:
                raise InstallError(
                    f"{path} has comments (line {line}), which compactd would not keep: remove "
                    "them, or add compactd's entries by hand (docs/gemini.md#install); nothing "
                    "was changed"
                ) from None
        raise InstallError(f"{path} is not valid JSON ({exc}); nothing was changed") from None
    if not isinstance(data, dict):
        raise InstallError(f"{path} does not hold a JSON object; nothing was changed")

    def refuse(key: str, what: str) -> InstallError:
        return InstallError(f"{path}: {key} is not {what}; nothing was changed")

    if "hooks" in data and not isinstance(data["hooks"], dict):
        raise refuse("'hooks'", "an object")
    for event, groups in data.get("hooks", {}).items():
        if event in _HOOK_SETTINGS:
            continue
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise refuse(f"hooks.{event}", "a list of groups")
        for n, group in enumerate(groups):
            if "hooks" in group and not isinstance(group["hooks"], list):
                raise refuse(f"hooks.{event}[{n}].hooks", "a list")
            for m, handler in enumerate(group.get("hooks") or []):
                if not isinstance(handler, dict):
                    raise refuse(f"hooks.{event}[{n}].hooks[{m}]", "an object")
    if "mcpServers" in data and not isinstance(data["mcpServers"], dict):
        raise refuse("'mcpServers'", "an object")
    return data


def _dump(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


# -- the plan -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """What install or uninstall does: each file's new bytes (None: remove it), the changes in
    words, and notes for the person."""

    writes: dict[Path, bytes | None]
    changes: list[str]
    notes: list[str] = field(default_factory=list)


def plan_install(
    scope: Scope,
    project: Path,
    python: str,
    *,
    warning: bool = True,
    data_dir_arg: str | None = None,
) -> tuple[Plan, bytes | None]:
    """What ``install`` writes, and the file's bytes before (None: it did not exist)."""
    path = settings_path(scope, project)
    before = read_existing(path)
    data = _settings(path, before)
    changes: list[str] = []
    hooks = data.setdefault("hooks", {})
    for event in HOOK_EVENTS:
        command = hook_command(
            scope, python, data_dir_arg, warning=warning or event != "BeforeAgent"
        )
        groups = hooks.setdefault(event, [])
        handlers = [
            h
            for g in groups
            for h in (g.get("hooks") or [])
            if isinstance(h, dict) and _ours(h.get("command"))
        ]
        if handlers:
            if handlers[0].get("command") != command:
                handlers[0]["command"] = command
                changes.append(f"{path}: hook {event} ({command})")
            continue
        handler = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT_MS}
        groups.append({"matcher": "*", "hooks": [handler]})
        changes.append(f"{path}: hook {event} ({command})")
    servers = data.setdefault("mcpServers", {})
    wanted = mcp_server(scope, python, data_dir_arg)
    found = servers.get(SERVER_NAME)
    if found is not None and not _our_server(found):
        raise InstallError(
            f"{path}: mcpServers.{SERVER_NAME} is a server of another program; nothing was changed"
        )
    if found is None or found.get("trust") is not True:
        server = dict(found) if isinstance(found, dict) else dict(wanted)
        server["trust"] = True
        servers[SERVER_NAME] = server
        shown = " ".join([server["command"], *server.get("args", [])])
        changes.append(f"{path}: MCP server {SERVER_NAME} ({shown}), trusted")
    notes = _notes(scope, data, path)
    writes: dict[Path, bytes | None] = {path: _dump(data)} if changes else {}
    return Plan(writes, changes, notes), before


def _notes(scope: Scope, data: dict[str, Any], path: Path) -> list[str]:
    notes: list[str] = []
    config = data.get("hooksConfig")
    if isinstance(config, dict) and config.get("enabled") is False:
        notes.append(f"hooks are off in {path} (hooksConfig.enabled: false): compactd's do not run")
    if scope == "project":
        if shutil.which("compactd") is None:
            notes.append(f"{path} runs `compactd` from PATH, which has none here")
        notes.append(
            "Gemini CLI runs a project's hooks and MCP servers only in a trusted folder "
            "(gemini trust, or security.folderTrust.enabled: false)"
        )
    return notes


def install(
    scope: Scope,
    project: Path,
    python: str,
    data_dir: Path,
    *,
    dry_run: bool = False,
    warning: bool = True,
    data_dir_arg: str | None = None,
) -> Plan:
    """Add compactd to the scope's settings.json (see the module docstring)."""
    plan, before = plan_install(scope, project, python, warning=warning, data_dir_arg=data_dir_arg)
    if dry_run:
        return plan
    for path, new in plan.writes.items():
        assert new is not None
        installed.remember(data_dir, AGENT_DIR, path, before, new)
    return plan


def _strip(data: dict[str, Any]) -> None:
    """Take compactd's hooks and MCP server out of ``data`` (empty containers with them)."""
    hooks = data.get("hooks")
    if isinstance(hooks, dict):
        for event in [e for e in hooks if e not in _HOOK_SETTINGS]:
            groups = hooks[event]
            if not isinstance(groups, list):
                continue
            for g in groups:
                if isinstance(g, dict) and isinstance(g.get("hooks"), list):
                    g["hooks"] = [
                        h
                        for h in g["hooks"]
                        if not (isinstance(h, dict) and _ours(h.get("command")))
                    ]
            hooks[event] = [g for g in groups if not (isinstance(g, dict) and g.get("hooks") == [])]
            if not hooks[event]:
                del hooks[event]
        if not hooks:
            del data["hooks"]
    servers = data.get("mcpServers")
    if isinstance(servers, dict) and _our_server(servers.get(SERVER_NAME)):
        del servers[SERVER_NAME]
        if not servers:
            del data["mcpServers"]


def uninstall(scope: Scope, project: Path, data_dir: Path, *, dry_run: bool = False) -> Plan:
    """Take out what ``install`` put in (see the module docstring)."""
    path = settings_path(scope, project)
    raw = read_existing(path)
    data = _settings(path, raw)  # parsed first: nothing is written when it cannot be read

    def strip(_: Path, now: bytes) -> bytes | None:
        before = _dump(data)
        _strip(data)
        new = _dump(data)
        return new if new != before else None

    writes, changes = installed.undo(data_dir, AGENT_DIR, {path: raw}, strip, dry_run=dry_run)
    return Plan(writes, changes)
