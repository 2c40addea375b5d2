"""Paths as rehydration compares and shows them: joined and normalized as strings, never read
from the disk (the I/O layer resolves symlinks and checks confinement).

Pure.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

__all__ = [
    "display_path",
    "is_under",
    "normalize_path",
]


@functools.lru_cache(maxsize=4096)  # a session names the same files again and again
def normalize_path(path: str, cwd: str) -> str:
    """An absolute, normalized form of ``path`` (relative paths are taken from ``cwd``).

    Symlinks are not resolved here (that needs the disk); the I/O layer resolves them before
    reading and checks confinement on the resolved path.
    """
    joined = path if os.path.isabs(path) else os.path.join(cwd or os.sep, path)
    return os.path.normpath(joined)


def display_path(path: str, cwd: str) -> str:
    """``path`` relative to ``cwd`` when it lies below it, else unchanged."""
    base = os.path.normpath(cwd) if cwd else ""
    if base and (path == base or path.startswith(base.rstrip(os.sep) + os.sep)):
        return os.path.relpath(path, base)
    return path


def is_under(path: str, dirs: Sequence[str]) -> bool:
    """Whether ``path`` lies below one of ``dirs``."""
    return any(path.startswith(d.rstrip(os.sep) + os.sep) for d in dirs)
