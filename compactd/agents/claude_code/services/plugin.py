"""Installing compactd's Claude Code plugin, and taking it out exactly.

The plugin is a folder shipped with compactd (``compactd/agents/claude_code/plugin``): a plugin
and a marketplace that lists it, so ``claude plugin marketplace add`` takes the folder
(docs/claude-code.md#the-plugin). ``install`` puts it into one scope of Claude Code's settings:

- through Claude Code's own commands when the ``claude`` program is found (``claude plugin
  marketplace add <folder> --scope S`` and ``claude plugin install compactd@compactd --scope
  S``), which also register it in Claude Code's own state, so the next session loads it;
- else by writing the keys those commands write into the scope's settings file:
  ``extraKnownMarketplaces.compactd`` (a ``directory`` source) and
  ``enabledPlugins["compactd@compactd"]``; Claude Code registers the marketplace at its next start.

For the project scope the folder is copied into the project (``.claude/compactd-plugin``) and
the settings name it by a path relative to the project, so the files a team commits name no
path of one machine. compactd then adds, itself, the status line (a plugin cannot) and the
``env`` entries it was asked for (``COMPACTD_SUMMARIZER``; ``COMPACTD_COMMAND`` for a user or
local install whose compactd is not on PATH).

Before anything changes, the settings file's bytes are kept under compactd's data dir
(``claude-code/installed/plugin-<key>.json``) with a digest of what install left. ``uninstall``
runs Claude Code's ``plugin uninstall`` and ``marketplace remove`` (which leave empty
``enabledPlugins`` and ``extraKnownMarketplaces`` behind), then puts the kept bytes back when
nobody else changed the file since install, so the file is byte-identical to before; otherwise
it takes out only what install added. The copied folder, and a ``.claude`` folder install made,
go too.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

from compactd.agents.claude_code.services import settings as cs

__all__ = [
    "MARKETPLACE",
    "MIN_VERSION",
    "PLUGIN_ID",
    "PROJECT_COPY",
    "Claude",
    "Program",
    "find_claude",
    "install_plugin",
    "installed_plugin",
    "plugin_folder",
    "uninstall_plugin",
]

MARKETPLACE: Final = "compactd"
PLUGIN_ID: Final = "compactd@compactd"
# Where a project-scope install copies the plugin, relative to the project.
PROJECT_COPY: Final = Path(".claude") / "compactd-plugin"
# The oldest Claude Code whose plugins can answer session.compact from a hook module (the issue's
# observations cover 2.1.330 to 2.1.332; compactd's tests pin 2.1.332).
MIN_VERSION: Final = (2, 1, 330)
# Seconds one of Claude Code's plugin commands may take.
_CLAUDE_TIMEOUT_S: Final = 120
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def plugin_folder() -> Path:
    """The plugin folder shipped with this compactd (a marketplace listing the plugin in it)."""
    return Path(__file__).resolve().parents[1] / "plugin"


@dataclass(frozen=True, slots=True)
class Claude:
    """The ``claude`` program install runs, and its version (None: it did not say)."""

    exe: str
    version: tuple[int, ...] | None

    @property
    def has_modules(self) -> bool:
        return self.version is None or self.version >= MIN_VERSION


def find_claude(explicit: str | None = None) -> Claude | None:
    """The ``claude`` program: ``explicit``, else the one on PATH; None when there is none."""
    exe = shutil.which(explicit) if explicit else shutil.which("claude")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, timeout=_CLAUDE_TIMEOUT_S
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return Claude(exe, None)
    found = _VERSION.search(out)
    return Claude(exe, tuple(int(x) for x in found.groups()) if found else None)


@dataclass(frozen=True, slots=True)
class Program:
    """How Claude Code runs this compactd: ``compactd`` from PATH when that is this one, else
    the path of its console script (None when it has none)."""

    on_path: bool
    path: str | None

    def command(self, scope: cs.Scope) -> str:
        """The program in a command written into ``scope``'s settings: never a path of this
        machine in a project's files."""
        if self.on_path or scope == "project" or self.path is None:
            return "compactd"
        return shlex.quote(self.path)


class _Record(msgspec.Struct, kw_only=True):
    scope: str
    settings: str
    original: bytes | None
    written: str  # sha256 of the settings file as install left it
    made_claude_dir: bool = False
    copied: str = ""  # the plugin folder copied into the project
    via_claude: bool = False
    #: what install itself added, to take out when the file changed since
    status_line: bool = False
    env_keys: list[str] = msgspec.field(default_factory=list)


def _record_path(data_dir: Path, settings: Path) -> Path:
    key = hashlib.sha256(str(settings.absolute()).encode()).hexdigest()[:24]
    return data_dir / "claude-code" / "installed" / f"plugin-{key}.json"


def _read_record(path: Path) -> _Record | None:
    try:
        return msgspec.json.decode(path.read_bytes(), type=_Record)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def installed_plugin(scope: cs.Scope, project: Path, data_dir: Path) -> bool:
    """Whether compactd's plugin was installed into ``scope`` (and not taken out since)."""
    settings = cs.scope_files(scope, project).settings
    return _read_record(_record_path(data_dir, settings)) is not None


def _digest(data: bytes | None) -> str:
    return hashlib.sha256(data).hexdigest() if data is not None else ""


def _source(scope: cs.Scope, project: Path) -> tuple[Path, str]:
    """The marketplace folder Claude Code reads, and the path the settings name it by."""
    if scope == "project":
        return project / PROJECT_COPY, f"./{PROJECT_COPY.as_posix()}"
    folder = plugin_folder()
    return folder, str(folder)


def _claude(claude: Claude, args: Sequence[str], cwd: Path) -> str:
    """Run ``claude ARGS``; its message, or ``InstallError`` with what it said."""
    try:
        run = subprocess.run(
            [claude.exe, *args], cwd=cwd, capture_output=True, text=True, timeout=_CLAUDE_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise cs.InstallError(f"{shlex.join(['claude', *args])} failed: {exc}") from None
    said = (run.stdout.strip().splitlines() or [""])[-1]
    try:
        message = str(json.loads(said).get("message") or said)
    except (ValueError, AttributeError):
        message = said or run.stderr.strip()
    if run.returncode != 0:
        raise cs.InstallError(f"{shlex.join(['claude', *args])} failed: {message}")
    return message


def _status_line(settings: dict[str, Any], program: Program, scope: cs.Scope) -> bool:
    """Add compactd's status line unless one is set (the user's stays: ``kept_status_line``)."""
    if "statusLine" in settings:
        return False
    command = f"{program.command(scope)} claude-code statusline"
    settings["statusLine"] = {
        "type": "command", "command": command, "padding": 0, "timeout": cs.STATUS_TIMEOUT_S,
    }  # fmt: skip
    return True


def _env(
    settings: dict[str, Any],
    program: Program,
    scope: cs.Scope,
    summarizer: str | None,
    quiet_warning: bool,
) -> dict[str, str]:
    """The ``env`` entries to add: the summarizer asked for, no threshold warning when asked,
    and where compactd is when Claude Code would not find it on PATH (user and local scopes)."""
    wanted: dict[str, str] = {}
    if summarizer is not None:
        wanted["COMPACTD_SUMMARIZER"] = summarizer
    if quiet_warning:
        wanted["COMPACTD_NO_THRESHOLD_WARNING"] = "1"
    if scope != "project" and not program.on_path and program.path is not None:
        wanted["COMPACTD_COMMAND"] = program.path
    env = settings.get("env")
    current = env if isinstance(env, dict) else {}
    return {k: v for k, v in wanted.items() if current.get(k) != v}


def _marketplace_keys(settings: dict[str, Any], named: str) -> list[str]:
    changed: list[str] = []
    known = settings.setdefault("extraKnownMarketplaces", {})
    entry = {"source": {"source": "directory", "path": named}}
    if known.get(MARKETPLACE) != entry:
        known[MARKETPLACE] = entry
        changed.append(f"marketplace {MARKETPLACE} ({named})")
    enabled = settings.setdefault("enabledPlugins", {})
    if enabled.get(PLUGIN_ID) is not True:
        enabled[PLUGIN_ID] = True
        changed.append(f"plugin {PLUGIN_ID} enabled")
    return changed


def install_plugin(
    scope: cs.Scope,
    project: Path,
    data_dir: Path,
    program: Program,
    *,
    claude: Claude | None,
    summarizer: str | None = None,
    quiet_warning: bool = False,
    dry_run: bool = False,
) -> cs.Plan:
    """Put the plugin into ``scope`` (see the module docstring). ``claude``: Claude Code's
    program to install through (None: write the keys)."""
    settings_path = cs.scope_files(scope, project).settings
    before, data = cs.load_settings(settings_path)
    folder, named = _source(scope, project)
    record_path = _record_path(data_dir, settings_path)
    record = _read_record(record_path)
    how = (
        f"through Claude Code's commands ({claude.exe} plugin marketplace add, plugin install)"
        if claude is not None
        else "by writing the keys Claude Code's plugin commands write (no claude program found)"
    )
    changes: list[str] = []
    if scope == "project":
        changes.append(f"{folder}: the plugin, copied from {plugin_folder()}")
    preview = json.loads(json.dumps(data))
    keys = _marketplace_keys(preview, named)
    status = _status_line(preview, program, scope)
    env = _env(preview, program, scope, summarizer, quiet_warning)
    changes += [f"{settings_path}: {c}" for c in keys]
    if status:
        changes.append(f"{settings_path}: status line ({preview['statusLine']['command']})")
    changes += [f"{settings_path}: env {k}={v}" for k, v in env.items()]
    notes = (
        []
        if status or "statusLine" not in data
        else [cs.kept_status_line(settings_path, data["statusLine"])]
    )
    notes = [n for n in notes if n]
    if not keys and not status and not env and record is not None:
        if scope == "project" and not dry_run:
            _copy(folder)  # the copy follows this compactd's plugin
        return cs.Plan({}, [], notes)
    if dry_run:
        return cs.Plan({settings_path: None}, [f"({how})", *changes], notes)
    made_claude_dir = not settings_path.parent.exists()
    if scope == "project":
        _copy(folder)
    try:
        if claude is not None:
            _claude(
                claude,
                ["plugin", "marketplace", "add", str(folder), "--scope", scope, "--json"],
                project,
            )
            _claude(claude, ["plugin", "install", PLUGIN_ID, "--scope", scope, "--json"], project)
        _, data = cs.load_settings(settings_path)
        _marketplace_keys(data, named)  # the relative path, for the project's files
        status = _status_line(data, program, scope) or (record is not None and record.status_line)
        if env:
            data.setdefault("env", {}).update(env)
        new = cs.dump_settings(data)
        cs.write_file(settings_path, new)
    except BaseException:
        if record is None:  # nothing of compactd's was there: leave the file as it was
            cs.write_file(settings_path, before)
            if scope == "project":
                shutil.rmtree(folder, ignore_errors=True)
        raise
    kept = record or _Record(
        scope=scope,
        settings=str(settings_path),
        original=before,
        written="",
        made_claude_dir=made_claude_dir,
        via_claude=claude is not None,
    )
    kept.written = _digest(new)
    kept.copied = str(folder) if scope == "project" else ""
    kept.status_line = bool(status)
    kept.env_keys = sorted({*kept.env_keys, *env})
    cs.write_file(record_path, msgspec.json.encode(kept))
    return cs.Plan({settings_path: new}, [f"({how})", *changes], notes)


def _copy(folder: Path) -> None:
    """The project's copy of the plugin, made anew from this compactd's."""
    source = plugin_folder()
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def _strip(data: dict[str, Any], record: _Record) -> None:
    """Take out what install added, when the file changed since (emptied containers too)."""
    for key, inner in (("extraKnownMarketplaces", MARKETPLACE), ("enabledPlugins", PLUGIN_ID)):
        holder = data.get(key)
        if isinstance(holder, dict):
            holder.pop(inner, None)
            if not holder:
                del data[key]
    status = data.get("statusLine")
    if record.status_line and isinstance(status, dict):
        command = status.get("command")
        if isinstance(command, str) and command.endswith(" claude-code statusline"):
            del data["statusLine"]
    env = data.get("env")
    if isinstance(env, dict):
        for key in record.env_keys:
            env.pop(key, None)
        if not env:
            del data["env"]


def uninstall_plugin(
    scope: cs.Scope,
    project: Path,
    data_dir: Path,
    *,
    claude: Claude | None,
    dry_run: bool = False,
) -> cs.Plan | None:
    """Take the plugin out of ``scope`` (see the module docstring); None when it was not
    installed there by compactd."""
    settings_path = cs.scope_files(scope, project).settings
    record_path = _record_path(data_dir, settings_path)
    record = _read_record(record_path)
    if record is None:
        return None
    current, _ = cs.load_settings(settings_path)
    untouched = _digest(current) == record.written
    changes: list[str] = []
    if claude is not None:
        changes.append(
            f"(through Claude Code's commands: {claude.exe} plugin uninstall, marketplace remove)"
        )
    if untouched:
        changes.append(
            f"{settings_path}: " + ("removed" if record.original is None else "restored")
        )
    else:
        changes.append(
            f"{settings_path}: compactd's plugin entries taken out (the file changed since install)"
        )
    if record.copied:
        changes.append(f"{record.copied}: removed")
    if dry_run:
        return cs.Plan({settings_path: None}, changes)
    if claude is not None:
        for args in (
            ["plugin", "uninstall", PLUGIN_ID, "--scope", scope, "--json"],
            ["plugin", "marketplace", "remove", MARKETPLACE, "--scope", scope, "--json"],
        ):
            try:
                _claude(claude, args, project)
            except cs.InstallError as exc:  # not installed there any more: go on
                changes.append(f"(note: {exc})")
    if untouched:
        new = record.original
    else:
        _, data = cs.load_settings(settings_path)
        _strip(data, record)
        new = cs.dump_settings(data)
    cs.write_file(settings_path, new)
    if record.copied:
        shutil.rmtree(record.copied, ignore_errors=True)
    if record.made_claude_dir and new is None:
        try:
            settings_path.parent.rmdir()  # only when nothing else is in it
            changes.append(f"{settings_path.parent}: removed (empty)")
        except OSError:
            pass
    record_path.unlink(missing_ok=True)
    return cs.Plan({settings_path: new}, changes)
