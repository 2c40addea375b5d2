"""compactd inside the real Codex CLI 0.171.0, installed as a user installs it (docs/codex.md#compactd-inside-codex).

``compactd codex install`` writes the hooks, the MCP server and the trust entries into a
temporary ``CODEX_HOME``; Codex runs with NO trust-bypass flag, so the hooks run only because
the trust entries compactd wrote are the ones Codex computes (checked against ``codex
app-server``'s ``hooks/list`` first). Codex (``codex exec`` against tests/emulator's Responses
API) compacts in the middle of a turn, and again in a turn of ``codex exec resume``: the request
after each compaction carries the user's words exactly once and each command that compaction
dropped exactly once (compactd's hand-back, a developer message after Codex's summary). Then
the model calls ``recall`` in compactd's namespace and gets back a command from before the
compactions, and ``compactd codex uninstall`` leaves config.toml byte for byte as it was.
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

from tests.editors.codex_cli import (
    DEFAULT_CODEX,
    FALLBACK_MODEL,
    HOW_TO_INSTALL,
    VERSION,
    Codex,
    Steps,
    hooks_list,
    message_texts,
    rollout_lines,
)
from tests.editors.conftest import ROOT, out_dir, require
from tests.emulator import Emulator, RecordedRequest, Reply
from tests.emulator.responses import add_file_patch, codex_request_kind, exec_command, mcp_call

FIRST = "Count the kiwi crates, then write notes.txt and show it"
SECOND = "Now the pelican checklist: count it the same way"
THIRD = "What did we count first? Look it up."
# Codex's summary: names no command and quotes no prompt, so what the request after a
# compaction carries of them is what Codex kept and what compactd gave back.
SUMMARY = "SUMMARY-TEXT: counting done so far, notes written."
# A command whose output (about 4,700 tokens) takes the history past the limit below; Codex's
# own prompt and tools (fallback metadata, compactd's MCP tools) are about 10,700 tokens.
BIG_FIRST = "seq 1 4000"
BIG_SECOND = "seq 7 4006"
READ = "cat notes.txt"
AUTO_COMPACT_LIMIT = 13_000
HANDBACK = "compactd: what Codex's summary above left out"


@pytest.fixture
def exe() -> str:
    path = require(os.environ.get("CODEX") or str(DEFAULT_CODEX), HOW_TO_INSTALL)
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.strip().endswith(VERSION), version.stdout
    return path


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def _compactd(codex: Codex, *args: str) -> subprocess.CompletedProcess[str]:
    """``compactd ARGS`` as the user runs it, with Codex's environment (its CODEX_HOME)."""
    env = {**codex.env, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "compactd", *args],
        cwd=codex.cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _patch(patch: str) -> Any:
    """A patch as a model without Codex's metadata sends it: a heredoc Codex applies."""
    return exec_command(f"apply_patch <<'PATCH'\n{patch}PATCH\n")


def _text(body: dict[str, Any]) -> str:
    """Every message's text a request carries, joined."""
    return "\n".join(text for _, text in message_texts(body))


def _after(requests: list[RecordedRequest]) -> list[dict[str, Any]]:
    """The turn requests right after each compaction request."""
    out = []
    for i, rec in enumerate(requests[:-1]):
        if codex_request_kind(rec) == "compaction":
            out.append(requests[i + 1].body)
    return out


@pytest.mark.timeout(900)
def test_compactd_installed_in_codex_hands_back_what_each_compaction_dropped(
    exe: str, emu: Emulator, tmp_path: Path
) -> None:
    out = out_dir("codex-compactd")
    project = tmp_path / "project"
    project.mkdir()
    model = Steps(
        [
            Reply(text="Counting.", tool_uses=[exec_command(BIG_FIRST)]),
            Reply(text="Writing.", tool_uses=[_patch(add_file_patch("notes.txt", "kiwi 4000"))]),
            Reply(text="Showing.", tool_uses=[exec_command(READ)]),
            Reply(text="Done with the kiwis."),
        ],
        summary=SUMMARY,
    )
    emu.set_default(model)
    codex = Codex(exe, emu, tmp_path / "home", project, out / "codex.log", model=FALLBACK_MODEL,
                  auto_compact_limit=AUTO_COMPACT_LIMIT)  # fmt: skip
    before = codex.config_path.read_bytes()
    data = tmp_path / "compactd-data"

    # Installed as a user installs it; a second run changes nothing.
    done = _compactd(codex, "codex", "install", "--data-dir", str(data))
    assert done.returncode == 0, done.stderr
    (out / "install.txt").write_text(done.stdout)
    assert "trusts the SessionStart hook" in done.stdout
    again = _compactd(codex, "codex", "install", "--data-dir", str(data))
    assert again.stdout.strip() == "compactd codex install: nothing to change (user scope)"
    installed = codex.config_path.read_bytes()
    assert installed.startswith(before)  # the user's config as it was, compactd's tables after

    # Codex trusts exactly the hooks compactd wrote: the hashes are the ones it computes.
    listed = [h for h in hooks_list(exe, codex.env, project) if "compactd" in json.dumps(h)]
    assert {h["eventName"].lower() for h in listed} >= {"sessionstart", "userpromptsubmit"}, listed
    assert all(h["trustStatus"] == "trusted" for h in listed), listed

    # 1. A turn Codex compacts in the middle (after the first, large command).
    first = codex.exec(FIRST)
    kinds = first.kinds()
    assert kinds.count("compaction") == 1, kinds
    (rollout,) = codex.rollouts()
    (after,) = _after(first.requests)
    text = _text(after)
    assert text.count(FIRST) == 1, text  # Codex keeps the words; compactd does not repeat them
    assert text.count(HANDBACK) == 1
    assert text.count(f"`{BIG_FIRST}`") == 1 and text.count(BIG_FIRST) == 1, text
    roles = message_texts(after)
    at = next(i for i, (r, t) in enumerate(roles) if t.startswith(HANDBACK))
    assert roles[at][0] == "developer" and SUMMARY in roles[at - 1][1]

    # 2. codex exec resume: a second compaction mid-turn. The request after it carries both
    #    prompts once, and every command this compaction dropped once: those run since the
    #    first compaction, and the first one's, whose hand-back the compaction dropped too.
    model.add(
        Reply(text="Counting again.", tool_uses=[exec_command(BIG_SECOND)]),
        Reply(text="Done with the pelicans."),
    )
    second = codex.resume(first.thread_id, SECOND)
    assert second.kinds().count("compaction") == 1, second.kinds()
    # The context was past 80% of Codex's limit at the prompt: the model was warned, once.
    warned = [t for r, t in message_texts(second.bodies()[0]) if "the context holds" in t]
    assert len(warned) == 1 and warned[0].startswith("compactd:"), warned
    assert codex.rollouts() == [rollout]
    (after,) = _after(second.requests)
    text = _text(after)
    assert text.count(FIRST) == 1 and text.count(SECOND) == 1, text
    assert text.count(HANDBACK) == 1
    for command in (BIG_FIRST, READ, BIG_SECOND):
        assert text.count(f"`{command}`") == 1, (command, text)
    (handback,) = [t for _, t in message_texts(after) if t.startswith(HANDBACK)]
    (out / "handback.txt").write_text(handback)
    assert "<<'PATCH'" not in handback  # a patch is a file change, not a command
    assert "notes.txt" in handback

    # 3. recall is offered in compactd's namespace, and a call returns a dropped command.
    called: list[bool] = []

    def recalling(rec: RecordedRequest) -> Reply:
        if codex_request_kind(rec) == "compaction":
            return Reply(text=SUMMARY)
        names = [t.get("name") for t in rec.body.get("tools") or []]
        if called:
            return Reply(text="Recalled.")
        if "mcp__compactd" in names:
            called.append(True)
            return Reply(text="Recalling.", tool_uses=[mcp_call("compactd", "recall",
                                                                {"query": BIG_FIRST})])  # fmt: skip
        return Reply(text="Waiting.", tool_uses=[exec_command("sleep 1")])

    emu.set_default(recalling)
    third = codex.resume(first.thread_id, THIRD)
    tools = next(t for t in third.bodies()[-1]["tools"] if t.get("name") == "mcp__compactd")
    assert tools["type"] == "namespace"
    assert {t["name"] for t in tools["tools"]} == {"recall", "context"}
    last = third.bodies()[-1]["input"]
    (call,) = [i for i in last if i.get("type") == "function_call" and i["name"] == "recall"]
    assert call["namespace"] == "mcp__compactd"
    (output,) = [i for i in last if i.get("type") == "function_call_output"
                 and i["call_id"] == call["call_id"]]  # fmt: skip
    (out / "recall.txt").write_text(str(output["output"]))
    assert "exec_command" in output["output"] and first.thread_id in output["output"], output

    # The rollout was only read: every line Codex wrote is still a Codex line.
    lines = rollout_lines(rollout)
    assert all({"timestamp", "type", "payload"} <= set(line) for line in lines)
    (out / rollout.name).write_bytes(rollout.read_bytes())

    # 4. Uninstalled: config.toml byte for byte as before, hooks.json gone (it was not there).
    done = _compactd(codex, "codex", "uninstall", "--data-dir", str(data))
    assert done.returncode == 0, done.stderr
    assert codex.config_path.read_bytes() == before
    assert not (codex.codex_home / "hooks.json").exists()


@pytest.mark.timeout(300)
def test_a_project_install_is_trusted_by_codex(exe: str, emu: Emulator, tmp_path: Path) -> None:
    """``--scope project``: the project's .codex/ files name no path of this machine, and Codex
    trusts the hooks there through the entries compactd put in the user's config."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    codex = Codex(exe, emu, tmp_path / "home", project, out_dir("codex-project") / "codex.log",
                  extra_config=f'\n[projects."{project}"]\ntrust_level = "trusted"\n')  # fmt: skip
    done = _compactd(codex, "codex", "install", "--scope", "project")
    assert done.returncode == 0 and "note:" not in done.stdout, done.stderr
    for name in ("hooks.json", "config.toml"):
        assert str(tmp_path) not in (project / ".codex" / name).read_text()
    listed = [h for h in hooks_list(exe, codex.env, project)
              if h["sourcePath"] == str(project / ".codex" / "hooks.json")]  # fmt: skip
    assert len(listed) == 2 and {h["trustStatus"] for h in listed} == {"trusted"}, listed
