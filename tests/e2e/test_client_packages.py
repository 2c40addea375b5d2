"""The two client packages as a new user gets them, each against the real daemon.

From a clean temporary folder: the TypeScript client packed with ``npm pack``, installed into an
empty npm project beside ``typescript``, its README's ``ts`` example compiled with ``tsc --strict``
and run with node; the Python client installed alone into a fresh virtual environment (where
``import compactd`` fails: the daemon is not there), its README's ``python`` example run with that
environment's interpreter. In both, ``compactd`` on PATH is this checkout's daemon (the directory
of ``sys.executable`` comes first) and ``XDG_DATA_HOME`` points into the temporary folder, so no
session reaches the user's data dir.

Installing takes a while (npm and pip fetch from their registries), so each package is set up
once per module; the tests are skipped, saying why, only when node or npm is missing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT

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
