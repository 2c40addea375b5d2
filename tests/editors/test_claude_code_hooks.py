"""compactd installed into the real Claude Code CLI: hooks, MCP recall, status line, uninstall.

Claude Code 2.1.332 (tests/editors/setup.sh; ``CLAUDE_CODE`` names it) runs headless against
tests/emulator, offline, in a trusted project folder after ``compactd claude-code install
--settings-hooks --scope project`` (the install where plugins are not available). The emulated model reads a file and runs shell commands over several turns;
its summaries (the emulated summarizer's) keep neither the user's words nor the commands.
After Claude Code's own ``/compact`` and after its automatic compaction (the API refusing a
request as too long), the first request must carry what the summary dropped, once; the model
must be offered the MCP ``recall`` tool, and a call to it must return the original entry; the
status line command must print; ``uninstall`` must leave the settings as they were
(docs/claude-code.md#installed-in-claude-code).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.editors.conftest import out_dir, require, venv_bin
from tests.editors.test_claude_code import (
    CC_SUMMARY_INSTRUCTION,
    DEFAULT_CLAUDE,
    NOTES,
    VERSION,
    Claude,
    _lines,
    _text,
    _tool_results,
)
from tests.emulator import Emulator
from tests.emulator.script import ApiError, Reply, ToolUse

FINAL = "All steps done."
HANDBACK = "compactd: what Claude Code's summary above left out"
FIRST_PROMPT = "Read notes.txt then run the echo steps, and never touch the tests folder"
SECOND_PROMPT = "Now the quokka inventory: run the steps again please"
# The emulated summary: no user words, no commands, no paths.
SUMMARY = (
    "<analysis>short</analysis>\n<summary>1. Primary Request and Intent:\n   The user asked "
    "for some steps.\n\n6. All user messages:\n   - (several requests)\n</summary>"
)
RECALL_TOOL = "mcp__compactd__recall"


class Model:
    """Per turn: a Read of notes.txt, two Bash commands, a final answer. A summary request gets
    ``SUMMARY``. When ``recall_query`` is set, the next turn calls the recall tool first."""

    def __init__(self, notes: Path) -> None:
        self.notes = notes
        self.recall_query: str | None = None

    def __call__(self, rec: Any) -> Reply:
        messages = rec.body.get("messages") or []
        if messages and CC_SUMMARY_INSTRUCTION in _text(messages[-1]):
            return Reply(text=SUMMARY)
        tools = {t.get("name") for t in rec.body.get("tools") or []}
        if "Read" not in tools:
            return Reply(text="ok")
        last = messages[-1] if messages else {}
        if self.recall_query is not None:
            query, self.recall_query = self.recall_query, None
            return Reply(text="Recalling.", tool_uses=[ToolUse(RECALL_TOOL, {"query": query})])
        if RECALL_TOOL in json.dumps(messages[-2:]) and '"tool_result"' in json.dumps(last):
            return Reply(text=FINAL)
        done = _tool_results(messages) - _results_before_prompt(messages)
        if done == 0:
            return Reply(
                text="Reading the notes.",
                tool_uses=[ToolUse("Read", {"file_path": str(self.notes)})],
            )
        if done < 3:
            return Reply(
                text=f"Step {done}.",
                tool_uses=[ToolUse("Bash", {"command": f"echo step {done}-kiwi"})],
            )
        return Reply(text=FINAL)


def _results_before_prompt(messages: list[dict[str, Any]]) -> int:
    last_prompt = max(
        (
            i
            for i, m in enumerate(messages)
            if m["role"] == "user" and "tool_result" not in json.dumps(m["content"])
        ),
        default=0,
    )
    return _tool_results(messages[:last_prompt])


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def _compactd(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compactd", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _body_text(body: dict[str, Any]) -> str:
    return json.dumps(body.get("messages") or [])


@pytest.mark.timeout(600)
def test_claude_code_with_compactd_installed(tmp_path: Path, emu: Emulator) -> None:
    exe = require(
        os.environ.get("CLAUDE_CODE") or str(DEFAULT_CLAUDE),
        f"install the Claude Code CLI: tests/editors/setup.sh CACHE CODE_SERVER_VERSION {VERSION}",
    )
    out = out_dir("claude-code-hooks")
    home = tmp_path / "home"
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    home.mkdir()
    notes = project / "notes.txt"
    notes.write_text(NOTES)
    model = Model(notes)
    emu.set_default(model)
    claude = Claude(exe, emu, home, project, out / "claude.log")
    data_home = tmp_path / "data"
    claude.env["XDG_DATA_HOME"] = str(data_home)
    # compactd on PATH, as a user who installed it has it: the project's settings run it so.
    claude.env["PATH"] = os.pathsep.join([str(venv_bin()), claude.env["PATH"]])
    # How long Claude Code waits for an MCP server to connect (ms): on a loaded machine the
    # server's start (the MCP SDK's imports) can take longer than Claude Code's default wait,
    # and a headless run then starts without its tools.
    claude.env["MCP_TIMEOUT"] = "120000"
    # Trusted folder: Claude Code keeps the trust answer in its global config.
    config = {"projects": {str(project): {"hasTrustDialogAccepted": True}}}
    (home / ".claude").mkdir()
    (home / ".claude" / ".claude.json").write_text(json.dumps(config))
    # A settings file of the user's own, which install merges into and uninstall restores.
    own = b'{\n  "permissions": {"allow": ["Bash(echo:*)"]}\n}\n'
    (project / ".claude" / "settings.json").write_bytes(own)

    env = {**os.environ, **claude.env}
    # The settings-file install (where plugins are not available: docs/claude-code.md#install);
    # the plugin is tests/editors/test_claude_code_plugin.py's.
    run = _compactd(
        "claude-code", "install", "--settings-hooks", "--scope", "project", env=env, cwd=project
    )
    assert run.returncode == 0, run.stderr
    assert "hook SessionStart" in run.stdout and ".mcp.json" in run.stdout
    again = _compactd(
        "claude-code", "install", "--settings-hooks", "--scope", "project", env=env, cwd=project
    )
    assert "nothing to change" in again.stdout
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert settings["permissions"] == {"allow": ["Bash(echo:*)"]}
    mcp = json.loads((project / ".mcp.json").read_text())
    assert mcp["mcpServers"]["compactd"]["alwaysLoad"] is True

    # 1. Two turns of work.
    stdout, bodies = claude.run("-p", FIRST_PROMPT)
    assert FINAL in stdout
    tools = {t["name"] for t in bodies[0].get("tools") or []}
    assert RECALL_TOOL in tools, sorted(tools)
    stdout, bodies = claude.run("--continue", "-p", SECOND_PROMPT)
    assert FINAL in stdout
    (transcript,) = list(claude.projects.rglob("*.jsonl"))
    before = transcript.read_bytes()

    # 2. Claude Code's own /compact: the summary request carries compactd's steering; the
    #    first request after it carries what the summary dropped.
    claude.run("--continue", "-p", "/compact")
    summarized = [
        r.body for r in emu.message_requests if CC_SUMMARY_INSTRUCTION in json.dumps(r.body)
    ]
    assert summarized and "quote every message the user typed" in json.dumps(summarized[-1])
    assert transcript.read_bytes().startswith(before)  # compactd wrote nothing into it
    stdout, bodies = claude.run("--continue", "-p", "Carry on")
    first = _body_text(bodies[0])
    assert first.count(HANDBACK) == 1, first[:3000]
    for words in (FIRST_PROMPT, SECOND_PROMPT, "echo step 1-kiwi", "echo step 2-kiwi"):
        assert words in first, words
    # Resumed again: handed back once, never twice.
    stdout, bodies = claude.run("--continue", "-p", "And again")
    assert _body_text(bodies[0]).count(HANDBACK) == 1

    # 3. The agent recalls: a scripted call to the MCP tool returns the original entry.
    model.recall_query = "quokka inventory"
    stdout, bodies = claude.run("--continue", "-p", "What did I ask about the inventory?")
    results = [
        b
        for body in bodies
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert any(SECOND_PROMPT in json.dumps(b) for b in results), json.dumps(results)[:2000]

    # 4. The automatic compaction: the API refuses a request as too long, Claude Code compacts
    #    and sends it again, with what its summary dropped.
    emu.script(ApiError(type="invalid_request_error", prompt_too_long=True))
    stdout, bodies = claude.run("--continue", "-p", "Final round with the pelican checklist")
    boundaries = [e for e in _lines(transcript) if e.get("subtype") == "compact_boundary"]
    assert [b["compactMetadata"]["trigger"] for b in boundaries] == ["manual", "auto"]
    # Both keep a tail verbatim after the summary, named only in the boundary, which comes after
    # the hooks (docs/claude-code.md#sessionstart-after-a-compaction).
    assert all(b["compactMetadata"]["preservedMessages"]["uuids"] for b in boundaries)
    after = [b for b in bodies if CC_SUMMARY_INSTRUCTION not in json.dumps(b)][1:]
    assert after and HANDBACK in _body_text(after[0]), _body_text(after[0])[:3000]

    # 5. The status line command, as installed, prints one line for this session.
    command = settings["statusLine"]["command"]
    status_input = {
        "session_id": transcript.stem,
        "transcript_path": str(transcript),
        "cwd": str(project),
        "model": {"id": "claude-sonnet-4-5", "display_name": "Sonnet"},
        "context_window": {
            "context_window_size": 200_000,
            "current_usage": {"input_tokens": 1200, "cache_read_input_tokens": 30_000},
        },
    }
    line = subprocess.run(
        shlex.split(command), input=json.dumps(status_input), env=env, capture_output=True,
        text=True, timeout=60, check=True,
    )  # fmt: skip
    assert line.stdout.startswith("compactd ") and "of auto-compact" in line.stdout
    assert "last compaction: restored" in line.stdout

    # 6. uninstall puts the user's file back byte for byte and removes what install created.
    run = _compactd("claude-code", "uninstall", "--scope", "project", env=env, cwd=project)
    assert run.returncode == 0, run.stderr
    assert (project / ".claude" / "settings.json").read_bytes() == own
    assert not (project / ".mcp.json").exists()
