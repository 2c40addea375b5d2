"""What Claude Code's own summaries dropped, and whether recall finds each item from a few words,
for the recall benchmark (``tests/bench/bench_recall_words.py``) and its test on data
(``tests/unit/test_recall_index.py``). No tests here.

For each Claude Code compaction in a real transcript (a ``compact_boundary`` followed by its
summary), the survival ledger (``compactd.core.ledger``) lists the person's messages, the files
and the shell commands of what was summarized, and ``check_summary`` tells which of them the
summary does not mention: those are the dropped items.

Each item is then asked for the way an agent asks, lowercased and short (``agent_query``): a
message by its first few words of three letters or more, apostrophes dropped ("trying import
files that dont" for "Trying to import files that don't ..."); a file by its name; a command by
its first two words and the last argument of its first line
(``git diff src/app.py``). It counts as found when one of the first ``TOP`` results is the item's own
entry: the message's entry (its uuid), or a tool call or result whose text holds the command or
the file name. The baseline is the exact-substring search recall/search had before the index
(``substring_search``: the query as one case-insensitive string, most recent first).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from compactd.agents.claude_code.format import is_hook_summary
from compactd.core import recall
from compactd.core.ledger import build_ledger, check_summary
from compactd.core.recall_words import parse_query, words
from compactd.core.view import context_records
from compactd.services.recall_index import RecallIndex
from compactd.transcript.model import Record
from compactd.transcript.reading import parse_buffer
from tests.fidelity import cc_like_summary

ROOT = Path(__file__).resolve().parents[1]
TRANSCRIPTS = ROOT / "tests" / "data" / "transcripts"
# A hit counts when it is among the first this-many results.
TOP = 5
# Words an agent keeps of a message, and of a command.
MESSAGE_WORDS = 5
COMMAND_WORDS = 3


@dataclass(frozen=True)
class Item:
    kind: str  # "message", "file" or "command"
    text: str  # the message, the path, the command
    uuid: str | None  # the message's entry
    source: str  # transcript name and compaction number

    @property
    def query(self) -> str:
        return agent_query(self)


def agent_query(item: Item) -> str:
    """A few words of ``item``, phrased the way an agent asks (module docstring)."""
    if item.kind == "file":
        return os.path.basename(item.text.rstrip("/")).casefold()
    if item.kind == "command":
        # Its first line: a heredoc's body is not what one remembers a command by.
        first = item.text.strip().splitlines()[0] if item.text.strip() else ""
        chunks = [c for c in first.casefold().split() if re.search(r"\w", c)]
        chunks = [c for c in chunks if not c.startswith("-")]
        # The program and what it works on: its first words and its last argument.
        picked = chunks if len(chunks) <= COMMAND_WORDS else [*chunks[:2], chunks[-1]]
        return " ".join(picked)
    picked = [w for w in words(item.text) if len(w) >= 3 or any(ch.isdigit() for ch in w)]
    return " ".join(picked[:MESSAGE_WORDS])


def _summary_text(record: Record) -> str:
    content = record.entry.content
    if isinstance(content, str):
        return content
    return recall.entry_text(record)


def compactions(path: Path) -> Iterator[tuple[str, list[Record], str]]:
    """(label, the records a Claude Code compaction summarized, its summary text).

    A transcript without a compaction gives one over all its records, with a summary written
    the way Claude Code's are (``tests.fidelity.cc_like_summary``), labelled ``cc-like``.
    """
    records = [r for _, r in parse_buffer(path.read_bytes())]
    name = path.stem.split("__")[-1][:20]
    if not any(r.entry.subtype == "compact_boundary" for r in records):
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        yield f"{name} cc-like", records, cc_like_summary(lines)
        return
    n = 0
    for at, record in enumerate(records):
        if record.entry.type != "system" or record.entry.subtype != "compact_boundary":
            continue
        summary = next((r for r in records[at + 1 :] if r.entry.is_compact_summary), None)
        if summary is None:
            continue
        n += 1
        yield f"{name}#{n}", context_records(records[:at]), _summary_text(summary)


def dropped(path: Path) -> list[Item]:
    """The items the transcript's Claude Code summaries dropped."""
    out: list[Item] = []
    for label, summarized, summary in compactions(path):
        missing = check_summary(build_ledger(summarized), summary)
        out += [Item("message", m.text, m.uuid, label) for m in missing.messages if m.human]
        out += [Item("file", f.path, None, label) for f in missing.files]
        out += [Item("command", c.command, None, label) for c in missing.commands]
    return out


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def is_item(item: Item, uuid: str | None, text: str) -> bool:
    """Whether an entry (its uuid and text) is ``item``'s own."""
    if item.kind == "message":
        return uuid is not None and uuid == item.uuid
    if item.kind == "file":
        return os.path.basename(item.text.rstrip("/")).casefold() in text.casefold()
    return _norm(item.text)[:80] in _norm(text)


def found_by_index(index: RecallIndex, item: Item) -> bool:
    outcome = index.search(parse_query(item.query), TOP)
    return any(is_item(item, f.entry.uuid, f.entry.text) for f in outcome.found)


def substring_search(records: list[Record], query: str, limit: int) -> list[Record]:
    """The baseline: recall/search before the index, the query as one case-insensitive string
    in an entry's text, most recent first."""
    needle = query.casefold()
    hits = [r for r in reversed(records) if needle in recall.entry_text(r).casefold()]
    return hits[:limit]


def found_by_substring(records: list[Record], item: Item) -> bool:
    hits = substring_search(records, item.query, TOP)
    return any(is_item(item, r.uuid, recall.entry_text(r)) for r in hits)


@dataclass
class Tally:
    """Dropped items of one kind, and how many each recall found."""

    total: int = 0
    index: int = 0
    substring: int = 0
    missed: list[tuple[Item, str]] | None = None


def measure(paths: list[Path]) -> dict[str, Tally]:
    """Per item kind: how many dropped items each recall finds in its first ``TOP`` results."""
    tallies = {kind: Tally(missed=[]) for kind in ("message", "file", "command")}
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            items = dropped(path)
            if not items:
                continue
            records = [r for _, r in parse_buffer(path.read_bytes())]
            with RecallIndex(Path(tmp), path) as index:
                index.refresh()
                for item in items:
                    t = tallies[item.kind]
                    t.total += 1
                    if found_by_index(index, item):
                        t.index += 1
                    else:
                        assert t.missed is not None
                        t.missed.append((item, item.query))
                    t.substring += found_by_substring(records, item)
    return tallies


def compacted_by_compactd(path: Path) -> bool:
    """Whether a compaction of the transcript was answered by compactd's plugin (a summary row
    filed by its ``session.compact`` hook): compactd's summary keeps what it replaces, so such a
    compaction drops nothing to look for."""
    records = [r for _, r in parse_buffer(path.read_bytes())]
    boundaries = {r.entry.uuid for r in records if r.entry.subtype == "compact_boundary"}
    return any(is_hook_summary(r.entry, {b for b in boundaries if b}) for r in records)


def transcripts() -> list[Path]:
    return sorted(TRANSCRIPTS.glob("*.jsonl"))


__all__ = ["Item", "agent_query", "compacted_by_compactd", "dropped", "measure", "transcripts"]
