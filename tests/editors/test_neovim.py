"""A second real client: Neovim's built-in LSP client (Debian's neovim, headless) drives the daemon.

nvim_client.lua starts `python -m compactd serve` with `vim.lsp.start_client`, opens a
fixture transcript with session/open, asks tokens/status, compacts with compact/full (offline
summarizer) while recording the compact/status notifications and the work-done progress the
daemon creates on the client, and shuts the daemon down with shutdown + exit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.editors.conftest import ROOT, fixture, out_dir, require

SCRIPT = Path(__file__).resolve().parent / "nvim_client.lua"
FIXTURE = "d-kimuson__claude-code-viewer__5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"


@pytest.mark.timeout(180)
def test_neovim_lsp_client_drives_a_compaction(tmp_path: Path) -> None:
    nvim = require("nvim", "install Debian's neovim (apt-get install neovim), 0.7 or newer")
    transcript = fixture(FIXTURE)
    out = out_dir("neovim")
    result_file = out / "result.json"
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "COMPACTD_CMD": json.dumps(
            [sys.executable, "-m", "compactd", "serve", "--data-dir", str(tmp_path / "sessions")]
        ),
        "COMPACTD_CWD": str(ROOT),
        "COMPACTD_FIXTURE": str(transcript),
        "COMPACTD_RESULT": str(result_file),
    }
    run = subprocess.run(
        [nvim, "--headless", "--clean", "-u", "NONE", "-c", f"luafile {SCRIPT}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    (out / "nvim.log").write_text(f"exit {run.returncode}\n{run.stdout}\n{run.stderr}")
    assert result_file.exists(), f"nvim wrote no result (exit {run.returncode}): {run.stderr}"
    record: dict[str, Any] = json.loads(result_file.read_text())
    failed = [s for s in record["steps"] if not s["ok"]]
    assert not failed and run.returncode == 0, f"failed steps {failed}; nvim: {run.stderr}"

    init = record["initialize"]
    assert init["serverInfo"]["name"] == "compactd"
    assert "compact/full" in init["capabilities"]["experimental"]["compactd"]["methods"]

    opened = record["open"]
    assert opened["sessionId"] == "nvim-fixture" and opened["entryCount"] > 0
    assert opened["importedFrom"] == str(transcript)
    before, after = record["status_before"], record["status_after"]
    assert before["tokens"] == opened["status"]["tokens"] > 0
    compacted = record["compact"]
    assert compacted["preCompactTokens"] == before["tokens"]
    assert after["tokens"] == compacted["postCompactTokens"] < before["tokens"]

    # compact/status: this compaction's phases, in order, ending in 'completed'.
    phases = [n["phase"] for n in record["status_notes"]]
    assert phases[0] == "started" and phases[-1] == "completed", phases
    assert "summarizing" in phases and "failed" not in phases
    assert {n["compactionId"] for n in record["status_notes"]} == {compacted["compactionId"]}

    # $/progress: one work-done progress that the daemon created on the client, begun and ended.
    assert record["progress_creates"] == 1
    kinds = [p["value"]["kind"] for p in record["progress"]]
    assert kinds[0] == "begin" and kinds[-1] == "end" and set(kinds) <= {"begin", "report", "end"}
    assert len({p["token"] for p in record["progress"]}) == 1
    assert record["progress"][0]["value"]["cancellable"] is True

    # shutdown + exit: the daemon exits 0.
    assert record["exit"] == {"code": 0, "signal": 0}

    # The daemon advertises only what it serves: no document sync, so Neovim does not send it
    # every buffer it attaches the client to.
    assert "textDocumentSync" not in init["capabilities"], init["capabilities"]
