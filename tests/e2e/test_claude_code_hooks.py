"""``compactd claude-code hook|statusline|install|uninstall`` run as Claude Code runs them: a
process, the event on stdin. The hand-back keeps what the summary dropped and comes once; bad
input is one line on stderr and exit 0, and the transcript is never written; install and
uninstall round-trip the settings byte for byte."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, ROOT

R16 = FIXTURES / "claude-code-2.1.330__r16_manual.jsonl"
R2 = FIXTURES / "claude-code-2.1.330__r2_auto.jsonl"
TITLE = "compactd: what Claude Code's summary above left out"


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "COMPACTD"))}
    # No claude program on PATH: what install does is decided by its flags, not by this machine.
    # This compactd on PATH first, as a user who installed it has it (a project's settings run
    # `compactd` from PATH).
    env["PATH"] = os.pathsep.join(
        [str(Path(sys.executable).absolute().parent)]
        + [
            d
            for d in env.get("PATH", "").split(os.pathsep)
            if d and not (Path(d) / "claude").exists()
        ]
    )
    env.update(
        HOME=str(tmp / "home"),
        CLAUDE_CONFIG_DIR=str(tmp / "home" / ".claude"),
        XDG_DATA_HOME=str(tmp / "data"),
        PYTHONPATH=str(ROOT),
    )
    return env


def _run(
    tmp: Path, *args: str, stdin: bytes = b"", cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "compactd", "claude-code", *args],
        input=stdin, env=_env(tmp), cwd=cwd or tmp, capture_output=True, timeout=120, check=False,
    )  # fmt: skip


def _event(name: str, transcript: Path | str, **extra: Any) -> bytes:
    event = {
        "session_id": "sess-1",
        "transcript_path": str(transcript),
        "cwd": "/home/dev/project",
        "hook_event_name": name,
        **extra,
    }
    return json.dumps(event).encode()


def _copy(tmp: Path, source: Path = R16) -> Path:
    path = tmp / "t.jsonl"
    shutil.copyfile(source, path)
    return path


def _stat(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def test_resume_hands_back_what_the_summary_dropped_once(tmp_path: Path) -> None:
    transcript = _copy(tmp_path)
    before = _stat(transcript)
    run = _run(tmp_path, "hook", stdin=_event("SessionStart", transcript, source="resume"))
    assert run.returncode == 0 and run.stderr == b""
    out = json.loads(run.stdout)["hookSpecificOutput"]
    assert out["hookEventName"] == "SessionStart" and len(run.stdout) < 10_000
    text = out["additionalContext"]
    assert text.startswith(TITLE)
    assert "Read notes.txt then run echo steps" in text
    assert "echo step 3; seq 1 200 | tr '\\n' ' '" in text
    again = _run(tmp_path, "hook", stdin=_event("SessionStart", transcript, source="resume"))
    assert again.returncode == 0 and again.stdout == b""  # never twice
    assert _stat(transcript) == before
    status = {"session_id": "sess-1", "context_window": {"context_window_size": 200_000,
              "current_usage": {"input_tokens": 5_000, "cache_read_input_tokens": 15_000}}}  # fmt: skip
    line = _run(tmp_path, "statusline", stdin=json.dumps(status).encode())
    assert line.returncode == 0
    assert line.stdout.decode().startswith("compactd · 20,000 tok")
    assert "last compaction: restored 1 msgs, 2 cmds, 0 files" in line.stdout.decode()


def test_compact_hands_back_the_span_before_claude_code_files_it(tmp_path: Path) -> None:
    # SessionStart(compact) runs before the boundary is in the file: the lines up to it.
    lines = R2.read_bytes().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if b'"compact_boundary"' in line)
    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes(b"".join(lines[:at]))
    run = _run(tmp_path, "hook", stdin=_event("SessionStart", transcript, source="compact"))
    text = json.loads(run.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "Run echo commands step by step and read notes.txt" in text
    assert "echo step 1; seq 1 200" in text
    post = _run(tmp_path, "hook", stdin=_event("PostCompact", transcript, trigger="auto",
                compact_summary="1. The user asked to run echo steps."))  # fmt: skip
    assert post.stdout.decode().startswith("compactd: Claude Code's summary kept 0 of 1 user")
    assert "gave the model 1 user messages" in post.stdout.decode()
    # Claude Code files it (here with a count right after it that leaves little room); the
    # resume that follows gives nothing again.
    filed = [json.loads(line) for line in R2.read_bytes().splitlines()]
    for entry in filed:
        if entry.get("subtype") == "compact_boundary":
            entry["compactMetadata"]["postTokens"] = 150_000
    transcript.write_text("".join(json.dumps(e) + "\n" for e in filed))
    resumed = _run(tmp_path, "hook", stdin=_event("SessionStart", transcript, source="resume"))
    assert resumed.returncode == 0 and resumed.stdout == b""
    # The next prompt's hook notes the filed compaction; the status line then warns.
    _run(tmp_path, "hook", stdin=_event("UserPromptSubmit", transcript, prompt="go on"))
    status = {"session_id": "sess-1", "context_window": {"context_window_size": 200_000,
              "current_usage": {"input_tokens": 151_000}}}  # fmt: skip
    line = _run(tmp_path, "statusline", stdin=json.dumps(status).encode()).stdout.decode()
    assert "last compaction: restored 1 msgs, 1 cmds, 1 files" in line  # the kept Read too
    assert "⚠ 150,000 tok right after compacting" in line


def test_precompact_steers_and_never_blocks_unless_asked(tmp_path: Path) -> None:
    transcript = _copy(tmp_path)
    run = _run(tmp_path, "hook", stdin=_event("PreCompact", transcript, trigger="auto"))
    assert run.returncode == 0 and b"word for word" in run.stdout
    assert len(run.stdout.decode()) < 10_000
    blocked = _run(tmp_path, "hook", "--block-compaction",
                   stdin=_event("PreCompact", transcript, trigger="manual"))  # fmt: skip
    assert json.loads(blocked.stdout)["decision"] == "block"


def test_threshold_warning_once_per_level(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    usage = {"input_tokens": 10, "cache_read_input_tokens": 160_000, "output_tokens": 100}
    line = {"type": "assistant", "uuid": "a1", "message": {"role": "assistant", "id": "m1",
            "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": "hi"}], "usage": usage}}  # fmt: skip
    transcript.write_text(
        json.dumps({"type": "user", "uuid": "u1", "message": {"role": "user", "content": "go"}})
        + "\n"
        + json.dumps(line)
        + "\n"
    )
    first = _run(tmp_path, "hook", stdin=_event("UserPromptSubmit", transcript, prompt="x"))
    answer = json.loads(first.stdout)
    assert "auto-compact threshold" in answer["hookSpecificOutput"]["additionalContext"]
    assert answer["systemMessage"].startswith("compactd: context at")
    second = _run(tmp_path, "hook", stdin=_event("UserPromptSubmit", transcript, prompt="x"))
    assert second.stdout == b""


BAD: list[tuple[str, Any, str]] = [
    ("empty stdin", b"", "no hook event on stdin"),
    ("not JSON", b"hello", "not JSON"),
    ("a JSON array", b"[1, 2]", "not one Claude Code sends"),
    ("unknown event", {"hook_event_name": "Teleport"}, "does not handle the hook event 'Teleport'"),
    (
        "no transcript_path",
        {"hook_event_name": "SessionStart", "source": "resume"},
        "no transcript_path",
    ),
    ("missing transcript", "missing", "does not exist"),
    ("a directory", "directory", "is a directory"),
    ("binary transcript", "binary", "is binary"),
    ("half-written transcript", "half", "no complete line yet"),
    ("another tool's format", "codex", "not a session file compactd reads"),
    ("a 50 MB line", "huge", "longer than"),
]


@pytest.mark.parametrize("what,stdin,says", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_and_exit_zero(
    tmp_path: Path, what: str, stdin: Any, says: str
) -> None:
    transcript = tmp_path / "t.jsonl"
    if stdin == "missing":
        pass
    elif stdin == "directory":
        transcript.mkdir()
    elif stdin == "binary":
        transcript.write_bytes(bytes(range(256)) * 64)
    elif stdin == "half":
        transcript.write_bytes(b'{"type": "user", "uuid": "u1", "message": {"role": "us')
    elif stdin == "codex":
        rows = [{"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta", "payload": {"id": "x"}},
                {"timestamp": "2026-01-01T00:00:01Z", "type": "response_item", "payload": {"type": "message"}}]  # fmt: skip
        transcript.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif stdin == "huge":
        transcript.write_bytes(
            b'{"type": "user", "message": {"content": "' + b"x" * 50_000_000 + b'"}}\n'
        )
    if isinstance(stdin, str):
        stdin = _event("SessionStart", transcript, source="resume", unknown_field={"a": 1})
    elif isinstance(stdin, dict):
        stdin = json.dumps(stdin).encode()
    before = _stat(transcript) if transcript.is_file() else None
    run = _run(tmp_path, "hook", stdin=stdin)
    assert run.returncode == 0, run.stderr
    assert run.stdout == b""
    err = run.stderr.decode()
    assert err.startswith("compactd claude-code hook: ") and err.count("\n") == 1, err
    assert says in err, err
    if before is not None:
        assert _stat(transcript) == before


def test_unknown_fields_are_ignored(tmp_path: Path) -> None:
    transcript = _copy(tmp_path)
    run = _run(tmp_path, "hook", stdin=_event("SessionStart", transcript, source="resume",
               brand_new={"x": [1]}, permission_mode="default"))  # fmt: skip
    assert run.returncode == 0 and TITLE.encode() in run.stdout


def _program() -> str:
    """This compactd as a user/local install writes it: its console script beside the
    interpreter when it has one, else the interpreter with the module."""
    script = Path(sys.executable).absolute().parent / "compactd"
    if not script.is_file():
        return f"{sys.executable} -m compactd"
    found = shutil.which("compactd", path=_env(Path("/nonexistent"))["PATH"])
    return "compactd" if found and os.path.samefile(found, script) else str(script)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("scope", ["user", "project", "local"])
def test_install_uninstall_round_trip(tmp_path: Path, scope: str) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".claude").mkdir(parents=True)
    (project / ".claude").mkdir(parents=True)
    # What the user already has, in their own formatting.
    (home / ".claude" / "settings.json").write_bytes(b'{"model":"opus",\n "hooks": {"Stop": []}}\n')
    (home / ".claude" / ".claude.json").write_bytes(b'{"numStartups": 3, "projects": {}}')
    (project / ".claude" / "settings.json").write_bytes(b'{ "permissions": {"allow": []} }')
    before = {**_tree(home), **{f"p/{k}": v for k, v in _tree(project).items()}}

    dry = _run(tmp_path, "install", "--settings-hooks", "--scope", scope, "--dry-run", cwd=project)
    assert dry.returncode == 0 and b"would change" in dry.stdout
    assert {**_tree(home), **{f"p/{k}": v for k, v in _tree(project).items()}} == before
    run = _run(tmp_path, "install", "--settings-hooks", "--scope", scope, cwd=project)
    assert run.returncode == 0 and b"changed: " in run.stdout, run.stderr
    installed = {**_tree(home), **{f"p/{k}": v for k, v in _tree(project).items()}}
    assert installed != before
    again = _run(tmp_path, "install", "--settings-hooks", "--scope", scope, cwd=project)
    assert b"nothing to change" in again.stdout
    assert {**_tree(home), **{f"p/{k}": v for k, v in _tree(project).items()}} == installed
    settings_file = {
        "user": home / ".claude" / "settings.json",
        "project": project / ".claude" / "settings.json",
        "local": project / ".claude" / "settings.local.json",
    }[scope]
    settings = json.loads(settings_file.read_text())
    hook = settings["hooks"]["SessionStart"][-1]
    assert hook["matcher"] == "compact|resume"
    # compactd from PATH in a project's files (no path of this machine), else this compactd.
    program = "compactd" if scope == "project" else _program()
    assert hook["hooks"][0]["command"] == f"{program} claude-code hook"
    assert "compactd claude-code statusline" in settings["statusLine"]["command"]
    mcp_file, at = {
        "user": (home / ".claude" / ".claude.json", []),
        "project": (project / ".mcp.json", []),
        "local": (home / ".claude" / ".claude.json", ["projects", str(project.resolve())]),
    }[scope]
    servers = json.loads(mcp_file.read_text())
    for key in at:
        servers = servers[key]
    assert servers["mcpServers"]["compactd"]["alwaysLoad"] is True
    assert servers["mcpServers"]["compactd"]["command"].split()[-1].endswith("compactd") or (
        servers["mcpServers"]["compactd"]["args"][:2] == ["-m", "compactd"]
    )
    assert servers["mcpServers"]["compactd"]["args"][-1] == "mcp"

    out = _run(tmp_path, "uninstall", "--scope", scope, cwd=project)
    assert out.returncode == 0, out.stderr
    assert {**_tree(home), **{f"p/{k}": v for k, v in _tree(project).items()}} == before


def test_uninstall_after_the_user_edited_takes_out_only_compactds_entries(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    assert (
        _run(tmp_path, "install", "--settings-hooks", "--scope", "project", cwd=project).returncode
        == 0
    )
    settings_file = project / ".claude" / "settings.json"
    settings = json.loads(settings_file.read_text())
    settings["model"] = "sonnet"
    settings_file.write_text(json.dumps(settings))
    assert _run(tmp_path, "uninstall", "--scope", "project", cwd=project).returncode == 0
    assert json.loads(settings_file.read_text()) == {"model": "sonnet"}
    assert not (project / ".mcp.json").exists()


def test_uninstall_removes_the_folder_install_created_once_it_is_empty(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    assert (
        _run(tmp_path, "install", "--settings-hooks", "--scope", "project", cwd=project).returncode
        == 0
    )
    assert (project / ".claude" / "settings.json").exists()
    dry = _run(tmp_path, "uninstall", "--scope", "project", "--dry-run", cwd=project)
    assert f"{project / '.claude'}: removed (empty)".encode() in dry.stdout
    assert (project / ".claude").is_dir()
    assert _run(tmp_path, "uninstall", "--scope", "project", cwd=project).returncode == 0
    assert list(project.iterdir()) == []

    # Something else now lives in the folder install created: it stays, with that file.
    assert (
        _run(tmp_path, "install", "--settings-hooks", "--scope", "local", cwd=project).returncode
        == 0
    )
    (project / ".claude" / "agents.md").write_text("mine")
    out = _run(tmp_path, "uninstall", "--scope", "local", cwd=project)
    assert out.returncode == 0 and f"{project / '.claude'}: removed".encode() not in out.stdout
    assert [p.name for p in (project / ".claude").iterdir()] == ["agents.md"]


def test_install_refuses_a_settings_file_it_cannot_parse(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    broken = project / ".claude" / "settings.json"
    broken.write_bytes(b'{"hooks": {,}')
    run = _run(tmp_path, "install", "--settings-hooks", "--scope", "project", cwd=project)
    assert run.returncode == 1
    assert str(broken).encode() in run.stderr and b"nothing was changed" in run.stderr
    assert broken.read_bytes() == b'{"hooks": {,}' and not (project / ".mcp.json").exists()


def test_transcript_being_written(tmp_path: Path) -> None:
    # Claude Code is in the middle of appending a line: the complete ones are read.
    transcript = _copy(tmp_path)
    with transcript.open("ab") as fh:
        fh.write(b'{"type": "assistant", "uuid": "zz", "message": {"role": "assis')
    before = _stat(transcript)
    run = _run(tmp_path, "hook", stdin=_event("SessionStart", transcript, source="resume"))
    text = json.loads(run.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "Read notes.txt then run echo steps" in text
    assert _stat(transcript) == before


@dataclass(frozen=True)
class _Imports:
    stdout: bytes
    imported: set[str]


def _imports(tmp: Path, args: list[str], stdin: bytes) -> _Imports:
    """The modules a Python process running ``args`` imports (``-X importtime``)."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        input=stdin, env=_env(tmp), cwd=tmp, capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    lines = run.stderr.decode().splitlines()
    return _Imports(run.stdout, {line.split("|")[-1].strip() for line in lines if "|" in line})


@pytest.mark.parametrize(
    "args,event",
    [
        (["hook"], {"hook_event_name": "SessionStart", "source": "resume"}),
        (["hook"], {"hook_event_name": "UserPromptSubmit", "prompt": "x"}),
        (["hook"], {"hook_event_name": "PreCompact", "trigger": "auto"}),
        (["statusline"], {"session_id": "sess-1"}),
    ],
)
def test_short_processes_import_no_sdk_daemon_or_event_loop(
    tmp_path: Path, args: list[str], event: dict[str, Any]
) -> None:
    transcript = _copy(tmp_path)
    stdin = (
        _event(event.pop("hook_event_name"), transcript, **event)
        if args == ["hook"]
        else json.dumps(event).encode()
    )
    imported = _imports(tmp_path, ["-m", "compactd", "claude-code", *args], stdin).imported
    assert "compactd.agents.claude_code.cli" in imported
    heavy = {"anthropic", "openai", "mcp", "pygls", "anyio", "asyncio", "rich", "compactd.cli.main"}
    assert not heavy & imported, heavy & imported


# The `compactd` console script enters through compactd.cli.entry: an agent's command line goes
# to the agent's package, the rest to compactd.cli.main, which imports each subcommand's modules
# only in the branch that runs it.
_CONSOLE_SCRIPT = "import sys; from compactd.cli.entry import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.parametrize(
    "args", [["--version"], ["claude-code", "statusline"], ["claude-code", "hook"]]
)
def test_the_console_script_imports_only_what_the_subcommand_uses(
    tmp_path: Path, args: list[str]
) -> None:
    stdin = _event("UserPromptSubmit", _copy(tmp_path), prompt="x") if "hook" in args else b"{}"
    run = _imports(tmp_path, ["-c", _CONSOLE_SCRIPT, *args], stdin)
    imported = run.imported
    # The general command line (argparse's help, logging, the summarizer flags) only for its own.
    assert ("compactd.cli.main" in imported) == (args == ["--version"])
    heavy = {"anthropic", "openai", "mcp", "pygls", "anyio", "asyncio", "rich", "compactd_client"}
    assert not heavy & imported, heavy & imported
    if args == ["--version"]:
        assert run.stdout.startswith(b"compactd ") and not any(
            m.startswith(("compactd.core.tokens", "compactd.services", "compactd.transcript"))
            for m in imported
        )


# -- hostile input: FIFOs, devices, folders, stdin that never closes (docs/safe-io.md) ---------

EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("SessionStart", {"source": "resume"}),
    ("SessionStart", {"source": "compact"}),
    ("PostCompact", {"trigger": "auto", "compact_summary": "1. The user asked for steps."}),
    ("UserPromptSubmit", {"prompt": "go on"}),
    ("PreCompact", {"trigger": "auto"}),
]
# What Claude Code gives a hook run: its timeout (what install writes), the guard of these tests.
from compactd.agents.claude_code.services.settings import (  # noqa: E402
    HOOK_TIMEOUT_S,
    STATUS_TIMEOUT_S,
)


def _spawn(tmp: Path, args: list[str], stdin: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "compactd", "claude-code", *args],
        stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp), cwd=tmp,
    )  # fmt: skip


def _finish(run: subprocess.Popen[bytes], guard: float) -> tuple[int, bytes, bytes]:
    """The process's exit status and output; it must end by itself within ``guard`` seconds
    (the timeout Claude Code would give it: a generous guard, not a measurement)."""
    try:
        run.wait(timeout=guard)  # not communicate(): it would close stdin
    except subprocess.TimeoutExpired:
        run.kill()
        run.wait()
        raise AssertionError(f"still running after {guard} s: Claude Code would kill it") from None
    assert run.stdout is not None and run.stderr is not None  # small: the pipes hold them
    return run.returncode, run.stdout.read(), run.stderr.read()


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_a_fifo_a_device_or_a_folder_as_transcript_never_holds_a_hook(
    tmp_path: Path, kind: str
) -> None:
    named = {"fifo": tmp_path / "t.jsonl", "device": Path("/dev/zero"), "folder": tmp_path / "d"}
    if kind == "fifo":
        os.mkfifo(named["fifo"])  # nobody ever opens it for writing
    elif kind == "folder":
        named["folder"].mkdir()
    says = {"fifo": "is a FIFO (named pipe)", "device": "is a device", "folder": "is a directory"}
    runs = [
        (name, _spawn(tmp_path, ["hook"], subprocess.PIPE), _event(name, named[kind], **extra))
        for name, extra in EVENTS
    ]
    for _, run, event in runs:
        assert run.stdin is not None
        run.stdin.write(event)
        run.stdin.close()
    for name, run, _ in runs:
        code, out, err = _finish(run, HOOK_TIMEOUT_S)
        assert code == 0, err
        if name == "PreCompact":  # reads no transcript: it steers the summary as usual
            assert b"word for word" in out and err == b""
            continue
        if name == "PostCompact" or name == "SessionStart":
            assert out == b""
        line = err.decode()
        assert line.startswith("compactd claude-code hook: ") and line.count("\n") == 1, line
        assert says[kind] in line, line
    # Not recorded as the folder's current session: the MCP server and the status line would
    # open it.
    assert not (tmp_path / "data" / "compactd" / "claude-code" / "current").exists()


def test_stdin_that_is_never_closed(tmp_path: Path) -> None:
    transcript = _copy(tmp_path)
    whole = _event("SessionStart", transcript, source="resume")
    status = json.dumps({"session_id": "sess-1"}).encode()
    cases = [  # (args, what is written before the pipe is left open, what is expected)
        (["hook"], whole, "answer"),
        (["hook"], whole[: len(whole) // 2], "refusal"),
        (["hook"], b"", "refusal"),
        (["hook"], _event("PreCompact", transcript), "answer"),
        (["statusline"], status, "answer"),
        (["statusline"], status[:5], "refusal"),
        (["statusline"], b"", "refusal"),
    ]
    runs = []
    for args, written, expected in cases:
        run = _spawn(tmp_path, args, subprocess.PIPE)
        assert run.stdin is not None
        run.stdin.write(written)
        run.stdin.flush()  # and never closed while the process runs
        runs.append((args, run, expected))
    for args, run, expected in runs:
        guard = HOOK_TIMEOUT_S if args == ["hook"] else STATUS_TIMEOUT_S
        try:
            code, out, err = _finish(run, guard)
        finally:
            assert run.stdin is not None
            run.stdin.close()
        assert code == 0, (args, err)
        if expected == "answer":
            assert out.strip(), (args, err)
            if args == ["statusline"]:
                assert out.startswith(b"compactd")
        else:
            assert out == b"", (args, out)
            line = err.decode()
            assert line.count("\n") == 1, line
            assert "was not closed within" in line or "gave up after" in line, line


@pytest.mark.parametrize("args", [["hook"], ["statusline"]])
@pytest.mark.parametrize("source", ["/dev/zero", "fifo"])
def test_dev_zero_or_a_fifo_without_writer_on_stdin(
    tmp_path: Path, args: list[str], source: str
) -> None:
    if source == "fifo":
        fifo = tmp_path / "in"
        os.mkfifo(fifo)
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO nobody writes to, as stdin
    else:
        fd = os.open(source, os.O_RDONLY)
    try:
        run = _spawn(tmp_path, args, fd)
    finally:
        os.close(fd)
    guard = HOOK_TIMEOUT_S if args == ["hook"] else STATUS_TIMEOUT_S
    code, out, err = _finish(run, guard)
    assert code == 0 and out == b""
    line = err.decode()
    assert line.startswith(f"compactd claude-code {args[0]}: ") and line.count("\n") == 1
    if source == "/dev/zero":
        assert "binary data" in line


# -- settings of every shape, symlinks, --data-dir (docs/claude-code.md#install) --------------

# Valid JSON that install and uninstall cannot act on: (file, its content, the key named).
# "settings" is the project's .claude/settings.json, "mcp" its .mcp.json, "local-settings" and
# "home" the local scope's .claude/settings.local.json and Claude Code's .claude.json.
SHAPES: list[tuple[str, Any, str]] = [
    ("settings", [5], "the file holds an array"),
    ("settings", None, "the file holds null"),
    ("settings", 5, "the file holds a number"),
    ("settings", "text", "the file holds a string"),
    ("settings", True, "the file holds a boolean"),
    ("settings", {"hooks": "nope"}, "hooks is a string"),
    ("settings", {"hooks": None}, "hooks is null"),
    ("settings", {"hooks": []}, "hooks is an array"),
    ("settings", {"hooks": 3}, "hooks is a number"),
    ("settings", {"hooks": {"SessionStart": "x"}}, "hooks.SessionStart is a string"),
    ("settings", {"hooks": {"PreCompact": {}}}, "hooks.PreCompact is an object"),
    ("settings", {"hooks": {"Stop": None}}, "hooks.Stop is null"),
    ("settings", {"hooks": {"SessionStart": [5]}}, "hooks.SessionStart[0] is a number"),
    ("settings", {"hooks": {"SessionStart": [[]]}}, "hooks.SessionStart[0] is an array"),
    (
        "settings",
        {"hooks": {"PostCompact": [{"hooks": "x"}]}},
        "hooks.PostCompact[0].hooks is a string",
    ),
    (
        "settings",
        {"hooks": {"PostCompact": [{"hooks": {}}]}},
        "hooks.PostCompact[0].hooks is an object",
    ),
    (
        "settings",
        {"hooks": {"SessionStart": [{"hooks": [5]}]}},
        "hooks.SessionStart[0].hooks[0] is a number",
    ),
    (
        "settings",
        {"hooks": {"SessionStart": [{"hooks": [{"command": 7}]}]}},
        "hooks.SessionStart[0].hooks[0].command is a number",
    ),
    (
        "settings",
        {"hooks": {"UserPromptSubmit": [{"matcher": 1, "hooks": []}]}},
        "hooks.UserPromptSubmit[0].matcher is a number",
    ),
    ("settings", {"hooks": {"my event": [1]}}, 'hooks."my event"[0] is a number'),
    ("settings", {"statusLine": "x"}, "statusLine is a string"),
    ("settings", {"statusLine": []}, "statusLine is an array"),
    ("settings", {"statusLine": {"command": ["a"]}}, "statusLine.command is an array"),
    ("settings", {"enabledMcpjsonServers": "x"}, "enabledMcpjsonServers is a string"),
    (
        "settings",
        {"enabledMcpjsonServers": {"compactd": True}},
        "enabledMcpjsonServers is an object",
    ),
    ("settings", {"enabledMcpjsonServers": [1]}, "enabledMcpjsonServers[0] is a number"),
    ("mcp", {"mcpServers": []}, "mcpServers is an array"),
    ("mcp", {"mcpServers": {"compactd": "x"}}, "mcpServers.compactd is a string"),
    ("mcp", {"mcpServers": {"compactd": {"args": "mcp"}}}, "mcpServers.compactd.args is a string"),
    ("home", {"projects": []}, "projects is an array"),
    ("home", {"projects": {"<project>": 5}}, 'projects."<project>" is a number'),
    (
        "local-settings",
        {"hooks": {"SessionStart": [{"hooks": None}]}},
        "hooks.SessionStart[0].hooks is null",
    ),
]


def _everything(tmp: Path) -> dict[str, tuple[bytes | None, bool]]:
    """Every file under ``tmp`` (but the data dir): its bytes (a link's, not followed) and
    whether it is a link. A tree compared before and after."""
    out: dict[str, tuple[bytes | None, bool]] = {}
    for p in sorted(tmp.rglob("*")):
        if "data" in p.relative_to(tmp).parts[:1]:
            continue
        if p.is_symlink():
            out[str(p)] = (os.readlink(p).encode(), True)
        elif p.is_file():
            out[str(p)] = (p.read_bytes(), False)
        else:
            out[str(p)] = (None, False)
    return out


@pytest.mark.parametrize("action", ["install", "uninstall"])
def test_settings_of_unexpected_shapes_are_refused_in_one_line(tmp_path: Path, action: str) -> None:
    assert len(SHAPES) >= 30
    refusals = tracebacks = changed = 0
    for i, (where, content, says) in enumerate(SHAPES):
        tmp = tmp_path / str(i)
        home, project = tmp / "home", tmp / "project"
        (home / ".claude").mkdir(parents=True)
        (project / ".claude").mkdir(parents=True)
        real = str(project.resolve())
        text = json.dumps(content).replace("<project>", real)
        scope = "local" if where in ("home", "local-settings") else "project"
        path = {
            "settings": project / ".claude" / "settings.json",
            "mcp": project / ".mcp.json",
            "home": home / ".claude" / ".claude.json",
            "local-settings": project / ".claude" / "settings.local.json",
        }[where]
        path.write_text(text)
        before = _everything(tmp)
        run = _run(
            tmp,
            action,
            *(["--settings-hooks"] if action == "install" else []),
            "--scope",
            scope,
            cwd=project,
        )
        err = run.stderr.decode()
        tracebacks += "Traceback" in err
        changed += _everything(tmp) != before
        if run.returncode == 1 and err.count("\n") == 1 and run.stdout == b"":
            refusals += 1
            assert err.startswith(f"compactd: {path}: "), err
            assert says.replace("<project>", real) in err, (says, err)
            assert "nothing was changed" in err
    assert (refusals, tracebacks, changed) == (len(SHAPES), 0, 0)


def test_a_symlinked_settings_file_stays_a_link(tmp_path: Path) -> None:
    project, dotfiles = tmp_path / "project", tmp_path / "dotfiles"
    (project / ".claude").mkdir(parents=True)
    dotfiles.mkdir()
    target = dotfiles / "claude-settings.json"
    original = b'{"model": "opus",\n "permissions": {"allow": []}}\n'
    target.write_bytes(original)
    target.chmod(0o640)
    link = project / ".claude" / "settings.json"
    link.symlink_to(target)
    # A second link, relative and dangling: install creates its target, uninstall removes it.
    (tmp_path / "home" / ".claude").mkdir(parents=True)
    assert (
        _run(tmp_path, "install", "--settings-hooks", "--scope", "project", cwd=project).returncode
        == 0
    )
    assert link.is_symlink() and os.readlink(link) == str(target)
    installed = json.loads(target.read_text())
    assert installed["model"] == "opus" and "SessionStart" in installed["hooks"]
    assert target.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in dotfiles.iterdir()] == ["claude-settings.json"]  # no temp file left
    assert _run(tmp_path, "uninstall", "--scope", "project", cwd=project).returncode == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == original

    dangling = project / ".claude" / "settings.local.json"
    dangling.symlink_to("../../dotfiles/local.json")
    assert (
        _run(tmp_path, "install", "--settings-hooks", "--scope", "local", cwd=project).returncode
        == 0
    )
    assert dangling.is_symlink() and (dotfiles / "local.json").is_file()
    assert _run(tmp_path, "uninstall", "--scope", "local", cwd=project).returncode == 0
    assert dangling.is_symlink() and not (dotfiles / "local.json").exists()


def test_install_with_a_data_dir_writes_commands_that_use_it(tmp_path: Path) -> None:
    transcript = _copy(tmp_path)
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    mine = tmp_path / "my data"
    run = _run(
        tmp_path,
        "install",
        "--settings-hooks",
        "--scope",
        "project",
        "--data-dir",
        "../my data",
        cwd=project,
    )
    assert run.returncode == 0, run.stderr
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    server = json.loads((project / ".mcp.json").read_text())["mcpServers"]["compactd"]
    # compactd from PATH in a project's files; the data dir asked for, absolute.
    assert server["command"] == "compactd"
    assert server["args"] == ["mcp", "--data-dir", str(mine)]
    status = settings["statusLine"]
    assert status["timeout"] == STATUS_TIMEOUT_S
    hook = settings["hooks"]["SessionStart"][0]["hooks"][0]
    assert hook["timeout"] == HOOK_TIMEOUT_S
    # The command as Claude Code runs it (a shell, the event on stdin): its records go to the
    # data dir install was given, not the default one.
    event = _event("SessionStart", transcript, source="resume")
    ran = subprocess.run(
        hook["command"], shell=True, input=event, env=_env(tmp_path), cwd=project,
        capture_output=True, timeout=HOOK_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert ran.returncode == 0 and TITLE.encode() in ran.stdout, ran.stderr
    assert list((mine / "claude-code" / "current").iterdir())
    assert not (tmp_path / "data" / "compactd" / "claude-code").exists()
    line = subprocess.run(
        status["command"], shell=True, input=b'{"session_id": "sess-1"}', env=_env(tmp_path),
        cwd=project, capture_output=True, timeout=STATUS_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert b"last compaction: restored" in line.stdout, line.stderr
    # Found again by uninstall, options and all; the record install kept is in that data dir.
    out = _run(tmp_path, "uninstall", "--scope", "project", "--data-dir", str(mine), cwd=project)
    assert out.returncode == 0 and not (project / ".mcp.json").exists()
    assert list((project / ".claude").iterdir()) == []  # the folder was there before
