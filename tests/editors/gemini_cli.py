"""The real Gemini CLI, run headless and offline against tests/emulator's Gemini API.

``Gemini`` runs ``gemini -p`` (the pinned npm ``@google/gemini-cli``, which
tests/editors/setup.sh installs; ``GEMINI_CLI`` names another executable) in a project folder
of its own, with HOME in a temporary folder, so that everything the CLI writes (settings,
``projects.json``, chats) lands there. It talks to 127.0.0.1 only (docs/gemini.md#offline):

* ``GEMINI_API_KEY`` (any value) and ``GOOGLE_GEMINI_BASE_URL`` pointing at the emulator;
* ``~/.gemini/settings.json`` with ``security.auth.selectedType: "gemini-api-key"`` (a headless
  run exits 41 without it), ``security.folderTrust.enabled: false`` (a headless run in an
  untrusted folder exits 55 otherwise), usage statistics, telemetry and updates off;
* a user policy (``~/.gemini/policies/``) that allows ``run_shell_command``, which a headless
  run does not offer the model otherwise (short of ``--yolo``, which would also trust every MCP
  server and so hide what ``trust`` does).

``Turns`` scripts the emulated model by prompt, so a test says what the model does after each
of its prompts however many side requests the CLI makes. ``compress_at`` sets the compression
threshold low enough that the CLI compresses when a ``--resume`` finds a long chat.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.editors.conftest import require
from tests.emulator import Emulator, Reply, ToolUse
from tests.emulator.gemini import gemini_request_kind, parse_gemini_path

# What the installed CLI must say it is (Makefile GEMINI_CLI_VERSION).
VERSION = "0.61.0"
DEFAULT_GEMINI = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "compactd-editors"
    / f"gemini-cli-{VERSION}"
    / "node_modules"
    / ".bin"
    / "gemini"
)
# The settings every run starts from (docs/gemini.md#offline).
BASE_SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}
SHELL_POLICY = '[[rule]]\ntoolName = "run_shell_command"\ndecision = "allow"\npriority = 500\n'


def gemini_exe() -> str:
    """The Gemini CLI to run (checked to be the pinned version), or fail saying how to get it."""
    exe = require(
        os.environ.get("GEMINI_CLI") or str(DEFAULT_GEMINI),
        f"install the Gemini CLI: GEMINI_CLI_VERSION={VERSION} tests/editors/setup.sh CACHE "
        f"CODE_SERVER_VERSION (npm install @google/gemini-cli@{VERSION}, Node >= 20), or set "
        "GEMINI_CLI",
    )
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == VERSION, f"{exe} is {version.stdout!r}, not {VERSION}"
    return exe


def merge(base: dict[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes`` merged in, objects key by key (a None value removes a key)."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a chat file, one a line."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class Run:
    """One ``gemini`` run: its exit status, output, and the Gemini API requests it made."""

    args: Sequence[str]
    returncode: int
    stdout: str
    stderr: str
    requests: list[Any]

    def bodies(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The generate request bodies of the run (of ``kind`` only: see
        ``tests.emulator.gemini.gemini_request_kind``)."""
        return [
            r.body
            for r in self.requests
            if (parse_gemini_path(r.path) or (None, None))[1]
            in ("generateContent", "streamGenerateContent")
            and isinstance(r.body, dict)
            and (kind is None or gemini_request_kind(r.body) == kind)
        ]


@dataclass
class Turns:
    """The emulated model by prompt: ``{marker: [reply, reply, ...]}``.

    A main request is answered by the list of the first marker found in the latest user
    content (not a tool result) that holds one; the n-th reply of the list answers the request
    that has n model turns after that content, and the last one answers any later request. A
    request with no marker gets ``fallback``. (Looking for the marker rather than taking the
    last user content keeps the script right when a hook appends text of its own.)
    """

    replies: dict[str, list[Reply]]
    fallback: Reply = field(default_factory=lambda: Reply(text="Nothing scripted for this."))

    def __call__(self, rec: Any) -> Reply:
        contents = rec.body.get("contents") or []
        for i in range(len(contents) - 1, -1, -1):
            content = contents[i]
            parts = content.get("parts") or []
            if content.get("role") != "user" or any("functionResponse" in p for p in parts):
                continue
            text = "".join(str(p.get("text", "")) for p in parts if not p.get("thought"))
            for marker, replies in self.replies.items():
                if marker in text:
                    done = sum(1 for c in contents[i + 1 :] if c.get("role") == "model")
                    return replies[min(done, len(replies) - 1)]
        return self.fallback


class Gemini:
    """``gemini`` in a project folder under ``root``, against ``emu``, offline, logging each run
    to ``log``."""

    def __init__(
        self,
        exe: str,
        emu: Emulator,
        root: Path,
        log: Path,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.exe, self.emu, self.log = exe, emu, log
        self.home = root / "home"
        self.project = root / "project"
        self.gemini_dir = self.home / ".gemini"
        self.project.mkdir(parents=True, exist_ok=True)
        (self.gemini_dir / "policies").mkdir(parents=True, exist_ok=True)
        (self.gemini_dir / "policies" / "allow-shell.toml").write_text(SHELL_POLICY)
        self.settings_path = self.gemini_dir / "settings.json"
        self.write_settings(merge(BASE_SETTINGS, settings or {}))
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(self.home),
            "GEMINI_API_KEY": "test-gemini-key",
            "GOOGLE_GEMINI_BASE_URL": emu.base_url,
            "COLORTERM": "truecolor",
            "TERM": "xterm-256color",
            "NO_COLOR": "1",
        }

    # ---- settings

    @property
    def settings(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.settings_path.read_text())
        return result

    def write_settings(self, settings: Mapping[str, Any]) -> None:
        self.settings_path.write_text(json.dumps(settings, indent=2) + "\n")

    def configure(self, changes: Mapping[str, Any]) -> None:
        """Merge ``changes`` into ``~/.gemini/settings.json`` (see ``merge``)."""
        self.write_settings(merge(self.settings, changes))

    def compress_at(self, threshold: float) -> None:
        """Compress when the last prompt's tokens reach ``threshold`` of the model's window
        (``model.compressionThreshold``; the window is 1,048,576 tokens for Gemini CLI 0.61.0's
        models)."""
        self.configure({"model": {"compressionThreshold": threshold}})

    def add_hook(
        self, event: str, command: str, *, matcher: str = "*", timeout_ms: int = 30_000
    ) -> None:
        """Add a command hook for ``event`` (``hooks.<event>`` in settings.json)."""
        hooks = self.settings.get("hooks", {})
        group = {
            "matcher": matcher,
            "hooks": [{"type": "command", "command": command, "timeout": timeout_ms}],
        }
        hooks.setdefault(event, []).append(group)
        self.configure({"hooks": hooks})

    def add_mcp_server(
        self, name: str, command: str, args: Iterable[str] = (), *, trust: bool | None = None
    ) -> None:
        """Add a stdio MCP server (``mcpServers.<name>``), with ``trust`` when given."""
        entry: dict[str, Any] = {"command": command, "args": list(args)}
        if trust is not None:
            entry["trust"] = trust
        self.configure({"mcpServers": {name: entry}})

    # ---- running

    def run(
        self, *args: str, check: bool = True, timeout: float = 180, wrap: Sequence[str] = ()
    ) -> Run:
        """``gemini ARGS`` in the project folder (``wrap`` goes in front, e.g. strace)."""
        seen = len(self.emu.requests)
        done = subprocess.run(
            [*wrap, self.exe, *args],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        requests = self.emu.requests[seen:]
        run = Run(args, done.returncode, done.stdout, done.stderr, requests)
        with self.log.open("a") as fh:
            fh.write(
                f"$ gemini {' '.join(args)}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}\n"
            )
            for rec in requests:
                fh.write(f"{rec.method} {rec.path} -> {rec.status}\n")
            fh.write("\n")
        if check:
            assert done.returncode == 0, (
                f"gemini {args} exited {done.returncode}: {done.stderr or done.stdout}"
            )
        return run

    def prompt(self, text: str, *args: str, **kw: Any) -> Run:
        """A new session: ``gemini -p TEXT``."""
        return self.run(*args, "-p", text, **kw)

    def resume(self, text: str, *args: str, session: str = "latest", **kw: Any) -> Run:
        """The latest session (or ``session``) continued: ``gemini --resume latest -p TEXT``."""
        return self.run("--resume", session, *args, "-p", text, **kw)

    # ---- what it wrote

    @property
    def slug(self) -> str:
        """The project's folder name under ~/.gemini/tmp (``projects.json`` maps it)."""
        projects = json.loads((self.gemini_dir / "projects.json").read_text())["projects"]
        return str(projects[str(self.project)])

    @property
    def chats_dir(self) -> Path:
        return self.gemini_dir / "tmp" / self.slug / "chats"

    def chat_files(self) -> list[Path]:
        """The project's chat files (``session-*.jsonl``), oldest first."""
        return sorted(self.chats_dir.glob("session-*.jsonl"), key=lambda p: p.stat().st_mtime)

    def chat(self) -> Path:
        """The project's one chat with messages in it (fails when there are several).

        A ``--resume`` first starts a chat of its own, named after the current minute, before it
        loads the old one: when the minute differs from the old file's, that leaves a file of
        two lines (a metadata line and the session context) beside it (docs/gemini.md#resume).
        """
        files = [p for p in self.chat_files() if any("id" in r for r in read_jsonl(p))]
        assert len(files) == 1, f"expected one chat with messages, found {files}"
        return files[0]


# A throwaway command hook (compactd's Gemini hooks do not exist yet): it appends what Gemini CLI
# gives it on stdin to EVENTS (one JSON a line) and answers as PLAN (a JSON file, read on every
# call, so that a test can change it between runs) says for the event:
#   {"context": TEXT}        hookSpecificOutput.additionalContext
#   {"append": TEXT}         BeforeModel: the messages it was given, and one user message more
#   {"replace_first": TEXT}  BeforeModel: only a first message, TEXT followed by the first one's
#   {"messages": [...]}      BeforeModel: these messages
#   {"stdout": TEXT, "exit": N}  TEXT as it is, and exit status N
HOOK_SCRIPT = r"""
import json, sys
event = json.load(sys.stdin)
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(event) + "\n")
try:
    with open(sys.argv[2]) as fh:
        plan = json.load(fh).get(event["hook_event_name"]) or {}
except FileNotFoundError:
    plan = {}
name = event["hook_event_name"]
messages = (event.get("llm_request") or {}).get("messages") or []
out = None
if "context" in plan:
    out = {"hookSpecificOutput": {"hookEventName": name, "additionalContext": plan["context"]}}
elif "append" in plan:
    out = messages + [{"role": "user", "content": plan["append"]}]
elif "replace_first" in plan:
    out = [{"role": messages[0]["role"], "content": plan["replace_first"] + messages[0]["content"]}]
elif "messages" in plan:
    out = plan["messages"]
if isinstance(out, list):
    out = {"hookSpecificOutput": {"hookEventName": name, "llm_request": {"messages": out}}}
if "stdout" in plan:
    sys.stdout.write(plan["stdout"])
elif out is not None:
    sys.stdout.write(json.dumps(out))
sys.exit(plan.get("exit", 0))
"""


class Hooks:
    """``HOOK_SCRIPT`` installed for ``events`` in a Gemini's settings: ``log()`` gives what
    each call received, ``plan(...)`` says what the next calls answer."""

    def __init__(self, gemini: Gemini, events: Iterable[str], folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.script = folder / "hook.py"
        self.events = folder / "events.jsonl"
        self.plan_path = folder / "plan.json"
        self.script.write_text(HOOK_SCRIPT)
        self.plan_path.write_text("{}")
        for event in events:
            command = f"{shlex.quote(sys.executable)} {self.script} {self.events} {self.plan_path}"
            gemini.add_hook(event, command)

    def plan(self, **actions: Mapping[str, Any]) -> None:
        """What each event answers from now on (``{}`` for nothing)."""
        self.plan_path.write_text(json.dumps(actions))

    def log(self) -> list[dict[str, Any]]:
        """What every hook call received, in order."""
        return read_jsonl(self.events) if self.events.exists() else []

    def names(self, since: int = 0) -> list[str]:
        return [e["hook_event_name"] for e in self.log()[since:]]


# The session that compresses on --resume (tests/editors/test_gemini.py checks it;
# tests/data/gemini/capture.py keeps one in that folder). Its first prompt reads a long
# file and runs two commands; the second, on --resume, finds the chat past the threshold, so the
# CLI compresses all of the first turn into a snapshot before it sends the second prompt; the
# third resumes it again without compressing.
FIRST = "FIRST: read notes.txt, then run the alpha check and count the notes"
SECOND = "SECOND: now run the beta check"
THIRD = "THIRD: wrap up with a short summary"
ALPHA = "echo alpha-check-7d1"
COUNT = "wc -l notes.txt"
BETA = "echo beta-check-3c9"
NOTE = "note {:05d}: the build cache lives in .cache/build and is safe to delete\n"
# 800 notes of 71 characters: about 14,200 tokens by Gemini CLI's estimate (twice that once the
# chat is loaded again, each tool result twice), more than the threshold below, while a request
# after the compression (system prompt and tools, about 10,700 emulated tokens) stays under it.
NOTES = "".join(NOTE.format(i) for i in range(1, 801))
THRESHOLD = 0.012  # of 1,048,576 tokens: 12,583


def shell(command: str, description: str) -> ToolUse:
    return ToolUse("run_shell_command", {"command": command, "description": description})


def compressing_turns() -> Turns:
    """The model of the compressing session."""
    return Turns(
        {
            "FIRST": [
                Reply(
                    text="Reading the notes.",
                    tool_uses=[ToolUse("read_file", {"file_path": "notes.txt"})],
                ),
                Reply(text="Running the alpha check.", tool_uses=[shell(ALPHA, "alpha check")]),
                Reply(text="Counting the notes.", tool_uses=[shell(COUNT, "count the notes")]),
                Reply(text="The alpha check passed and there are 800 notes."),
            ],
            "SECOND": [
                Reply(text="Running the beta check.", tool_uses=[shell(BETA, "beta check")]),
                Reply(text="The beta check passed."),
            ],
            "THIRD": [Reply(text="Both checks passed.")],
        }
    )


def compressing_session(gemini: Gemini) -> tuple[Run, Run, Run]:
    """Runs the compressing session in ``gemini``'s project: its three runs."""
    gemini.compress_at(THRESHOLD)
    (gemini.project / "notes.txt").write_text(NOTES)
    gemini.emu.gemini.set_default(compressing_turns())
    return gemini.prompt(FIRST), gemini.resume(SECOND), gemini.resume(THIRD)


SESSION_FILE_RE = re.compile(r"^session-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-[0-9a-f]{8}\.jsonl$")

__all__ = [
    "ALPHA",
    "BASE_SETTINGS",
    "BETA",
    "COUNT",
    "FIRST",
    "NOTES",
    "SECOND",
    "THIRD",
    "THRESHOLD",
    "compressing_session",
    "compressing_turns",
    "DEFAULT_GEMINI",
    "SESSION_FILE_RE",
    "VERSION",
    "HOOK_SCRIPT",
    "Gemini",
    "Hooks",
    "Run",
    "Turns",
    "gemini_exe",
    "merge",
    "read_jsonl",
]
