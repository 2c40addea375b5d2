"""compactd's data dir when none is given: the platform's user data dir.

The one home of that default, for the daemon, ``compactd mcp`` and the short processes agents
start (hooks, status lines, ``session-compact``). It imports nothing of compactd, so that a short
process finds the data dir without loading the rest.
"""

from __future__ import annotations

from pathlib import Path

import platformdirs

__all__ = ["data_dir_of", "default_data_dir"]


def default_data_dir() -> Path:
    """The platform's user data dir for compactd (``$XDG_DATA_HOME/compactd`` on Linux)."""
    return Path(platformdirs.user_data_dir("compactd", appauthor=False))


def data_dir_of(arg: str | None) -> Path:
    """The data dir a command's ``--data-dir`` names, made absolute (an install writes it into
    the agent's settings, whose hooks run in other folders), else the default."""
    return Path(arg).absolute() if arg else default_data_dir()
