"""Files on disk: confinement to the workspace roots, reading text with limits, memory files.

Blocking: call from worker threads.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from compactd import protocol as p
from compactd.core import constants as c
from compactd.core import rehydrate as rh
from compactd.core.file_state import content_hash

log = logging.getLogger(__name__)

# Files larger than this are never read whole (rehydration needs at most a few tens of KB of
# text; a larger file is announced by reference instead). compactd's choice.
MAX_READ_BYTES: Final = 8 << 20
# A NUL byte in the first 8 KiB marks a file as binary (the heuristic git and grep use).
BINARY_SNIFF_BYTES: Final = 8192
# Longest path accepted from a client.
MAX_PATH_CHARS: Final = 4096


def resolve_roots(cwd: str, workspace_roots: Sequence[str]) -> list[Path]:
    """The directories reads are confined to, symlinks resolved."""
    roots: list[Path] = []
    for raw in [cwd, *workspace_roots]:
        if not raw:
            continue
        try:
            root = Path(raw).expanduser().resolve()
        except (OSError, RuntimeError):
            continue
        if root not in roots:
            roots.append(root)
    return roots


def _inside(path: Path, roots: Sequence[Path]) -> Path | None:
    for root in roots:
        if path == root or path.is_relative_to(root):
            return root
    return None


def confine(path: str, cwd: str, roots: Sequence[Path]) -> Path:
    """Resolve ``path`` (relative to ``cwd``) and check it lies inside one of ``roots``.

    Raises ``CompactdError``: ``invalidParams`` for an unusable path, ``pathOutsideRoots`` when
    the path, or the target of a symlink on the way, leaves the roots.
    """
    if not path or "\x00" in path or len(path) > MAX_PATH_CHARS:
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS,
            "path must be a non-empty string without NUL characters, "
            f"at most {MAX_PATH_CHARS} characters long",
        )
    candidate = Path(rh.normalize_path(path, cwd))
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as exc:  # symlink loops, unreadable components
        raise p.CompactdError(
            p.ErrorCode.PATH_OUTSIDE_ROOTS, f"cannot resolve {path!r}: {exc}", path=path
        ) from exc
    if _inside(resolved, roots) is None:
        via = f" (it resolves to {resolved})" if resolved != candidate else ""
        raise p.CompactdError(
            p.ErrorCode.PATH_OUTSIDE_ROOTS,
            f"{path!r} is outside the session's working directory and workspace roots{via}; "
            f"allowed: {', '.join(str(r) for r in roots) or 'none'}",
            path=path,
            resolved=str(resolved),
            roots=[str(r) for r in roots],
        )
    return resolved


@dataclass(frozen=True, slots=True)
class FileText:
    """A file read from disk: its text or, for a file not shown, why (``binary``,
    ``tooLarge``); ``digest`` hashes the bytes on disk."""

    text: str | None
    digest: str
    reason: str | None = None


def read_file(path: Path, max_bytes: int = MAX_READ_BYTES) -> FileText | None:
    """Read a regular file; None when it is missing or not a regular file."""
    try:
        st = path.stat()
    except OSError:
        return None
    if not path.is_file():
        return None
    if st.st_size > max_bytes:
        return FileText(text=None, digest=f"size:{st.st_size}:{st.st_mtime_ns}", reason="tooLarge")
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return FileText(text=None, digest=content_hash(data), reason="binary")
    return FileText(text=data.decode("utf-8", errors="replace"), digest=content_hash(data))


def slice_lines(text: str, offset: int | None, limit: int | None) -> tuple[str, int, int]:
    """The lines a Read call with ``offset`` (1-based first line) and ``limit`` returned.

    Returns the text, its first line number and the file's line count.
    """
    lines = text.splitlines(keepends=True)
    start = max(1, offset or 1)
    end = start - 1 + limit if limit and limit > 0 else len(lines)
    return "".join(lines[start - 1 : end]), start, len(lines)


def memory_chain_dirs(file: Path, cwd: Path, roots: Sequence[Path]) -> list[Path]:
    """Directories from the session's cwd (or the root holding ``file``) down to its folder."""
    base = cwd if file.is_relative_to(cwd) else _inside(file, roots)
    if base is None:
        return []
    dirs = [base]
    for part in file.parent.relative_to(base).parts:
        dirs.append(dirs[-1] / part)
    return dirs


def valid_memory_names(names: Sequence[str] | None) -> tuple[str, ...]:
    """Configured memory file names; names that could leave their directory are dropped."""
    if names is None:
        return tuple(c.DEFAULT_MEMORY_FILE_NAMES)
    out = []
    for name in names:
        parts = Path(name).parts
        if not name or os.path.isabs(name) or ".." in parts or "\x00" in name:
            log.warning("ignoring memory file name %r: it must be a relative path", name)
            continue
        out.append(os.path.normpath(name))
    return tuple(dict.fromkeys(out))


def write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` with ``data``, durably; never replaces a file that exists (``O_EXCL``).
    A failed write leaves no file behind."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
