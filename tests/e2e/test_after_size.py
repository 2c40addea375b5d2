"""One after-compaction figure everywhere it is shown (docs/thresholds.md#after-a-compaction).

The same compaction of the same fixture, through every door a user reads the size after a
compaction from: the README's Python example (the real Python client, its own daemon), the
README's TypeScript example (the real TypeScript client, packed and installed as a user does,
its own daemon), ``compactd demo``, ``compactd status``'s preview, and ``compact/preview`` and
``compact/full`` asked directly. All must print the same number. ``compact/auto`` compacts with
one more paragraph in its summary (an automatic compaction tells the agent to carry on): its
result must be what ``compact/preview`` of ``auto`` announced, and the status after it.

The summary names the path of the session's transcript in compactd's data folder (the model
can read it back), so the figure depends on that path's length. Each door gets a data folder
whose path has the same length: the examples' ``compactd-data`` in the project folder, the
demo's ``--data-dir compactd-data`` too, and for ``compactd status``, whose throwaway folder
(``cli.inputs.scratch_data_dir``, the demo's without ``--data-dir``) sits in the temporary
directory, a ``TMPDIR`` of the right length. Session ids are UUIDs, all of one length.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT
from tests.e2e.test_client_packages import (  # noqa: F401  (the module's fixture, reused)
    RUN_TIMEOUT,
    example,
    run,
    ts_project,
    user_env,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

FIXTURE = "d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
README = ROOT / "README.md"
# The data folder the README's examples name, relative to the folder they run in.
EXAMPLE_DATA = "compactd-data"


def _scratch_name_length() -> int:
    """The length of the name of ``compactd status``'s throwaway data folder."""
    from compactd.cli.inputs import scratch_data_dir

    with scratch_data_dir() as folder:
        return len(Path(folder).name)


STATUS_TMP = _scratch_name_length()


def _figures(text: str) -> list[int]:
    return [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", text)]


def _after(line: str) -> int:
    """The after-size of a ``PRE -> POST tokens`` line."""
    match = re.search(r"-> ([\d,]+) tokens", line)
    assert match, line
    return int(match.group(1).replace(",", ""))


def _status_tmpdir(base: Path, project: Path) -> Path:
    """A folder for ``TMPDIR`` whose ``compactd-status-XXXXXXXX`` child has the length of
    ``project / compactd-data``."""
    want = len(str(project / EXAMPLE_DATA)) - STATUS_TMP - 1
    name_len = want - len(str(base)) - 1
    assert name_len > 0, "the project path is too short to match"
    folder = base / ("t" * name_len)
    folder.mkdir(exist_ok=True)
    assert len(str(folder / ("x" * STATUS_TMP))) == len(str(project / EXAMPLE_DATA))
    return folder


async def _direct(project: Path) -> dict[str, int]:
    """compact/preview, compact/full and compact/auto through the Python client, on sessions of
    the fixture in the examples' data folder."""
    from compactd_client import Client

    from compactd import protocol as p
    from tests.conftest import daemon_args

    out: dict[str, int] = {}
    args = daemon_args(str(project / EXAMPLE_DATA))
    async with Client.spawn(args, initialization_options={"summarizer": {"offline": True}}) as c:

        async def open_() -> str:
            opened = await c.open_session(
                cwd=str(project), model="claude-sonnet-4-5", transcript_path="session.jsonl"
            )
            return opened.session_id

        sid = await open_()
        out["compact/preview"] = (
            await c.compact_preview(sid, mechanism="full")
        ).estimated_post_tokens
        full = await c.compact_full(sid)
        out["compact/full"] = full.post_compact_tokens
        out["tokens/status after"] = (await c.tokens_status(sid)).tokens
        # An automatic compaction's summary ends with one more paragraph (the agent carries on
        # without asking, docs/compaction.md#continuation-message): its own preview says so.
        sid = await open_()
        preview = await c.request(
            p.COMPACT_PREVIEW, {"sessionId": sid, "mechanism": "auto", "force": True}
        )
        auto = await c.request(p.COMPACT_AUTO, {"sessionId": sid, "force": True})
        assert auto["wasCompacted"] and auto["mechanism"] == "full", auto
        assert preview["mechanism"] == "full", preview
        assert preview["estimatedPostTokens"] == auto["result"]["postCompactTokens"], (
            preview,
            auto,
        )
        assert (await c.tokens_status(sid)).tokens == auto["result"]["postCompactTokens"]
    return out


async def test_the_same_compaction_shows_the_same_size_everywhere(
    ts_project: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    project = ts_project
    shutil.copy(FIXTURES / FIXTURE, project / "session.jsonl")
    shutil.rmtree(project / EXAMPLE_DATA, ignore_errors=True)
    env = user_env(project)
    shown: dict[str, int] = {}

    # The README's Python example (the first ```python block), with this checkout's Python.
    (project / "example.py").write_text(example(README, "python"))
    out = run([sys.executable, "example.py"], project, RUN_TIMEOUT, env=env)
    shown["README Python"] = _after(out.strip().splitlines()[-1])

    # The README's TypeScript example, compiled and run against the installed package.
    (project / "example.ts").write_text(example(README, "ts"))
    tsc = project / "node_modules" / ".bin" / "tsc"
    run([tsc, "--strict", "--target", "es2022", "--module", "node16", "example.ts"], project)
    out = run(["node", "example.js"], project, RUN_TIMEOUT, env=env)
    preview_line, result_line = out.strip().splitlines()[-2:]
    shown["README TypeScript preview"] = _figures(preview_line)[0]
    shown["README TypeScript"] = _after(result_line)

    # The command a user runs.
    compactd = [str(Path(sys.executable).parent / "compactd")]
    # compactd demo on the same transcript, its sessions beside the examples'.
    out = run(
        [*compactd, "demo", "session.jsonl", "--data-dir", EXAMPLE_DATA, "--json"],
        project,
        RUN_TIMEOUT * 3,
        env=env,
    )
    shown["compactd demo"] = json.loads(out)["compaction"]["postCompactTokens"]

    # compactd status: its preview of a full compaction.
    tmpdir = _status_tmpdir(project.parent.parent, project)
    out = run(
        [*compactd, "status", "session.jsonl", "--json"],
        project,
        RUN_TIMEOUT,
        env={**env, "TMPDIR": str(tmpdir)},
    )
    shown["compactd status preview"] = json.loads(out)["preview"]["full"]["estimatedPostTokens"]

    shown.update(await _direct(project))
    assert len(set(shown.values())) == 1, shown
    # And it is the size a later status reports for the compacted session.
    assert shown["tokens/status after"] == shown["compact/full"]


def test_the_readme_shows_the_figures_the_examples_print() -> None:
    """The outputs the README prints under its examples are one figure too."""
    text = README.read_text(encoding="utf-8")
    python_after = re.search(r"^21,562 -> ([\d,]+) tokens$", text, re.M)
    ts_preview = re.search(r"^preview: about ([\d,]+) tokens after$", text, re.M)
    assert python_after and ts_preview
    figures = set(re.findall(r"^21,562 -> ([\d,]+) tokens$", text, re.M))
    assert figures == {python_after.group(1)} == {ts_preview.group(1)}


if __name__ == "__main__":  # pragma: no cover
    subprocess.run([sys.executable, "-m", "pytest", "-q", __file__], check=False)
