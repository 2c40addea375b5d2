"""Which transcript ``compactd status`` and ``compactd compact`` read (``cli/transcripts.py``),
the CLI run as a subprocess: a file, a folder of sessions (its newest, said so), a project's
working folder, or nothing (the current folder's newest Claude Code session; with none, a hint
where Claude Code keeps them and how to name one).

Claude Code's folder is a temporary one (``CLAUDE_CONFIG_DIR``), and so is ``HOME``: nothing here
reads the user's sessions.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

from tests.conftest import FIXTURES
from tests.helpers import run_cli

R2_AUTO = FIXTURES / "claude-code-2.1.330__r2_auto.jsonl"
R16_MANUAL = FIXTURES / "claude-code-2.1.330__r16_manual.jsonl"
VIEWER = FIXTURES / "d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"


def slug(folder: Path) -> str:
    """Claude Code's name for the folder it keeps ``folder``'s sessions in."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(folder))


class Machine:
    """A home with a Claude Code folder, and the environment of a CLI run on it."""

    def __init__(self, tmp_path: Path, *, config_dir: bool = True) -> None:
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.claude = tmp_path / "claude" if config_dir else self.home / ".claude"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
        self.env["HOME"] = str(self.home)
        self.env.pop("PWD", None)
        self.env.pop("CODEX_HOME", None)  # Codex's folder: ~/.codex
        if config_dir:
            self.env["CLAUDE_CONFIG_DIR"] = str(self.claude)
        else:
            self.env.pop("CLAUDE_CONFIG_DIR", None)

    def project(self, name: str) -> Path:
        """A working folder and its (still empty) folder of sessions."""
        folder = self.home / name
        folder.mkdir()
        (self.claude / "projects" / slug(folder)).mkdir(parents=True)
        return folder

    def session(self, folder: Path, fixture: Path, name: str, age: float) -> Path:
        """``fixture`` as a session of ``folder``, last written ``age`` seconds ago."""
        path = self.claude / "projects" / slug(folder) / name
        shutil.copyfile(fixture, path)
        stamp = time.time() - age
        os.utime(path, (stamp, stamp))
        return path

    async def cli(self, *args: str, cwd: Path) -> tuple[int, str, str]:
        return await run_cli(*args, env=self.env, cwd=cwd)


async def test_a_folder_of_sessions_reads_its_newest_and_says_so(tmp_path: Path) -> None:
    machine = Machine(tmp_path)
    work = machine.project("app")
    machine.session(work, R2_AUTO, "older.jsonl", age=3 * 3600)
    newest = machine.session(work, R16_MANUAL, "newest.jsonl", age=120)
    # Newer still, but not sessions: a sub-agent's transcript (older Claude Code releases wrote
    # them beside the sessions) and a session with nothing in it yet.
    machine.session(work, VIEWER, "agent-1234abcd.jsonl", age=10)
    (newest.parent / "just-started.jsonl").write_bytes(b"")
    folder = newest.parent

    code, out, err = await machine.cli("status", str(folder), "--plain", cwd=tmp_path)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"the newest of 2 sessions in {folder}, written 2 minutes ago", out
    assert lines[1] == "newest.jsonl"
    # The same report as for the file named.
    code, named, err = await machine.cli("status", str(newest), "--plain", cwd=tmp_path)
    assert code == 0, err
    assert named.splitlines() == lines[1:]

    code, out, err = await machine.cli("status", str(folder), "--json", cwd=tmp_path)
    assert code == 0, err
    report = json.loads(out)
    assert report["transcript"] == str(newest)
    assert report["picked"]["folder"] == str(folder) and report["picked"]["sessions"] == 2
    code, out, err = await machine.cli("status", str(newest), "--json", cwd=tmp_path)
    assert code == 0, err
    assert "picked" not in json.loads(out) and json.loads(out)["transcript"] == str(newest)
    assert json.loads(out)["status"] == report["status"]


async def test_nothing_named_reads_the_current_folders_newest_session(tmp_path: Path) -> None:
    machine = Machine(tmp_path, config_dir=False)  # Claude Code's default folder, ~/.claude
    work = machine.project("service")
    other = machine.project("other")
    machine.session(work, R2_AUTO, "a.jsonl", age=600)
    machine.session(other, R16_MANUAL, "b.jsonl", age=5)  # newer, but another project's
    code, out, err = await machine.cli("status", "--plain", cwd=work)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == (
        f"the only session of this folder, in ~/.claude/projects/{slug(work)}, written 10 "
        "minutes ago"
    ), out
    assert lines[1] == "a.jsonl"
    # A working folder named is read the same way, from anywhere.
    code, out, err = await machine.cli("status", str(other), "--plain", cwd=tmp_path)
    assert code == 0, err
    assert out.splitlines()[0].startswith(
        f"the only session of ~/other, in ~/.claude/projects/{slug(other)}, written "
    )
    assert out.splitlines()[1] == "b.jsonl"


async def test_no_session_here_says_where_they_live_and_how_to_name_one(tmp_path: Path) -> None:
    machine = Machine(tmp_path, config_dir=False)
    lonely = machine.home / "lonely"
    lonely.mkdir()
    # No Claude Code folder at all: said, and how to name a transcript.
    code, out, err = await machine.cli("status", cwd=lonely)
    assert code == 1 and out == "", err
    assert err.splitlines() == [
        f"compactd: Claude Code has no session for ~/lonely: it keeps a folder's sessions in "
        f"~/.claude/projects/<project>/, for this one ~/.claude/projects/{slug(lonely)}/, which "
        "does not exist.",
        "Name one: compactd status ~/.claude/projects/<project>/ (its newest session) or "
        "compactd status FILE.jsonl.",
        "~/.claude/projects does not exist: Claude Code has saved no session as this user (it "
        "keeps them under $CLAUDE_CONFIG_DIR when that is set).",
        "Codex has no session for ~/lonely: it keeps every session in ~/.codex/sessions/YYYY/MM/"
        "DD/ (the working folder is inside each), which does not exist.",
        "Name one: compactd status ~/.codex/sessions/ (the newest rollout) or compactd status "
        "rollout-....jsonl.",
    ]
    # Other projects have sessions: the hint names the latest, with their counts.
    for i, name in enumerate(["old", "busy", "new"]):
        work = machine.project(name)
        for n in range(1 + (name == "busy")):
            machine.session(work, R2_AUTO, f"s{n}.jsonl", age=1000 - 100 * i)
    code, out, err = await machine.cli("status", cwd=lonely)
    assert code == 1 and "Traceback" not in err, err
    assert err.splitlines()[2] == (
        f"The latest projects in ~/.claude/projects: {slug(machine.home / 'new')} (1 session), "
        f"{slug(machine.home / 'busy')} (2 sessions), {slug(machine.home / 'old')} (1 session)."
    )
    # A folder named that holds no transcript and is no project Claude Code knows.
    code, _, err = await machine.cli("status", str(lonely), cwd=tmp_path)
    assert code == 1
    assert err.startswith(
        "compactd: ~/lonely holds no transcript (*.jsonl, *.jsonl.zst), and Claude Code has no "
        "session for "
        "~/lonely: "
    ), err
    # compact takes its transcript the same way, and says the same.
    code, _, err = await machine.cli("compact", cwd=lonely)
    assert code == 1 and "compactd compact FILE.jsonl" in err, err


async def test_compact_with_nothing_named_compacts_the_current_session(tmp_path: Path) -> None:
    machine = Machine(tmp_path)
    work = machine.project("project")
    # The fixture recorded in the working folder of this machine, so its resume command works.
    data = R2_AUTO.read_bytes().replace(b"/home/dev/project", str(work).encode())
    source = machine.claude / "projects" / slug(work) / "4b1f7f7a-0000-4000-8000-000000000001.jsonl"
    source.write_bytes(data)
    code, out, err = await machine.cli("compact", "--plain", cwd=work)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"the only session of this folder, in {source.parent}, written ")
    assert lines[1] == f"{source.name} compacted into a new Claude Code session"
    new = [f for f in source.parent.iterdir() if f != source]
    assert len(new) == 1
    # Run from the session's folder, on the machine it ran on: nothing to warn about.
    assert lines[-1] == f"  claude --resume {new[0].stem}", out
    assert "note:" not in out
    assert source.read_bytes() == data


async def test_compact_says_when_the_resume_command_cannot_work_here(tmp_path: Path) -> None:
    machine = Machine(tmp_path)
    # A session recorded on another machine, copied into a folder of its own.
    folder = tmp_path / "copied"
    folder.mkdir()
    source = folder / "959f8b37-3e2e-416f-8620-5ef5ede9f42c.jsonl"
    shutil.copyfile(R16_MANUAL, source)
    assert not Path("/home/dev/project").exists()
    code, out, err = await machine.cli("compact", str(source), "--plain", cwd=tmp_path)
    assert code == 0, err
    new_id = next(f.stem for f in folder.iterdir() if f != source)
    assert out.splitlines()[-3:] == [
        f"  cd /home/dev/project && claude --resume {new_id}",
        "note: /home/dev/project, the folder the session ran in, does not exist on this machine, "
        "so the `cd` above fails: Claude Code resumes a session only from its own folder.",
        "note: Claude Code looks for the sessions of /home/dev/project in "
        f"{machine.claude}/projects/-home-dev-project/, and this one was written to {folder}/: "
        "copy it there for `claude --resume` to find it.",
    ]
    code, out, err = await machine.cli("compact", str(source), "--json", cwd=tmp_path)
    assert code == 0, err
    notes = json.loads(out)["resumeNotes"]
    assert len(notes) == 2 and "does not exist on this machine" in notes[0]


CODEX_ROLLOUT = (
    FIXTURES.parent / "codex" / "codex-0.171.0__fallback_model__mid_turn_and_resume.jsonl"
)
CODEX_CWD = b"/tmp/codex-capture-03bl9w6d/b/project"


async def test_a_codex_session_of_the_folder_is_found_like_claude_code_s(tmp_path: Path) -> None:
    """Codex files its sessions by date, the working folder inside each: nothing named finds
    the newest rollout of this folder, and a newer Claude Code session of it wins over it."""
    machine = Machine(tmp_path, config_dir=False)
    work = machine.project("service")
    day = machine.home / ".codex" / "sessions" / "2026" / "11" / "28"
    day.mkdir(parents=True)
    rollout = day / "rollout-2026-11-28T08-26-39-01a22143-78ca-7a61-91e9-bdd2e011ff43.jsonl"
    rollout.write_bytes(CODEX_ROLLOUT.read_bytes().replace(CODEX_CWD, str(work).encode()))
    elsewhere = day / "rollout-2026-11-28T09-00-00-01a22143-0000-7000-8000-000000000000.jsonl"
    elsewhere.write_bytes(CODEX_ROLLOUT.read_bytes())  # newer, another folder's
    old = time.time() - 600
    os.utime(rollout, (old, old))
    code, out, err = await machine.cli("status", "--json", cwd=work)
    assert code == 0, err
    report = json.loads(out)
    assert report["transcript"] == str(rollout)
    assert report["picked"]["how"].startswith(
        "the only session of this folder, in ~/.codex/sessions"
    )
    assert report["entries"] > 30 and report["skippedLines"] == 0
    # The status agrees with the rollout's last token count.
    last = [json.loads(line) for line in CODEX_ROLLOUT.read_bytes().splitlines()][-2]
    assert last["payload"]["type"] == "token_count"
    assert (
        report["status"]["exactTokens"]
        == last["payload"]["info"]["last_token_usage"]["total_tokens"]
    )
    # The sessions folder named: its newest rollout; a Claude Code session newer than the
    # rollout, of the same folder, is the one read with nothing named.
    code, out, err = await machine.cli(
        "status", str(machine.home / ".codex" / "sessions"), "--plain", cwd=tmp_path
    )
    assert code == 0, err
    assert out.splitlines()[0].startswith("the newest of 2 sessions in ~/.codex/sessions")
    machine.session(work, R2_AUTO, "a.jsonl", age=5)
    code, out, err = await machine.cli("status", "--plain", cwd=work)
    assert code == 0, err
    assert out.splitlines()[1] == "a.jsonl"
