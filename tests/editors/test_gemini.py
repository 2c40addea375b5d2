"""The facts docs/gemini.md states about Gemini CLI 0.61.0, checked on the real CLI.

Each test runs the pinned ``gemini`` (tests/editors/gemini_cli.py) headless against
tests/emulator's Gemini API, offline, with throwaway hooks and a throwaway MCP server written by
the test (compactd's own Gemini hooks do not exist yet). What a compactd integration relies on
is asserted here, so that a new CLI version that changes it fails this file first. The section
of docs/gemini.md each test checks is named in its docstring.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.editors.conftest import out_dir
from tests.editors.gemini_cli import (
    ALPHA,
    BETA,
    COUNT,
    FIRST,
    NOTES,
    SECOND,
    SESSION_FILE_RE,
    THIRD,
    Gemini,
    Hooks,
    Turns,
    compressing_session,
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

pytestmark = pytest.mark.timeout(600)
ALL_EVENTS = (
    "SessionStart",
    "BeforeAgent",
    "BeforeModel",
    "PreCompress",
    "AfterAgent",
    "SessionEnd",
)
CTX = "<session_context>"


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


@pytest.fixture
def exe() -> str:
    return gemini_exe()


def _gemini(exe: str, emu: Emulator, tmp_path: Path, name: str) -> Gemini:
    return Gemini(exe, emu, tmp_path, out_dir(f"gemini-{name}") / "gemini.log")


def _declared(body: dict[str, Any]) -> list[str]:
    return [d["name"] for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []]


def _kind(rec: Any) -> str:
    return gemini_request_kind(rec.body) if isinstance(rec.body, dict) else "-"


def _records(path: Path) -> list[dict[str, Any]]:
    return read_jsonl(path)


def _sets(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The ``$set.messages`` lists of a chat file, in order."""
    return [r["$set"]["messages"] for r in records if "messages" in r.get("$set", {})]


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))


# --------------------------------------------------------------------------------- offline


def test_offline_headless_run_and_its_chat_file(exe: str, emu: Emulator, tmp_path: Path) -> None:
    """docs/gemini.md#offline, #requests, #chat-files: a headless run connects to 127.0.0.1 only; what it
    sends; the JSONL chat file it writes."""
    strace = shutil.which("strace")
    assert strace, "strace is not installed: apt-get install strace (tests/editors/setup.sh)"
    g = _gemini(exe, emu, tmp_path, "offline")
    (g.project / "notes.txt").write_text("first note\nsecond note\n")
    emu.gemini.set_default(
        Turns(
            {
                "CHECK": [
                    Reply(
                        text="Reading.",
                        tool_uses=[ToolUse("read_file", {"file_path": "notes.txt"})],
                    ),
                    Reply(text="Running.", tool_uses=[shell("echo offline-ok", "say ok")]),
                    Reply(text="All checked."),
                ]
            }
        )
    )
    trace = tmp_path / "connect.trace"
    run = g.prompt(
        "CHECK the notes", wrap=[strace, "-f", "-qq", "-e", "trace=connect", "-o", str(trace)]
    )
    assert "All checked." in run.stdout
    # Every IP connection goes to the emulator on loopback (DNS included: no lookups at all).
    inet = [line for line in trace.read_text().splitlines() if "AF_INET" in line]
    assert inet, "strace saw no connection at all"
    addresses = {
        re.search(r'inet_(?:addr|pton)\((?:AF_INET6, )?"([^"]+)"', line).group(1) for line in inet
    }  # type: ignore[union-attr]
    ports = {int(m) for m in re.findall(r"sin6?_port=htons\((\d+)\)", "\n".join(inet))}
    assert addresses <= {"127.0.0.1", "::1"}, addresses
    assert ports == {emu.port}, ports

    # What it sent: side requests by generateContent, the agent's turns by streamGenerateContent.
    main = [r for r in run.requests if r.path.endswith(":streamGenerateContent")]
    assert len(main) == 3 and all(r.query == "alt=sse" for r in main)
    assert all(r.headers.get("x-goog-api-key") == g.env["GEMINI_API_KEY"] for r in run.requests)
    assert {r.path.rsplit(":", 1)[-1] for r in run.requests} <= {
        "generateContent",
        "streamGenerateContent",
    }
    first = main[0].body
    assert "run_shell_command" in _declared(first) and "read_file" in _declared(first)
    shell_tool = next(
        d
        for t in first["tools"]
        for d in t["functionDeclarations"]
        if d["name"] == "run_shell_command"
    )
    schema = shell_tool.get("parametersJsonSchema") or shell_tool.get("parameters") or {}
    assert {"command", "description"} <= set(schema["properties"])
    assert first["contents"][0]["parts"][0]["text"].startswith(CTX)
    assert contents_text(first)[0].endswith("CHECK the notes")

    # The chat file: ~/.gemini/tmp/<slug>/chats/session-<minute>-<id8>.jsonl.
    projects = json.loads((g.gemini_dir / "projects.json").read_text())["projects"]
    assert projects == {str(g.project): g.slug}
    chat = g.chat()
    assert SESSION_FILE_RE.match(chat.name)
    records = _records(chat)
    meta = records[0]
    assert set(meta) == {"sessionId", "projectHash", "startTime", "lastUpdated", "kind"}
    assert meta["kind"] == "main" and chat.name.endswith(f"-{meta['sessionId'][:8]}.jsonl")
    assert _sets(records)[0][0]["type"] == "user" and _text(_sets(records)[0][0]).startswith(CTX)
    messages = [r for r in records if "id" in r]
    users = [m for m in messages if m["type"] == "user"]
    assert _text(users[0]) == "CHECK the notes"
    geminis = [m for m in messages if m["type"] == "gemini"]
    # A gemini record is written again, with the same id, as it grows (its tool calls).
    by_id: dict[str, list[dict[str, Any]]] = {}
    for m in geminis:
        by_id.setdefault(m["id"], []).append(m)
    assert [len(v) for v in by_id.values()] == [2, 2, 1]
    last = [v[-1] for v in by_id.values()]
    assert "toolCalls" not in by_id[last[0]["id"]][0] and len(last[0]["toolCalls"]) == 1
    call = last[1]["toolCalls"][0]
    assert {"id", "name", "args", "result", "status"} <= set(call)
    assert call["name"] == "run_shell_command" and call["args"]["command"] == "echo offline-ok"
    assert call["status"] == "success"
    # Tokens: the usageMetadata of the response that made the record.
    usages = [r.usage for r in main]
    assert [m["tokens"] for m in last] == [
        {
            "input": u["promptTokenCount"],
            "output": u["candidatesTokenCount"],
            "cached": 0,
            "thoughts": 0,
            "tool": 0,
            "total": u["totalTokenCount"],
        }
        for u in usages
    ]
    # Each tool result twice: in the call's result and in a user record of its own.
    answers = [m for m in users if any("functionResponse" in p for p in m["content"])]
    assert len(answers) == 2
    assert answers[1]["content"] == call["result"]
    assert "offline-ok" in json.dumps(call["result"])
    assert any(r.get("$set", {}).keys() == {"lastUpdated"} for r in records)


def test_what_a_headless_run_needs(exe: str, emu: Emulator, tmp_path: Path) -> None:
    """docs/gemini.md#offline: without selectedType a headless run exits 41; in an untrusted folder, 55."""
    g = _gemini(exe, emu, tmp_path, "needs")
    g.configure({"security": {"auth": None}})
    run = g.prompt("hello", check=False)
    assert run.returncode == 41 and not run.requests
    assert "auth" in (run.stderr + run.stdout).lower()
    g.configure(
        {"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": True}}}
    )
    run = g.prompt("hello", check=False)
    assert run.returncode == 55 and not run.requests
    run = g.prompt("hello", "--skip-trust")
    assert run.returncode == 0 and run.requests


# ----------------------------------------------------------------------------- compression


def test_compression_on_resume(exe: str, emu: Emulator, tmp_path: Path) -> None:
    """docs/gemini.md#compression, #resume, #hook-events: a resumed session past the threshold is
    compressed before its prompt is sent; what the file records; what the next request
    carries; which hooks fire."""
    g = _gemini(exe, emu, tmp_path, "compression")
    hooks = Hooks(g, ALL_EVENTS, tmp_path / "hooks")
    first, second, third = compressing_session(g)
    chat = g.chat()
    log = hooks.log()

    # 1. One long prompt never compresses, however large: PreCompress fires before every
    #    model request all the same (and BeforeModel once per request).
    assert not first.bodies("compression") and len(first.bodies("main")) == 4
    runs = [first, second, third]
    names = [e["hook_event_name"] for e in log]
    starts = [i for i, n in enumerate(names) if n == "SessionStart"]
    assert len(starts) == 3
    per_run = [names[a:b] for a, b in zip(starts, [*starts[1:], len(names)], strict=True)]
    for events, run in zip(per_run, runs, strict=True):
        n = len(run.bodies("main"))
        assert events == [
            "SessionStart",
            "BeforeAgent",
            *(["PreCompress", "BeforeModel"] * n),
            "AfterAgent",
            "SessionEnd",
        ]
    assert [e["source"] for e in log if e["hook_event_name"] == "SessionStart"] == [
        "startup",
        "resume",
        "resume",
    ]
    assert {e["trigger"] for e in log if e["hook_event_name"] == "PreCompress"} == {"auto"}

    # 2. The --resume past the threshold: two generateContent calls with no tools (the snapshot,
    #    then its verification), before the prompt's first request; nothing fires after them.
    (snap_req,) = second.bodies("compression")
    (verify_req,) = second.bodies("verification")
    calls = [r for r in second.requests if r.body is snap_req or r.body is verify_req]
    assert [r.path.rsplit(":", 1)[-1] for r in calls] == ["generateContent", "generateContent"]
    assert not snap_req.get("tools") and not verify_req.get("tools")
    assert second.requests.index(calls[1]) < min(
        second.requests.index(r) for r in second.requests if r.path.endswith("GenerateContent")
    )
    assert contents_text(snap_req)[-1].startswith("Generate a new <state_snapshot>")
    assert FIRST in json.dumps(snap_req) and ALPHA in json.dumps(snap_req)
    assert contents_text(verify_req)[-1].startswith("Critically evaluate the <state_snapshot>")
    snapshot = contents_text(verify_req, "model")[-1]
    assert snapshot.startswith("<state_snapshot>")
    # No BeforeModel for them: BeforeModel saw only the main requests.
    assert len(per_run[1]) == 4 + 2 * len(second.bodies("main"))

    # 3. What the next request carries: the session context and the snapshot, an
    #    acknowledgement, the new prompt. The user's earlier words, the commands and the file
    #    reach the model 0 times.
    after = second.bodies("main")[0]
    roles_texts = [
        (c["role"], "".join(p.get("text", "") for p in c["parts"])) for c in after["contents"]
    ]
    assert roles_texts[0][0] == "user" and roles_texts[0][1].startswith(CTX)
    assert snapshot in roles_texts[0][1]
    assert roles_texts[1] == ("model", "Got it. Thanks for the additional context!")
    assert roles_texts[2] == ("user", SECOND)
    sent = json.dumps(after)
    for dropped in (FIRST, ALPHA, COUNT, "note 00042"):
        assert dropped not in sent, dropped
    assert not function_calls(after)

    # 4. The file: the compression is a $set.messages of [session context, snapshot,
    #    acknowledgement] (and the turns it kept, none here); every older line stays.
    records = _records(chat)
    sets = _sets(records)
    compressed = next(s for s in sets if any("<state_snapshot>" in _text(m) for m in s))
    assert [m["type"] for m in compressed] == ["user", "user", "gemini"]
    assert _text(compressed[0]).startswith(CTX) and _text(compressed[1]) == snapshot
    assert _text(compressed[2]) == "Got it. Thanks for the additional context!"
    raw = chat.read_text()
    for kept_in_file in (FIRST, ALPHA, COUNT, "note 00800"):
        assert kept_in_file in raw
    second_prompt = next(r for r in records if r.get("type") == "user" and _text(r) == SECOND)
    assert records.index(second_prompt) > records.index(
        next(r for r in records if r.get("$set", {}).get("messages") is compressed)
    )

    # 5. --resume appends to the same file, after starting a chat of its own (a metadata line
    #    and a $set.messages of the session context alone) in the file named after the current
    #    minute: the old file when the minute is the same, a stub beside it otherwise.
    every = [r for path in g.chat_files() for r in _records(path)]
    metas = [r for r in every if "projectHash" in r]
    assert len(metas) == 3 and {m["sessionId"] for m in metas} == {records[0]["sessionId"]}
    alone = [s for s in _sets(every) if len(s) == 1 and _text(s[0]).startswith(CTX)]
    assert len(alone) == 3
    for stub in set(g.chat_files()) - {chat}:
        assert all("id" not in r for r in _records(stub))
    # The history loaded by a resume is written back whole as a $set.messages.
    assert [m["type"] for m in sets[-1]][:3] == ["user", "user", "gemini"] and len(sets[-1]) > 3

    # 6. The third run, resumed after the compression: the snapshot again, the second turn
    #    with its tool result twice, the new prompt; no compression.
    assert not third.bodies("compression")
    resumed = third.bodies("main")[0]
    texts = contents_text(resumed)
    assert snapshot in texts[0] and SECOND in texts and texts[-1] == THIRD
    assert [c["args"]["command"] for c in function_calls(resumed)] == [BETA]
    responses = function_responses(resumed)
    assert len(responses) == 2 and responses[0] == responses[1]
    assert FIRST not in json.dumps(resumed)
    # The hooks were told where the chat is (from the first BeforeAgent of a run on).
    paths = {e["transcript_path"] for e in log if e["hook_event_name"] != "SessionStart"}
    assert paths == {str(chat)}, paths


def test_compression_mid_turn_keeps_the_current_turn(
    exe: str, emu: Emulator, tmp_path: Path
) -> None:
    """docs/gemini.md#compression: in a resumed run, a tool result that takes the request past the threshold
    makes the CLI compress before its next request, in the middle of the turn: the earlier
    prompts go into the snapshot, the current prompt and its calls so far are kept."""
    g = _gemini(exe, emu, tmp_path, "mid-turn")
    hooks = Hooks(g, ["PreCompress", "BeforeModel"], tmp_path / "hooks")
    g.compress_at(0.02)  # 20,971 tokens: under the first request with the notes in it
    (g.project / "notes.txt").write_text(NOTES)
    emu.gemini.set_default(
        Turns(
            {
                "FIRST": [
                    Reply(text="Alpha.", tool_uses=[shell(ALPHA, "alpha")]),
                    Reply(text="Done."),
                ],
                "SECOND": [
                    Reply(
                        text="Reading.",
                        tool_uses=[ToolUse("read_file", {"file_path": "notes.txt"})],
                    ),
                    Reply(text="Beta.", tool_uses=[shell(BETA, "beta")]),
                    Reply(text="Second done."),
                ],
            }
        )
    )
    g.prompt(FIRST)
    before = len(hooks.log())
    run = g.resume(SECOND)
    kinds = [k for k in (_kind(r) for r in run.requests) if k != "utility"]
    assert kinds == ["main", "main", "compression", "verification", "main"]
    last = run.bodies("main")[-1]
    texts = [(c["role"], "".join(p.get("text", "") for p in c["parts"])) for c in last["contents"]]
    assert texts[0][1].startswith(CTX) and "<state_snapshot>" in texts[0][1]
    assert texts[1] == ("model", "Got it. Thanks for the additional context!")
    assert texts[2] == ("user", SECOND)
    assert [c["name"] for c in function_calls(last)] == ["read_file", "run_shell_command"]
    assert "note 00800" in json.dumps(last) and FIRST not in json.dumps(last)
    assert ALPHA not in json.dumps(last)
    compressed = next(
        s for s in _sets(_records(g.chat())) if any("<state_snapshot>" in _text(m) for m in s)
    )
    assert [m["type"] for m in compressed][:4] == ["user", "user", "gemini", "user"]
    assert _text(compressed[3]) == SECOND and len(compressed) > 4
    # PreCompress before each of the three requests (the compression after the third one);
    # nothing marks the compression itself.
    assert hooks.names(before) == ["PreCompress", "BeforeModel"] * 3


# ----------------------------------------------------------------------------------- hooks


def test_before_model_rewrites_one_request(exe: str, emu: Emulator, tmp_path: Path) -> None:
    """docs/gemini.md#beforemodel: what BeforeModel sees, and what a returned llm_request.messages does."""
    g = _gemini(exe, emu, tmp_path, "before-model")
    hooks = Hooks(g, ["BeforeModel"], tmp_path / "hooks")
    emu.gemini.set_default(
        Turns(
            {
                "STEP": [
                    Reply(text="Running.", tool_uses=[shell("echo step-one", "step")]),
                    Reply(text="Again.", tool_uses=[shell("echo step-two", "step")]),
                    Reply(text="Stepped."),
                ]
            }
        )
    )
    hooks.plan(BeforeModel={"append": "HANDBACK-NOTE"})
    run = g.prompt("STEP through it")
    bodies = run.bodies("main")
    seen = [e["llm_request"] for e in hooks.log()]
    assert len(seen) == len(bodies) == 3
    # It sees text only: one {role, content} per content with text (the parts joined), no
    # calls, no results, in the request's order.
    assert seen[2]["messages"] == [
        {"role": "user", "content": "".join(p["text"] for p in bodies[0]["contents"][0]["parts"])},
        {"role": "model", "content": "Running."},
        {"role": "model", "content": "Again."},
    ]
    assert set(seen[0]) == {"model", "messages", "config"}
    # An appended message reaches that request once, after everything, and is not kept: the
    # next request has the next one only, and the chat file has none.
    for body in bodies:
        assert json.dumps(body).count("HANDBACK-NOTE") == 1
        assert body["contents"][-1] == {"role": "user", "parts": [{"text": "HANDBACK-NOTE"}]}
    assert "HANDBACK-NOTE" not in g.chat().read_text()
    # Returned messages replace the text of the contents with text, by position (a content's
    # text parts become one); the calls and results stay where they were.
    assert bodies[2]["contents"][0]["parts"] == [{"text": seen[2]["messages"][0]["content"]}]
    assert [c["args"]["command"] for c in function_calls(bodies[2])] == [
        "echo step-one",
        "echo step-two",
    ]
    assert len(function_responses(bodies[2])) == 2

    hooks.plan(BeforeModel={"replace_first": "REPLACED: "})
    run = g.resume("STEP again")
    for body in run.bodies("main"):
        texts = contents_text(body)
        assert texts[0].startswith("REPLACED: ") and CTX in texts[0]
        # A shorter list leaves the later contents as they were: nothing can be removed.
        assert "STEP again" in texts and len(function_calls(body)) >= 2
    hooks.plan(BeforeModel={"messages": []})
    run = g.resume("STEP once more")
    assert all(contents_text(b)[0].startswith(CTX) for b in run.bodies("main"))


def test_session_start_and_before_agent_context(exe: str, emu: Emulator, tmp_path: Path) -> None:
    """docs/gemini.md#beforeagent-and-sessionstart: where their additionalContext goes, and what a later
    --resume makes of it."""
    g = _gemini(exe, emu, tmp_path, "context")
    hooks = Hooks(g, ["SessionStart", "BeforeAgent"], tmp_path / "hooks")
    emu.gemini.set_default(
        Turns(
            {
                "ONE": [Reply(text="one done")],
                "TWO": [Reply(text="two done")],
                "THREE": [Reply(text="three done")],
            }
        )
    )
    hooks.plan(SessionStart={"context": "START <b>"}, BeforeAgent={"context": "AGENT <b>"})
    run = g.prompt("ONE: the first prompt")
    (body,) = run.bodies("main")
    parts = [p["text"] for p in body["contents"][0]["parts"]]
    # SessionStart: in front of the prompt, in the same text; BeforeAgent: a part after it.
    # Both wrapped in <hook_context>, with < and > escaped.
    assert parts[1] == "<hook_context>START &lt;b&gt;</hook_context>\n\nONE: the first prompt"
    assert parts[2] == "<hook_context>AGENT &lt;b&gt;</hook_context>"
    # BeforeAgent is told the prompt with the SessionStart context already in front of it.
    assert [e["prompt"] for e in hooks.log() if e["hook_event_name"] == "BeforeAgent"] == [
        "<hook_context>START &lt;b&gt;</hook_context>\n\nONE: the first prompt"
    ]

    hooks.plan(BeforeAgent={"context": "AGENT again"})
    run = g.resume("TWO: the second prompt")
    (body,) = run.bodies("main")
    sent = json.dumps(body)
    # The first prompt was recorded behind its SessionStart context, so the resume drops the
    # whole message: the user's words with it. Its BeforeAgent part went with it.
    assert "ONE: the first prompt" not in sent and "one done" in sent
    assert "ONE: the first prompt" in g.chat_files()[0].read_text()
    assert (
        contents_text(body)[-1] == "TWO: the second prompt<hook_context>AGENT again</hook_context>"
    )
    hooks.plan()
    run = g.resume("THREE: the third prompt")
    (body,) = run.bodies("main")
    # A prompt with only a BeforeAgent part is kept, the part with it.
    assert "TWO: the second prompt" in json.dumps(body) and "AGENT again" in json.dumps(body)


def test_what_a_hook_prints_and_its_exit_status(exe: str, emu: Emulator, tmp_path: Path) -> None:
    """docs/gemini.md#hook-output: text that is not JSON, and the exit status, on BeforeModel; a hook in the
    project's .gemini/settings.json runs too (the folder is trusted: folder trust is off)."""
    g = _gemini(exe, emu, tmp_path, "hook-output")
    hooks = Hooks(g, ["BeforeModel"], tmp_path / "hooks")
    emu.gemini.set_default(Turns({"ASK": [Reply(text="answered")]}))
    outcomes = {}
    for name, plan in {
        "text, exit 0": {"stdout": "compactd: not json", "exit": 0},
        "exit 1": {"stdout": "compactd: failed", "exit": 1},
        "exit 2": {"stdout": "compactd: failed hard", "exit": 2},
    }.items():
        hooks.plan(BeforeModel=plan)
        run = g.prompt(f"ASK {name}", check=False)
        outcomes[name] = (run.returncode, len(run.bodies("main")), run.stdout + run.stderr)
    assert outcomes["text, exit 0"][:2] == (0, 1) and "answered" in outcomes["text, exit 0"][2]
    assert outcomes["exit 1"][:2] == (0, 1) and "answered" in outcomes["exit 1"][2]
    # Exit status 2 blocks the model call: the prompt gets no answer.
    assert outcomes["exit 2"][1] == 0 and "answered" not in outcomes["exit 2"][2]
    assert "compactd: failed hard" in outcomes["exit 2"][2]

    project_settings = g.project / ".gemini" / "settings.json"
    project_settings.parent.mkdir()
    marker = tmp_path / "project-hook-ran"
    hook = {"type": "command", "command": f"touch {marker}", "timeout": 10_000}
    project_settings.write_text(
        json.dumps({"hooks": {"BeforeAgent": [{"matcher": "*", "hooks": [hook]}]}})
    )
    hooks.plan()
    g.prompt("ASK again")
    assert marker.exists()


# ------------------------------------------------------------------------------------- MCP

MCP_SERVER = """
from mcp.server.mcpserver import MCPServer
server = MCPServer("recaller")

@server.tool()
def recall(query: str) -> str:
    \"\"\"Find an original message by a few of its words.\"\"\"
    return f"ORIGINAL for {query}"

server.run()
"""


def test_mcp_server_is_offered_only_when_trusted(exe: str, emu: Emulator, tmp_path: Path) -> None:
    """docs/gemini.md#mcp: an mcpServers entry, its tools as mcp_<server>_<tool>, offered headless only with
    trust: true."""
    g = _gemini(exe, emu, tmp_path, "mcp")
    script = tmp_path / "mcp_server.py"
    script.write_text(MCP_SERVER)
    g.add_mcp_server("compactd", sys.executable, [str(script)])
    emu.gemini.set_default(Reply(text="no tools used"))
    run = g.prompt("ONE")
    assert not [n for n in _declared(run.bodies("main")[0]) if n.startswith("mcp_")]

    g.add_mcp_server("compactd", sys.executable, [str(script)], trust=True)
    emu.gemini.set_default(
        Turns(
            {
                "RECALL": [
                    Reply(tool_uses=[ToolUse("mcp_compactd_recall", {"query": "the build cache"})]),
                    Reply(text="Recalled."),
                ]
            }
        )
    )
    run = g.prompt("RECALL the build cache")
    first, second = run.bodies("main")
    assert "mcp_compactd_recall" in _declared(first)
    decl = next(
        d
        for t in first["tools"]
        for d in t["functionDeclarations"]
        if d["name"] == "mcp_compactd_recall"
    )
    assert "query" in json.dumps(decl)
    (response,) = function_responses(second)
    assert response["name"] == "mcp_compactd_recall"
    assert "ORIGINAL for the build cache" in json.dumps(response)


# ------------------------------------------------------------------------------ older format


def test_an_older_json_chat_is_read_and_continued(exe: str, emu: Emulator, tmp_path: Path) -> None:
    """docs/gemini.md#older-format: a session-*.json chat (as Gemini CLI wrote them before 0.39) is resumed
    by 0.61.0, which continues it in a new .jsonl beside it and leaves the .json alone."""
    from tests.conftest import ROOT

    (source,) = (ROOT / "tests" / "data" / "gemini").glob("session-*.json")
    g = _gemini(exe, emu, tmp_path, "older")
    emu.gemini.set_default(Turns({"AGAIN": [Reply(text="continued")]}))
    g.prompt("ONE", check=True)  # makes the project's folders
    for path in g.chat_files():
        path.unlink()
    legacy = g.chats_dir / source.name
    shutil.copyfile(source, legacy)
    original = legacy.read_bytes()
    run = g.resume("AGAIN please")
    (body,) = run.bodies("main")
    sent = json.dumps(body)
    data = json.loads(original)
    prompts = [_text(m) for m in data["messages"] if m["type"] == "user"]
    assert all(p in sent for p in prompts)
    assert "Context compressed from" not in sent  # info messages stay out
    assert function_calls(body)
    assert legacy.read_bytes() == original
    continued = legacy.with_suffix(".jsonl")
    records = read_jsonl(continued)
    assert records[0]["sessionId"] == data["sessionId"]
    assert any(r.get("type") == "user" and _text(r) == "AGAIN please" for r in records)
    # It starts with a metadata line and every record of the old chat.
    assert {"sessionId", "projectHash", "startTime"} <= set(records[0])
    assert [r["id"] for r in records[1 : 1 + len(data["messages"])]] == [
        m["id"] for m in data["messages"]
    ]
