"""Putting compactd into Codex CLI's config, and taking it out exactly (docs/codex.md#install).

``install`` adds, for one scope:

- to ``hooks.json``: ``compactd codex hook`` for ``SessionStart`` (matcher ``compact|resume``:
  the hand-back) and ``UserPromptSubmit`` (the threshold warning, unless turned off);
- to ``config.toml``: the MCP server ``[mcp_servers.compactd]`` (``compactd mcp``), and the trust
  entries Codex needs before it runs a hook: ``[hooks.state."<hooks.json>:<event>:<group>:
  <handler>"]`` with ``trusted_hash``, the sha256 Codex computes of the handler
  (``trusted_hash`` below; docs/codex.md#hooks). Without them Codex skips the hooks silently.

Scopes: ``user`` edits ``$CODEX_HOME`` (``~/.codex``); ``project`` edits the project's
``.codex/hooks.json`` and ``.codex/config.toml`` with commands that name no path of this machine
(``compactd`` from PATH) and puts the trust entries, which name the project's files, in the
user's ``config.toml``. Codex reads a project's ``.codex/`` only for a project the user trusts.

Every file is parsed before anything is written, and nothing changes when one cannot be read
(``config.toml`` with tomlkit, which keeps the user's comments and layout). Only compactd's own
entries are added, found again by their commands, and each file is written whole in one rename.
For each file it changes, compactd keeps under its data dir the bytes from before (or that there
was no file) and a digest of what it wrote: ``uninstall`` puts the old bytes back when the file
is still as compactd left it (removing a file or a ``.codex`` folder it created), and otherwise
takes out only its own entries. Running ``install`` twice changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import tomlkit
import tomlkit.exceptions
from tomlkit.items import Table
from tomlkit.toml_document import TOMLDocument

from compactd.agents.codex.services.sessions import codex_home
from compactd.services import installed
from compactd.services.installed import InstallError, read_existing

__all__ = [
    "HOOK_EVENTS",
    "InstallError",
    "Plan",
    "Scope",
    "install",
    "scope_files",
    "trusted_hash",
    "uninstall",
]

Scope = Literal["user", "project"]
#: The MCP server's name in Codex (its tools are offered in the namespace ``mcp__compactd``).
SERVER_NAME: Final = "compactd"
# The hook events compactd answers, each with its group's matcher (None: the event takes none).
HOOK_EVENTS: Final[tuple[tuple[str, str | None], ...]] = (
    ("SessionStart", "compact|resume"),
    ("UserPromptSubmit", None),
)
# Codex's names of those events in trust keys and hashes (docs/codex.md#hooks).
_SNAKE: Final = {"SessionStart": "session_start", "UserPromptSubmit": "user_prompt_submit"}
# Seconds Codex waits for one hook run (its default is ten minutes): three times the hook's own
# deadline (cli.HOOK_DEADLINE_S, docs/safe-io.md).
HOOK_TIMEOUT_S: Final = 60
# Seconds Codex waits for the MCP server to start (compactd's start is about a second).
MCP_STARTUP_S: Final = 30
# What compactd's hook command ends with: how its entries are found again.
_HOOK_TAIL: Final = "compactd codex hook"
_DEFAULT_TIMEOUT: Final = 600


def trusted_hash(event: str, matcher: str | None, handler: dict[str, Any]) -> str:
    """The ``trusted_hash`` Codex 0.171.0 records for a hook handler: the sha256 of the compact,
    key-sorted JSON of the event's snake_case name, the group's matcher (left out for events
    that take none) and the handler with its defaults filled in (docs/codex.md#hooks)."""
    full: dict[str, Any] = {
        "type": handler.get("type", "command"),
        "command": handler["command"],
        "timeout": handler.get("timeout", _DEFAULT_TIMEOUT),
        "async": handler.get("async", False),
    }
    if handler.get("statusMessage") is not None:
        full["statusMessage"] = handler["statusMessage"]
    identity: dict[str, Any] = {"event_name": _SNAKE.get(event, event), "hooks": [full]}
    if event != "UserPromptSubmit" and event != "Stop":
        identity["matcher"] = matcher or ""
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Files:
    hooks: Path  # hooks.json
    config: Path  # the config.toml with the MCP server
    trust: Path  # the config.toml with the trust entries (the user's)


def scope_files(scope: Scope, project: Path) -> Files:
    home = codex_home()
    if scope == "user":
        return Files(home / "hooks.json", home / "config.toml", home / "config.toml")
    folder = project / ".codex"
    return Files(folder / "hooks.json", folder / "config.toml", home / "config.toml")


def hook_command(scope: Scope, python: str, data_dir_arg: str | None) -> str:
    """The command Codex runs for a hook: this interpreter's compactd for the user's own
    config, ``compactd`` from PATH in a project's files (they name no path of this machine)."""
    base = ["compactd"] if scope == "project" else [python, "-m", "compactd"]
    extra = ["--data-dir", data_dir_arg] if data_dir_arg and scope == "user" else []
    return shlex.join([*base, "codex", "hook", *extra])


def mcp_server(scope: Scope, python: str, data_dir_arg: str | None) -> dict[str, Any]:
    if scope == "project":
        return {"command": "compactd", "args": ["mcp"]}
    args = ["-m", "compactd", "mcp"]
    if data_dir_arg:
        args += ["--data-dir", data_dir_arg]
    return {"command": python, "args": args}


# -- reading the files -----------------------------------------------------------------------------


def _toml(path: Path, raw: bytes | None) -> TOMLDocument:
    if raw is None:
        return tomlkit.document()
    try:
        return tomlkit.parse(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InstallError(f"{path} is not UTF-8 text; nothing was changed") from None
    except tomlkit.exceptions.TOMLKitError as exc:
        raise InstallError(f"{path} is not valid TOML ({exc}); nothing was changed") from None


def _json(path: Path, raw: bytes | None) -> dict[str, Any]:
    if raw is None or not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InstallError(f"{path} is not valid JSON ({exc}); nothing was changed") from None
    if not isinstance(data, dict):
        raise InstallError(f"{path} does not hold a JSON object; nothing was changed")
    hooks = data.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        raise InstallError(f"{path}: 'hooks' is not an object; nothing was changed")
    for event, groups in (hooks or {}).items():
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise InstallError(
                f"{path}: hooks.{event} is not a list of groups; nothing was changed"
            )
    return data


def _table(parent: Any, key: str, path: Path, where: str) -> Table:
    """The table ``key`` of ``parent`` (made when missing; a super table, so that only its
    sub-tables get headers). InstallError when the key holds something else."""
    if key not in parent:
        parent.add(key, tomlkit.table(True))
    found = parent[key]
    if not isinstance(found, Table):
        raise InstallError(f"{path}: {where} is not a table; nothing was changed")
    return found


def _ours(command: Any) -> bool:
    return isinstance(command, str) and (
        command.endswith(_HOOK_TAIL) or f" {_HOOK_TAIL} --data-dir " in command
    )


def _dump_json(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


# -- the plan -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """What install or uninstall does: each file's new bytes (None: remove it), the list of
    changes in words, and notes for the person."""

    writes: dict[Path, bytes | None]
    changes: list[str]
    notes: list[str] = field(default_factory=list)


def _trust_key(hooks_path: Path, event: str, group: int, handler: int) -> str:
    return f"{hooks_path}:{_SNAKE[event]}:{group}:{handler}"


def plan_install(
    scope: Scope, project: Path, python: str, *, warning: bool = True,
    data_dir_arg: str | None = None,
) -> tuple[Plan, dict[Path, bytes | None]]:  # fmt: skip
    """What ``install`` writes, and each file's bytes before (None: it did not exist)."""
    files = scope_files(scope, project)
    paths = list(dict.fromkeys((files.hooks, files.config, files.trust)))
    before = {p: read_existing(p) for p in paths}
    hooks = _json(files.hooks, before[files.hooks])
    tomls = {p: _toml(p, before[p]) for p in paths if p != files.hooks}
    changes: list[str] = []
    command = hook_command(scope, python, data_dir_arg)

    # hooks.json: compactd's group per event, and where it sits (for its trust key).
    events = [e for e in HOOK_EVENTS if warning or e[0] != "UserPromptSubmit"]
    table = hooks.setdefault("hooks", {})
    placed: list[tuple[str, str | None, int, int, dict[str, Any]]] = []
    for event, matcher in events:
        groups = table.setdefault(event, [])
        at = next(
            (
                (g, h)
                for g, group in enumerate(groups)
                for h, handler in enumerate(group.get("hooks") or [])
                if isinstance(handler, dict) and _ours(handler.get("command"))
            ),
            None,
        )
        if at is None:
            handler = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S}
            group: dict[str, Any] = {"hooks": [handler]}
            if matcher is not None:
                group = {"matcher": matcher, **group}
            groups.append(group)
            at = (len(groups) - 1, 0)
            changes.append(f"{files.hooks}: hook {event}" + (f" ({matcher})" if matcher else ""))
        g, h = at
        found = groups[g]["hooks"][h]
        placed.append((event, groups[g].get("matcher"), g, h, found))

    # config.toml: the MCP server.
    config = tomls[files.config]
    servers = _table(config, "mcp_servers", files.config, "mcp_servers")
    if SERVER_NAME not in servers:
        server = tomlkit.table()
        for key, value in mcp_server(scope, python, data_dir_arg).items():
            server[key] = value
        server["startup_timeout_sec"] = MCP_STARTUP_S
        servers[SERVER_NAME] = server
        shown = " ".join([server["command"], *server["args"]])
        changes.append(f"{files.config}: MCP server {SERVER_NAME} ({shown})")

    # The trust entries, in the user's config.toml.
    trust = tomls[files.trust]
    state = _table(
        _table(trust, "hooks", files.trust, "hooks"), "state", files.trust, "hooks.state"
    )
    for event, matcher, g, h, handler in placed:
        key = _trust_key(files.hooks, event, g, h)
        digest = trusted_hash(event, matcher, handler)
        entry = state.get(key)
        if isinstance(entry, dict) and entry.get("trusted_hash") == digest:
            continue
        fresh = tomlkit.table()
        fresh["trusted_hash"] = digest
        state[key] = fresh
        changes.append(f"{files.trust}: trusts the {event} hook ({key})")

    writes: dict[Path, bytes | None] = {}
    for path in paths:
        if not any(c.startswith(f"{path}:") for c in changes):
            continue
        if path == files.hooks:
            writes[path] = _dump_json(hooks)
        else:
            writes[path] = tomlkit.dumps(tomls[path]).encode()
    notes: list[str] = []
    projects = trust.get("projects")
    entry = projects.get(str(project)) if isinstance(projects, dict) else None
    trusted = isinstance(entry, dict) and entry.get("trust_level") == "trusted"
    if scope == "project" and not trusted:
        notes.append(
            f"Codex reads {files.hooks.parent} only when {project} is a trusted project "
            f'([projects."{project}"] trust_level = "trusted" in {files.trust})'
        )
    return Plan(writes, changes, notes), before


# -- what compactd wrote, kept for uninstall (services/installed) ---------------------------------

AGENT_DIR: Final = "codex"


def install(
    scope: Scope, project: Path, python: str, data_dir: Path, *, dry_run: bool = False,
    warning: bool = True, data_dir_arg: str | None = None,
) -> Plan:  # fmt: skip
    """Add compactd to the scope's files (see the module docstring)."""
    plan, before = plan_install(scope, project, python, warning=warning, data_dir_arg=data_dir_arg)
    if dry_run:
        return plan
    for path, new in plan.writes.items():
        assert new is not None
        installed.remember(data_dir, AGENT_DIR, path, before[path], new)
    return plan


def _strip_hooks(data: dict[str, Any]) -> None:
    hooks = data.get("hooks")
    if not isinstance(hooks, dict):
        return
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        for g in groups:
            if isinstance(g, dict) and isinstance(g.get("hooks"), list):
                g["hooks"] = [
                    h for h in g["hooks"] if not (isinstance(h, dict) and _ours(h.get("command")))
                ]
        hooks[event] = [g for g in groups if not (isinstance(g, dict) and g.get("hooks") == [])]
        if not hooks[event]:
            del hooks[event]
    if not hooks:
        del data["hooks"]


def _strip_server(doc: TOMLDocument) -> None:
    """Take compactd's MCP server out of ``doc`` (the one whose arguments run ``mcp``)."""
    servers = doc.get("mcp_servers")
    server = servers.get(SERVER_NAME) if isinstance(servers, Table) else None
    args = server.get("args") if isinstance(server, dict) else None
    if isinstance(servers, Table) and isinstance(args, list) and "mcp" in args:
        del servers[SERVER_NAME]
        if not servers:
            del doc["mcp_servers"]


def uninstall(scope: Scope, project: Path, data_dir: Path, *, dry_run: bool = False) -> Plan:
    """Take out what ``install`` put in (see the module docstring).

    A trust entry is taken out only for hooks.json handlers that are compactd's own."""
    files = scope_files(scope, project)
    paths = list(dict.fromkeys((files.hooks, files.config, files.trust)))
    raws = {p: read_existing(p) for p in paths}
    # Parsed first: nothing is written when one file cannot be read.
    hooks = _json(files.hooks, raws[files.hooks])
    ours = _our_keys(files, hooks)
    tomls = {p: _toml(p, raws[p]) for p in paths if p != files.hooks}

    def strip(path: Path, raw: bytes) -> bytes | None:
        if path == files.hooks:
            _strip_hooks(hooks)
            new = _dump_json(hooks)
            return new if new != _dump_json(_json(path, raw)) else None
        doc = tomls[path]
        if path == files.trust:
            _strip_trust(doc, ours)
        if path == files.config:
            _strip_server(doc)
        new = tomlkit.dumps(doc).encode()
        return new if new != raw else None

    writes, changes = installed.undo(data_dir, AGENT_DIR, raws, strip, dry_run=dry_run)
    return Plan(writes, changes)


def _our_keys(files: Files, hooks: dict[str, Any]) -> set[str]:
    """The trust keys of compactd's handlers in hooks.json."""
    out: set[str] = set()
    for event, groups in (hooks.get("hooks") or {}).items():
        if event not in _SNAKE:
            continue
        for g, group in enumerate(groups):
            for h, handler in enumerate(group.get("hooks") or []):
                if isinstance(handler, dict) and _ours(handler.get("command")):
                    out.add(_trust_key(files.hooks, event, g, h))
    return out


def _strip_trust(doc: TOMLDocument, keys: set[str]) -> None:
    hooks = doc.get("hooks")
    state = hooks.get("state") if isinstance(hooks, dict) else None
    if not isinstance(state, Table):
        return
    for key in [k for k in state if str(k) in keys]:
        del state[key]
    if not state and isinstance(hooks, Table):
        del hooks["state"]
        if not hooks:
            del doc["hooks"]
