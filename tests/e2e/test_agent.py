"""The example agent (examples/agent.py) runs as a program against the emulator and compacts.

The emulated model answers the agent's own requests from a script (tool calls, then answers) and
writes a summary whenever compactd asks for one (``request_kind``). The agent reads real files
and runs a real shell command in its working directory; its window is small enough that the
third file read crosses the auto-compact threshold, so ``compact/auto`` compacts during the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from compactd_client import Client, RpcError

from tests.conftest import ROOT, daemon_args, spawn
from tests.emulator import Emulator, RecordedRequest, Reply, ToolUse, request_kind
from tests.helpers import transcript_lines

AGENT = ROOT / "examples" / "agent.py"
# 40,000 - 4,096 reserved for the agent's output - 13,000 = an auto-compact threshold of
# 22,904 tokens; each file below is about 8,000.
WINDOW = 40_000
FILES = 4


def file_text(i: int) -> str:
    return f"file{i} begins here\n" + "".join(f"line {n} of file {i}: data\n" for n in range(1000))


def script() -> tuple[list[str], list[Reply], list[str]]:
    """The prompts, the model's replies to the agent in order, and the answers they lead to."""
    prompts, replies, answers = [], [], []
    for i in range(1, FILES + 1):
        prompts.append(f"What does file{i}.txt begin with?")
        replies.append(Reply(tool_uses=[ToolUse("read_file", {"path": f"file{i}.txt"})]))
        answers.append(f"file{i}.txt begins with 'file{i} begins here'.")
        replies.append(Reply(text=answers[-1]))
    prompts.append("What is six times seven, by the shell?")
    replies.append(Reply(tool_uses=[ToolUse("run", {"command": "echo shell-says-$((6*7))"})]))
    answers.append("The shell says 42.")
    replies.append(Reply(text=answers[-1]))
    return prompts, replies, answers


def make_project(tmp_path: Path) -> Path:
    """The agent's working directory, with the files the script reads."""
    project = tmp_path / "project"
    project.mkdir()
    for i in range(1, FILES + 1):
        (project / f"file{i}.txt").write_text(file_text(i))
    return project


def assert_answers(out: list[str], prompts: list[str], answers: list[str]) -> None:
    """The agent printed every answer after its prompt (its own notes start with "[")."""
    assert [line for line in out if not line.startswith("[")] == [
        line
        for prompt, answer in zip(prompts, answers, strict=True)
        for line in (f"> {prompt}", answer)
    ]


def test_the_agent_compacts_and_carries_on(emulator: Emulator, tmp_path: Path) -> None:
    project = make_project(tmp_path)
    prompts, replies, answers = script()
    queue = deque(replies)

    def model(rec: RecordedRequest) -> Reply:
        # Summaries are written by the emulator (it quotes the user's messages).
        return queue.popleft() if request_kind(rec.body) == "main" else Reply()

    emulator.set_default(model)
    env = {**os.environ, "ANTHROPIC_BASE_URL": emulator.base_url, "ANTHROPIC_API_KEY": "test"}
    data = tmp_path / "data"
    # Synchronous: with a summary prepared in the background the agent, this fast, may finish
    # before it is ready (tests/e2e/test_background.py covers that).
    command = [
        sys.executable,
        str(AGENT),
        "--synchronous",
        "--context-window",
        str(WINDOW),
        "--data-dir",
        str(data),
    ]
    done = subprocess.run(
        [*command, *prompts], cwd=project, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert not queue, "the agent stopped before the model's last reply"

    # The answers, each after its prompt, and the compaction reported where it happened.
    out = done.stdout.splitlines()
    assert_answers(out, prompts, answers)
    compacted = [line for line in out if line.startswith("[")]
    assert len(compacted) == 1 and compacted[0].startswith("[full: "), out
    assert out.index(compacted[0]) > out.index(f"> {prompts[1]}")  # not before two files

    kinds = [request_kind(r.body) for r in emulator.message_requests]
    assert kinds.count("summary") == 1 and kinds.count("main") == len(replies)
    main = [r.body for r in emulator.message_requests if request_kind(r.body) == "main"]
    summary = emulator.message_requests[kinds.index("summary")]
    # The summary is a fork of the main loop: same system prompt and tools, and it reads the
    # prefix the agent's last request cached.
    assert summary.body["system"] == main[0]["system"] and summary.body["tools"] == main[0]["tools"]
    assert summary.usage is not None and summary.usage["cache_read_input_tokens"] > 0
    # From the compaction on, the model sees the summary first, not the files read before it,
    # and the later turns after it.
    continued = [
        i
        for i, body in enumerate(main)
        if "continues an earlier" in json.dumps(body["messages"][0])
    ]
    assert continued and continued == list(range(continued[0], len(main)))
    after = main[continued[0]]["messages"]
    assert prompts[0] in json.dumps(after[0]) and "line 999 of file 1" not in json.dumps(after)
    assert prompts[-1] in json.dumps(main[-1]["messages"][1:])

    # The transcript holds every line the agent appended, compaction or not: the prompts, the
    # files as read from disk, the shell's real output, the answers and their usage.
    (path,) = data.glob("sessions/*/transcript.jsonl")
    lines = transcript_lines(path)
    texts = [_text(line) for line in lines]
    for prompt in prompts:
        assert prompt in texts
    results = [_results(line) for line in lines if line["type"] == "user"]
    flat = [r for rs in results for r in rs]
    for i in range(1, FILES + 1):
        assert file_text(i) in flat
    assert "shell-says-42\n(exit status 0)" in flat
    replies_seen = [line for line in lines if line["type"] == "assistant"]
    assert len(replies_seen) == len(replies)
    assert all(line["message"]["usage"]["output_tokens"] > 0 for line in replies_seen)
    for answer in answers:
        assert answer in texts
    assert sum(1 for line in lines if line.get("subtype") == "compact_boundary") == 1


def _text(line: dict[str, Any]) -> str:
    content = (line.get("message") or {}).get("content")
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def _results(line: dict[str, Any]) -> list[str]:
    content = (line.get("message") or {}).get("content")
    if not isinstance(content, list):
        return []
    return [b["content"] for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


async def test_background_compaction_options_are_checked(tmp_path: Path) -> None:
    # Accepted with every field (nothing is prepared yet: issue 28), refused when out of range.
    good = {"enabled": False, "startAt": 0.7, "idleMinutes": 30, "applyWhenIdle": True}
    async with spawn(tmp_path / "a", {"backgroundCompaction": good}) as client:
        assert (await client.list_sessions()).sessions == []
    client = await Client.spawn_process(daemon_args(tmp_path / "b"))
    try:
        with pytest.raises(RpcError) as refused:
            await client.initialize({"backgroundCompaction": {**good, "startAt": 1.5}})
        assert refused.value.code == "invalidParams"
        assert "backgroundCompaction.startAt" in refused.value.message
    finally:
        await client.shutdown()


def test_the_agent_goes_on_while_the_summary_is_prepared(
    emulator: Emulator, tmp_path: Path
) -> None:
    """With background compaction (the default), a summary that takes the model long is never
    waited for below the blocking limit: the agent says it is being prepared and answers every
    prompt (docs/background.md#applying)."""
    project = make_project(tmp_path)
    prompts, replies, answers = script()
    queue = deque(replies)
    emulator.set_default(
        lambda rec: queue.popleft() if request_kind(rec.body) == "main" else Reply()
    )
    emulator.set_latency("summary", 600.0)  # never ready while the agent runs
    env = {**os.environ, "ANTHROPIC_BASE_URL": emulator.base_url, "ANTHROPIC_API_KEY": "test"}
    command = [sys.executable, str(AGENT), "--context-window", str(WINDOW)]
    command += ["--data-dir", str(tmp_path / "data")]
    done = subprocess.run(
        [*command, *prompts], cwd=project, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert_answers(out, prompts, answers)
    notes = [line for line in out if line.startswith("[")]
    assert notes and all(
        line.startswith("[a summary is being prepared in the background; ") for line in notes
    ), out
    # Every reply was asked for; the summary is still being written (the emulator records a
    # request once it has answered it).
    kinds = [request_kind(r.body) for r in emulator.message_requests]
    assert kinds == ["main"] * len(replies)
