"""compactd's Claude Code plugin without Claude Code: ``compactd claude-code session-compact`` run
as the plugin's module runs it (a process, the request on stdin), the hooks around it, and
``install`` / ``uninstall`` of the plugin (docs/claude-code.md#the-plugin).

The conversation is a synthetic coding session in Claude Code's shape (``compactd.cli.synthetic``):
many prompts, reads, commands and edits. The event's rows are built from it as Claude Code builds
them (``tests/cc_rows.py``). The answers must hold every user message of the replaced span word
for word, never give a row back by its handle, keep at most a quarter of the conversation
verbatim, and be recorded so that the SessionStart hook does not hand the same items back again.
The real-client tests (tests/editors/test_claude_code_plugin.py) run the same through Claude Code.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from compactd.agents.claude_code.services.plugin import plugin_folder
from compactd.agents.claude_code.services.prepared import Prepared, write_prepared
from compactd.agents.claude_code.services.rows import rows_tokens
from compactd.agents.claude_code.services.state import default_data_dir, load_session
from compactd.agents.claude_code.services.warm import ask, folder_key, socket_dir
from compactd.cli.synthetic import make_session, to_jsonl
from compactd.core.ledger import build_ledger
from compactd.core.view import main_thread
from compactd.transcript.model import Record, parse_lines
from tests.cc_rows import request, rows_of
from tests.conftest import ROOT

TITLE = "compactd: what Claude Code's summary above left out"
CC_SUMMARY = "This session is being continued from a previous conversation.\nSummary: the user asked for several things."


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CLAUDE", "COMPACTD", "ANTHROPIC", "OPENAI"))
    }
    # No claude program on PATH: install writes the keys itself (the real CLI is the
    # real-client tests' business).
    env["PATH"] = os.pathsep.join(
        d for d in env.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "claude").exists()
    )
    env.update(
        HOME=str(tmp / "home"),
        CLAUDE_CONFIG_DIR=str(tmp / "home" / ".claude"),
        XDG_DATA_HOME=str(tmp / "data"),
        PYTHONPATH=str(ROOT),
        **extra,
    )
    return env


def _run(
    tmp: Path, *args: str, stdin: bytes = b"", cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "compactd", "claude-code", *args],
        input=stdin, env=_env(tmp, **env), cwd=cwd or tmp, capture_output=True, timeout=120,
        check=False,
    )  # fmt: skip


def _session(tmp: Path, entries: int = 240) -> tuple[Path, list[Record]]:
    """A transcript of a session in progress (its records: the span a compaction replaces)."""
    path = tmp / "session.jsonl"
    path.write_bytes(to_jsonl(make_session(entries=entries, target_tokens=60_000, seed=3)))
    with path.open("rb") as fh:
        return path, list(parse_lines(fh))


def _answer(run: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    assert run.returncode == 0, run.stderr
    out = run.stdout.decode()
    assert out.count("\n") == 1  # one JSON object on one line
    answer = json.loads(out)
    assert isinstance(answer, dict)
    return answer


def _typed(records: list[Record]) -> list[str]:
    """What the person typed in ``records``, in order."""
    return [m.text for m in build_ledger(main_thread(records)).human]


def _hook(
    tmp: Path, name: str, transcript: Path, **fields: Any
) -> subprocess.CompletedProcess[bytes]:
    event = {
        "session_id": "sess-1",
        "transcript_path": str(transcript),
        "cwd": "/home/dev/project",
        "hook_event_name": name,
        **fields,
    }
    return _run(tmp, "hook", stdin=json.dumps(event).encode())


def _no_handles(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        assert "handle" not in row
        assert row["role"] in ("user", "assistant") and isinstance(row["text"], str)
        assert isinstance(row["toolUses"], list)
        for use in row["toolUses"]:
            assert set(use) == {"tool_use_id", "tool", "input"}


def test_nothing_configured_lets_claude_code_compact_and_the_hooks_wait(tmp_path: Path) -> None:
    path, records = _session(tmp_path)
    answer = _answer(
        _run(tmp_path, "session-compact", stdin=request(records, transcript=str(path)))
    )
    assert "COMPACTD_SUMMARIZER" in answer["next"] and "messages" not in answer
    assert "quote every message the user typed word for word" in answer["instructions"]
    # Claude Code compacts now (inside next(e)): its SessionStart hook leaves the hand-back to
    # the module, and PostCompact tells the user in one line.
    start = _hook(tmp_path, "SessionStart", path, source="compact")
    assert start.returncode == 0 and start.stdout == b"", start.stderr
    post = _hook(tmp_path, "PostCompact", path, trigger="manual", compact_summary=CC_SUMMARY)
    assert post.stdout.decode().count("\n") == 1
    assert b"compactd adds what it left out to the compaction" in post.stdout


def test_claude_codes_compaction_gets_compactds_row_of_what_it_left_out(tmp_path: Path) -> None:
    path, records = _session(tmp_path)
    rows = rows_of(records)
    kept = rows[-3:]  # Claude Code keeps the last rows verbatim, under their handles
    claude_code = {
        "messages": [
            {"role": "user", "text": CC_SUMMARY, "toolUses": [], "handle": "cc-new-1"},
            *kept,
        ],
        "tokensBefore": 60_000,
        "tokensAfter": 4_000,
    }
    body = request(records, transcript=str(path), claude_code=claude_code)
    answer = _answer(_run(tmp_path, "session-compact", stdin=body))
    out = answer["messages"]
    _no_handles(out)
    assert out[0]["text"] == CC_SUMMARY
    assert [(r["role"], r["text"]) for r in out[1:4]] == [(r["role"], r["text"]) for r in kept]
    assert out[-1]["role"] == "user" and out[-1]["text"].startswith(TITLE)
    everything = json.dumps(out)
    for words in _typed(records):
        assert json.dumps(words)[1:-1] in everything, words
    # Filed, then resumed: the SessionStart hook does not hand the same items back.
    start = _hook(tmp_path, "SessionStart", path, source="compact")
    assert start.stdout == b""


def test_claude_codes_compaction_unchanged_when_it_left_nothing_out(tmp_path: Path) -> None:
    path, records = _session(tmp_path, entries=40)
    ledger = build_ledger(main_thread(records))
    summary = "\n".join(
        [
            *(m.text for m in ledger.human),
            *(c.command for c in ledger.commands),
            *(f.path for f in ledger.files),
        ]
    )
    claude_code = {
        "messages": [{"role": "user", "text": summary, "toolUses": [], "handle": "cc-2"}]
    }
    body = request(records, transcript=str(path), claude_code=claude_code)
    answer = _answer(_run(tmp_path, "session-compact", stdin=body))
    assert answer["messages"] == claude_code["messages"]  # next(e)'s answer, exactly


def test_offline_answers_with_compactds_own_compaction(tmp_path: Path) -> None:
    path, records = _session(tmp_path)
    rows = rows_of(records)
    answer = _answer(
        _run(tmp_path, "session-compact", stdin=request(records, transcript=str(path), trigger="auto"),
             COMPACTD_SUMMARIZER="offline")
    )  # fmt: skip
    out = answer["messages"]
    _no_handles(out)
    summary = out[0]["text"]
    assert summary.startswith("This session continues an earlier conversation")
    assert "recall:<id>, the `recall` tool of the compactd MCP server" in summary
    for words in _typed(records[: len(records) - 5]):
        assert words in json.dumps(out, ensure_ascii=False) or words in summary, words
    tail = out[1:]
    assert rows_tokens(tail) <= rows_tokens(rows) / 4
    assert [r["text"] for r in tail] == [r["text"] for r in rows[len(rows) - len(tail) :]]
    assert not tail or "toolResults" not in tail[0]  # no result without its call
    # The user's one line, and no second hand-back at SessionStart.
    post = _hook(tmp_path, "PostCompact", path, trigger="auto", compact_summary="")
    assert post.stdout.startswith(b"compactd: compacted with its offline summary in ")
    assert _hook(tmp_path, "SessionStart", path, source="compact").stdout == b""
    # --offline says the same whatever is configured.
    forced = _answer(
        _run(tmp_path, "session-compact", "--offline", stdin=request(records, transcript=str(path)))
    )
    assert forced["messages"][0]["text"].startswith("This session continues")


def _prepare(tmp: Path, records: list[Record], at: int, **fields: Any) -> str:
    """A summary prepared in the background up to record ``at`` (what ``compactd mcp`` keeps)."""
    snapshot = records[at].uuid
    assert snapshot is not None
    write_prepared(
        _data(tmp),
        Prepared(
            session_id="sess-1",
            after=fields.get("after", ""),
            snapshot_uuid=snapshot,
            summary="Summary:\nPREPARED IN THE BACKGROUND: the user works on the parser.",
            prepared_at=time.time(),
            window=fields.get("window", 0),
        ),
    )
    return snapshot


def _data(tmp: Path) -> Path:
    env = _env(tmp)
    old = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = env["XDG_DATA_HOME"]
    try:
        return default_data_dir()
    finally:
        if old is None:
            del os.environ["XDG_DATA_HOME"]
        else:
            os.environ["XDG_DATA_HOME"] = old


MODEL = {"COMPACTD_SUMMARIZER": "anthropic", "ANTHROPIC_API_KEY": "sk-test"}


def test_a_prepared_summary_answers_at_once(tmp_path: Path) -> None:
    path, records = _session(tmp_path)
    rows = rows_of(records)
    at = next(i for i in range(len(records) - 1, 0, -1) if records[i].uuid == rows[-8]["handle"])
    _prepare(tmp_path, records, at)
    answer = _answer(
        _run(
            tmp_path,
            "session-compact",
            stdin=request(records, transcript=str(path), trigger="auto"),
            **MODEL,
        )
    )
    out = answer["messages"]
    _no_handles(out)
    summary = out[0]["text"]
    assert "PREPARED IN THE BACKGROUND" in summary
    # The ledger completes it: every message the person typed before the kept tail.
    tail = out[1:]
    replaced = (
        records[
            : next(
                i for i, r in enumerate(records) if r.uuid == rows[len(rows) - len(tail)]["handle"]
            )
        ]
        if tail
        else records
    )
    for words in _typed(replaced):
        assert words in summary or words[:60] in summary, words
    assert [r["text"] for r in tail] == [r["text"] for r in rows[len(rows) - len(tail) :]]
    assert len(tail) <= 7 and rows_tokens(tail) <= rows_tokens(rows) / 4
    post = _hook(tmp_path, "PostCompact", path, trigger="auto", compact_summary="")
    assert b"compacted with its summary prepared in the background" in post.stdout


def test_a_prepared_summary_brings_its_window_and_the_answer_skips_the_token_levels(
    tmp_path: Path,
) -> None:
    """The window the preparation recorded sizes the summary's room
    (docs/claude-code.md#the-seam): the answer does not import the token levels to work it
    out again, and a small window gives a smaller room than the model's own."""
    path, records = _session(tmp_path, entries=600)
    rows = rows_of(records)
    at = next(i for i in range(len(records) - 1, 0, -1) if records[i].uuid == rows[-8]["handle"])
    body = request(records, transcript=str(path), trigger="auto")
    sizes = {}
    for window in (0, 8_000):
        _prepare(tmp_path, records, at, window=window)
        run = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "compactd", "claude-code", "session-compact"],
            input=body, env=_env(tmp_path, **MODEL), cwd=tmp_path, capture_output=True,
            timeout=120, check=False,
        )  # fmt: skip
        imported = {line.split("|")[-1].strip() for line in run.stderr.decode().splitlines()}
        assert ("compactd.core.tokens" in imported) == (window == 0), window
        sizes[window] = len(_answer(run)["messages"][0]["text"])
    assert sizes[8_000] < sizes[0], sizes


@pytest.mark.parametrize(
    ("why", "fields", "instructions"),
    [
        ("instructions", {}, "focus on the parser"),
        ("earlier span", {"after": "a-boundary-since-replaced"}, None),
    ],
)
def test_a_prepared_summary_that_does_not_fit_lets_claude_code_compact(
    tmp_path: Path, why: str, fields: dict[str, str], instructions: str | None
) -> None:
    path, records = _session(tmp_path)
    _prepare(tmp_path, records, len(records) // 2, **fields)
    body = request(records, transcript=str(path), instructions=instructions)
    answer = _answer(_run(tmp_path, "session-compact", stdin=body, **MODEL))
    assert why in answer["next"]


def test_nothing_prepared_yet_lets_claude_code_compact(tmp_path: Path) -> None:
    path, records = _session(tmp_path)
    answer = _answer(
        _run(tmp_path, "session-compact", stdin=request(records, transcript=str(path)), **MODEL)
    )
    assert answer["next"] == "no summary is prepared for this session yet"


def test_a_subscription_login_prepares_nothing(tmp_path: Path) -> None:
    path, records = _session(tmp_path)
    answer = _answer(
        _run(
            tmp_path,
            "session-compact",
            stdin=request(records, transcript=str(path)),
            COMPACTD_SUMMARIZER="anthropic",
        )
    )
    assert "ANTHROPIC_API_KEY" in answer["next"]


def test_only_a_user_who_asked_gets_a_veto(tmp_path: Path) -> None:
    path, records = _session(tmp_path, entries=40)
    answer = _answer(
        _run(tmp_path, "session-compact", stdin=request(records), COMPACTD_BLOCK_COMPACTION="1")
    )
    assert answer == {"skip": "compactd blocks compactions (COMPACTD_BLOCK_COMPACTION is set)"}


@pytest.mark.parametrize(
    "stdin",
    [
        b"",
        b"not json",
        b'{"event": {"messages": []}}',
        b'{"event": {"messages": [{"role": 3}]}}',
        b'{"event": {"messages": [{"role": "user", "text": "hi"}]}, "claudeCode": {"messages": []}}',
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, stdin: bytes) -> None:
    run = _run(tmp_path, "session-compact", stdin=stdin)
    assert run.returncode == 2 and run.stdout == b""
    lines = run.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("compactd claude-code session-compact: ")


def test_the_transcript_is_only_read(tmp_path: Path) -> None:
    path, records = _session(tmp_path)
    before = path.read_bytes(), path.stat().st_mtime_ns
    _answer(
        _run(
            tmp_path,
            "session-compact",
            stdin=request(records, transcript=str(path)),
            COMPACTD_SUMMARIZER="offline",
        )
    )
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


# -- install ---------------------------------------------------------------------------------


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _all(home: Path, project: Path) -> dict[str, bytes]:
    return {**_tree(home), **{f"p/{k}": v for k, v in _tree(project).items()}}


@pytest.mark.parametrize("scope", ["project", "user", "local"])
def test_plugin_install_uninstall_round_trip(tmp_path: Path, scope: str) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".claude").mkdir(parents=True)
    (project / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_bytes(b'{"model":"opus",\n "hooks": {"Stop": []}}\n')
    (project / ".claude" / "settings.json").write_bytes(b'{ "permissions": {"allow": []} }')
    before = _all(home, project)

    dry = _run(tmp_path, "install", "--scope", scope, "--dry-run", cwd=project)
    assert dry.returncode == 0 and b"would change" in dry.stdout
    assert b"by writing the keys Claude Code's plugin commands write" in dry.stdout
    assert _all(home, project) == before
    run = _run(tmp_path, "install", "--scope", scope, "--summarizer", "offline", cwd=project)
    assert run.returncode == 0 and b"changed: " in run.stdout, run.stderr
    installed = _all(home, project)
    again = _run(tmp_path, "install", "--scope", scope, cwd=project)
    assert b"nothing to change" in again.stdout and _all(home, project) == installed
    settings_file = {
        "user": home / ".claude" / "settings.json",
        "project": project / ".claude" / "settings.json",
        "local": project / ".claude" / "settings.local.json",
    }[scope]
    settings = json.loads(settings_file.read_text())
    source = settings["extraKnownMarketplaces"]["compactd"]["source"]
    assert source["source"] == "directory"
    assert settings["enabledPlugins"] == {"compactd@compactd": True}
    assert settings["env"]["COMPACTD_SUMMARIZER"] == "offline"
    assert "claude-code statusline" in settings["statusLine"]["command"]
    assert "hooks" not in settings or "SessionStart" not in settings["hooks"]  # the plugin has them
    if scope == "project":
        assert source["path"] == "./.claude/compactd-plugin"
        copy = project / ".claude" / "compactd-plugin"
        assert (copy / "hooks" / "register.js").is_file()
        assert (
            json.loads((copy / ".claude-plugin" / "marketplace.json").read_text())["plugins"][0][
                "source"
            ]
            == "./"
        )
        # Nothing install wrote into the project names a path of this machine.
        for name, data in _tree(project / ".claude").items():
            text = data.decode()
            for machine in (str(tmp_path), str(ROOT), sys.executable, str(Path.home())):
                assert machine not in text, (name, machine)
    else:
        assert (
            Path(source["path"]).is_absolute()
            and (Path(source["path"]) / "hooks" / "register.js").is_file()
        )
    assert not (project / ".mcp.json").exists()  # the plugin declares the MCP server

    out = _run(tmp_path, "uninstall", "--scope", scope, cwd=project)
    assert out.returncode == 0, out.stderr
    assert _all(home, project) == before


def test_plugin_uninstall_after_the_user_edited_takes_out_only_its_keys(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    assert _run(tmp_path, "install", cwd=project).returncode == 0
    settings_file = project / ".claude" / "settings.json"
    settings = json.loads(settings_file.read_text())
    settings["model"] = "sonnet"
    settings["enabledPlugins"]["other@market"] = True
    settings_file.write_text(json.dumps(settings))
    out = _run(tmp_path, "uninstall", cwd=project)
    assert out.returncode == 0 and b"taken out" in out.stdout
    assert json.loads(settings_file.read_text()) == {
        "model": "sonnet",
        "enabledPlugins": {"other@market": True},
    }
    assert not (project / ".claude" / "compactd-plugin").exists()


def test_uninstall_removes_the_folder_install_created(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    assert _run(tmp_path, "install", cwd=project).returncode == 0
    assert _run(tmp_path, "uninstall", cwd=project).returncode == 0
    assert list(project.iterdir()) == []


def test_the_plugin_is_not_installed_over_an_earlier_settings_install(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    assert _run(tmp_path, "install", "--settings-hooks", cwd=project).returncode == 0
    before = _tree(project)
    run = _run(tmp_path, "install", cwd=project)
    assert run.returncode == 1 and b"from an earlier install" in run.stderr
    assert _tree(project) == before
    assert _run(tmp_path, "uninstall", cwd=project).returncode == 0
    assert list(project.iterdir()) == []


def test_install_help_explains_the_scopes(tmp_path: Path) -> None:
    out = _run(tmp_path, "install", "--help").stdout.decode()
    assert "--replace-compaction" not in out
    for words in ("project (default", "user (your settings", "local (this project, for you only"):
        assert words in " ".join(out.split()), words


def test_compactd_mcp_ends_on_sigint(tmp_path: Path) -> None:
    """Claude Code stops its MCP servers with SIGINT (SIGTERM 100 ms later when that fails):
    the server ends on it, where it used to wait on stdin until SIGTERM."""
    import signal

    env = _env(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "compactd", "mcp", "--cwd", str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        hello = {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        }  # fmt: skip
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write((json.dumps(hello) + "\n").encode())
        process.stdin.flush()
        assert b'"id":1' in process.stdout.readline()  # serving, stdin still open
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _status(tmp: Path, transcript: Path, tokens: int) -> str:
    usage = {"input_tokens": tokens, "cache_read_input_tokens": 0}
    status = {
        "session_id": "sess-1",
        "transcript_path": str(transcript),
        "model": {"id": "claude-sonnet-4-5"},
        "context_window": {"context_window_size": 200_000, "current_usage": usage},
    }
    run = _run(tmp, "statusline", stdin=json.dumps(status).encode())
    assert run.returncode == 0, run.stderr
    return run.stdout.decode()


def test_the_status_line_shows_compactds_count_right_after_its_compaction(tmp_path: Path) -> None:
    path, records = _session(tmp_path)
    # Claude Code's count before: the session's latest usage is in its transcript.
    _answer(
        _run(
            tmp_path,
            "session-compact",
            stdin=request(records, transcript=str(path)),
            COMPACTD_SUMMARIZER="offline",
        )
    )
    # Claude Code sends 0 until the next response: the count right after compaction stands in.
    line = _status(tmp_path, path, 0)
    count = int(line.split(" tok")[0].split("·")[-1].strip().replace(",", ""))
    assert 0 < count < 60_000, line
    assert " 0 tok" not in line and "0%" not in line.split("·")[2], line
    # A response came: its count again.
    assert "45,000 tok" in _status(tmp_path, path, 45_000)


def test_the_status_line_reads_claude_codes_figure_after_its_own_compaction(tmp_path: Path) -> None:
    path, _ = _session(tmp_path, entries=40)
    boundary = {
        "type": "system",
        "subtype": "compact_boundary",
        "uuid": "b-1",
        "parentUuid": None,
        "content": "Conversation compacted",
        "compactMetadata": {"trigger": "auto", "preTokens": 150_000, "postTokens": 23_456},
    }
    with path.open("a") as fh:
        fh.write(json.dumps(boundary) + "\n")
    assert "23,456 tok" in _status(tmp_path, path, 0)


@pytest.mark.parametrize("args", [["hook"], ["statusline"]])
def test_the_plugins_script_reads_nothing_from_a_folder_as_stdin(
    tmp_path: Path, args: list[str]
) -> None:
    """docs/safe-io.md: Python cannot start with a folder as its standard input; the plugin's
    script runs compactd with nothing on it instead, which says so in one line and exits 0."""
    folder = tmp_path / "stdin"
    folder.mkdir()
    script = plugin_folder() / "bin" / "compactd"
    fd = os.open(folder, os.O_RDONLY)
    try:
        run = subprocess.run(
            ["sh", str(script), "claude-code", *args], stdin=fd, capture_output=True,
            env=_env(tmp_path, COMPACTD_COMMAND=str(Path(sys.executable).with_name("compactd"))),
            cwd=tmp_path, timeout=120, check=False,
        )  # fmt: skip
    finally:
        os.close(fd)
    assert run.returncode == 0, run.stderr
    err = run.stderr.decode()
    if args == ["hook"]:
        assert (
            err.startswith("compactd claude-code hook: no hook event on stdin")
            and err.count("\n") == 1
        ), err
    else:  # the status line with nothing to show: its bare name, as with an empty input
        assert run.stdout.decode().strip() == "compactd" and err == "", (run.stdout, err)


# -- the warm answer: compactd mcp answers the plugin's call (docs/claude-code.md#the-seam) ------


def _sockets(tmp: Path) -> list[Path]:
    """The sockets of this test's servers (the runtime dir is the machine's)."""
    return sorted(socket_dir().glob(f"{folder_key(_data(tmp), str(tmp))}-*.sock"))


def _start_mcp(tmp: Path) -> subprocess.Popen[bytes]:
    """``compactd mcp`` as the plugin starts it, with a summarizer: its stdin stays open (the
    agent's end of the MCP connection), and it serves warm answers beside the preparation."""
    log = (tmp / "mcp.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "compactd", "mcp"], stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL, stderr=log, env=_env(tmp, **MODEL), cwd=tmp,
    )  # fmt: skip


def _until_socket(tmp: Path, mcp: subprocess.Popen[bytes]) -> None:
    """Until the server's socket is there (the MCP SDK's imports take seconds on a busy
    machine: a generous guard, not a measurement)."""
    for _ in range(1200):
        if _sockets(tmp):
            return
        assert mcp.poll() is None, (tmp / "mcp.log").read_text()
        time.sleep(0.1)
    raise AssertionError("compactd mcp opened no socket: " + (tmp / "mcp.log").read_text())


def _answered_by(tmp: Path) -> str:
    kept = load_session(_data(tmp), "sess-1").last
    assert kept is not None
    return kept.answered_by


def _prepared_call(tmp: Path) -> bytes:
    """The plugin's call for a session whose summary was prepared up to its last eight rows."""
    path, records = _session(tmp)
    rows = rows_of(records)
    at = next(i for i in range(len(records) - 1, 0, -1) if records[i].uuid == rows[-8]["handle"])
    _prepare(tmp, records, at)
    return request(records, transcript=str(path), trigger="auto")


def test_a_warm_compactd_mcp_answers_the_plugins_call(tmp_path: Path) -> None:
    body = _prepared_call(tmp_path)
    mcp = _start_mcp(tmp_path)
    try:
        _until_socket(tmp_path, mcp)
        (sock,) = _sockets(tmp_path)
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
        warm = _answer(_run(tmp_path, "session-compact", stdin=body, **MODEL))
        assert _answered_by(tmp_path) == "compactd mcp"
    finally:
        assert mcp.stdin is not None
        mcp.stdin.close()  # the agent is gone
        mcp.wait(timeout=60)
    assert not _sockets(tmp_path)  # removed on the way out
    cold = _answer(_run(tmp_path, "session-compact", stdin=body, **MODEL))
    assert _answered_by(tmp_path) == ""
    # The same compaction either way: the summary prepared in the background, then the tail.
    assert "PREPARED IN THE BACKGROUND" in warm["messages"][0]["text"]
    assert [r["text"] for r in warm["messages"][1:]] == [r["text"] for r in cold["messages"][1:]]


def test_without_a_warm_answer_the_command_answers_by_itself(tmp_path: Path) -> None:
    """A socket left by a process that died, one whose server never answers, and one of
    another folder: the command answers by itself each time, and removes the dead one."""
    body = _prepared_call(tmp_path)
    folder = socket_dir()
    key = folder_key(_data(tmp_path), str(tmp_path))
    dead = folder / f"{key}-{os.getpid()}1.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(dead))  # bound, never listening: connecting is refused
    silent = socket.socket(socket.AF_UNIX)
    silent.bind(str(folder / f"{key}-{os.getpid()}2.sock"))
    silent.listen()  # accepts (the kernel's backlog) and never answers
    other = socket.socket(socket.AF_UNIX)
    other.bind(str(folder / f"{folder_key(_data(tmp_path), '/elsewhere')}-{os.getpid()}3.sock"))
    other.listen()
    # The newest is asked first: the dead one, before the silent one takes the time there is.
    later = time.time() + 60
    os.utime(dead, (later, later))
    try:
        out = _answer(_run(tmp_path, "session-compact", stdin=body, **MODEL))
    finally:
        for s in (silent, other):
            Path(s.getsockname()).unlink()
            s.close()
    assert "PREPARED IN THE BACKGROUND" in out["messages"][0]["text"]
    assert _answered_by(tmp_path) == ""
    assert not dead.exists()


def test_a_warm_server_turns_away_what_is_not_its_own(tmp_path: Path) -> None:
    """Another folder's request, a request that is no JSON, one that never ends: each gets a
    refusal (the command then answers by itself), and the server goes on answering."""
    body = _prepared_call(tmp_path)
    mcp = _start_mcp(tmp_path)
    try:
        _until_socket(tmp_path, mcp)
        (sock,) = _sockets(tmp_path)
        data = _data(tmp_path)
        assert ask(data, "/elsewhere", body) is None  # no socket of that folder
        for header, payload in (
            (f"/elsewhere\0{data}\n", body),  # its socket, another folder's request
            (f"{tmp_path}\0{data}\n", b"this is not json"),
        ):
            with socket.socket(socket.AF_UNIX) as conn:
                conn.connect(str(sock))
                conn.sendall(header.encode() + payload)
                conn.shutdown(socket.SHUT_WR)
                assert conn.recv(1 << 16).startswith(b"1")
        with socket.socket(socket.AF_UNIX) as conn:  # never ends its request
            conn.connect(str(sock))
            conn.sendall(f"{tmp_path}\0{data}\n".encode())
            conn.settimeout(60)
            assert conn.recv(1 << 16).startswith(b"1")
        reply = ask(data, str(tmp_path), body)
        assert reply is not None and b"PREPARED IN THE BACKGROUND" in reply
    finally:
        assert mcp.stdin is not None
        mcp.stdin.close()
        mcp.wait(timeout=60)
    assert "Traceback" not in (tmp_path / "mcp.log").read_text()
