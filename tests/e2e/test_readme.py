"""The README's code blocks run as they stand and print what the README says they print.

Every fenced block of README.md has an info string, which says what the block is:

- ``python``: a program. It runs with ``sys.executable`` in a fresh temporary folder holding
  ``session.jsonl`` (the fixture ``SESSION``), with ``XDG_DATA_HOME`` inside that folder so
  nothing reaches the real user data dir, and must exit 0 within ``TIMEOUT`` seconds.
  The folder's absolute path is as long as the README's ``/home/dev/project`` (``PROJECT``):
  a summary names the session's transcript by its path in the data folder, so the size after
  a compaction moves with the length of that path (docs/thresholds.md#after-a-compaction).
- ``text`` directly after a ``python`` or ``ts`` block: what that program prints. Other ``text``
  blocks (the ``serve`` synopsis, the layout) are not programs and are skipped.
- ``ts``: the TypeScript client's example. ``tests/e2e/test_after_size.py`` runs it with the
  real client, packed and installed as a user does, and checks its figure against the Python
  example's and the others'.
- ``console``: ``$ command`` lines, each followed by what it prints. Each command runs with
  ``bash -c`` in the repository root, with the directory of ``sys.executable`` first on PATH (so
  ``compactd`` is the venv's), and must exit 0.
- ``sh``: the two commands at the top. ``make demo`` runs; ``make test`` runs as ``make -n
  test`` (a dry run: this test runs inside ``make test``, which must not start itself again).
  The other ``sh`` block installs compactd as a tool, a line per tool (``INSTALLERS``):
  ``tests/e2e/test_client_packages.py`` runs each line (``install_commands``) from a copy of the
  checkout, with the tools' folders in a temporary one.

Expected output is compared with stdout line by line, after trailing spaces are stripped and
durations (``6 ms``, ``1,204 ms``) become ``N ms``. A line that is exactly ``...`` matches any
number of lines (none included); a line ending in ``...`` matches any line that starts with
the text before it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT

README = ROOT / "README.md"
SESSION = FIXTURES / "d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
TIMEOUT = 60
KINDS = {"python", "text", "console", "sh", "ts"}
# The folder the README's programs say they ran in.
PROJECT = "/home/dev/project"
# The commands of the sh block, and what the test runs for each.
SH_COMMANDS = {"make demo": "make demo", "make test": "make -n test"}
# What the install block's lines start with: one line per tool.
INSTALLERS = ("pipx install", "uv tool install")


@dataclass
class Block:
    index: int  # 0-based, in the order of the README
    info: str
    line: int  # 1-based line of the opening fence
    body: list[str]
    expected: list[str] | None = None  # a python block's output block


def read_blocks() -> list[Block]:
    blocks: list[Block] = []
    current: Block | None = None
    for number, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1):
        if current is None:
            if line.startswith("```"):
                current = Block(len(blocks), line[3:].strip(), number, [])
        elif line == "```":
            blocks.append(current)
            current = None
        else:
            current.body.append(line)
    assert current is None, f"README.md:{current.line}: the block is never closed"
    return blocks


def runnable() -> list[Block]:
    """The blocks to run, each python block carrying the output block that follows it."""
    blocks = read_blocks()
    out: list[Block] = []
    for previous, block in zip([None, *blocks], blocks, strict=False):
        if block.info == "text" and previous is not None and previous.info in ("python", "ts"):
            previous.expected = block.body
        elif block.info in ("python", "console") or (block.info == "sh" and not _installs(block)):
            out.append(block)
    return out


def sh_commands(block: Block) -> list[str]:
    """Each command is a line's text before its comment; comment-only lines continue one."""
    return [c for c in (line.split("#", 1)[0].strip() for line in block.body) if c]


def _installs(block: Block) -> bool:
    return block.info == "sh" and any(c.startswith(INSTALLERS) for c in sh_commands(block))


def install_commands() -> dict[str, str]:
    """The README's install block: its command for each tool of ``INSTALLERS``."""
    blocks = [b for b in read_blocks() if _installs(b)]
    assert len(blocks) == 1, "README.md: one sh block installs compactd as a tool"
    commands = sh_commands(blocks[0])
    by_tool = {tool: [c for c in commands if c.startswith(tool)] for tool in INSTALLERS}
    assert all(len(found) == 1 for found in by_tool.values()), f"one line a tool: {commands}"
    assert len(commands) == len(INSTALLERS), f"only the install lines: {commands}"
    return {tool.split()[0]: found[0] for tool, found in by_tool.items()}


def _id(block: Block) -> str:
    first = next((line for line in block.body if line.strip()), "")
    return f"{block.index}-{block.info}-{first[:50]}"


def normalize(line: str) -> str:
    return re.sub(r"\d[\d,]* ms\b", "N ms", line.rstrip())


def line_matches(want: str, got: str) -> bool:
    return got.startswith(want[:-3]) if want.endswith("...") else got == want


def matches(expected: list[str], actual: list[str]) -> bool:
    want = [normalize(line) for line in expected]
    got = [normalize(line) for line in actual]
    n, m = len(want), len(got)
    # ok[i][j]: want[i:] matches got[j:] (filled from the ends, so no recursion on long outputs).
    ok = [[False] * (m + 1) for _ in range(n + 1)]
    ok[n][m] = True
    for i in range(n - 1, -1, -1):
        for j in range(m, -1, -1):
            if want[i] == "...":
                ok[i][j] = ok[i + 1][j] or (j < m and ok[i][j + 1])
            else:
                ok[i][j] = j < m and line_matches(want[i], got[j]) and ok[i + 1][j + 1]
    return ok[0][0]


def check_output(what: str, expected: list[str], out: str) -> None:
    actual = out.splitlines()
    if not matches(expected, actual):
        # The first expected line that the output cannot follow, whatever comes after it.
        n = next(
            (i for i in range(1, len(expected) + 1) if not matches(expected[:i] + ["..."], actual)),
            None,
        )
        where = (
            f"expected line {n} is not matched: {expected[n - 1]!r}"
            if n is not None
            else "it goes on after the last expected line"
        )
        pytest.fail(
            f"{what}: the output is not the README's ({where})\n--- README:\n"
            + "\n".join(expected)
            + "\n--- printed:\n"
            + "\n".join(actual),
            pytrace=False,
        )


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def console_env(tmp_path: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    # Without the flags of the `make test` this test may run in (its jobserver, -k, ...).
    # Without CLAUDE_CONFIG_DIR: Claude Code's folder is the one a user has, ~/.claude.
    skip = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CLAUDE_CONFIG_DIR"}
    return {
        **{k: v for k, v in os.environ.items() if k not in skip},
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
    }


def test_every_block_has_a_known_kind() -> None:
    blocks = read_blocks()
    untyped = [f"README.md:{b.line}" for b in blocks if not b.info]
    assert not untyped, f"blocks without an info string: {untyped}"
    assert {b.info for b in blocks} == KINDS, "a new kind of block: teach this test to run it"


@pytest.mark.timeout(4 * TIMEOUT)
@pytest.mark.parametrize("block", runnable(), ids=_id)
def test_readme_block(block: Block, tmp_path: Path) -> None:
    where = f"README.md:{block.line} ({block.info})"
    if block.info == "python":
        run_python(block, where, tmp_path)
    elif block.info == "console":
        run_console(block, where, tmp_path)
    else:
        run_sh(block, where, tmp_path)


def _project_folder(tmp_path: Path) -> Path:
    """A new folder whose absolute path is as long as ``PROJECT`` (in ``/tmp`` when the
    test's own temporary folder is too long for that)."""
    base = Path("/tmp") if len(str(tmp_path)) + 2 > len(PROJECT) else tmp_path
    name_len = len(PROJECT) - len(str(base)) - 1
    work = Path(tempfile.mkdtemp(prefix="r" * max(0, name_len - 8), dir=base))
    assert len(str(work)) == len(PROJECT), (work, PROJECT)
    return work


def run_python(block: Block, where: str, tmp_path: Path) -> None:
    work = _project_folder(tmp_path)
    try:
        _run_python_in(block, where, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_python_in(block: Block, where: str, work: Path) -> None:
    shutil.copyfile(SESSION, work / "session.jsonl")
    (work / "program.py").write_text("\n".join(block.body) + "\n", encoding="utf-8")
    xdg = work / "xdg-data"
    env = {**os.environ, "XDG_DATA_HOME": str(xdg)}
    done = run([sys.executable, "program.py"], work, env)
    assert done.returncode == 0, f"{where} exited {done.returncode}:\n{done.stderr}"
    # The README says where the programs keep their sessions: not in the user data dir.
    assert not (xdg / "compactd").exists(), f"{where} wrote to the user data dir"
    if block.expected is not None:
        check_output(where, block.expected, done.stdout)


def run_console(block: Block, where: str, tmp_path: Path) -> None:
    commands: list[tuple[str, list[str]]] = []
    for line in block.body:
        if line.startswith("$ "):
            commands.append((line[2:], []))
        else:
            assert commands, f"{where}: output before the first $ command"
            commands[-1][1].append(line)
    assert commands, f"{where}: no $ command"
    for command, expected in commands:
        done = run(["bash", "-c", command], ROOT, console_env(tmp_path))
        assert done.returncode == 0, f"{where} `{command}` exited {done.returncode}:\n{done.stderr}"
        check_output(f"{where} `{command}`", expected, done.stdout)


def run_sh(block: Block, where: str, tmp_path: Path) -> None:
    commands = sh_commands(block)
    assert set(commands) == set(SH_COMMANDS), f"{where}: commands this test does not know"
    for command in commands:
        done = run(["bash", "-c", SH_COMMANDS[command]], ROOT, console_env(tmp_path))
        assert done.returncode == 0, f"{where} `{command}` exited {done.returncode}:\n{done.stderr}"
        if command == "make demo":
            assert "compact" in done.stdout and "entries" in done.stdout, done.stdout
        else:
            assert "-m pytest" in done.stdout, done.stdout


def test_local_links_lead_somewhere() -> None:
    """Every link and image of the README that names a file of the repository finds it."""
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert "docs/screenshots/status.svg" in local and "docs/screenshots/replay.svg" in local
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, missing
