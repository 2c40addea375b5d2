"""What the reports start from: the transcript a person names, the daemon they run it through."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from compactd.core.constants import DEFAULT_MODEL

__all__ = ["DEFAULT_MODEL", "daemon_args", "scratch_data_dir", "unreadable"]


def daemon_args(data_dir: str) -> list[str]:
    """The command of a throwaway daemon, run with this very Python."""
    return [sys.executable, "-m", "compactd", "serve", "--data-dir", data_dir]


def scratch_data_dir() -> tempfile.TemporaryDirectory[str]:
    """The throwaway data folder of a command that keeps nothing (demo, status, compact, replay
    without ``--data-dir``), deleted when it ends.

    One form for all of them: a summary names the session's transcript by its path in the data
    folder, the size after a compaction counts that path, and so the same transcript compacted
    by any of these commands shows the same figure (docs/thresholds.md#after-a-compaction).
    """
    return tempfile.TemporaryDirectory(prefix="compactd-")


def unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be a transcript, said for a person; None when it may be one."""
    if path.is_dir():
        return "is a directory; give a Claude Code transcript file (.jsonl)"
    if not path.exists():
        return "no such file"
    if path.stat().st_size == 0:
        return "is empty: a transcript has one JSON entry per line"
    return None
