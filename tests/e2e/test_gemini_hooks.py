"""``compactd gemini hook|install|uninstall`` run as Gemini CLI and a user run them: a process,
the event on stdin (docs/gemini.md#compactd-inside-gemini-cli). BeforeModel gives back, with
every request after a compression, what that compression dropped (worked out once, kept for the
requests after it); BeforeAgent warns once per level; bad input is one line on stderr, exit 0,
nothing on stdout; the chat is never written; install and uninstall round-trip settings.json
byte for byte, refuse what they do not expect in one line naming the file and the key, and keep
a symlink a link; ``compactd mcp`` serves the chat the hook recorded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.gemini_chats import CAPTURED, SESSION, edge_chat

COMPRESSED = next(p for p in CAPTURED if "compressed_on_resume" in p.name)
TITLE = "compactd: what Gemini CLI's summary above left out"
CWD = "/tmp/compactd-gemini-capture/compressed/project"
FIRST = "FIRST: read notes.txt, then run the alpha check and count the notes"
ACK = "Got it. Thanks for the additional context!"


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEMINI", "COMPACTD"))}
    env.update(HOME=str(tmp / "home"), XDG_DATA_HOME=str(tmp / "data"), PYTHONPATH=str(ROOT))
    env.update(extra)
    return env


def _run(
    tmp: Path, *args: str, stdin: bytes = b"", cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "compactd", "gemini", *args],
        input=stdin, env=_env(tmp, **env), cwd=cwd or tmp, capture_output=True, timeout=120,
        check=False,
    )  # fmt: skip


def _snapshots(chat: bytes) -> list[str]:
    """The snapshots of a chat's compressions, in order."""
    found: list[str] = []
    for line in chat.splitlines():
        listed = json.loads(line).get("$set", {}).get("messages") or []
        if len(listed) > 1 and "<state_snapshot>" in json.dumps(listed[1]):
            text = "".join(p.get("text", "") for p in listed[1]["content"])
            if text not in found:
                found.append(text)
    return found


def _request(
    snapshot: str | None, prompt: str = "SECOND: now run the beta check"
) -> list[dict[str, str]]:
    """The messages BeforeModel gets: the session context and the snapshot (joined), the
    acknowledgement, the prompt (docs/gemini.md#beforemodel)."""
    first = "<session_context>\nThis is the Gemini CLI.\n</session_context>"
    if snapshot is None:
        return [{"role": "user", "content": first + prompt}]
    return [
        {"role": "user", "content": first + snapshot},
        {"role": "model", "content": ACK},
        {"role": "user", "content": prompt},
    ]


def _event(name: str, chat: Path | str, **extra: Any) -> bytes:
    event = {
        "session_id": SESSION,
        "transcript_path": str(chat),
        "cwd": CWD,
        "hook_event_name": name,
        "timestamp": "2026-05-01T10:00:00.000Z",
        **extra,
    }
    return json.dumps(event).encode()


def _model(chat: Path | str, messages: list[dict[str, str]]) -> bytes:
    request = {"model": "gemini-3-flash-preview", "messages": messages, "config": {}}
    return _event("BeforeModel", chat, llm_request=request)


def _answered(run: subprocess.CompletedProcess[bytes], given: list[dict[str, str]]) -> str:
    """The text BeforeModel appended to the messages it was given (which come back as they were)."""
    assert run.returncode == 0 and run.stderr == b"", run.stderr
    answer = json.loads(run.stdout)["hookSpecificOutput"]
    assert answer["hookEventName"] == "BeforeModel"
    messages = answer["llm_request"]["messages"]
    assert messages[:-1] == given and messages[-1]["role"] == "user"
    return str(messages[-1]["content"])


def _stat(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def test_every_request_after_a_compression_carries_what_it_dropped(tmp_path: Path) -> None:
    chat = tmp_path / "session-2026-11-28T08-47-c051a701.jsonl"
    shutil.copyfile(COMPRESSED, chat)
    before = _stat(chat)
    (snapshot,) = _snapshots(chat.read_bytes())
    given = _request(snapshot)
    text = _answered(_run(tmp_path, "hook", stdin=_model(chat, given)), given)
    assert text.startswith(TITLE)
    assert text.count(FIRST) == 1
    assert text.count("`echo alpha-check-7d1`") == 1 and text.count("`wc -l notes.txt`") == 1
    assert "notes.txt" in text.split("Files read")[1]
    assert len(text) <= 6_000
    assert _stat(chat) == before  # only read
    # The next request: the same text, worked out once (the chat is not read again).
    chat.rename(tmp_path / "moved.jsonl")
    later = _request(snapshot, "SECOND: now run the beta check") + [
        {"role": "model", "content": "Running the beta check."}
    ]
    assert _answered(_run(tmp_path, "hook", stdin=_model(chat, later)), later) == text
    # A request that already carries a hand-back (compactd installed twice, the hooks run one
    # after the other) gets no second one.
    twice = [*later, {"role": "user", "content": text}]
    again = _run(tmp_path, "hook", stdin=_model(chat, twice))
    assert again.returncode == 0 and again.stdout == b"" and again.stderr == b""
    # A request without a snapshot (a chat never compressed) gets nothing.
    plain = _run(tmp_path, "hook", stdin=_model(chat, _request(None)))
    assert plain.returncode == 0 and plain.stdout == b"" and plain.stderr == b""


def test_the_second_compression_gives_back_the_first_one_s_items_too(tmp_path: Path) -> None:
    data = edge_chat().data()
    lines = data.splitlines(keepends=True)
    first, second = _snapshots(data)
    at = next(i for i, line in enumerate(lines) if _snapshots(line) == [second])
    chat = tmp_path / "session-2026-05-01T10-00-5b1c0e55.jsonl"
    chat.write_bytes(b"".join(lines[:at]))
    given = _request(first, "Keep the old CSV dialect as it is; never change quoting")
    text = _answered(_run(tmp_path, "hook", stdin=_model(chat, given)), given)
    assert "Find why the pelican importer drops rows" in text
    assert text.count("`pytest -q tests/test_importer.py`") == 1
    # The second compression, in the middle of a turn: what it dropped, and what the first
    # hand-back carried (dropped with the first snapshot), each once; the kept turn not at all.
    chat.write_bytes(data)
    given = _request(second, "Now write the changelog entry for the importer fix")
    text = _answered(_run(tmp_path, "hook", stdin=_model(chat, given)), given)
    assert text.count("Keep the old CSV dialect as it is; never change quoting") == 1
    assert text.count("Find why the pelican importer drops rows") == 1
    assert text.count("`pytest -q tests/test_importer.py`") == 1
    assert "importer.py" in text and "Now write the changelog" not in text
    assert "git log --oneline -3" not in text and "Something I did not mean" in text


def test_a_snapshot_the_chat_does_not_hold_gets_nothing(tmp_path: Path) -> None:
    chat = tmp_path / "session.jsonl"
    shutil.copyfile(COMPRESSED, chat)
    given = _request(
        "<state_snapshot>\n  <overall_goal>elsewhere</overall_goal>\n</state_snapshot>"
    )
    run = _run(tmp_path, "hook", stdin=_model(chat, given))
    assert run.returncode == 0 and run.stdout == b"" and run.stderr == b""


def test_threshold_warning_once_per_level_and_opt_out(tmp_path: Path) -> None:
    chat = tmp_path / "session.jsonl"
    shutil.copyfile(COMPRESSED, chat)  # the last answer's total: 10,891 tokens
    settings = tmp_path / "home" / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(
        '{\n  // the user\'s comment\n  "model": {"compressionThreshold": 0.0115}\n}\n'
    )
    event = _event("BeforeAgent", chat, prompt="THIRD: wrap up")
    first = _run(tmp_path, "hook", stdin=event)
    answer = json.loads(first.stdout)
    context = answer["hookSpecificOutput"]["additionalContext"]
    assert "Gemini CLI compresses it (12,058: 1% of a 1,048,576-token window)" in context
    assert "<" not in context  # Gemini CLI escapes it
    assert answer["systemMessage"] == (
        "compactd: context at 90% of Gemini CLI's compression size (10,891 tokens)"
    )
    assert _run(tmp_path, "hook", stdin=event).stdout == b""  # once per level
    other = {"XDG_DATA_HOME": str(tmp_path / "other")}
    assert (
        _run(tmp_path, "hook", stdin=event, COMPACTD_NO_THRESHOLD_WARNING="1", **other).stdout
        == b""
    )
    assert _run(tmp_path, "hook", "--no-threshold-warning", stdin=event, **other).stdout == b""
    # The project's settings win; past the size itself the CLI compresses before the prompt
    # reaches the model: nothing to warn about.
    project = tmp_path / "project" / ".gemini" / "settings.json"
    project.parent.mkdir(parents=True)
    project.write_text('{"model": {"compressionThreshold": 0.01}}')
    past = _event("BeforeAgent", chat, prompt="go", cwd=str(tmp_path / "project"))
    assert _run(tmp_path, "hook", stdin=past, **other).stdout == b""
    # Far from it (the default threshold, half the window): nothing either.
    settings.write_text("{}")
    assert _run(tmp_path, "hook", stdin=event, XDG_DATA_HOME=str(tmp_path / "third")).stdout == b""


BAD: list[tuple[str, Any, str]] = [
    ("empty stdin", b"", "no hook event on stdin (expected Gemini CLI's JSON)"),
    ("not JSON", b"hello", "not JSON"),
    ("a JSON array", b"[1, 2]", "not one Gemini CLI sends"),
    ("unknown event", {"hook_event_name": "Teleport"}, "does not handle the Gemini CLI hook event"),
    (
        "messages not a list",
        {"hook_event_name": "BeforeModel", "llm_request": {"messages": "<state_snapshot>"}},
        "llm_request is not one Gemini CLI sends",
    ),  # fmt: skip
    (
        "no transcript_path",
        {
            "hook_event_name": "BeforeModel",
            "llm_request": {"messages": _request("<state_snapshot>x")},
        },
        "no transcript_path",
    ),  # fmt: skip
    ("missing chat", "missing", "does not exist"),
    ("a directory", "directory", "is a directory"),
    ("a FIFO", "fifo", "is a FIFO"),
    ("binary chat", "binary", "is binary"),
    ("another tool's format", "other", "not a session file compactd reads"),
]


@pytest.mark.parametrize("what,stdin,says", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_and_exit_zero(
    tmp_path: Path, what: str, stdin: Any, says: str
) -> None:
    chat = tmp_path / "session.jsonl"
    if stdin == "directory":
        chat.mkdir()
    elif stdin == "fifo":
        os.mkfifo(chat)
    elif stdin == "binary":
        chat.write_bytes(bytes(range(256)) * 64)
    elif stdin == "other":
        chat.write_text('{"said": "hello", "by": "me"}\n')
    if isinstance(stdin, str):
        stdin = _model(chat, _request("<state_snapshot>x</state_snapshot>"))
    elif isinstance(stdin, dict):
        stdin = json.dumps(stdin).encode()
    before = _stat(chat) if chat.is_file() else None
    run = _run(tmp_path, "hook", stdin=stdin)
    assert run.returncode == 0, run.stderr
    assert run.stdout == b""
    err = run.stderr.decode()
    assert err.startswith("compactd gemini hook: ") and err.count("\n") == 1, err
    assert says in err, err
    if before is not None:
        assert _stat(chat) == before


HOOK_GUARD_S = 60.0  # the timeout install gives Gemini CLI for the hook


def _spawn(tmp: Path, stdin: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "compactd", "gemini", "hook"], stdin=stdin,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp), cwd=tmp,
    )  # fmt: skip


def _finish(run: subprocess.Popen[bytes]) -> tuple[int, bytes, bytes]:
    try:
        run.wait(timeout=HOOK_GUARD_S)  # not communicate(): it would close stdin
    except subprocess.TimeoutExpired:
        run.kill()
        run.wait()
        raise AssertionError("still running: Gemini CLI would kill it") from None
    assert run.stdout is not None and run.stderr is not None
    return run.returncode, run.stdout.read(), run.stderr.read()


def test_stdin_that_is_never_closed(tmp_path: Path) -> None:
    chat = tmp_path / "session.jsonl"
    shutil.copyfile(COMPRESSED, chat)
    (snapshot,) = _snapshots(chat.read_bytes())
    whole = _model(chat, _request(snapshot))
    cases = [(whole, "answer"), (whole[: len(whole) // 2], "refusal"), (b"", "refusal")]
    runs = []
    for written, expected in cases:
        run = _spawn(tmp_path, subprocess.PIPE)
        assert run.stdin is not None
        run.stdin.write(written)
        run.stdin.flush()  # and never closed while the process runs
        runs.append((run, expected))
    for run, expected in runs:
        try:
            code, out, err = _finish(run)
        finally:
            assert run.stdin is not None
            run.stdin.close()
        assert code == 0, err
        if expected == "answer":
            assert TITLE.encode() in out, err
        else:
            line = err.decode()
            assert out == b"" and line.count("\n") == 1, line
            assert "was not closed within" in line or "gave up after" in line, line


@pytest.mark.parametrize("source", ["/dev/zero", "fifo"])
def test_dev_zero_or_a_fifo_without_writer_on_stdin(tmp_path: Path, source: str) -> None:
    if source == "fifo":
        fifo = tmp_path / "in"
        os.mkfifo(fifo)
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO nobody writes to, as stdin
    else:
        fd = os.open(source, os.O_RDONLY)
    try:
        run = _spawn(tmp_path, fd)
    finally:
        os.close(fd)
    code, out, err = _finish(run)
    line = err.decode()
    assert code == 0 and out == b"" and line.count("\n") == 1, line
    assert line.startswith("compactd gemini hook: ")


def test_events_compactd_has_nothing_to_say_to_get_nothing(tmp_path: Path) -> None:
    chat = tmp_path / "session.jsonl"
    shutil.copyfile(COMPRESSED, chat)
    for name, extra in (("SessionStart", {"source": "resume"}), ("PreCompress", {"trigger": "auto"}),
                        ("AfterAgent", {"prompt": "x", "prompt_response": "y"}),
                        ("SessionEnd", {"reason": "exit"}), ("AfterModel", {}),
                        ("BeforeTool", {"tool_name": "read_file", "tool_input": {}})):  # fmt: skip
        run = _run(tmp_path, "hook", stdin=_event(name, chat, **extra))
        assert run.returncode == 0 and run.stdout == b"" and run.stderr == b"", name


def test_the_hook_imports_no_sdk_daemon_or_event_loop(tmp_path: Path) -> None:
    chat = tmp_path / "session.jsonl"
    shutil.copyfile(COMPRESSED, chat)
    (snapshot,) = _snapshots(chat.read_bytes())
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "compactd", "gemini", "hook"],
        input=_model(chat, _request(snapshot)), env=_env(tmp_path), cwd=tmp_path,
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    imported = {
        line.split("|")[-1].strip() for line in run.stderr.decode().splitlines() if "|" in line
    }
    assert "compactd.agents.gemini.cli" in imported and TITLE.encode() in run.stdout
    heavy = {"anthropic", "openai", "mcp", "pygls", "anyio", "asyncio", "rich", "tomlkit",
             "compactd.cli.main", "compactd.engine", "compactd.agents.claude_code.cli"}  # fmt: skip
    assert not heavy & imported, heavy & imported


# -- install and uninstall -------------------------------------------------------------------------

USER_SETTINGS = b"""{
  "security": {"auth": {"selectedType": "gemini-api-key"}},
  "hooks": {"AfterAgent": [{"matcher": "*", "hooks": [{"type": "command", "command": "echo done"}]}]},
  "mcpServers": {"docs": {"command": "docs-server"}}
}
"""


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _both(tmp: Path) -> dict[str, bytes]:
    return {**_tree(tmp / "home"), **{f"p/{k}": v for k, v in _tree(tmp / "project").items()}}


@pytest.mark.parametrize("scope", ["user", "project"])
def test_install_uninstall_round_trip(tmp_path: Path, scope: str) -> None:
    home, project = tmp_path / "home" / ".gemini", tmp_path / "project"
    home.mkdir(parents=True)
    project.mkdir()
    (home / "settings.json").write_bytes(USER_SETTINGS)
    before = _both(tmp_path)

    dry = _run(tmp_path, "install", "--scope", scope, "--dry-run", cwd=project)
    assert dry.returncode == 0 and b"would change" in dry.stdout, dry.stderr
    assert _both(tmp_path) == before
    run = _run(tmp_path, "install", "--scope", scope, cwd=project)
    assert run.returncode == 0 and b"changed: " in run.stdout, run.stderr
    installed = _both(tmp_path)
    again = _run(tmp_path, "install", "--scope", scope, cwd=project)
    assert b"nothing to change" in again.stdout
    assert _both(tmp_path) == installed

    folder = home if scope == "user" else project / ".gemini"
    settings = json.loads((folder / "settings.json").read_text())
    if scope == "user":  # the user's own entries as they were
        mine = json.loads(USER_SETTINGS)
        assert settings["security"] == mine["security"]
        assert settings["hooks"]["AfterAgent"] == mine["hooks"]["AfterAgent"]
        assert settings["mcpServers"]["docs"] == mine["mcpServers"]["docs"]
    (model,) = settings["hooks"]["BeforeModel"]
    (agent,) = settings["hooks"]["BeforeAgent"]
    server = settings["mcpServers"]["compactd"]
    assert server["trust"] is True
    assert model["hooks"][0]["timeout"] == 60_000
    if scope == "project":
        # The project's file names no path of this machine.
        text = (folder / "settings.json").read_text()
        assert str(tmp_path) not in text and sys.executable not in text, text
        assert (
            model["hooks"][0]["command"] == agent["hooks"][0]["command"] == "compactd gemini hook"
        )
        assert server == {"command": "compactd", "args": ["mcp"], "trust": True}
        assert b"trusted folder" in run.stdout
    else:
        assert model["hooks"][0]["command"] == f"{sys.executable} -m compactd gemini hook"
        assert server["args"] == ["-m", "compactd", "mcp"]

    out = _run(tmp_path, "uninstall", "--scope", scope, cwd=project)
    assert out.returncode == 0, out.stderr
    assert _both(tmp_path) == before


def test_no_threshold_warning_and_a_data_dir_go_into_the_commands(tmp_path: Path) -> None:
    home = tmp_path / "home" / ".gemini"
    data = tmp_path / "elsewhere"
    run = _run(tmp_path, "install", "--no-threshold-warning", "--data-dir", str(data))
    assert run.returncode == 0, run.stderr
    settings = json.loads((home / "settings.json").read_text())
    agent = settings["hooks"]["BeforeAgent"][0]["hooks"][0]["command"]
    model = settings["hooks"]["BeforeModel"][0]["hooks"][0]["command"]
    assert agent.endswith(f"--data-dir {data} --no-threshold-warning")
    assert model.endswith(f"--data-dir {data}")
    assert settings["mcpServers"]["compactd"]["args"][-2:] == ["--data-dir", str(data)]
    # Installed again with the warning on: the command changes back, in place.
    run = _run(tmp_path, "install", "--data-dir", str(data))
    settings = json.loads((home / "settings.json").read_text())
    assert len(settings["hooks"]["BeforeAgent"]) == 1
    assert not settings["hooks"]["BeforeAgent"][0]["hooks"][0]["command"].endswith("warning")
    assert _run(tmp_path, "uninstall", "--data-dir", str(data)).returncode == 0
    assert not (home / "settings.json").exists() and not home.exists()


def test_uninstall_after_the_user_edited_takes_out_only_compactds_entries(tmp_path: Path) -> None:
    home = tmp_path / "home" / ".gemini"
    home.mkdir(parents=True)
    (home / "settings.json").write_bytes(USER_SETTINGS)
    assert _run(tmp_path, "install").returncode == 0
    settings = json.loads((home / "settings.json").read_text())
    settings["ui"] = {"theme": "GitHub"}
    settings["hooks"]["BeforeModel"].append({"matcher": "*", "hooks": [{"type": "command",
                                                                        "command": "mine"}]})  # fmt: skip
    (home / "settings.json").write_text(json.dumps(settings, indent=2))
    assert _run(tmp_path, "uninstall").returncode == 0
    left = json.loads((home / "settings.json").read_text())
    assert "compactd" not in json.dumps(left)
    assert (
        left["ui"] == {"theme": "GitHub"}
        and left["hooks"]["BeforeModel"][0]["hooks"][0]["command"] == "mine"
    )
    assert left["mcpServers"] == {"docs": {"command": "docs-server"}}
    assert "BeforeAgent" not in left["hooks"]


REFUSED = [
    ("not JSON", b'{"hooks": {,}', "is not valid JSON"),
    ("not text", b"\xff\xfe not text", "is not UTF-8 text"),
    ("not an object", b"[1, 2]", "does not hold a JSON object"),
    ("comments", b'{\n  // mine\n  "ui": {}\n}\n', "has comments (line 2)"),
    ("hooks", b'{"hooks": []}', "'hooks' is not an object"),
    ("an event", b'{"hooks": {"BeforeModel": {"matcher": "*"}}}', "hooks.BeforeModel is not a list of groups"),
    ("a group", b'{"hooks": {"BeforeAgent": [{"hooks": "x"}]}}', "hooks.BeforeAgent[0].hooks is not a list"),
    ("mcpServers", b'{"mcpServers": []}', "'mcpServers' is not an object"),
    ("hooks null", b'{"hooks": null}', "'hooks' is not an object"),
    ("mcpServers null", b'{"mcpServers": null}', "'mcpServers' is not an object"),
    ("an event null", b'{"hooks": {"BeforeAgent": null}}', "hooks.BeforeAgent is not a list of groups"),
    ("a handler", b'{"hooks": {"AfterAgent": [{"hooks": [5]}]}}', "hooks.AfterAgent[0].hooks[0] is not an object"),
    ("a server", b'{"mcpServers": {"compactd": "compactd mcp"}}', "mcpServers.compactd is a server of another program"),
    ("another compactd", b'{"mcpServers": {"compactd": {"command": "other", "args": []}}}',
     "mcpServers.compactd is a server of another program"),
]  # fmt: skip


@pytest.mark.parametrize("what,content,says", REFUSED, ids=[r[0] for r in REFUSED])
def test_install_refuses_what_it_does_not_expect(
    tmp_path: Path, what: str, content: bytes, says: str
) -> None:
    home = tmp_path / "home" / ".gemini"
    home.mkdir(parents=True)
    settings = home / "settings.json"
    settings.write_bytes(content)
    before = _tree(tmp_path / "home")
    for action in ("install", "uninstall"):
        if action == "uninstall" and what in ("another compactd", "a server"):
            continue  # nothing of compactd's to take out: uninstall leaves it
        run = _run(tmp_path, action)
        assert run.returncode == 1, run.stdout
        err = run.stderr.decode()
        assert err.count("\n") == 1 and str(settings) in err and "nothing was changed" in err, err
        assert says in err, err
        assert _tree(tmp_path / "home") == before


def test_a_symlinked_settings_file_is_written_through_its_link(tmp_path: Path) -> None:
    home = tmp_path / "home" / ".gemini"
    home.mkdir(parents=True)
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "gemini.json").write_bytes(USER_SETTINGS)
    (home / "settings.json").symlink_to(dotfiles / "gemini.json")
    assert _run(tmp_path, "install").returncode == 0
    assert (home / "settings.json").is_symlink()
    assert b'"compactd"' in (dotfiles / "gemini.json").read_bytes()
    assert _run(tmp_path, "uninstall").returncode == 0
    assert (home / "settings.json").is_symlink()
    assert (dotfiles / "gemini.json").read_bytes() == USER_SETTINGS


# -- compactd mcp -----------------------------------------------------------------------------------


def test_compactd_mcp_serves_the_chat_the_hook_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compactd.mcp_server import McpConfig, context_answer, recall_answer

    chat = tmp_path / "session-2026-11-28T08-47-c051a701.jsonl"
    shutil.copyfile(COMPRESSED, chat)
    data = tmp_path / "data" / "compactd"  # XDG_DATA_HOME/compactd: the hook's data dir
    run = _run(tmp_path, "hook", stdin=_event("BeforeAgent", chat, prompt="hi"))
    assert run.returncode == 0, run.stderr
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))  # no Claude Code session
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path / "home"))
    config = McpConfig(data, CWD)
    answer = recall_answer(config, "alpha-check-7d1", 5, None)
    assert f"{SESSION} (the current Gemini CLI chat, as compactd's hook recorded it)" in answer
    assert "run_shell_command: echo alpha-check-7d1" in answer
    status = context_answer(config, None)
    assert "model gemini-3.8-flash" in status and "1,048,576-token window" in status
    assert "compactions so far: 1" in status
    assert "wc -l notes.txt" in recall_answer(config, "wc notes", 5, str(chat))
