"""How full a transcript's context is and what comes next, read from the transcript alone.

The MCP ``context`` tool (docs/recall.md#context) answers for a session compactd does not run:
a Claude Code transcript, or a compactd session's file read by another process. The count is
the one ``tokens/status`` gives (``core.tokens``: the latest response's usage plus an estimate of
what came after, over the records after the last compaction), measured by ``core.agent_gauge``
against the limits of the model the transcript last names (or one given, or compactd's default).

Pure: the caller reads the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from compactd.core import constants as c
from compactd.core import tokens
from compactd.core.agent_gauge import Gauge, measure
from compactd.core.view import context_records
from compactd.transcript.model import Record

__all__ = ["Outlook", "outlook"]


@dataclass(frozen=True, slots=True)
class Outlook:
    gauge: Gauge
    model: str


def outlook(
    records: Sequence[Record],
    env: Mapping[str, str],
    *,
    model: str | None = None,
    context_window: int | None = None,
) -> Outlook:
    """The gauge of ``records`` (a whole transcript) and the model it was measured for."""
    view = [r.entry for r in context_records(records)]
    named = model or tokens.recorded_model(r.entry for r in reversed(records)) or c.DEFAULT_MODEL
    return Outlook(measure(tokens.count_tokens(view), named, env, context_window), named)
