"""The real Claude Code CLI resumes the sessions ``compactd compact`` writes.

Claude Code 2.1.332 from npm (tests/editors/setup.sh installs it; ``CLAUDE_CODE`` names the
executable) runs headless (``-p``) against tests/emulator on loopback, kept offline by its own
variables (a dummy key, no telemetry, no non-essential traffic, no autoupdater) with HOME and
CLAUDE_CONFIG_DIR in a temporary folder; ``IS_SANDBOX=1`` lets it run as root with
``--dangerously-skip-permissions``. The emulated model reads a file and runs shell commands, so
Claude Code writes a session of several turns; ``compactd compact`` compacts it into a new
session; ``claude --resume <new id> -p`` must then send compactd's summary followed by the kept
assistant turn, with nothing Claude Code made up and nothing that was compacted; Claude Code's
own ``/compact`` must work on it, and so must its automatic compaction when the first request
after resuming is refused as too long (the reactive path, which needs an assistant message in
what it summarizes: docs/claude-code.md#what-claude-code-needs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.editors.conftest import ROOT, out_dir, require
from tests.emulator import Emulator
from tests.emulator.script import ApiError, Reply, ToolUse

# What the installed CLI must say it is (Makefile CLAUDE_CODE_VERSION).
VERSION = "2.1.332"
DEFAULT_CLAUDE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "compactd-editors"
    / f"claude-code-{VERSION}"
    / "node_modules"
    / ".bin"
    / "claude"
)
# The opening of the instruction Claude Code (2.1.330 to 2.1.332) adds to a summarization request (seen in
# its requests to the emulator).
CC_SUMMARY_INSTRUCTION = "CRITICAL: Respond with TEXT ONLY"
# The opening of compactd's summary message (core/prompts.py).
COMPACTD_OPENING = "This session continues an earlier conversation"
FINAL = "All steps done."
NOTES = "".join(f"note line {i}\n" for i in range(1, 41))


def _text(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))


def _tool_results(messages: list[dict[str, Any]]) -> int:
    return sum(
        1
        for m in messages
        if m["role"] == "user"
        and isinstance(m["content"], list)
        and any(b.get("type") == "tool_result" for b in m["content"])
    )


class Model:
    """The emulated model: a Read of notes.txt, two Bash commands, then a final answer; a
    summary (the emulator's own ``<analysis>/<summary>``) when Claude Code asks for one."""

    def __init__(self, notes: Path) -> None:
        self.notes = notes

    def __call__(self, rec: Any) -> Reply:
        messages = rec.body.get("messages") or []
        if messages and CC_SUMMARY_INSTRUCTION in _text(messages[-1]):
            return Reply()
        tools = {t.get("name") for t in rec.body.get("tools") or []}
        if "Read" not in tools:  # a side request without the agent's tools
            return Reply(text="ok")
        done = _tool_results(messages) - self._results_before_prompt(messages)
        if done == 0:
            return Reply(
                text="Reading the notes.",
                tool_uses=[ToolUse("Read", {"file_path": str(self.notes)})],
            )
        if done < 3:
            command = f"echo step {done}"
            return Reply(
                text=f"Step {done}.",
                tool_uses=[ToolUse("Bash", {"command": command, "description": "echo a step"})],
            )
        return Reply(text=FINAL)

    @staticmethod
    def _results_before_prompt(messages: list[dict[str, Any]]) -> int:
        """Tool results before the latest typed prompt: each turn starts its steps anew."""
        last_prompt = max(
            (
                i
                for i, m in enumerate(messages)
                if m["role"] == "user" and "tool_result" not in json.dumps(m["content"])
            ),
            default=0,
        )
        return _tool_results(messages[:last_prompt])


class Claude:
    """``claude`` in a project folder, against the emulator, offline, logging each run."""

    def __init__(self, exe: str, emu: Emulator, home: Path, cwd: Path, log: Path) -> None:
        self.exe, self.emu, self.cwd, self.log = exe, emu, cwd, log
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(home),
            "CLAUDE_CONFIG_DIR": str(home / ".claude"),
            "ANTHROPIC_BASE_URL": emu.base_url,
            "ANTHROPIC_API_KEY": "sk-ant-test-dummy",
            "DISABLE_TELEMETRY": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "IS_SANDBOX": "1",
        }
        self.projects = home / ".claude" / "projects"

    def run(self, *args: str) -> tuple[str, list[dict[str, Any]]]:
        """stdout of ``claude ARGS -p ...`` and the /v1/messages bodies it sent."""
        seen = len(self.emu.message_requests)
        run = subprocess.run(
            [self.exe, *args, "--dangerously-skip-permissions"],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        bodies = [r.body for r in self.emu.message_requests[seen:]]
        with self.log.open("a") as fh:
            fh.write(f"$ claude {' '.join(args)}\nexit {run.returncode}\n{run.stdout}\n")
            fh.write(f"{run.stderr}\n{json.dumps(bodies)[:20000]}\n\n")
        assert run.returncode == 0, f"claude {args} failed: {run.stderr or run.stdout}"
        return run.stdout, bodies


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def _compactd_compact(transcript: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'clients' / 'python'}"}
    env.pop("ANTHROPIC_API_KEY", None)
    run = subprocess.run(
        [sys.executable, "-m", "compactd", "compact", str(transcript), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    result: dict[str, Any] = json.loads(run.stdout)
    return result


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _boundaries(path: Path) -> list[dict[str, Any]]:
    return [e for e in _lines(path) if e.get("subtype") == "compact_boundary"]


@pytest.mark.timeout(300)
def test_claude_code_resumes_compactd_compaction(tmp_path: Path, emu: Emulator) -> None:
    exe = os.environ.get("CLAUDE_CODE") or str(DEFAULT_CLAUDE)
    exe = require(
        exe,
        f"install the Claude Code CLI: tests/editors/setup.sh CACHE CODE_SERVER_VERSION {VERSION} "
        f"(npm install @anthropic-ai/claude-code@{VERSION}), or set CLAUDE_CODE",
    )
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.startswith(VERSION), version.stdout
    out = out_dir("claude-code")
    project = tmp_path / "project"
    project.mkdir()
    notes = project / "notes.txt"
    notes.write_text(NOTES)
    emu.set_default(Model(notes))
    claude = Claude(exe, emu, tmp_path / "home", project, out / "claude.log")

    # 1. Claude Code writes a session of several turns: a Read, two Bash commands, an answer.
    stdout, bodies = claude.run("-p", "Read notes.txt then run the echo steps")
    assert FINAL in stdout and len(bodies) >= 4
    (source,) = list(claude.projects.rglob("*.jsonl"))
    src = _lines(source)
    tools = [
        b["name"]
        for e in src
        if e.get("type") == "assistant"
        for b in e["message"]["content"]
        if b.get("type") == "tool_use"
    ]
    assert tools == ["Read", "Bash", "Bash"]
    compacted_texts = ["Reading the notes.", "Step 1.", "Step 2."]
    original = source.read_bytes()

    # 2. compactd compacts it into a new session beside it.
    first = _compactd_compact(source)
    assert source.read_bytes() == original
    new = Path(first["newTranscriptPath"])
    assert new.parent == source.parent
    assert first["resumeCommand"] == f"cd {project} && claude --resume {first['newSessionId']}"

    # 3. Claude Code resumes it: the request begins with compactd's summary, then the kept turn.
    stdout, bodies = claude.run("--resume", first["newSessionId"], "-p", "Now run the steps again")
    assert FINAL in stdout
    messages = [m for m in bodies[0]["messages"] if m["role"] != "system"]
    assert messages[0]["role"] == "user" and _text(messages[0]).startswith(COMPACTD_OPENING)
    assert str(source) in _text(messages[0])
    assert messages[1]["role"] == "assistant" and _text(messages[1]) == FINAL
    assert "No response requested" not in json.dumps(bodies[0]["messages"])
    # Nothing compacted is sent again: no tool call, none of the compacted replies.
    rest = json.dumps(messages[1:])
    assert '"tool_use"' not in rest and '"tool_result"' not in rest
    for text in compacted_texts:
        assert text not in rest
    # notes.txt comes back as user content, after the kept turn.
    assert "note line 40" in _text(messages[2]) and messages[2]["role"] == "user"
    after = _lines(new)
    assert all(e.get("message", {}).get("model") != "<synthetic>" for e in after)
    assert {e["sessionId"] for e in after if "sessionId" in e} == {first["newSessionId"]}

    # 4. Claude Code's own /compact works on it.
    claude.run("--resume", first["newSessionId"], "-p", "/compact")
    manual = _boundaries(new)
    assert len(manual) == 2 and manual[-1]["compactMetadata"]["trigger"] == "manual"
    summarized = [b for b in emu.message_requests if CC_SUMMARY_INSTRUCTION in json.dumps(b.body)]
    assert summarized and COMPACTD_OPENING in json.dumps(summarized[-1].body["messages"])

    # 5. Its automatic compaction on the first request after resuming: the API refuses the
    #    request as too long, Claude Code compacts (it needs the kept assistant turn for that)
    #    and sends it again.
    second = _compactd_compact(source)
    assert source.read_bytes() == original
    emu.script(ApiError(type="invalid_request_error", prompt_too_long=True))
    stdout, bodies = claude.run("--resume", second["newSessionId"], "-p", "Now run the steps again")
    assert FINAL in stdout
    assert bodies[0]["messages"] and _text(bodies[0]["messages"][0]).startswith(COMPACTD_OPENING)
    assert CC_SUMMARY_INSTRUCTION in json.dumps(bodies[1]["messages"])
    auto = _boundaries(Path(second["newTranscriptPath"]))
    assert [b["compactMetadata"]["trigger"] for b in auto] == ["manual", "auto"]
    assert source.read_bytes() == original
