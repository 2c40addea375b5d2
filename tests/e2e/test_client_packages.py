"""The packages as a new user gets them: the two clients, each against the real daemon, and
compactd itself, as ``make demo`` sets it up and as the README installs it as a tool.

From a clean temporary folder: the TypeScript client packed with ``npm pack``, installed into an
empty npm project beside ``typescript``, its README's ``ts`` example compiled with ``tsc --strict``
and run with node; the Python client installed alone into a fresh virtual environment (where
``import compactd`` fails: the daemon is not there), its README's ``python`` example run with that
environment's interpreter. In both, ``compactd`` on PATH is this checkout's daemon (the directory
of ``sys.executable`` comes first) and ``XDG_DATA_HOME`` points into the temporary folder, so no
session reaches the user's data dir.

From a copy of the checkout as a fresh clone holds it (``fresh_clone``): ``make demo``, whose
``.venv`` must hold no test, lint or type-check package; and each line of the README's install
block (pipx, uv: the tools come with the ``dev`` extra), run with the tool's folders in the
temporary one, after which the copy is removed and the installed ``compactd`` must still report
its version and a transcript's status (the client package, which its build carries, included).

Installing takes a while (npm, pip, pipx and uv fetch from their registries), so each package is
set up once per module; the tests are skipped, saying why, only when node or npm is missing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from compactd import __version__
from tests.conftest import FIXTURES, ROOT
from tests.e2e.test_readme import install_commands

TS_CLIENT = ROOT / "clients" / "typescript"
PY_CLIENT = ROOT / "clients" / "python"
# What the TypeScript project installs beside the client: the compiler the client is built with,
# and Node's types (the example uses `process`).
TS_TOOLS = ["typescript@~5.9.3", "@types/node@^20.19.0"]
INSTALL_TIMEOUT = 900
RUN_TIMEOUT = 120

pytestmark = [pytest.mark.slow, pytest.mark.timeout(INSTALL_TIMEOUT + RUN_TIMEOUT)]


def example(readme: Path, language: str) -> str:
    """The first fenced block of ``language`` in ``readme``."""
    match = re.search(
        rf"^```{language}\n(.*?)^```", readme.read_text(encoding="utf-8"), re.S | re.M
    )
    assert match, f"{readme} has no ```{language} block"
    return match.group(1)


def user_env(home: Path) -> dict[str, str]:
    """The environment of the user's program: this checkout's ``compactd`` first on PATH, the
    daemon's data under ``home``."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "XDG_DATA_HOME": str(home / "data")}


def run(args: list[str | Path], cwd: Path, timeout: float = INSTALL_TIMEOUT, **kw: object) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout, **kw
    )  # type: ignore[call-overload]
    assert done.returncode == 0, f"{args} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return str(done.stdout)


def check_output(output: str) -> None:
    """Both examples print the status after the append, then compact/auto's answer."""
    lines = output.strip().splitlines()
    assert len(lines) == 2, output
    assert re.fullmatch(r"\d+ tokens, 100% left", lines[0]), output
    # `false` in TypeScript, `False` in Python.
    assert lines[1].lower() == "compacted: false (belowthreshold)", output


@pytest.fixture(scope="module")
def ts_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("node and npm are needed to pack and install the TypeScript client")
    root = tmp_path_factory.mktemp("ts-client")
    # A copy of the package's sources, so that packing builds nothing inside the checkout.
    source = root / "source"
    shutil.copytree(
        TS_CLIENT, source, ignore=shutil.ignore_patterns("node_modules", "dist", "out", "*.tgz")
    )
    run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], source)
    tarball = (
        run([npm, "pack", "--silent", "--pack-destination", root], source).strip().splitlines()[-1]
    )
    project = root / "project"
    project.mkdir()
    run([npm, "init", "-y"], project)
    run(
        [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", root / tarball, *TS_TOOLS],
        project,
    )
    yield project


@pytest.fixture(scope="module")
def py_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("py-client")
    source = root / "source"
    shutil.copytree(
        PY_CLIENT, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__")
    )
    venv = root / "venv"
    run([sys.executable, "-m", "venv", venv], root)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", source], root)
    return python


def test_the_typescript_client_from_its_packed_tarball(ts_project: Path) -> None:
    (ts_project / "example.ts").write_text(example(TS_CLIENT / "README.md", "ts"), encoding="utf-8")
    tsc = ts_project / "node_modules" / ".bin" / "tsc"
    run([tsc, "--strict", "--target", "es2022", "--module", "node16", "example.ts"], ts_project)
    output = run(["node", "example.js"], ts_project, RUN_TIMEOUT, env=user_env(ts_project))
    check_output(output)


def test_the_python_client_installed_alone(py_env: Path, tmp_path: Path) -> None:
    # Away from the checkout, whose folder holds the daemon's package.
    alone = subprocess.run(
        [py_env, "-c", "import compactd"], cwd=tmp_path, capture_output=True, text=True
    )
    assert alone.returncode != 0 and "ModuleNotFoundError" in alone.stderr, alone
    run([py_env, "-c", "import compactd_client"], tmp_path, RUN_TIMEOUT)
    program = tmp_path / "example.py"
    program.write_text(example(PY_CLIENT / "README.md", "python"), encoding="utf-8")
    output = run([py_env, program], tmp_path, RUN_TIMEOUT, env=user_env(tmp_path))
    check_output(output)


# -- compactd itself, from a fresh clone --------------------------------------------------------

#: Distributions of the development tools (the `dev` extra and what only they bring): none may be
#: in the venv `make demo` sets up.
DEV_ONLY = {
    "pytest", "pytest-lsp", "pytest-asyncio", "pytest-timeout", "pytest-xdist", "hypothesis",
    "hypothesis-jsonschema", "mypy", "ruff", "import-linter", "playwright", "pipx", "uv",
}  # fmt: skip
TRANSCRIPT = FIXTURES / "claude-code-2.1.330__r2_auto.jsonl"


def fresh_clone(where: Path) -> Path:
    """The checkout's files as a clone of it holds them, the changes not yet committed included:
    what git tracks and the new files it does not ignore; no .venv, nothing built."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    clone = where / "compactd"
    for name in filter(None, listed.split(b"\0")):
        source = ROOT / os.fsdecode(name)
        if source.is_file():  # not one deleted in the work tree
            target = clone / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return clone


def clean_env(**extra: str | Path) -> dict[str, str]:
    """The environment of a new user's shell: none of this run's venv, make or tool settings."""
    drop = ("VIRTUAL_ENV", "PIPX_", "UV_", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**env, **{k: str(v) for k, v in extra.items()}}


def test_make_demo_installs_only_what_compactd_runs_on(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path)
    # The Python that made this venv, as `python3` on a new user's PATH.
    python = shutil.which("python3") or sys.executable
    env = clean_env(XDG_DATA_HOME=tmp_path / "data")
    done = subprocess.run(
        ["make", "demo", f"PY={python}"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    # Its output is the demo's: one line says what is installed, pip says nothing.
    assert done.stderr.splitlines() == [
        "installing compactd and the packages it runs on into .venv"
    ], done.stderr
    assert done.stdout.startswith(f"compactd {__version__} demo: "), done.stdout[:300]
    assert "the transcript still holds" in done.stdout
    listed = run([clone / ".venv/bin/python", "-m", "pip", "list", "--format=json"], clone)
    installed = {d["name"].lower() for d in msgspec.json.decode(listed)}
    assert {"compactd", "anthropic", "pygls", "mcp"} <= installed, installed
    assert not installed & DEV_ONLY, installed & DEV_ONLY
    # The client comes with compactd's own build, not as a distribution of its own.
    assert "compactd-client" not in installed
    # A second run installs nothing and goes straight to the demo.
    again = subprocess.run(
        ["make", "demo", f"PY={python}"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
    )
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert again.stdout.startswith(f"compactd {__version__} demo: ")


@pytest.mark.parametrize("tool", ["pipx", "uv"])
def test_the_readme_installs_compactd_as_a_tool(tool: str, tmp_path: Path) -> None:
    command = install_commands()[tool]
    clone = fresh_clone(tmp_path)
    bin_dir = tmp_path / "bin"
    env = clean_env(
        # The tools' own folders, in this test's.
        PIPX_HOME=tmp_path / "pipx",
        PIPX_BIN_DIR=bin_dir,
        PIPX_MAN_DIR=tmp_path / "man",
        UV_TOOL_DIR=tmp_path / "uv-tools",
        UV_TOOL_BIN_DIR=bin_dir,
        # The Python on PATH, never one uv would download.
        UV_PYTHON_DOWNLOADS="never",
        XDG_DATA_HOME=tmp_path / "data",
        # The installed command first, then the tools (this venv's, from the dev extra).
        PATH=os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]]),
    )
    run(["bash", "-c", command], clone, env=env)
    shutil.rmtree(clone)  # what is installed stands on its own
    assert shutil.which("compactd", path=env["PATH"]) == str(bin_dir / "compactd")
    version = run(["compactd", "--version"], tmp_path, RUN_TIMEOUT, env=env)
    assert version == f"compactd {__version__}\n"
    # The command line's client and the daemon it spawns, both from the tool's environment.
    out = run(["compactd", "status", TRANSCRIPT, "--json"], tmp_path, RUN_TIMEOUT, env=env)
    report = msgspec.json.decode(out)
    assert report["entries"] == 72 and report["status"]["tokens"] > 0, report
