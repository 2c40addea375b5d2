"""What the Codex integration relies on, checked against the real Codex CLI 0.171.0.

Codex from npm (tests/editors/setup.sh installs it; ``CODEX`` names the executable) runs
``codex exec`` against tests/emulator's Responses API on loopback (tests/editors/codex_cli.py).
Each fact here is written up in docs/codex.md ("Observed (0.171.0)"); a new Codex that
changes one fails this file first. Throwaway hook scripts and a throwaway MCP server stand
in for compactd's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.editors.codex_cli import (
    DEFAULT_CODEX,
    FALLBACK_MODEL,
    HOOK_EVENTS,
    HOW_TO_INSTALL,
    KNOWN_MODEL,
    VERSION,
    Codex,
    Hooks,
    Steps,
    hooks_list,
    message_texts,
    rollout_lines,
    trust_entries,
    trusted_hash,
)
from tests.editors.conftest import out_dir, require
from tests.emulator import Emulator, Reply
from tests.emulator.responses import (
    COMPACTION_PROMPT_OPENING,
    add_file_patch,
    apply_patch,
    exec_command,
    mcp_call,
)

FIRST_PROMPT = "Count the kiwi crates, then write notes.txt and show it"
SECOND_PROMPT = "Now the pelican checklist: count again and append a line"
SUMMARY = "SUMMARY-TEXT: crates counted, notes written."
# Codex puts this before the summary in the history it keeps (seen in its requests).
SUMMARY_PREFIX = "Another language model started to solve this problem"
# A command whose output (about 4,700 tokens by the emulator's count) takes the history past
# AUTO_COMPACT_LIMIT; Codex's own prompt and tools are about 9,200 tokens.
BIG_COMMAND = "seq 1 4000"
AUTO_COMPACT_LIMIT = 12_000
EVENTS = ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "PreCompact",
          "PostCompact", "Stop")  # fmt: skip
# What each throwaway hook prints: SessionStart and UserPromptSubmit add context; the
# compaction hooks print fields that must not reach the model.
OUTPUTS: dict[str, Any] = {
    "SessionStart": {
        "hookSpecificOutput": {
            "hookEventName": "SessionStart",
            "additionalContext": "HANDBACK-$SOURCE",
        }
    },
    "UserPromptSubmit": {
        "hookSpecificOutput": {
            "hookEventName": "UserPromptSubmit",
            "additionalContext": "PROMPT-CONTEXT",
        }
    },
    "PreCompact": {"systemMessage": "PRECOMPACT-SAYS", "suppressOutput": False},
    "PostCompact": {"systemMessage": "POSTCOMPACT-SAYS"},
}


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


def _hooks_json(hooks: Hooks) -> dict[str, Any]:
    groups: dict[str, Any] = {}
    for event in EVENTS:
        group: dict[str, Any] = {"hooks": [{"type": "command", "command": hooks.command(event)}]}
        if event != "Stop":
            group["hooks"][0]["timeout"] = 60
        if event not in ("UserPromptSubmit", "Stop"):
            group["matcher"] = ""
        groups[event] = [group]
    return {"hooks": groups}


def _install_hooks(codex: Codex, hooks: Hooks, *, trust: bool) -> dict[str, Any]:
    config = _hooks_json(hooks)
    source = codex.codex_home / "hooks.json"
    source.write_text(json.dumps(config, indent=2))
    if trust:
        codex.extra_config += trust_entries(source, config)
        codex.write_config()
    return config


def _work() -> list[Reply]:
    """One turn: a large command, a patch creating notes.txt, a command reading it."""
    return [
        Reply(text="Counting.", tool_uses=[exec_command(BIG_COMMAND)]),
        Reply(text="Writing.", tool_uses=[apply_patch(add_file_patch("notes.txt", "kiwi 4000"))]),
        Reply(text="Showing.", tool_uses=[exec_command("cat notes.txt")]),
        Reply(text="Done with this part."),
    ]


def _texts(body: dict[str, Any], role: str) -> list[str]:
    return [text for r, text in message_texts(body) if r == role]


@pytest.mark.timeout(600)
def test_compaction_hooks_and_resume(exe: str, emu: Emulator, tmp_path: Path) -> None:
    out = out_dir("codex")
    project = tmp_path / "project"
    project.mkdir()
    model = Steps(_work(), summary=SUMMARY)
    emu.set_default(model)
    codex = Codex(exe, emu, tmp_path / "home", project, out / "codex.log", model=KNOWN_MODEL,
                  auto_compact_limit=AUTO_COMPACT_LIMIT)  # fmt: skip
    hooks = Hooks(tmp_path / "hooks", OUTPUTS)
    config = _install_hooks(codex, hooks, trust=True)

    # Trust: the hash computed here is the one Codex computes, and it trusts the hooks.
    listed = {h["key"]: h for h in hooks_list(exe, codex.env, project)}
    source = codex.codex_home / "hooks.json"
    for event, groups in config["hooks"].items():
        key = f"{source}:{HOOK_EVENTS[event]}:0:0"
        assert listed[key]["currentHash"] == trusted_hash(
            event, groups[0].get("matcher"), groups[0]["hooks"][0]
        )
        assert listed[key]["trustStatus"] == "trusted", listed[key]

    # 1. A turn Codex compacts in the middle: PreCompact, the summary request, PostCompact,
    #    SessionStart(compact), then the next request.
    first = codex.exec(FIRST_PROMPT)
    assert first.kinds() == ["turn", "compaction", "turn", "turn", "turn"], first.kinds()
    (rollout,) = codex.rollouts()
    assert re.fullmatch(
        r"rollout-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-" + re.escape(first.thread_id) + r"\.jsonl",
        rollout.name,
    )
    day = rollout.parent.relative_to(codex.codex_home / "sessions").parts
    assert len(day) == 3 and len(day[0]) == 4 and len(day[1]) == len(day[2]) == 2
    assert hooks.labels() == ["SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse",
                              "PreCompact", "PostCompact", "SessionStart", "PreToolUse",
                              "PostToolUse", "PreToolUse", "PostToolUse", "Stop"]  # fmt: skip
    calls = hooks.calls()
    by_label: dict[str, list[dict[str, Any]]] = {}
    for call in calls:
        by_label.setdefault(call["label"], []).append(call["stdin"])
    assert [s["source"] for s in by_label["SessionStart"]] == ["startup", "compact"]
    for stdin in (s for c in by_label.values() for s in c):
        assert stdin["session_id"] == first.thread_id and stdin["cwd"] == str(project)
        assert stdin["transcript_path"] == str(rollout) and stdin["model"] == KNOWN_MODEL
    assert by_label["UserPromptSubmit"][0]["prompt"] == FIRST_PROMPT
    assert [s["trigger"] for s in by_label["PreCompact"] + by_label["PostCompact"]] == ["auto"] * 2
    assert by_label["PreToolUse"][0]["tool_name"] == "Bash"
    assert by_label["PreToolUse"][0]["tool_input"] == {"command": BIG_COMMAND}
    assert by_label["PreToolUse"][1]["tool_name"] == "apply_patch"
    compact_request = first.requests[1]
    assert (
        json.loads(compact_request.headers["x-codex-turn-metadata"])["compaction"]["implementation"]
        == "responses"
    )
    body = compact_request.body
    assert body["tools"] == [] and _texts(body, "user")[-1].startswith(COMPACTION_PROMPT_OPENING)

    # What the next request carries: context, the user's words once, the summary, the
    # SessionStart(compact) context right after it; no command, no output, nothing the
    # compaction hooks printed, not the context the startup hooks added.
    after = first.bodies()[1]
    roles = message_texts(after)
    users = _texts(after, "user")
    assert users.count(FIRST_PROMPT) == 1
    assert users[-1].startswith(SUMMARY_PREFIX) and users[-1].endswith(SUMMARY)
    assert roles[-1] == ("developer", "HANDBACK-compact")
    assert not [r for r, _ in roles if r not in ("user", "developer")]
    text = json.dumps(after)
    for gone in ("HANDBACK-startup", "PROMPT-CONTEXT", "PRECOMPACT-SAYS", "POSTCOMPACT-SAYS",
                 BIG_COMMAND, "Counting."):  # fmt: skip
        assert gone not in text, gone
    # ... and the context stays in every later request of the session.
    for later in first.bodies()[2:]:
        assert json.dumps(later).count("HANDBACK-compact") == 1

    # The rollout: its line types and the compacted line.
    lines = rollout_lines(rollout)
    assert all(set(line) >= {"timestamp", "type", "payload"} for line in lines)
    types = {line["type"] for line in lines}
    assert types >= {"session_meta", "response_item", "event_msg", "turn_context", "compacted",
                     "token_usage_record", "world_state"}  # fmt: skip
    events = {line["payload"].get("type") for line in lines if line["type"] == "event_msg"}
    assert events >= {"task_started", "token_count", "item_completed", "task_complete"}
    (compacted,) = [line["payload"] for line in lines if line["type"] == "compacted"]
    assert compacted["message"].startswith(SUMMARY_PREFIX) and compacted["message"].endswith(
        SUMMARY
    )
    kept = [i for i in compacted["replacement_history"] if i.get("type") == "message"]
    assert [i["role"] for i in compacted["replacement_history"]] == [i["role"] for i in kept]
    assert [m["text"] for m in compacted["retained_context"]["user_messages"]] == [FIRST_PROMPT]
    record = compacted["latest_token_usage_record"]
    assert record["usage"]["input_tokens"] == compact_request.usage["input_tokens"]
    assert compacted["window_number"] == 1 and compacted["previous_window_id"]
    # The compacted line's history is what the next request sends, less Codex's base
    # instructions (first developer message, kept in session_meta) and the hook's context.
    assert [i["content"] for i in kept] == [i["content"] for i in after["input"][1:-1]]
    patched = (project / "notes.txt").read_text()
    assert patched == "kiwi 4000\n"

    # 2. codex exec resume: SessionStart(resume), the new prompt, and a second compaction
    #    mid-turn: SessionStart(compact) again; the request after it carries both prompts once
    #    and the second summary only.
    hooks.clear()
    model.add(*_work())
    second = codex.resume(first.thread_id, SECOND_PROMPT)
    assert second.kinds() == ["turn", "compaction", "turn", "turn", "turn"], second.kinds()
    assert codex.rollouts() == [rollout]  # the same file goes on
    sources = [c["stdin"].get("source") for c in hooks.calls() if c["label"] == "SessionStart"]
    assert sources == ["resume", "compact"]
    assert hooks.labels()[:2] == ["SessionStart", "UserPromptSubmit"]
    resumed = second.bodies()[0]
    assert _texts(resumed, "developer")[-3:] == ["HANDBACK-compact", "HANDBACK-resume",
                                                  "PROMPT-CONTEXT"]  # fmt: skip
    after = second.bodies()[1]
    users = _texts(after, "user")
    assert users.count(FIRST_PROMPT) == 1 and users.count(SECOND_PROMPT) == 1
    assert sum(u.startswith(SUMMARY_PREFIX) for u in users) == 1
    assert json.dumps(after).count("HANDBACK-compact") == 1
    assert message_texts(after)[-1] == ("developer", "HANDBACK-compact")
    compactions = [line for line in rollout_lines(rollout) if line["type"] == "compacted"]
    assert len(compactions) == 2 and compactions[1]["payload"]["window_number"] == 2
    retained = compactions[1]["payload"]["retained_context"]["user_messages"]
    assert [m["text"] for m in retained] == [FIRST_PROMPT, SECOND_PROMPT]
    shutil.copy(rollout, out / rollout.name)


def _connects(trace: Path) -> list[str]:
    """The addresses of the AF_INET/AF_INET6 connect() calls an strace log shows."""
    found = []
    for line in trace.read_text(errors="replace").splitlines():
        if "connect(" not in line:
            continue
        match = re.search(r'sin6?_addr=inet_(?:addr|pton)\((?:AF_INET6, )?"([^"]+)"', line)
        if match:
            found.append(match.group(1))
    return found


@pytest.mark.timeout(300)
def test_untrusted_hooks_are_skipped_and_nothing_leaves_loopback(
    exe: str, emu: Emulator, tmp_path: Path
) -> None:
    out = out_dir("codex-untrusted")
    project = tmp_path / "project"
    project.mkdir()
    emu.set_default(Steps([Reply(text="Listing.", tool_uses=[exec_command("ls")]),
                           Reply(text="Listed.")]))  # fmt: skip
    toml_hook = (
        '\n[[hooks.SessionStart]]\nmatcher = "startup"\n\n[[hooks.SessionStart.hooks]]\n'
        'type = "command"\ncommand = "echo toml-hook"\ntimeout = 7\n'
    )
    codex = Codex(exe, emu, tmp_path / "home", project, out / "codex.log",
                  extra_config=toml_hook)  # fmt: skip
    hooks = Hooks(tmp_path / "hooks", OUTPUTS)
    _install_hooks(codex, hooks, trust=False)

    listed = hooks_list(exe, codex.env, project)
    assert {h["trustStatus"] for h in listed} == {"untrusted"}
    (from_toml,) = [h for h in listed if h["sourcePath"] == str(codex.config_path)]
    assert from_toml["key"] == f"{codex.config_path}:session_start:0:0"
    assert from_toml["currentHash"] == trusted_hash(
        "SessionStart", "startup", {"command": "echo toml-hook", "timeout": 7}
    )

    strace = shutil.which("strace")
    assert strace, "strace is missing: apt-get install strace (tests/editors/setup.sh)"
    trace = out / "connect.trace"
    run = codex.exec("List the files", wrapper=[strace, "-f", "-qq", "-e", "trace=connect",
                                                "-o", str(trace)])  # fmt: skip
    assert run.kinds() == ["turn", "turn"]
    # Skipped without a word: no hook ran, nothing about them on stderr or in the requests.
    assert hooks.calls() == []
    assert "hook" not in run.stderr.replace(
        str(tmp_path), ""
    ).lower() and "HANDBACK" not in json.dumps(run.bodies())
    addresses = _connects(trace)
    assert addresses and set(addresses) <= {"127.0.0.1"}, sorted(set(addresses))


MCP_SERVER = """\
import pathlib, sys
from mcp.server.mcpserver import MCPServer

server = MCPServer("probe")


@server.tool()
def recall(query: str) -> str:
    \"\"\"Find an earlier item of the conversation by a few of its words.\"\"\"
    return f"RECALLED {query}"


pathlib.Path(sys.argv[1]).write_text("started")
server.run()
"""


@pytest.mark.timeout(300)
def test_mcp_tools_are_offered_in_a_namespace(exe: str, emu: Emulator, tmp_path: Path) -> None:
    out = out_dir("codex-mcp")
    project = tmp_path / "project"
    project.mkdir()
    script = tmp_path / "mcp_probe.py"
    script.write_text(MCP_SERVER)
    ready = tmp_path / "mcp-ready"
    extra = (
        f"\n[mcp_servers.probe]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(script))}, {json.dumps(str(ready))}]\n"
        "startup_timeout_sec = 120\ntool_timeout_sec = 60\n"
    )
    steps = Steps([Reply(text="Looking.", tool_uses=[exec_command("true")]),
                   Reply(text="Recalling.", tool_uses=[mcp_call("probe", "recall",
                                                                {"query": "kiwi"})]),
                   Reply(text="Recalled.")])  # fmt: skip

    def model(rec: Any) -> Reply:
        # codex exec does not wait for its MCP servers before its first request: the first
        # reply waits until the server has started, so the next request can offer its tools.
        deadline = time.monotonic() + 120
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return steps(rec)

    emu.set_default(model)
    codex = Codex(exe, emu, tmp_path / "home", project, out / "codex.log", model=FALLBACK_MODEL,
                  extra_config=extra)  # fmt: skip
    run = codex.exec("What did I say about kiwis?")
    tools = run.bodies()[1]["tools"]
    (namespace,) = [t for t in tools if t.get("name") == "mcp__probe"]
    assert namespace["type"] == "namespace"
    assert [t["name"] for t in namespace["tools"]] == ["recall"]
    last = run.bodies()[-1]["input"]
    (call,) = [i for i in last if i.get("type") == "function_call" and i["name"] == "recall"]
    assert call["namespace"] == "mcp__probe"
    (output,) = [i for i in last if i.get("type") == "function_call_output"
                 and i["call_id"] == call["call_id"]]  # fmt: skip
    assert "RECALLED kiwi" in output["output"]


@pytest.mark.timeout(300)
def test_precompact_can_cancel_the_compaction(exe: str, emu: Emulator, tmp_path: Path) -> None:
    out = out_dir("codex-cancel")
    project = tmp_path / "project"
    project.mkdir()
    emu.set_default(Steps(_work(), summary=SUMMARY))
    codex = Codex(exe, emu, tmp_path / "home", project, out / "codex.log", model=KNOWN_MODEL,
                  auto_compact_limit=AUTO_COMPACT_LIMIT)  # fmt: skip
    hooks = Hooks(tmp_path / "hooks", {"PreCompact": {"continue": False, "stopReason": "no"}})
    _install_hooks(codex, hooks, trust=True)
    run = codex.exec(FIRST_PROMPT, check=False)
    assert "compaction" not in run.kinds()
    assert "PreCompact" in hooks.labels() and "PostCompact" not in hooks.labels()
    (rollout,) = codex.rollouts()
    assert not [line for line in rollout_lines(rollout) if line["type"] == "compacted"]
    out.joinpath("run.json").write_text(json.dumps({"kinds": run.kinds(), "rc": run.returncode,
                                                    "labels": hooks.labels()}))  # fmt: skip
