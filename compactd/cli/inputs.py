"""What the reports start from: the transcript a person names, the daemon they run it through."""

from __future__ import annotations

import sys
from pathlib import Path

from compactd.core.constants import DEFAULT_MODEL

__all__ = ["DEFAULT_MODEL", "daemon_args", "unreadable"]


def daemon_args(data_dir: str) -> list[str]:
    """The command of a throwaway daemon, run with this very Python."""
    return [sys.executable, "-m", "compactd", "serve", "--data-dir", data_dir]


def unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be a transcript, said for a person; None when it may be one."""
    if path.is_dir():
        return "is a directory; give a Claude Code transcript file (.jsonl)"
    if not path.exists():
        return "no such file"
    if path.stat().st_size == 0:
        return "is empty: a transcript has one JSON entry per line"
    return None
