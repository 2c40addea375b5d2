"""Capture compactd's reports as a person sees them in a terminal.

Each command runs in a detached tmux pane of 100 x 40 with the venv's ``compactd`` first on
PATH; the pane, colours included, is captured once the command ends and saved as SVG beside
this file. ``make screenshots`` runs it (and installs tmux when it is missing).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.text import Text

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
COLUMNS, ROWS = 100, 40
VIEWER = "tests/data/transcripts/d-kimuson__claude-code-viewer__fe5e1c67-*.jsonl"
SHOTS = {
    "status.svg": f"compactd status {VIEWER}",
    "replay.svg": "compactd replay",
}


def capture(command: str) -> str:
    """The pane after ``command`` ran in it, with its escape sequences."""
    session = f"compactd-shot-{os.getpid()}"
    done = f"{session}-done"
    # A tmux server keeps the environment it started with: the pane's shell is set up here.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    script = (
        f"cd {shlex.quote(str(ROOT))}; export PATH={shlex.quote(path)}; unset NO_COLOR; PS1=; clear; "
        f"echo {shlex.quote('$ ' + command)}; {command}; tmux wait-for -S {done}"
    )
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", str(COLUMNS), "-y", str(ROWS)],
        check=True,
    )
    try:
        subprocess.run(["tmux", "send-keys", "-t", session, script, "Enter"], check=True)
        subprocess.run(["tmux", "wait-for", done], check=True, timeout=120)
        pane = subprocess.run(
            ["tmux", "capture-pane", "-t", session, "-p", "-e"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    lines = pane.rstrip("\n").split("\n")
    return "\n".join(lines[: ROWS - 1]).rstrip("\n")


def main() -> int:
    for name, command in SHOTS.items():
        pane = capture(command)
        console = Console(record=True, width=COLUMNS, file=open(os.devnull, "w"))  # noqa: SIM115
        console.print(Text.from_ansi(pane))
        console.save_svg(str(HERE / name), title=command.split(" tests/")[0])
        print(f"{HERE / name}: {len(pane.splitlines())} lines")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
