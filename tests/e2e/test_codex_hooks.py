"""``compactd codex hook|install|uninstall`` run as Codex and a user run them: a process, the
event on stdin (docs/codex.md#compactd-inside-codex). The hand-back gives back what a Codex
compaction dropped, once; bad input gets what Claude Code's hooks get (one line on stderr, exit
0) and the rollout is never written; install and uninstall round-trip config.toml and
hooks.json byte for byte, and a config.toml that cannot be parsed is refused by name with
nothing changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from compactd.agents.codex.services.install import trusted_hash
from tests.codex_rollouts import CAPTURED, older_rollout
from tests.conftest import ROOT

ROLLOUT = CAPTURED[0]  # fallback model: exec_command heredoc patches
CWD = "/tmp/codex-capture-03bl9w6d/b/project"
TITLE = "compactd: what Codex's summary above left out"


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEX", "COMPACTD"))}
    env.update(
        HOME=str(tmp / "home"),
        CODEX_HOME=str(tmp / "home" / ".codex"),
        XDG_DATA_HOME=str(tmp / "data"),
        PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return env


def _run(
    tmp: Path, *args: str, stdin: bytes = b"", cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "compactd", "codex", *args],
        input=stdin, env=_env(tmp, **env), cwd=cwd or tmp, capture_output=True, timeout=120,
        check=False,
    )  # fmt: skip


def _event(name: str, rollout: Path | str, **extra: Any) -> bytes:
    event = {
        "session_id": "thread-1",
        "transcript_path": str(rollout),
        "cwd": CWD,
        "hook_event_name": name,
        "model": "emu-codex",
        **extra,
    }
    return json.dumps(event).encode()


def _lines(n: int) -> bytes:
    return b"".join(ROLLOUT.read_bytes().splitlines(keepends=True)[:n])


def _context(run: subprocess.CompletedProcess[bytes]) -> str:
    assert run.returncode == 0 and run.stderr == b"", run.stderr
    return str(json.loads(run.stdout)["hookSpecificOutput"]["additionalContext"])


def _stat(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def test_each_compaction_is_handed_back_once_with_what_it_dropped(tmp_path: Path) -> None:
    rollout = tmp_path / "rollout.jsonl"
    rollout.write_bytes(_lines(35))  # up to the first compaction and its hook's line
    before = _stat(rollout)
    startup = _run(tmp_path, "hook", stdin=_event("SessionStart", rollout, source="startup"))
    assert startup.returncode == 0 and startup.stdout == b""
    text = _context(_run(tmp_path, "hook", stdin=_event("SessionStart", rollout, source="compact")))
    assert text.startswith(TITLE)
    assert "`seq 1 4000`" in text
    # Codex kept the prompt word for word: it is not given again.
    assert "Count the crates" not in text
    assert _stat(rollout) == before
    # Never twice: the same compaction on resume gives nothing.
    again = _run(tmp_path, "hook", stdin=_event("SessionStart", rollout, source="resume"))
    assert again.returncode == 0 and again.stdout == b""

    # The second compaction: what ran since, and the first one's items (its hand-back, a
    # developer message, was dropped too).
    rollout.write_bytes(_lines(71))
    text = _context(_run(tmp_path, "hook", stdin=_event("SessionStart", rollout, source="compact")))
    assert text.count("`seq 1 4000`") == 1 and text.count("`cat notes.txt`") == 1, text
    assert "Check the count again" not in text


def test_resume_hands_back_a_compaction_no_hook_saw(tmp_path: Path) -> None:
    rollout = tmp_path / "rollout.jsonl"
    rollout.write_bytes(ROLLOUT.read_bytes())
    text = _context(_run(tmp_path, "hook", stdin=_event("SessionStart", rollout, source="resume")))
    assert "`cat notes.txt`" in text and "`seq 1 4000`" in text


def test_an_older_rollout_s_remote_compaction_hands_back_its_messages_too(tmp_path: Path) -> None:
    """A remote compaction keeps an encrypted summary: the commands and files are given back;
    the user's messages Codex kept are not."""
    rollout = tmp_path / "rollout.jsonl"
    data = older_rollout().data()
    cut = data.index(b'"type": "compacted"')
    rollout.write_bytes(data[: data.index(b"\n", cut) + 1])
    text = _context(_run(tmp_path, "hook", stdin=_event("SessionStart", rollout, source="resume")))
    assert "pytest -q tests/test_importer.py" in text and "rg -n trailing_comma" in text
    assert "importer.py" in text
    assert "Find why the pelican importer" not in text


def test_threshold_warning_once_per_level_and_opt_out(tmp_path: Path) -> None:
    rollout = tmp_path / "rollout.jsonl"
    rollout.write_bytes(_lines(27))  # the last usage: 8,778 tokens, before any compaction
    home = tmp_path / "home" / ".codex"
    home.mkdir(parents=True)
    (home / "config.toml").write_text("model_auto_compact_token_limit = 10000\n")
    event = _event("UserPromptSubmit", rollout, prompt="go on", turn_id="t1")
    first = _run(tmp_path, "hook", stdin=event)
    answer = json.loads(first.stdout)
    assert "Codex compacts it (10,000" in answer["hookSpecificOutput"]["additionalContext"]
    assert answer["systemMessage"].startswith("compactd: context at 88%")
    assert _run(tmp_path, "hook", stdin=event).stdout == b""  # once per level
    off = _run(tmp_path, "hook", stdin=event, COMPACTD_NO_THRESHOLD_WARNING="1")
    assert off.returncode == 0 and off.stdout == b""
    (home / "config.toml").write_text("model_auto_compact_token_limit = 100000\n")
    quiet = _run(tmp_path, "hook", stdin=event, XDG_DATA_HOME=str(tmp_path / "other"))
    assert quiet.returncode == 0 and quiet.stdout == b""  # far from Codex's limit


BAD: list[tuple[str, Any, str]] = [
    ("empty stdin", b"", "no hook event on stdin (expected Codex's JSON)"),
    ("not JSON", b"hello", "not JSON"),
    ("a JSON array", b"[1, 2]", "not one Codex sends"),
    ("unknown event", {"hook_event_name": "Teleport"}, "does not handle the Codex hook event"),
    (
        "no transcript_path",
        {"hook_event_name": "SessionStart", "source": "resume"},
        "no transcript_path",
    ),  # fmt: skip
    (
        "null transcript_path",
        {"hook_event_name": "SessionStart", "source": "resume", "transcript_path": None},
        "no transcript_path",
    ),  # fmt: skip
    ("missing rollout", "missing", "does not exist"),
    ("a directory", "directory", "is a directory"),
    ("binary rollout", "binary", "is binary"),
    ("half-written rollout", "half", "no complete line yet"),
    ("another tool's format", "other", "not a session file compactd reads"),
]


@pytest.mark.parametrize("what,stdin,says", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_and_exit_zero(
    tmp_path: Path, what: str, stdin: Any, says: str
) -> None:
    rollout = tmp_path / "rollout.jsonl"
    if stdin == "directory":
        rollout.mkdir()
    elif stdin == "binary":
        rollout.write_bytes(bytes(range(256)) * 64)
    elif stdin == "half":
        rollout.write_bytes(b'{"timestamp": "2026-01-01T00:00:00Z", "type": "session_me')
    elif stdin == "other":
        rollout.write_text('{"said": "hello", "by": "me"}\n')
    if isinstance(stdin, str):
        stdin = _event("SessionStart", rollout, source="resume", unknown_field={"a": 1})
    elif isinstance(stdin, dict):
        stdin = json.dumps(stdin).encode()
    before = _stat(rollout) if rollout.is_file() else None
    run = _run(tmp_path, "hook", stdin=stdin)
    assert run.returncode == 0, run.stderr
    assert run.stdout == b""
    err = run.stderr.decode()
    assert err.startswith("compactd codex hook: ") and err.count("\n") == 1, err
    assert says in err, err
    if before is not None:
        assert _stat(rollout) == before


def test_events_compactd_has_nothing_to_say_to_get_nothing(tmp_path: Path) -> None:
    rollout = tmp_path / "rollout.jsonl"
    rollout.write_bytes(ROLLOUT.read_bytes())
    for name, extra in (("PreCompact", {"trigger": "auto"}), ("PostCompact", {"trigger": "auto"}),
                        ("Stop", {"stop_hook_active": False}),
                        ("PreToolUse", {"tool_name": "Bash", "tool_input": {"command": "ls"}})):  # fmt: skip
        run = _run(tmp_path, "hook", stdin=_event(name, rollout, **extra))
        assert run.returncode == 0 and run.stdout == b"" and run.stderr == b"", name


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _both(tmp: Path) -> dict[str, bytes]:
    return {**_tree(tmp / "home"), **{f"p/{k}": v for k, v in _tree(tmp / "project").items()}}


USER_CONFIG = b"""# my Codex
model = "o3"   # the one I like

[mcp_servers.docs]
command = "docs-server"

[features]
plugins = false
"""
USER_HOOKS = b'{"hooks": {"SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo hi"}]}]}}'


@pytest.mark.parametrize("scope", ["user", "project"])
def test_install_uninstall_round_trip(tmp_path: Path, scope: str) -> None:
    home, project = tmp_path / "home" / ".codex", tmp_path / "project"
    home.mkdir(parents=True)
    project.mkdir()
    (home / "config.toml").write_bytes(USER_CONFIG)
    (home / "hooks.json").write_bytes(USER_HOOKS)
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

    user = (home / "config.toml").read_bytes()
    # The user's lines, comments and spacing as they were, in their order.
    lines = iter(user.splitlines())
    assert all(any(mine == theirs for theirs in lines) for mine in USER_CONFIG.splitlines())
    config = tomllib.loads(user.decode())
    folder = home if scope == "user" else project / ".codex"
    hooks = json.loads((folder / "hooks.json").read_text())
    group = hooks["hooks"]["SessionStart"][-1]
    assert group["matcher"] == "compact|resume"
    handler = group["hooks"][0]
    index = len(hooks["hooks"]["SessionStart"]) - 1
    key = f"{folder / 'hooks.json'}:session_start:{index}:0"
    assert config["hooks"]["state"][key]["trusted_hash"] == trusted_hash(
        "SessionStart", "compact|resume", handler
    )
    (prompt,) = hooks["hooks"]["UserPromptSubmit"]
    assert "matcher" not in prompt
    server = tomllib.loads((folder / "config.toml").read_text())["mcp_servers"]["compactd"]
    if scope == "project":
        # Project files name no path of this machine.
        for name in ("hooks.json", "config.toml"):
            text = (folder / name).read_text()
            assert str(tmp_path) not in text and sys.executable not in text, text
        assert handler["command"] == "compactd codex hook"
        assert server == {"command": "compactd", "args": ["mcp"], "startup_timeout_sec": 30}
        assert b"trusted project" in run.stdout
    else:
        assert handler["command"] == f"{sys.executable} -m compactd codex hook"
        assert server["args"] == ["-m", "compactd", "mcp"]

    out = _run(tmp_path, "uninstall", "--scope", scope, cwd=project)
    assert out.returncode == 0, out.stderr
    assert _both(tmp_path) == before


def test_uninstall_after_the_user_edited_takes_out_only_compactds_entries(tmp_path: Path) -> None:
    home = tmp_path / "home" / ".codex"
    home.mkdir(parents=True)
    (home / "config.toml").write_bytes(USER_CONFIG)
    assert _run(tmp_path, "install").returncode == 0
    config = home / "config.toml"
    config.write_bytes(config.read_bytes() + b'\n[profiles.fast]\nmodel = "o4-mini"\n')
    assert _run(tmp_path, "uninstall").returncode == 0
    text = config.read_text()
    assert "compactd" not in text and "hooks.state" not in text
    assert text.startswith(USER_CONFIG.decode()) and '[profiles.fast]\nmodel = "o4-mini"' in text
    assert not (home / "hooks.json").exists()


@pytest.mark.parametrize(
    "name,content",
    [("config.toml", b'model = "o3"\n[features\nplugins = false\n'),
     ("hooks.json", b'{"hooks": {,}'), ("config.toml", b"\xff\xfe not text")],
    ids=["toml", "json", "binary"],
)  # fmt: skip
def test_install_refuses_a_file_it_cannot_parse(tmp_path: Path, name: str, content: bytes) -> None:
    home = tmp_path / "home" / ".codex"
    home.mkdir(parents=True)
    broken = home / name
    broken.write_bytes(content)
    before = _tree(tmp_path / "home")
    for action in ("install", "uninstall"):
        run = _run(tmp_path, action)
        assert run.returncode == 1, run.stdout
        err = run.stderr.decode()
        assert err.count("\n") == 1 and str(broken) in err and "nothing was changed" in err, err
        assert _tree(tmp_path / "home") == before


def test_a_symlinked_config_is_written_through_its_link(tmp_path: Path) -> None:
    home = tmp_path / "home" / ".codex"
    home.mkdir(parents=True)
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "codex.toml").write_bytes(USER_CONFIG)
    (home / "config.toml").symlink_to(dotfiles / "codex.toml")
    assert _run(tmp_path, "install").returncode == 0
    assert (home / "config.toml").is_symlink()
    assert b"[mcp_servers.compactd]" in (dotfiles / "codex.toml").read_bytes()
    assert _run(tmp_path, "uninstall").returncode == 0
    assert (home / "config.toml").is_symlink()
    assert (dotfiles / "codex.toml").read_bytes() == USER_CONFIG


def test_the_hook_imports_no_sdk_daemon_or_event_loop(tmp_path: Path) -> None:
    rollout = tmp_path / "rollout.jsonl"
    rollout.write_bytes(ROLLOUT.read_bytes())
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "compactd", "codex", "hook"],
        input=_event("SessionStart", rollout, source="resume"), env=_env(tmp_path), cwd=tmp_path,
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    lines = run.stderr.decode().splitlines()
    imported = {line.split("|")[-1].strip() for line in lines if "|" in line}
    assert "compactd.agents.codex.cli" in imported and TITLE.encode() in run.stdout
    heavy = {"anthropic", "openai", "mcp", "pygls", "anyio", "asyncio", "rich", "tomlkit",
             "compactd.cli.main", "compactd.engine", "compactd.agents.claude_code.cli"}  # fmt: skip
    assert not heavy & imported, heavy & imported


def test_compactd_mcp_serves_the_rollout_the_hook_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compactd mcp``'s tools for a Codex session: the one the hook recorded for the working
    folder, or a rollout named by path (a compressed one too)."""
    from compactd.mcp_server import McpConfig, context_answer, recall_answer
    from tests.codex_rollouts import compressed

    rollout = tmp_path / "rollout-2026-11-28T08-26-39-thread-1.jsonl"
    rollout.write_bytes(ROLLOUT.read_bytes())
    data = tmp_path / "data" / "compactd"  # XDG_DATA_HOME/compactd: the hook's data dir
    run = _run(tmp_path, "hook", stdin=_event("SessionStart", rollout, source="startup"))
    assert run.returncode == 0, run.stderr
    config = McpConfig(data, CWD)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))  # no Claude Code session
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "home" / ".codex"))
    answer = recall_answer(config, "seq 1 4000", 5, None)
    assert "thread-1 (the current Codex session, as compactd's hook recorded it)" in answer
    assert "exec_command: seq 1 4000" in answer
    status = context_answer(config, None)
    assert "model emu-codex" in status and "258,400-token window" in status
    assert "compactions so far: 2" in status
    packed = tmp_path / "rollout-2026-11-28T08-26-39-thread-2.jsonl.zst"
    packed.write_bytes(compressed(ROLLOUT.read_bytes()))
    assert "cat notes.txt" in recall_answer(config, "cat notes", 5, str(packed))
