"""The session files of agents compactd joins without owning them, one reader per format.

Claude Code keeps its session as JSONL lines in its own shape (``transcript.claude_code``); other
agents keep theirs in files of their own (Codex's rollout files, for one). A front end that reads a
running agent's session (the Claude Code hooks, the status line) goes through an ``AgentFormat``:
the format turns raw lines into compactd's records (the Claude Code shape the core reads), says
whether lines are its own, and names the marks of its compaction lines so that a reader can find
the latest ones from the end of the file without parsing all of it. A second format is a second
implementation added to ``FORMATS``. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final, Protocol

from compactd.agents.claude_code.format import CLAUDE_CODE
from compactd.transcript.model import Record

__all__ = ["FORMATS", "AgentFormat", "format_of"]


class AgentFormat(Protocol):
    """How one agent's session file is read (see the module docstring)."""

    @property
    def name(self) -> str: ...

    @property
    def compaction_marks(self) -> re.Pattern[bytes]:
        """Matches, in a raw line, every line that belongs to a compaction."""
        ...

    @property
    def boundary_mark(self) -> re.Pattern[bytes]:
        """Matches the first line of a compaction (where the span it replaced ends)."""
        ...

    def records(self, lines: Iterable[bytes]) -> list[Record]:
        """The lines as records (corrupt ones skipped)."""
        ...

    def recognizes(self, records: Iterable[Record]) -> bool:
        """Whether these records came from lines in this format."""
        ...


FORMATS: Final[Sequence[AgentFormat]] = (CLAUDE_CODE,)


def format_of(lines: Sequence[bytes]) -> tuple[AgentFormat, list[Record]] | None:
    """The format of ``lines`` and their records, or None when no reader knows them."""
    for fmt in FORMATS:
        records = fmt.records(lines)
        if fmt.recognizes(records):
            return fmt, records
    return None
