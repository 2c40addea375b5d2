"""Rehydration after a full or partial compaction (issue 8 fills this in).

``rehydration_attachments`` returns the attachment entries (Claude Code's attachment entry
shape, as dicts) that re-inject the agent's working set after a compaction: recently read
files, the todo list, the plan, invoked skills, nested memory. ``kept`` are the records kept
verbatim by a partial compaction (files read in them are not re-attached).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from compactd.model import Record

if TYPE_CHECKING:
    from compactd.app import App
    from compactd.session import Session


async def rehydration_attachments(
    app: App, session: Session, kept: Sequence[Record]
) -> list[dict[str, Any]]:
    return []
