"""compactd inside the real Gemini CLI 0.61.0, installed as a user installs it (docs/gemini.md#compactd-inside-gemini-cli).

``compactd gemini install`` writes its hooks and a trusted MCP server into the user's
settings.json. Three runs of the pinned ``gemini`` (headless, against tests/emulator's Gemini
API) make one session that Gemini CLI compresses twice:

1. ``gemini -p FIRST``: a file read and two commands; one long prompt never compresses;
2. ``--resume -p SECOND``: past the threshold, the CLI compresses everything before the prompt;
   every request after it carries what the compression dropped (the first prompt, its commands
   and file) exactly once, appended by compactd's BeforeModel hook;
3. ``--resume -p THIRD``: the same hand-back with its first request (the CLI forgets a rewritten
   request: compactd gives it again); the context is near the threshold, so the model is warned
   once (BeforeAgent); a large tool result takes the request past the threshold and the CLI
   compresses in the middle of the turn, keeping the turn; before that the model calls
   ``mcp_compactd_recall`` and gets an original from before the first compression; the request
   after the second compression carries what it dropped (the second prompt and its command) and
   what the first hand-back carried, each exactly once.

The same runs check the facts of docs/gemini.md#compression, #resume and #hook-events that a
throwaway hook logging every event sees (the test that checked them alone took five runs). Then
``compactd gemini uninstall`` leaves settings.json byte for byte as it was.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.editors.conftest import ROOT, out_dir
from tests.editors.gemini_cli import (
    ALPHA,
    BETA,
    COUNT,
    FIRST,
    NOTES,
    SECOND,
    THIRD,
    THRESHOLD,
    Gemini,
    Hooks,
    Turns,
    gemini_exe,
    read_jsonl,
    shell,
)
from tests.emulator import Emulator, Reply, ToolUse
from tests.emulator.gemini import (
    contents_text,
    function_calls,
    function_responses,
    gemini_request_kind,
)

pytestmark = pytest.mark.timeout(900)
HANDBACK = "compactd: what Gemini CLI's summary above left out"
WARNED = "compactd: the context holds"
CTX = "<session_context>"
ACK = "Got it. Thanks for the additional context!"
EVENTS = ("SessionStart", "BeforeAgent", "BeforeModel", "PreCompress", "AfterAgent", "SessionEnd")
RECALL_QUERY = "alpha-check-7d1"


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def _compactd(g: Gemini, *args: str) -> subprocess.CompletedProcess[str]:
    """``compactd ARGS`` as the user runs it, with Gemini CLI's environment (its HOME)."""
    env = {**g.env, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "compactd", *args],
        cwd=g.project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _turns() -> Turns:
    return Turns(
        {
            "FIRST": [
                Reply(text="Reading the notes.", tool_uses=[ToolUse("read_file", {"file_path": "notes.txt"})]),
                Reply(text="Running the alpha check.", tool_uses=[shell(ALPHA, "alpha check")]),
                Reply(text="Counting the notes.", tool_uses=[shell(COUNT, "count the notes")]),
                Reply(text="The alpha check passed and there are 800 notes."),
            ],
            "SECOND": [
                Reply(text="Running the beta check.", tool_uses=[shell(BETA, "beta check")]),
                Reply(text="The beta check passed."),
            ],
            "THIRD": [
                Reply(text="Reading the notes again.", tool_uses=[ToolUse("read_file", {"file_path": "notes.txt"})]),
                Reply(text="Recalling the first check.",
                      tool_uses=[ToolUse("mcp_compactd_recall", {"query": RECALL_QUERY})]),
                Reply(text="Both checks passed, and the notes are unchanged."),
            ],
        },
        skip=(HANDBACK,),
    )  # fmt: skip


def _texts(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (c["role"], "".join(p.get("text", "") for p in c["parts"] if not p.get("thought")))
        for c in body["contents"]
    ]


def _own(body: dict[str, Any]) -> dict[str, Any]:
    """The request as Gemini CLI built it: without the content compactd appended."""
    last = _texts(body)[-1][1]
    return {**body, "contents": body["contents"][:-1]} if last.startswith(HANDBACK) else body


def _sets(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    return [r["$set"]["messages"] for r in records if "messages" in r.get("$set", {})]


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))


def test_compactd_in_gemini_hands_back_what_each_compression_dropped(
    emu: Emulator, tmp_path: Path
) -> None:
    out = out_dir("gemini-compactd")
    g = Gemini(gemini_exe(), emu, tmp_path, out / "gemini.log")
    log = Hooks(g, EVENTS, tmp_path / "hooks")  # a throwaway hook logging what the CLI sends
    g.compress_at(THRESHOLD)
    (g.project / "notes.txt").write_text(NOTES)
    emu.gemini.set_default(_turns())
    before = g.settings_path.read_bytes()
    data = tmp_path / "compactd-data"

    # Installed as a user installs it; a second run changes nothing.
    done = _compactd(g, "gemini", "install", "--data-dir", str(data))
    assert done.returncode == 0, done.stderr
    (out / "install.txt").write_text(done.stdout)
    assert "MCP server compactd" in done.stdout and "trusted" in done.stdout
    again = _compactd(g, "gemini", "install", "--data-dir", str(data))
    assert again.stdout.strip() == "compactd gemini install: nothing to change (user scope)"
    assert g.settings["mcpServers"]["compactd"]["trust"] is True

    # 1. One long prompt: no compression, four requests, nothing handed back.
    first = g.prompt(FIRST)
    assert not first.bodies("compression") and len(first.bodies("main")) == 4
    assert not any(HANDBACK in json.dumps(b) for b in first.bodies("main"))
    chat = g.chat()

    # 2. The resume past the threshold: the snapshot and its verification (no tools, no
    #    BeforeModel) before the prompt's first request.
    second = g.resume(SECOND)
    (snap_req,) = second.bodies("compression")
    (verify_req,) = second.bodies("verification")
    assert not snap_req.get("tools") and not verify_req.get("tools")
    assert contents_text(snap_req)[-1].startswith("Generate a new <state_snapshot>")
    assert FIRST in json.dumps(snap_req) and ALPHA in json.dumps(snap_req)
    assert contents_text(verify_req)[-1].startswith("Critically evaluate the <state_snapshot>")
    snapshot = contents_text(verify_req, "model")[-1]
    assert snapshot.startswith("<state_snapshot>")
    kinds = [gemini_request_kind(r.body) for r in second.requests if isinstance(r.body, dict)]
    kinds = [k for k in kinds if k != "utility"]
    assert kinds == ["compression", "verification", "main", "main"], kinds
    bodies = second.bodies("main")
    for body in bodies:
        texts = _texts(body)
        # Gemini CLI's own request: the session context and the snapshot, the acknowledgement,
        # the prompt; the earlier words, commands and file 0 times (docs/gemini.md#compression).
        assert texts[0][1].startswith(CTX) and snapshot in texts[0][1]
        assert texts[1] == ("model", ACK) and texts[2] == ("user", SECOND)
        own = json.dumps(_own(body))
        for dropped in (FIRST, ALPHA, COUNT, "note 00042"):
            assert dropped not in own, dropped
        # compactd's hand-back, appended, exactly once: the first prompt, both commands, the file.
        assert texts[-1][0] == "user" and texts[-1][1].startswith(HANDBACK)
        sent = "\n".join(t for _, t in texts)
        assert sent.count(HANDBACK) == 1
        assert sent.count(FIRST) == 1, sent
        assert sent.count(f"`{ALPHA}`") == 1 and sent.count(f"`{COUNT}`") == 1, sent
        assert "notes.txt" in texts[-1][1]
    assert not function_calls(_own(bodies[0]))  # the turn's calls went with it
    handback = _texts(bodies[0])[-1][1]
    (out / "handback-1.txt").write_text(handback)
    # The calls and results of the turn stay where they were (the echo keeps them).
    assert [c["args"]["command"] for c in function_calls(bodies[1])] == [BETA]

    # The file: the compression is a $set.messages of [session context, snapshot, ack]; every
    # older line stays (docs/gemini.md#compression).
    records = read_jsonl(chat)
    compressed = next(s for s in _sets(records) if any("<state_snapshot>" in _text(m) for m in s))
    assert [m["type"] for m in compressed] == ["user", "user", "gemini"]
    assert _text(compressed[1]) == snapshot and _text(compressed[2]) == ACK
    raw = chat.read_text()
    for kept_in_file in (FIRST, ALPHA, COUNT, "note 00800"):
        assert kept_in_file in raw
    assert HANDBACK not in raw  # compactd never writes the chat
    second_prompt = next(r for r in records if r.get("type") == "user" and _text(r) == SECOND)
    assert records.index(second_prompt) > records.index(
        next(r for r in records if r.get("$set", {}).get("messages") is compressed)
    )

    # 3. The second resume: the hand-back again with the first request; the threshold warning
    #    once (BeforeAgent); a compression in the middle of the turn; recall; the second hand-back.
    third = g.resume(THIRD)
    kinds = [gemini_request_kind(r.body) for r in third.requests if isinstance(r.body, dict)]
    assert [k for k in kinds if k != "utility"] == [
        "main", "main", "compression", "verification", "main",
    ]  # fmt: skip
    first_req, recall_req, after = third.bodies("main")
    texts = _texts(first_req)
    assert snapshot in texts[0][1] and texts[-1][1] == handback
    # The resumed turn: its call, its tool result twice (docs/gemini.md#resume).
    assert [c["args"]["command"] for c in function_calls(first_req)] == [BETA]
    responses = [r for r in function_responses(first_req) if r["name"] == "run_shell_command"]
    assert len(responses) == 2 and responses[0] == responses[1]
    assert SECOND in [t for _, t in _texts(_own(first_req))] and FIRST not in json.dumps(
        _own(first_req)
    )
    prompt = next(t for r, t in texts if r == "user" and t.startswith(THIRD))
    assert prompt.count(WARNED) == 1 and "&lt;" not in prompt, prompt
    assert sum(t.count(WARNED) for _, t in texts) == 1
    # recall is offered, and returns the original of a command the first compression dropped.
    declared = [d["name"] for t in first_req["tools"] for d in t.get("functionDeclarations", [])]
    assert "mcp_compactd_recall" in declared and "mcp_compactd_context" in declared
    (recalled,) = [r for r in function_responses(after) if r["name"] == "mcp_compactd_recall"]
    (out / "recall.txt").write_text(json.dumps(recalled, indent=2))
    assert ALPHA in json.dumps(recalled), recalled
    # The compression mid-turn kept the turn: the prompt, the read, the recall and its result.
    texts = _texts(after)
    assert texts[0][1].startswith(CTX) and "<state_snapshot>" in texts[0][1]
    second_snapshot = texts[0][1][texts[0][1].index("<state_snapshot>") :]
    assert second_snapshot != snapshot and texts[1] == ("model", ACK)
    assert texts[2][1].startswith(THIRD)
    assert [c["name"] for c in function_calls(after)] == ["read_file", "mcp_compactd_recall"]
    own = json.dumps(_own(after))
    assert "note 00800" in own  # the kept turn's tool result, as it was
    for dropped in (SECOND, BETA, FIRST):  # (the alpha check is in recall's answer)
        assert dropped not in own, dropped
    # What the second compression dropped, and what the first hand-back carried, exactly once.
    sent = "\n".join(t for _, t in texts)
    assert texts[-1][1].startswith(HANDBACK) and sent.count(HANDBACK) == 1
    for words in (FIRST, SECOND, f"`{ALPHA}`", f"`{COUNT}`", f"`{BETA}`"):
        assert sent.count(words) == 1, (words, texts[-1][1])
    assert sent.count(THIRD) == 1  # kept by Gemini CLI, not given back
    (out / "handback-2.txt").write_text(texts[-1][1])
    second_list = next(
        s for s in _sets(read_jsonl(chat)) if any(second_snapshot in _text(m) for m in s)
    )
    assert [m["type"] for m in second_list][:4] == ["user", "user", "gemini", "user"]
    assert _text(second_list[3]).startswith(THIRD) and len(second_list) > 4

    # The hook events, as the logging hook saw them (docs/gemini.md#hook-events): the same
    # events whether or not the CLI compresses; PreCompress before every request; none for
    # the compression calls.
    names = log.names()
    starts = [i for i, n in enumerate(names) if n == "SessionStart"]
    runs = [first, second, third]
    assert len(starts) == 3
    spans = zip(starts, [*starts[1:], len(names)], strict=True)
    for (a, b), run in zip(spans, runs, strict=True):
        n = len(run.bodies("main"))
        assert names[a:b] == [
            "SessionStart", "BeforeAgent", *(["PreCompress", "BeforeModel"] * n), "AfterAgent",
            "SessionEnd",
        ]  # fmt: skip
    events = log.log()
    assert [e["source"] for e in events if e["hook_event_name"] == "SessionStart"] == [
        "startup", "resume", "resume",
    ]  # fmt: skip
    assert {e["trigger"] for e in events if e["hook_event_name"] == "PreCompress"} == {"auto"}
    paths = {e["transcript_path"] for e in events if e["hook_event_name"] != "SessionStart"}
    assert paths == {str(chat)}, paths
    # A resume writes a metadata line and a $set.messages of the session context alone first,
    # in the file of the current minute: this one, or a stub beside it (docs/gemini.md#resume).
    every = [r for path in g.chat_files() for r in read_jsonl(path)]
    metas = [r for r in every if "projectHash" in r]
    assert len(metas) == 3 and {m["sessionId"] for m in metas} == {records[0]["sessionId"]}
    alone = [s for s in _sets(every) if len(s) == 1 and _text(s[0]).startswith(CTX)]
    assert len(alone) == 3
    for stub in set(g.chat_files()) - {chat}:
        assert all("id" not in r for r in read_jsonl(stub))
    # The history a resume loaded is written back whole as a $set.messages.
    reloaded = _sets(read_jsonl(chat))[-2]
    assert [m["type"] for m in reloaded][:3] == ["user", "user", "gemini"] and len(reloaded) > 3
    (out / chat.name).write_bytes(chat.read_bytes())

    # compactd's own account of the chat agrees with it: compactd status on the file.
    status = _compactd(g, "status", str(chat), "--plain")
    (out / "status.txt").write_text(status.stdout + status.stderr)
    assert status.returncode == 0, status.stderr
    last_total = [r for r in read_jsonl(chat) if r.get("type") == "gemini" and "tokens" in r][-1]
    assert f"{last_total['tokens']['total']:,}" in status.stdout, status.stdout

    # 4. Uninstalled: settings.json byte for byte as before.
    done = _compactd(g, "gemini", "uninstall", "--data-dir", str(data))
    assert done.returncode == 0, done.stderr
    assert g.settings_path.read_bytes() == before
