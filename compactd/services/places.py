"""Paths and times as a person reads them in compactd's messages: the home folder as ``~``,
a file's age in words. Shared by the CLI's reports and the agents' hints."""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["ago", "shown"]


def shown(path: Path) -> str:
    """``path`` with the home folder as ``~`` (the way people write it)."""
    home = str(Path.home())
    text = str(path)
    if home not in ("", "/") and (text == home or text.startswith(home + os.sep)):
        return "~" + text[len(home) :]
    return text


def ago(mtime: float) -> str:
    """How long ago ``mtime`` was, in the largest whole unit ("10 minutes ago")."""
    seconds = max(0.0, time.time() - mtime)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'' if count == 1 else 's'} ago"
    return "just now"
