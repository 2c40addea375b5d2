"""The real Codex CLI run offline against tests/emulator's Responses API (docs/codex.md).

``Codex`` runs ``codex exec`` (and ``codex exec resume``) in a project folder with CODEX_HOME
and HOME in a temporary folder, configured with a custom model provider pointed at the
emulator (``wire_api = "responses"``, its key in an environment variable), the plugin
catalogue, update check, analytics and feedback off, and optionally a low
``model_auto_compact_token_limit`` so that Codex compacts mid-turn. Each run is logged with
the requests it sent. ``Steps`` is an emulated model that answers Codex's turns from a list of
replies and its compaction requests with a summary. ``Hooks`` writes throwaway hook scripts,
``hooks.json`` and the trust entries Codex needs to run them (``trusted_hash``), and reads
what they were given; ``hooks_list`` asks ``codex app-server`` for ``hooks/list``.

Used by tests/editors/test_codex.py and tests/data/codex/capture.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.emulator import Emulator, RecordedRequest, Reply
from tests.emulator.responses import codex_request_kind

# What the installed CLI must say it is (Makefile CODEX_VERSION).
VERSION = "0.171.0"
DEFAULT_CODEX = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "compactd-editors"
    / f"codex-{VERSION}"
    / "node_modules"
    / ".bin"
    / "codex"
)
HOW_TO_INSTALL = (
    f"install the Codex CLI: tests/editors/setup.sh CACHE CODE_SERVER_VERSION "
    f"CLAUDE_CODE_VERSION {VERSION} (npm install @openai/codex@{VERSION}), or set CODEX"
)
# A model Codex 0.171.0 has metadata for: it offers ``apply_patch`` as a freeform tool and
# defers MCP tools behind ``tool_search``. Any other name gets Codex's fallback metadata: no
# ``apply_patch`` tool (a patch goes through ``exec_command``) and MCP tools offered directly
# as a ``namespace`` tool (docs/codex.md#mcp-servers).
KNOWN_MODEL = "gpt-5.5"
FALLBACK_MODEL = "emu-codex"
PROVIDER = "emulator"
KEY_VARIABLE = "EMULATOR_API_KEY"
# Codex's hook event names as its config spells them, and as its trust keys and hashes do.
HOOK_EVENTS = {
    "SessionStart": "session_start",
    "UserPromptSubmit": "user_prompt_submit",
    "PreToolUse": "pre_tool_use",
    "PostToolUse": "post_tool_use",
    "PreCompact": "pre_compact",
    "PostCompact": "post_compact",
    "Stop": "stop",
}
# Events whose groups take no matcher: their hash leaves the matcher out.
NO_MATCHER = {"UserPromptSubmit", "Stop"}
DEFAULT_HOOK_TIMEOUT = 600


def config_toml(
    base_url: str,
    *,
    model: str = FALLBACK_MODEL,
    auto_compact_limit: int | None = None,
    extra: str = "",
) -> str:
    """config.toml for a run against the emulator at ``base_url``: nothing leaves 127.0.0.1."""
    limit = f"model_auto_compact_token_limit = {auto_compact_limit}\n" if auto_compact_limit else ""
    return (
        f'model = "{model}"\n'
        f'model_provider = "{PROVIDER}"\n'
        "check_for_update_on_startup = false\n"
        f"{limit}"
        "\n"
        f"[model_providers.{PROVIDER}]\n"
        'name = "compactd tests/emulator"\n'
        f'base_url = "{base_url}/v1"\n'
        'wire_api = "responses"\n'
        f'env_key = "{KEY_VARIABLE}"\n'
        "\n"
        "[features]\n"
        "plugins = false\n"
        "remote_plugin = false\n"
        "\n"
        "[analytics]\n"
        "enabled = false\n"
        "\n"
        "[feedback]\n"
        "enabled = false\n"
        f"{extra}"
    )


@dataclass
class Run:
    """One ``codex exec``: its exit status, output, JSONL events and the requests it sent."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    requests: list[RecordedRequest]

    @property
    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.stdout.splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out

    @property
    def thread_id(self) -> str:
        for event in self.events:
            if event.get("type") == "thread.started":
                return str(event["thread_id"])
        raise AssertionError(f"no thread.started event in {self.stdout[:2000]}")

    def kinds(self) -> list[str]:
        """Codex's ``request_kind`` of each request, in order (``turn``, ``compaction``)."""
        return [codex_request_kind(r) for r in self.requests]

    def bodies(self, kind: str = "turn") -> list[dict[str, Any]]:
        return [r.body for r in self.requests if codex_request_kind(r) == kind]


class Codex:
    """``codex`` in ``cwd`` against ``emu``, offline, with its own CODEX_HOME under ``home``."""

    def __init__(
        self,
        exe: str,
        emu: Emulator,
        home: Path,
        cwd: Path,
        log: Path,
        *,
        model: str = FALLBACK_MODEL,
        auto_compact_limit: int | None = None,
        extra_config: str = "",
    ) -> None:
        self.exe, self.emu, self.cwd, self.log = exe, emu, cwd, log
        self.codex_home = home / ".codex"
        self.codex_home.mkdir(parents=True, exist_ok=True)
        self.model = model
        self.auto_compact_limit = auto_compact_limit
        self.extra_config = extra_config
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(home),
            "CODEX_HOME": str(self.codex_home),
            KEY_VARIABLE: "sk-emulator-dummy",
        }
        self.write_config()

    @property
    def config_path(self) -> Path:
        return self.codex_home / "config.toml"

    def write_config(self) -> None:
        self.config_path.write_text(
            config_toml(
                self.emu.base_url,
                model=self.model,
                auto_compact_limit=self.auto_compact_limit,
                extra=self.extra_config,
            )
        )

    def command(self, *args: str) -> list[str]:
        """``codex exec [--json ...] ARGS``: full access (the emulated model's commands run in
        the temporary project), never asking, ``--skip-git-repo-check``."""
        return [
            self.exe,
            "exec",
            "--sandbox",
            "danger-full-access",
            "--skip-git-repo-check",
            "--json",
            *args,
        ]

    def run(self, *args: str, wrapper: Sequence[str] = (), check: bool = True) -> Run:
        """``codex exec ARGS`` (``resume ID PROMPT`` continues a session) and what it sent."""
        seen = len(self.emu.requests)
        argv = [*wrapper, *self.command(*args)]
        done = subprocess.run(
            argv,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        run = Run(list(args), done.returncode, done.stdout, done.stderr, self.emu.requests[seen:])
        with self.log.open("a") as fh:
            fh.write(f"$ codex exec {' '.join(args)}\nexit {done.returncode}\n")
            fh.write(f"{done.stdout[-20000:]}\n{done.stderr[-20000:]}\n")
            fh.write(f"requests: {run.kinds()}\n\n")
        if check:
            assert done.returncode == 0, f"codex exec {args} failed: {done.stderr[-3000:]}"
        return run

    def exec(self, prompt: str, **kw: Any) -> Run:
        return self.run(prompt, **kw)

    def resume(self, thread_id: str, prompt: str, **kw: Any) -> Run:
        return self.run("resume", thread_id, prompt, **kw)

    def rollouts(self) -> list[Path]:
        """The rollout files under CODEX_HOME/sessions, oldest first."""
        return sorted(
            (self.codex_home / "sessions").rglob("rollout-*.jsonl*"), key=lambda p: p.name
        )

    def rollout(self, thread_id: str) -> Path:
        (path,) = [p for p in self.rollouts() if thread_id in p.name]
        return path


def rollout_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


# ------------------------------------------------------------------------- the model


class Steps:
    """An emulated model: each of Codex's turn requests takes the next reply of ``steps``
    (then ``final``); a compaction request gets ``summary`` (the emulator's derived summary
    when None). The replies do not depend on what Codex sends, so a compaction, which drops
    the outputs a model would count, changes nothing in the script."""

    def __init__(self, steps: Iterable[Reply], summary: str | None = None) -> None:
        self.steps = list(steps)
        self.summary = summary
        self.final = Reply(text="Nothing left to do.")

    def add(self, *steps: Reply) -> None:
        self.steps.extend(steps)

    def __call__(self, rec: RecordedRequest) -> Reply:
        if codex_request_kind(rec) == "compaction":
            return Reply() if self.summary is None else Reply(text=self.summary)
        return self.steps.pop(0) if self.steps else self.final


# ------------------------------------------------------------------------- hooks


def trusted_hash(event: str, matcher: str | None, hook: Mapping[str, Any]) -> str:
    """What Codex 0.171.0 records as a hook handler's ``trusted_hash``: the sha256 of the
    key-sorted, compact JSON of the event's snake_case name, the group's matcher (left out for
    events without matchers) and the handler with its defaults filled in (``timeout`` 600,
    ``async`` false; ``statusMessage`` only when set). docs/codex.md#hooks."""
    handler: dict[str, Any] = {
        "type": hook.get("type", "command"),
        "command": hook["command"],
        "timeout": hook.get("timeout", DEFAULT_HOOK_TIMEOUT),
        "async": hook.get("async", False),
    }
    if hook.get("statusMessage") is not None:
        handler["statusMessage"] = hook["statusMessage"]
    identity: dict[str, Any] = {"event_name": HOOK_EVENTS[event], "hooks": [handler]}
    if event not in NO_MATCHER:
        identity["matcher"] = matcher or ""
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def trust_entries(source: Path, hooks: Mapping[str, Any]) -> str:
    """config.toml ``[hooks.state."<source>:<event>:<group>:<handler>"]`` tables trusting
    every handler of ``hooks`` (a hooks.json ``{"hooks": {...}}`` object) read from
    ``source``."""
    out = []
    for event, groups in hooks["hooks"].items():
        for g, group in enumerate(groups):
            for h, hook in enumerate(group["hooks"]):
                key = f"{source}:{HOOK_EVENTS[event]}:{g}:{h}"
                digest = trusted_hash(event, group.get("matcher"), hook)
                out.append(f'\n[hooks.state."{key}"]\ntrusted_hash = "{digest}"\n')
    return "".join(out)


HOOK_SCRIPT = textwrap.dedent(
    """\
    import json, os, sys, time

    data = json.load(sys.stdin)
    label = sys.argv[1]
    with open(os.environ.get("HOOK_LOG") or {log!r}, "a") as fh:
        fh.write(json.dumps({{"label": label, "time": time.time(), "stdin": data}}) + "\\n")
    outputs = {outputs!r}
    out = outputs.get(label)
    if out is not None:
        print(json.dumps(out).replace("$SOURCE", str(data.get("source"))))
    """
)


@dataclass
class Hooks:
    """Throwaway command hooks in ``folder``: one Python script logging what each handler
    was given (its label, a time, its stdin) and printing ``outputs[label]`` (``$SOURCE`` is
    replaced with SessionStart's source)."""

    folder: Path
    outputs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.log = self.folder / "hooks.jsonl"
        self.script = self.folder / "hook.py"
        self.script.write_text(HOOK_SCRIPT.format(log=str(self.log), outputs=self.outputs))

    def command(self, label: str) -> str:
        return f"{sys.executable} {self.script} {label}"

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def labels(self) -> list[str]:
        return [c["label"] for c in self.calls()]

    def clear(self) -> None:
        self.log.unlink(missing_ok=True)


def hooks_list(exe: str, env: Mapping[str, str], cwd: Path) -> list[dict[str, Any]]:
    """``codex app-server``'s answer to ``hooks/list`` for ``cwd``: each hook with its
    ``key``, ``currentHash`` and ``trustStatus``."""
    proc = subprocess.Popen(
        [exe, "app-server"],
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None

    def send(message: Mapping[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()

    def answer(ident: int) -> dict[str, Any]:
        assert proc.stdout is not None
        for line in proc.stdout:
            message = json.loads(line)
            if message.get("id") == ident:
                if "error" in message:
                    raise AssertionError(f"app-server: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result
        raise AssertionError("codex app-server closed its output without answering")

    try:
        send(
            {
                "id": 0,
                "method": "initialize",
                "params": {"clientInfo": {"name": "t", "version": "0"}},
            }
        )
        answer(0)
        send({"method": "initialized"})
        send({"id": 1, "method": "hooks/list", "params": {}})
        data = answer(1)["data"]
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return [hook for entry in data for hook in entry["hooks"]]


def message_texts(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of each message item a request carries, in order; other items as
    (their type, "")."""
    out = []
    for item in body.get("input") or []:
        if item.get("type", "message") == "message":
            text = "\n".join(
                str(p.get("text", "")) for p in item.get("content") or [] if isinstance(p, dict)
            )
            out.append((str(item.get("role")), text))
        else:
            out.append((str(item.get("type")), ""))
    return out
