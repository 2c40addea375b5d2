"""Which files of the read-file state are re-read after a compaction
(docs/rehydration.md#recent-files).

Pure.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from compactd.core import constants as c

__all__ = [
    "FileCandidate",
    "select_files",
]


@dataclass(frozen=True, slots=True)
class FileCandidate:
    """One file of the read-file state, as rehydration sees it."""

    path: str
    timestamp: float
    seq: int = 0
    offset: int | None = None
    limit: int | None = None
    # The latest read returned the "file unchanged" stub instead of content.
    stub: bool = False
    # Registered as a nested memory file (CLAUDE.md and the like).
    memory: bool = False


def select_files(
    candidates: Iterable[FileCandidate],
    *,
    exclude_paths: Collection[str] = (),
    plan_paths: Collection[str] = (),
    plan_dirs: Collection[str] = (),
    memory_names: Collection[str] = c.DEFAULT_MEMORY_FILE_NAMES,
) -> list[FileCandidate]:
    """Files eligible for re-reading, most recent first (docs/rehydration.md#recent-files).

    Skipped: plan files (attached on their own), memory files (re-attached when the agent
    reads near them), files whose read is in the entries kept verbatim (the model still has
    them) and reads that returned the "file unchanged" stub. The caller reads them in this
    order and keeps the first ``Budgets.max_files`` that can be read.
    """
    excluded = set(exclude_paths)
    plans = set(plan_paths)
    dirs = tuple(d.rstrip(os.sep) + os.sep for d in plan_dirs)
    names = set(memory_names)
    latest: dict[str, FileCandidate] = {}
    for cand in candidates:
        prev = latest.get(cand.path)
        if prev is None or (cand.timestamp, cand.seq) >= (prev.timestamp, prev.seq):
            latest[cand.path] = cand
    eligible = [
        cand
        for cand in latest.values()
        if not cand.stub
        and not cand.memory
        and os.path.basename(cand.path) not in names
        and cand.path not in excluded
        and cand.path not in plans
        and not cand.path.startswith(dirs)
    ]
    eligible.sort(key=lambda cand: (cand.timestamp, cand.seq), reverse=True)
    return eligible
