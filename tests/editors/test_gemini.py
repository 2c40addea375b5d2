"""The facts docs/gemini.md states about Gemini CLI 0.61.0, checked on the real CLI.

Each test runs the pinned ``gemini`` (tests/editors/gemini_cli.py) headless against
tests/emulator's Gemini API, offline, with throwaway hooks and a throwaway MCP server written by
the test. What a compactd integration relies on is asserted here, so that a new CLI version that
changes it fails this file first; the facts of compression, resume and the hook events are
checked in the same runs as compactd's own hooks (tests/editors/test_gemini_compactd.py). The
section of docs/gemini.md each test checks is named in its docstring. One run checks as many
facts as it can: a run of the CLI costs several seconds before its first request.
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
    SESSION_FILE_RE,
    Gemini,
    Hooks,
    Turns,
    gemini_exe,
    read_jsonl,
    shell,
)
from tests.emulator import Emulator, Reply, ToolUse
from tests.emulator.gemini import contents_text, function_calls, function_responses

pytestmark = pytest.mark.timeout(600)
CTX = "<session_context>"


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


@pytest.fixture(scope="module")
def exe() -> str:
    return gemini_exe()


def _gemini(exe: str, emu: Emulator, tmp_path: Path, name: str) -> Gemini:
    return Gemini(exe, emu, tmp_path, out_dir(f"gemini-{name}") / "gemini.log")


def _declared(body: dict[str, Any]) -> list[str]:
    return [d["name"] for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []]


def _sets(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The ``$set.messages`` lists of a chat file, in order."""
    return [r["$set"]["messages"] for r in records if "messages" in r.get("$set", {})]


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))


MCP_SERVER = """
from mcp.server.mcpserver import MCPServer
server = MCPServer("recaller")

@server.tool()
def recall(query: str) -> str:
    \"\"\"Find an original message by a few of its words.\"\"\"
    return f"ORIGINAL for {query}"

server.run()
"""


# ------------------------------------------------------------ offline, chat file, MCP, older


def test_offline_run_its_chat_file_mcp_trust_and_an_older_chat(
    exe: str, emu: Emulator, tmp_path: Path
) -> None:
    """docs/gemini.md#offline, #requests, #chat-files, #mcp, #older-format: a headless run connects
    to 127.0.0.1 only; what it sends; the JSONL chat file it writes; an MCP server's tools are
    offered (as mcp_<server>_<tool>) only with trust: true; a session-*.json chat (as Gemini CLI
    wrote them before 0.39) is resumed by 0.61.0 in a new .jsonl beside it, the .json left alone."""
    strace = shutil.which("strace")
    assert strace, "strace is not installed: apt-get install strace (tests/editors/setup.sh)"
    g = _gemini(exe, emu, tmp_path, "offline")
    (g.project / "notes.txt").write_text("first note\nsecond note\n")
    script = tmp_path / "mcp_server.py"
    script.write_text(MCP_SERVER)
    g.add_mcp_server("hidden", sys.executable, [str(script)])  # not trusted
    g.add_mcp_server("recaller", sys.executable, [str(script)], trust=True)
    emu.gemini.set_default(
        Turns(
            {
                "CHECK": [
                    Reply(text="Reading.", tool_uses=[ToolUse("read_file", {"file_path": "notes.txt"})]),
                    Reply(text="Running.", tool_uses=[shell("echo offline-ok", "say ok")]),
                    Reply(tool_uses=[ToolUse("mcp_recaller_recall", {"query": "the build cache"})]),
                    Reply(text="All checked."),
                ]
            }
        )
    )  # fmt: skip
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
    assert len(main) == 4 and all(r.query == "alt=sse" for r in main)
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

    # MCP: the trusted server's tool is offered, the untrusted one's not; a call goes out as a
    # functionCall by that name and its result comes back as a functionResponse.
    assert "mcp_recaller_recall" in _declared(first)
    assert not [n for n in _declared(first) if n.startswith("mcp_hidden")]
    decl = next(
        d
        for t in first["tools"]
        for d in t["functionDeclarations"]
        if d["name"] == "mcp_recaller_recall"
    )
    assert "query" in json.dumps(decl)
    (response,) = [r for r in function_responses(main[3].body) if r["name"].startswith("mcp_")]
    assert response["name"] == "mcp_recaller_recall"
    assert "ORIGINAL for the build cache" in json.dumps(response)

    # The chat file: ~/.gemini/tmp/<slug>/chats/session-<minute>-<id8>.jsonl.
    projects = json.loads((g.gemini_dir / "projects.json").read_text())["projects"]
    assert projects == {str(g.project): g.slug}
    chat = g.chat()
    assert SESSION_FILE_RE.match(chat.name)
    records = read_jsonl(chat)
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
    assert [len(v) for v in by_id.values()] == [2, 2, 2, 1]
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
    assert len(answers) == 3
    assert answers[1]["content"] == call["result"]
    assert "offline-ok" in json.dumps(call["result"])
    assert any(r.get("$set", {}).keys() == {"lastUpdated"} for r in records)

    # An older chat beside it, resumed by its session id (docs/gemini.md#older-format).
    from tests.conftest import ROOT

    (source,) = (ROOT / "tests" / "data" / "gemini").glob("session-*.json")
    emu.gemini.set_default(Turns({"AGAIN": [Reply(text="continued")]}))
    legacy = g.chats_dir / source.name
    shutil.copyfile(source, legacy)
    original = legacy.read_bytes()
    data = json.loads(original)
    resumed = g.resume("AGAIN please", session=data["sessionId"])
    (body,) = resumed.bodies("main")
    sent = json.dumps(body)
    prompts = [_text(m) for m in data["messages"] if m["type"] == "user"]
    assert all(p in sent for p in prompts)
    assert "Context compressed from" not in sent  # info messages stay out
    assert function_calls(body) and "offline-ok" not in sent
    assert legacy.read_bytes() == original
    continued = legacy.with_suffix(".jsonl")
    lines = read_jsonl(continued)
    assert lines[0]["sessionId"] == data["sessionId"]
    assert any(r.get("type") == "user" and _text(r) == "AGAIN please" for r in lines)
    # It starts with a metadata line and every record of the old chat.
    assert {"sessionId", "projectHash", "startTime"} <= set(lines[0])
    assert [r["id"] for r in lines[1 : 1 + len(data["messages"])]] == [
        m["id"] for m in data["messages"]
    ]


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


# ----------------------------------------------------------------------------------- hooks


def test_what_hooks_see_and_what_their_answers_do(exe: str, emu: Emulator, tmp_path: Path) -> None:
    """docs/gemini.md#beforemodel, #beforeagent-and-sessionstart, #hook-output: what BeforeModel
    sees and what a returned llm_request.messages does (appended, replacing by position, an empty
    list), request by request in one turn; where SessionStart's and BeforeAgent's
    additionalContext go and what a later --resume makes of them; text that is not JSON and the
    exit status; a hook in the project's .gemini/settings.json (the folder is trusted: folder
    trust is off)."""
    g = _gemini(exe, emu, tmp_path, "hooks")
    hooks = Hooks(g, ["SessionStart", "BeforeAgent", "BeforeModel"], tmp_path / "hooks")
    texty = Hooks(g, ["BeforeModel"], tmp_path / "texty")  # prints text, exit 0
    failing = Hooks(g, ["BeforeModel"], tmp_path / "failing")  # exits 1
    emu.gemini.set_default(
        Turns(
            {
                "ONE": [
                    Reply(text="Running.", tool_uses=[shell("echo step-one", "step")]),
                    Reply(text="Again.", tool_uses=[shell("echo step-two", "step")]),
                    Reply(text="Once more.", tool_uses=[shell("echo step-three", "step")]),
                    Reply(text="one done"),
                ],
                "TWO": [Reply(text="two done")],
                "THREE": [Reply(text="three done")],
                "ASK": [Reply(text="answered")],
            }
        )
    )
    # 1. One turn of four requests; BeforeModel answers each differently.
    hooks.plan(
        SessionStart={"context": "START <b>"},
        BeforeAgent={"context": "AGENT <b>"},
        BeforeModel=[{}, {"append": "HANDBACK-NOTE"}, {"replace_first": "REPLACED: "}, {"messages": []}],
    )  # fmt: skip
    run = g.prompt("ONE: the first prompt")
    bodies = run.bodies("main")
    seen = [e["llm_request"] for e in hooks.log() if e["hook_event_name"] == "BeforeModel"]
    assert len(seen) == len(bodies) == 4
    # SessionStart: in front of the prompt, in the same text; BeforeAgent: a part after it.
    # Both wrapped in <hook_context>, with < and > escaped.
    parts = [p["text"] for p in bodies[0]["contents"][0]["parts"]]
    assert parts[1] == "<hook_context>START &lt;b&gt;</hook_context>\n\nONE: the first prompt"
    assert parts[2] == "<hook_context>AGENT &lt;b&gt;</hook_context>"
    # BeforeAgent is told the prompt with the SessionStart context already in front of it.
    assert [e["prompt"] for e in hooks.log() if e["hook_event_name"] == "BeforeAgent"] == [
        "<hook_context>START &lt;b&gt;</hook_context>\n\nONE: the first prompt"
    ]
    # BeforeModel sees text only: one {role, content} per content with text (its text parts
    # joined), no calls, no results, in the request's order.
    assert seen[2]["messages"] == [
        {"role": "user", "content": "".join(parts)},
        {"role": "model", "content": "Running."},
        {"role": "model", "content": "Again."},
    ]
    assert set(seen[0]) == {"model", "messages", "config"}
    # An appended message reaches that request once, after everything, and is not kept: the
    # next request does not have it, and the chat file has none.
    assert json.dumps(bodies[1]).count("HANDBACK-NOTE") == 1
    assert bodies[1]["contents"][-1] == {"role": "user", "parts": [{"text": "HANDBACK-NOTE"}]}
    # Echoed, a content's text parts become one.
    assert bodies[1]["contents"][0]["parts"] == [{"text": "".join(parts)}]
    assert "HANDBACK-NOTE" not in json.dumps(bodies[2])
    # Returned messages replace the text of the contents with text, by position; a shorter list
    # leaves the later contents as they were, and the calls and results stay where they were.
    assert bodies[2]["contents"][0]["parts"] == [{"text": "REPLACED: " + "".join(parts)}]
    assert [c["args"]["command"] for c in function_calls(bodies[2])] == [
        "echo step-one",
        "echo step-two",
    ]
    assert len(function_responses(bodies[2])) == 2
    assert "Again." in contents_text(bodies[2])
    # An empty list changes nothing: nothing can be removed.
    assert contents_text(bodies[3])[0].startswith(CTX) and "REPLACED" not in json.dumps(bodies[3])
    chat_text = g.chat().read_text()
    assert "HANDBACK-NOTE" not in chat_text and "REPLACED" not in chat_text

    # 2. A resume, with BeforeAgent context only, and two more BeforeModel hooks: one prints text
    #    that is not JSON (exit 0), one exits 1. Neither stops the model call.
    hooks.plan(BeforeAgent={"context": "AGENT again"})
    texty.plan(BeforeModel={"stdout": "compactd: not json", "exit": 0})
    failing.plan(BeforeModel={"stdout": "compactd: failed", "exit": 1})
    run = g.resume("TWO: the second prompt")
    assert run.returncode == 0 and "two done" in run.stdout
    (body,) = run.bodies("main")
    sent = json.dumps(body)
    # The first prompt was recorded behind its SessionStart context, so the resume drops the
    # whole message: the user's words with it. Its BeforeAgent part went with it.
    assert "ONE: the first prompt" not in sent and "one done" in sent
    assert "ONE: the first prompt" in g.chat_files()[0].read_text()
    assert (
        contents_text(body)[-1] == "TWO: the second prompt<hook_context>AGENT again</hook_context>"
    )

    # 3. Another resume, no hook answering: a prompt with only a BeforeAgent part is kept, the
    #    part with it. A hook in the project's settings.json runs too.
    hooks.plan()
    texty.plan()
    failing.plan()
    project_settings = g.project / ".gemini" / "settings.json"
    project_settings.parent.mkdir()
    marker = tmp_path / "project-hook-ran"
    hook = {"type": "command", "command": f"touch {marker}", "timeout": 10_000}
    project_settings.write_text(
        json.dumps({"hooks": {"BeforeAgent": [{"matcher": "*", "hooks": [hook]}]}})
    )
    run = g.resume("THREE: the third prompt")
    (body,) = run.bodies("main")
    assert "TWO: the second prompt" in json.dumps(body) and "AGENT again" in json.dumps(body)
    assert marker.exists()

    # 4. Exit status 2 on BeforeModel blocks the model call: the prompt gets no answer (the
    #    run still exits 0).
    failing.plan(BeforeModel={"stdout": "compactd: failed hard", "exit": 2})
    run = g.prompt("ASK once more", check=False)
    assert run.returncode == 0 and not run.bodies("main")
    assert "answered" not in run.stdout + run.stderr
    assert "compactd: failed hard" in run.stdout + run.stderr
