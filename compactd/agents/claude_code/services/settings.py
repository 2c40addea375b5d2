"""Putting compactd into Claude Code's own settings files, and taking it out exactly.

``install`` adds compactd's entries to the files of one scope (docs/claude-code.md#install):
the hooks (``compactd claude-code hook`` for SessionStart, PreCompact, PostCompact and
UserPromptSubmit), the status line when none is set, and the MCP server (``compactd mcp``, with
``alwaysLoad``). It parses every file first and changes nothing when one is not valid JSON; it
merges only its own entries, recognised again by their commands, and writes each file whole in
one rename. For each file it changes it keeps, under compactd's data dir, the file's bytes from
before (or that it did not exist) and a digest of what it wrote: ``uninstall`` puts the old
bytes back when the file is still as compactd left it (a file it created is removed, and so is
a folder it created for it, such as a project's ``.claude``, when nothing else is left in it),
and otherwise takes out only its own entries. Running ``install`` twice changes nothing.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from compactd.agents.claude_code.services.state import claude_config_dir
from compactd.services import installed

__all__ = ["InstallError", "Plan", "Scope", "install", "uninstall"]

Scope = Literal["user", "project", "local"]
#: The MCP server's name in Claude Code (its tools are ``mcp__compactd__<tool>``).
SERVER_NAME: Final = "compactd"
# The hook events compactd answers, each with its matcher (docs/claude-code.md#hooks).
HOOK_EVENTS: Final[tuple[tuple[str, str], ...]] = (
    ("SessionStart", "compact|resume"),
    ("PreCompact", ""),
    ("PostCompact", ""),
    ("UserPromptSubmit", ""),
)
# Seconds Claude Code waits for one hook run (its default is ten minutes).
HOOK_TIMEOUT_S: Final = 30
# What a compactd command ends with: how its entries are found again.
_HOOK_TAIL: Final = " claude-code hook"
_STATUS_TAIL: Final = " claude-code statusline"


class InstallError(Exception):
    """Nothing was changed; the message says why."""


def compactd_command(python: str) -> list[str]:
    """The command that runs the compactd the user installed: this interpreter's module."""
    return [python, "-m", "compactd"]


@dataclass(frozen=True, slots=True)
class Files:
    settings: Path
    mcp: Path
    #: the key path of the ``mcpServers`` object in the MCP file
    mcp_at: tuple[str, ...]


def scope_files(scope: Scope, project: Path) -> Files:
    """The files of a scope: Claude Code's settings file and where it keeps MCP servers."""
    home_json = (
        claude_config_dir() / ".claude.json"
        if os.environ.get("CLAUDE_CONFIG_DIR")
        else Path.home() / ".claude.json"
    )
    if scope == "user":
        return Files(claude_config_dir() / "settings.json", home_json, ())
    if scope == "project":
        return Files(project / ".claude" / "settings.json", project / ".mcp.json", ())
    return Files(project / ".claude" / "settings.local.json", home_json, ("projects", str(project)))


def _load(path: Path) -> tuple[bytes | None, dict[str, Any]]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, {}
    except OSError as exc:
        raise InstallError(f"{path} cannot be read ({exc.strerror}); nothing was changed") from None
    if not raw.strip():
        return raw, {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InstallError(f"{path} is not valid JSON ({exc}); nothing was changed") from None
    if not isinstance(data, dict):
        raise InstallError(f"{path} does not hold a JSON object; nothing was changed")
    return raw, data


def _dump(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


def _ours(command: Any, tail: str) -> bool:
    return isinstance(command, str) and command.endswith(tail) and " -m compactd" in command


def _add_hooks(settings: dict[str, Any], hook: str, events: list[tuple[str, str]]) -> list[str]:
    changed: list[str] = []
    hooks = settings.setdefault("hooks", {})
    for event, matcher in events:
        groups = hooks.setdefault(event, [])
        if any(_ours(h.get("command"), _HOOK_TAIL) for g in groups for h in g.get("hooks", [])):
            continue
        entry = {"type": "command", "command": hook, "timeout": HOOK_TIMEOUT_S}
        groups.append({"matcher": matcher, "hooks": [entry]})
        changed.append(f"hook {event}" + (f" ({matcher})" if matcher else ""))
    return changed


def _remove_hooks(settings: dict[str, Any]) -> None:
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        for g in groups:
            if isinstance(g, dict) and isinstance(g.get("hooks"), list):
                g["hooks"] = [h for h in g["hooks"] if not _ours(h.get("command"), _HOOK_TAIL)]
        hooks[event] = [g for g in groups if not (isinstance(g, dict) and g.get("hooks") == [])]
        if not hooks[event]:
            del hooks[event]
    if not hooks:
        del settings["hooks"]


def _at(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    for key in keys:
        data = data.setdefault(key, {})
    servers: dict[str, Any] = data.setdefault("mcpServers", {})
    return servers


@dataclass(frozen=True, slots=True)
class Plan:
    """What install or uninstall does: each file's new bytes (None: remove it), and the list of
    changes in words."""

    writes: dict[Path, bytes | None]
    changes: list[str]


# What install wrote, kept for uninstall (services/installed).
AGENT_DIR: Final = "claude-code"


def plan_install(
    scope: Scope, project: Path, python: str, *, warning: bool = True
) -> tuple[Plan, dict[Path, bytes | None]]:
    """What ``install`` writes, and each file's bytes before (None: it did not exist)."""
    files = scope_files(scope, project)
    base = shlex.join(compactd_command(python))
    before: dict[Path, bytes | None] = {}
    data: dict[Path, dict[str, Any]] = {}
    for path in dict.fromkeys((files.settings, files.mcp)):
        before[path], data[path] = _load(path)
    settings = data[files.settings]
    events = [e for e in HOOK_EVENTS if warning or e[0] != "UserPromptSubmit"]
    changes = [f"{files.settings}: {c}" for c in _add_hooks(settings, base + _HOOK_TAIL, events)]
    if "statusLine" not in settings:
        settings["statusLine"] = {"type": "command", "command": base + _STATUS_TAIL, "padding": 0}
        changes.append(f"{files.settings}: status line")
    if scope == "project":
        enabled = settings.setdefault("enabledMcpjsonServers", [])
        if SERVER_NAME not in enabled:
            enabled.append(SERVER_NAME)
            changes.append(f"{files.settings}: MCP server {SERVER_NAME} approved")
    servers = _at(data[files.mcp], files.mcp_at)
    if SERVER_NAME not in servers:
        args = [*compactd_command(python)[1:], "mcp"]
        servers[SERVER_NAME] = {
            "type": "stdio", "command": python, "args": args, "env": {}, "alwaysLoad": True,
        }  # fmt: skip
        changes.append(f"{files.mcp}: MCP server {SERVER_NAME} ({python} {' '.join(args)})")
    touched = {p for p in data if any(c.startswith(f"{p}:") for c in changes)}
    writes: dict[Path, bytes | None] = {p: _dump(data[p]) for p in touched}
    return Plan(writes, changes), before


def install(
    scope: Scope, project: Path, python: str, data_dir: Path, *, dry_run: bool = False,
    warning: bool = True,
) -> Plan:  # fmt: skip
    """Add compactd to the scope's files (see the module docstring)."""
    plan, before = plan_install(scope, project, python, warning=warning)
    if dry_run:
        return plan
    for path, new in plan.writes.items():
        assert new is not None
        installed.remember(data_dir, AGENT_DIR, path, before[path], new)
    return plan


def _strip(data: dict[str, Any], files: Files, path: Path) -> None:
    if path == files.settings:
        _remove_hooks(data)
        status = data.get("statusLine")
        if isinstance(status, dict) and _ours(status.get("command"), _STATUS_TAIL):
            del data["statusLine"]
        enabled = data.get("enabledMcpjsonServers")
        if isinstance(enabled, list) and SERVER_NAME in enabled:
            enabled.remove(SERVER_NAME)
            if not enabled:
                del data["enabledMcpjsonServers"]
    if path == files.mcp:
        holder: Any = data
        for key in files.mcp_at:
            holder = holder.get(key) if isinstance(holder, dict) else None
        servers = holder.get("mcpServers") if isinstance(holder, dict) else None
        server = servers.get(SERVER_NAME) if isinstance(servers, dict) else None
        if isinstance(server, dict) and server.get("args", [])[-1:] == ["mcp"]:
            assert isinstance(servers, dict)
            del servers[SERVER_NAME]


def uninstall(scope: Scope, project: Path, data_dir: Path, *, dry_run: bool = False) -> Plan:
    """Take out what ``install`` put in (see the module docstring)."""
    files = scope_files(scope, project)
    loaded = {p: _load(p) for p in dict.fromkeys((files.settings, files.mcp))}

    def strip(path: Path, raw: bytes) -> bytes | None:
        data = loaded[path][1]
        _strip(data, files, path)
        new = _dump(data)
        return new if new != _dump(json.loads(raw) if raw.strip() else {}) else None

    raws = {p: raw for p, (raw, _) in loaded.items()}
    writes, changes = installed.undo(data_dir, AGENT_DIR, raws, strip, dry_run=dry_run)
    return Plan(writes, changes)
