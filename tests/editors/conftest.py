"""Shared by the real-editor tests: where their tools are, and a failure that says how to get one.

`make test-editors` installs the tools (tests/editors/setup.sh) before it runs these tests. When a
tool is still missing, the test fails with what to install: it never skips.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT

OUT = Path(__file__).resolve().parent / "out"


def require(tool: str, how: str) -> str:
    """The path of ``tool`` (a name on PATH or a path), or fail the test saying ``how`` to get it."""
    found = shutil.which(tool)
    if found is None:
        pytest.fail(f"{tool} is not installed: {how}", pytrace=False)
    return found


def fixture(name: str) -> Path:
    """A transcript of tests/data/transcripts (part of the repository: missing is an error)."""
    path = FIXTURES / name
    assert path.is_file(), f"fixture transcript {path} is missing"
    return path


def out_dir(name: str) -> Path:
    """tests/editors/out/<name>: screenshots and logs of one test, kept after it for a look."""
    path = OUT / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def venv_bin() -> Path:
    """The folder of the interpreter running the tests: the venv with compactd's console script."""
    return Path(sys.executable).absolute().parent


__all__ = ["OUT", "ROOT", "out_dir", "require", "fixture", "venv_bin"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """A failed step of a real-editor test leaves a screenshot of what the editor showed then."""
    report = yield
    editor = getattr(item, "funcargs", {}).get("editor")
    if call.when == "call" and getattr(report, "failed", False) and editor is not None:
        try:
            editor.shot(f"FAILED-{item.name}")
        except Exception as exc:  # the browser itself may be what failed
            item.add_report_section("call", "screenshot", f"no screenshot: {exc!r}")
    return report
