"""Putting compactd into Claude Code's own settings files, and taking it out exactly.

``install`` adds compactd's entries to the files of one scope (docs/claude-code.md#install):
the hooks (``compactd claude-code hook`` for SessionStart, PreCompact, PostCompact and
UserPromptSubmit), the status line when none is set, and the MCP server (``compactd mcp``, with
``alwaysLoad``). It parses every file first and changes nothing when one is not valid JSON or
holds a value of a shape it does not understand where it would read or write (``hooks`` not an
object, ``hooks.SessionStart`` not an array, ...): one line names the file and the key. It
merges only its own entries, recognised again by their commands, and writes each file whole in
one rename; a settings file that is a symbolic link (dotfiles managers make them) is written
through the link, which stays a link. With ``--data-dir`` the commands it writes pass it on. For each file it changes it keeps, under compactd's data dir, the file's bytes from
before (or that it did not exist) and a digest of what it wrote: ``uninstall`` puts the old
bytes back when the file is still as compactd left it (a file it created is removed, and so is
a folder it created for it, such as a project's ``.claude``, when nothing else is left in it),
and otherwise takes out only its own entries. Running ``install`` twice changes nothing.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from compactd.agents.claude_code.services.state import claude_config_dir
from compactd.services import installed
from compactd.services.installed import InstallError
from compactd.services.safe_io import read_regular

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
# Seconds Claude Code waits for one hook run (its default is ten minutes), and for one run of
# the status line: each is three times the process's own deadline (agents/claude_code/cli.py).
HOOK_TIMEOUT_S: Final = 60
STATUS_TIMEOUT_S: Final = 15
# The subcommand of a compactd command: how its entries are found again.
_HOOK_TAIL: Final = "claude-code hook"
_STATUS_TAIL: Final = "claude-code statusline"


# The largest settings file read (Claude Code's ~/.claude.json keeps every project's history
# and grows to megabytes; a FIFO or a device there is refused, never waited on).
_MAX_SETTINGS_BYTES: Final = 256 * 1024 * 1024


def compactd_command(program: str) -> list[str]:
    """The command that runs the compactd the user installed: its ``compactd`` program (a name
    found on PATH, or its path), or an interpreter with the module (``python -m compactd``)."""
    if Path(program).name == "compactd":
        return [program]
    return [program, "-m", "compactd"]


def _data_args(data_dir: Path | None) -> list[str]:
    """``--data-dir`` for the commands install writes, when one was given."""
    return ["--data-dir", str(data_dir)] if data_dir is not None else []


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


_JSON_TYPES: Final = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}


def _kind(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _key(parts: tuple[str | int, ...]) -> str:
    """A key path as a person reads it: ``hooks.SessionStart[0].hooks``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + (
                part if part.replace("_", "").isalnum() else json.dumps(part)
            )
    return out


def _expect(path: Path, at: tuple[str | int, ...], value: Any, kind: type) -> None:
    if not isinstance(value, kind):
        raise InstallError(
            f"{path}: {_key(at)} is {_kind(value)}, not {_JSON_TYPES[kind]} as Claude Code "
            "expects; nothing was changed (fix or remove that key, then run it again)"
        )


def _check_settings(path: Path, data: dict[str, Any]) -> None:
    """Refuse (``InstallError``) a settings file whose keys install or uninstall reads or writes
    hold a shape it does not understand."""
    if "hooks" in data:
        hooks = data["hooks"]
        _expect(path, ("hooks",), hooks, dict)
        for event, groups in hooks.items():
            _expect(path, ("hooks", event), groups, list)
            for i, group in enumerate(groups):
                _expect(path, ("hooks", event, i), group, dict)
                if "matcher" in group:
                    _expect(path, ("hooks", event, i, "matcher"), group["matcher"], str)
                if "hooks" in group:
                    entries = group["hooks"]
                    _expect(path, ("hooks", event, i, "hooks"), entries, list)
                    for j, entry in enumerate(entries):
                        _expect(path, ("hooks", event, i, "hooks", j), entry, dict)
                        if "command" in entry:
                            at = ("hooks", event, i, "hooks", j, "command")
                            _expect(path, at, entry["command"], str)
    if "statusLine" in data:
        status = data["statusLine"]
        _expect(path, ("statusLine",), status, dict)
        if "command" in status:
            _expect(path, ("statusLine", "command"), status["command"], str)
    if "enabledMcpjsonServers" in data:
        enabled = data["enabledMcpjsonServers"]
        _expect(path, ("enabledMcpjsonServers",), enabled, list)
        for i, name in enumerate(enabled):
            _expect(path, ("enabledMcpjsonServers", i), name, str)


def _check_mcp(path: Path, data: dict[str, Any], at: tuple[str, ...]) -> None:
    """``_check_settings`` for the file that holds ``mcpServers`` (under the keys ``at``)."""
    holder: Any = data
    walked: tuple[str, ...] = ()
    for key in at:
        walked += (key,)
        if key not in holder:
            return
        holder = holder[key]
        _expect(path, walked, holder, dict)
    if "mcpServers" in holder:
        servers = holder["mcpServers"]
        _expect(path, (*at, "mcpServers"), servers, dict)
        if SERVER_NAME in servers:
            server = servers[SERVER_NAME]
            _expect(path, (*at, "mcpServers", SERVER_NAME), server, dict)
            if "args" in server:
                _expect(path, (*at, "mcpServers", SERVER_NAME, "args"), server["args"], list)


def _load(path: Path) -> tuple[bytes | None, dict[str, Any]]:
    try:
        raw = read_regular(path, _MAX_SETTINGS_BYTES)
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
        raise InstallError(
            f"{path}: the file holds {_kind(data)}, not a JSON object as Claude Code expects; "
            "nothing was changed"
        )
    return raw, data


def _load_checked(files: Files) -> dict[Path, tuple[bytes | None, dict[str, Any]]]:
    """Each file of ``files`` read, parsed and checked (``InstallError`` before any change)."""
    loaded = {p: _load(p) for p in dict.fromkeys((files.settings, files.mcp))}
    _check_settings(files.settings, loaded[files.settings][1])
    _check_mcp(files.mcp, loaded[files.mcp][1], files.mcp_at)
    return loaded


def _dump(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


def _ours(command: Any, tail: str) -> bool:
    """Whether ``command`` is one install writes: ``<python> -m compactd claude-code <tail>``
    or ``compactd claude-code <tail>`` (the program by name or path), with its options after it
    (``--data-dir``)."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    want = tail.split()
    for i in range(len(words)):
        if words[i : i + len(want)] == want:
            head = words[:i]
            return head[-2:] == ["-m", "compactd"] or (
                len(head) == 1 and Path(head[0]).name == "compactd"
            )
    return False


def _add_hooks(settings: dict[str, Any], hook: str, events: list[tuple[str, str]]) -> list[str]:
    changed: list[str] = []
    hooks = settings.setdefault("hooks", {})
    for event, matcher in events:
        groups = hooks.setdefault(event, [])
        if any(_ours(h.get("command"), _HOOK_TAIL) for g in groups for h in g.get("hooks", [])):
            continue  # (shapes checked by _check_settings)
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
    #: what was left as it was, worth a word (a status line of the user's own)
    notes: list[str] = field(default_factory=list)


# What install wrote, kept for uninstall (services/installed).
AGENT_DIR: Final = "claude-code"


def installed_settings(scope: Scope, project: Path, data_dir: Path) -> bool:
    """Whether ``install`` put compactd into ``scope``'s settings files (and ``uninstall`` has
    not taken it out since)."""
    files = scope_files(scope, project)
    return any(
        installed.record_path(data_dir, AGENT_DIR, p).is_file() for p in (files.settings, files.mcp)
    )


def kept_status_line(path: Path, status: Any) -> str:
    """A word on a status line install leaves as it is ("" when it is compactd's own)."""
    command = status.get("command") if isinstance(status, dict) else None
    if _ours(command, _STATUS_TAIL):
        return ""
    return (
        f"{path}: kept the status line already set ({command!r}); compactd's is "
        "`compactd claude-code statusline`, which you may put in its place"
    )


def load_settings(path: Path) -> tuple[bytes | None, dict[str, Any]]:
    """A settings file's bytes (None: absent) and its object; ``InstallError`` when it is not a
    JSON object."""
    return _load(path)


def dump_settings(data: dict[str, Any]) -> bytes:
    return _dump(data)


def write_file(path: Path, data: bytes | None) -> None:
    """Replace ``path`` whole with ``data`` (None: remove it)."""
    installed.write_file(path, data)


def plan_install(
    scope: Scope,
    project: Path,
    python: str,
    *,
    warning: bool = True,
    data_dir: Path | None = None,
) -> tuple[Plan, dict[Path, bytes | None]]:
    """What ``install`` writes, and each file's bytes before (None: it did not exist).
    ``data_dir``: passed to every command written (None: they use the default)."""
    files = scope_files(scope, project)
    base = compactd_command(python)
    extra = _data_args(data_dir)
    hook = shlex.join([*base, *_HOOK_TAIL.split(), *extra])
    status_line = shlex.join([*base, *_STATUS_TAIL.split(), *extra])
    loaded = _load_checked(files)
    before = {path: raw for path, (raw, _) in loaded.items()}
    data = {path: parsed for path, (_, parsed) in loaded.items()}
    settings = data[files.settings]
    events = [e for e in HOOK_EVENTS if warning or e[0] != "UserPromptSubmit"]
    changes = [f"{files.settings}: {c}" for c in _add_hooks(settings, hook, events)]
    notes: list[str] = []
    if "statusLine" not in settings:
        settings["statusLine"] = {
            "type": "command", "command": status_line, "padding": 0, "timeout": STATUS_TIMEOUT_S,
        }  # fmt: skip
        changes.append(f"{files.settings}: status line")
    else:
        notes.append(kept_status_line(files.settings, settings["statusLine"]))
    if scope == "project":
        enabled = settings.setdefault("enabledMcpjsonServers", [])
        if SERVER_NAME not in enabled:
            enabled.append(SERVER_NAME)
            changes.append(f"{files.settings}: MCP server {SERVER_NAME} approved")
    servers = _at(data[files.mcp], files.mcp_at)
    if SERVER_NAME not in servers:
        args = [*compactd_command(python)[1:], "mcp", *extra]
        servers[SERVER_NAME] = {
            "type": "stdio", "command": python, "args": args, "env": {}, "alwaysLoad": True,
        }  # fmt: skip
        changes.append(f"{files.mcp}: MCP server {SERVER_NAME} ({python} {' '.join(args)})")
    touched = {p for p in data if any(c.startswith(f"{p}:") for c in changes)}
    writes: dict[Path, bytes | None] = {p: _dump(data[p]) for p in touched}
    return Plan(writes, changes, [n for n in notes if n]), before


def install(
    scope: Scope, project: Path, python: str, data_dir: Path, *, dry_run: bool = False,
    warning: bool = True, pass_data_dir: bool = False,
) -> Plan:  # fmt: skip
    """Add compactd to the scope's files (see the module docstring). ``data_dir`` keeps the
    record of what changed; with ``pass_data_dir`` the commands written pass it on too."""
    given = data_dir if pass_data_dir else None
    plan, before = plan_install(scope, project, python, warning=warning, data_dir=given)
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
        args = server.get("args") if isinstance(server, dict) else None
        program = server.get("command") if isinstance(server, dict) else None
        if isinstance(args, list) and (
            args[:3] == ["-m", "compactd", "mcp"]
            or (
                isinstance(program, str)
                and Path(program).name == "compactd"
                and args[:1] == ["mcp"]
            )
        ):
            assert isinstance(servers, dict)
            del servers[SERVER_NAME]


def uninstall(scope: Scope, project: Path, data_dir: Path, *, dry_run: bool = False) -> Plan:
    """Take out what ``install`` put in (see the module docstring)."""
    files = scope_files(scope, project)
    loaded = _load_checked(files)

    def strip(path: Path, raw: bytes) -> bytes | None:
        data = loaded[path][1]
        _strip(data, files, path)
        new = _dump(data)
        return new if new != _dump(json.loads(raw) if raw.strip() else {}) else None

    raws = {p: raw for p, (raw, _) in loaded.items()}
    writes, changes = installed.undo(data_dir, AGENT_DIR, raws, strip, dry_run=dry_run)
    return Plan(writes, changes)
