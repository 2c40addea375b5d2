"""Ranked word recall, the pure half: what a transcript line gives the index, and what a query
asks of it (docs/recall.md).

The full-text index (``services/recall_index.py``) stores one row per transcript entry. This
module decides, without I/O, what that row holds (``indexed``: who said it, when, its searchable
text, the paths its tool call wrote or named, whether it is a person's correction) and turns a
query into the search stages the index tries in order (``parse_query``): all words, then all
words as prefixes, then any word; a quoted phrase or a file path stays a phrase; ``recall:<uuid>``
fetches one entry. Text and query are normalized the same way (``fold``): apostrophes inside
words are dropped, so "dont" finds "don't".

The revision rule lives here too (``is_correction``, ``written_paths``): a hit is shown with the
later entry that changed what it was about (docs/recall.md#revisions).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from compactd.core.vocabulary import vocabulary

__all__ = [
    "ALL_WORDS",
    "PREFIXES",
    "SOME_WORDS",
    "SUBSTRING",
    "Indexed",
    "Query",
    "Role",
    "fold",
    "indexed",
    "is_correction",
    "parse_query",
    "words",
]

Role = Literal["user", "assistant", "tool", "summary", "system"]

_POINTER: Final = re.compile(r"^\s*recall:([0-9A-Za-z][0-9A-Za-z_-]*)(?:\+(\d+))?\s*$")
# An apostrophe (straight or typographic) between two letters: "don't", "it’s".
_INNER_APOSTROPHE: Final = re.compile(r"(?<=\w)['\u2019](?=\w)")
# A word as FTS5's unicode61 tokenizer cuts them: letters and digits ("mod_0" is two words).
_WORD: Final = re.compile(r"[^\W_]+")
_QUOTED: Final = re.compile(r'"([^"]*)"')

# Shell commands that undo or replace a file's content: ``git checkout -- f``, ``rm f``, ...
_REVERTING: Final = (
    ("git", "checkout"),
    ("git", "restore"),
    ("git", "revert"),
    ("git", "reset"),
    ("git", "stash"),
    ("rm",),
    ("mv",),
    ("cp",),
    ("sed", "-i"),
)
# How a person's message opens when it corrects what came before it (folded, docs/recall.md).
_CORRECTION: Final = re.compile(
    r"^(?:no\b|nope\b|not\b|dont\b|do not\b|stop\b|wait\b|actually\b|instead\b|rather\b|"
    r"undo\b|revert\b|roll ?back\b|scratch that\b|never ?mind\b|wrong\b|thats (?:not|wrong)\b|"
    r"oops\b|sorry\b|that isnt\b|please don|please undo|please revert)"
)


def fold(text: str) -> str:
    """Text as the index compares it: inner apostrophes dropped, case folded."""
    return _INNER_APOSTROPHE.sub("", text).casefold()


def words(text: str) -> list[str]:
    """The words of ``text`` after ``fold``, in order (runs of letters and digits)."""
    return _WORD.findall(fold(text))


@dataclass(frozen=True, slots=True)
class Indexed:
    """What the index keeps of one transcript entry."""

    uuid: str | None
    role: Role
    type: str
    timestamp: str | None
    text: str  # the original words, for display
    tool_use_id: str | None = None  # of a tool result: the call it answers
    call_ids: tuple[str, ...] = ()  # of an assistant entry: its tool calls
    named: tuple[str, ...] = ()  # paths its tool calls name
    written: tuple[str, ...] = ()  # paths its tool calls write, move, remove or restore
    correction: bool = False  # a person's message that opens by correcting


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _reverted_paths(command: str) -> list[str]:
    """The arguments a shell command that reverts, removes or rewrites files names as files."""
    try:
        argv = shlex.split(command)
    except ValueError:
        argv = command.split()
    out: list[str] = []
    for start in range(len(argv)):
        for head in _REVERTING:
            if tuple(argv[start : start + len(head)]) == head:
                out.extend(
                    a for a in argv[start + len(head) :] if not a.startswith("-") and a != "--"
                )
    # Only what looks like a file: a path or a name with an extension.
    return [a for a in out if "/" in a or "." in a.strip(".")]


@dataclass(slots=True)
class _Parts:
    texts: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    named: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    result_of: str | None = None


def _tool_use(block: Mapping[str, Any], parts: _Parts) -> None:
    name = str(block.get("name", ""))
    args = block.get("input")
    args = args if isinstance(args, Mapping) else {}
    # "Bash: git status" reads like what the agent did; the values unescaped, newlines kept.
    parts.texts.append(f"{name}: " + "\n".join(_strings(args)))
    if isinstance(block.get("id"), str):
        parts.calls.append(block["id"])
    # The file a file tool names, else a search's folder (``path`` for every agent's searches);
    # the tools that write it are the agents' own (``core.vocabulary``).
    tools = vocabulary()
    for key in (*tools.file_args, "path"):
        value = args.get(key)
        if isinstance(value, str) and value:
            parts.named.append(value)
            if name in tools.writes:
                parts.written.append(value)
            break
    command = args.get("command")
    if isinstance(command, str):
        reverted = _reverted_paths(command)
        parts.named.extend(reverted)
        parts.written.extend(reverted)


def _blocks(content: Any, parts: _Parts) -> None:
    if isinstance(content, str):
        parts.texts.append(content)
        return
    if not isinstance(content, list):
        return
    for block in content:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.texts.append(block["text"])
        elif kind == "tool_use":
            _tool_use(block, parts)
        elif kind == "tool_result":
            if isinstance(block.get("tool_use_id"), str):
                parts.result_of = block["tool_use_id"]
            _blocks(block.get("content"), parts)


def _role(line: Mapping[str, Any], parts: _Parts) -> Role | None:
    kind = line.get("type")
    if kind == "summary" or line.get("isCompactSummary"):
        return "summary"
    if kind == "assistant":
        return "assistant"
    if kind == "user":
        if parts.result_of is not None:
            return "tool"
        return "system" if line.get("isMeta") else "user"
    if kind == "system":
        return "system"
    return None


def indexed(line: Mapping[str, Any]) -> Indexed | None:
    """What the index keeps of a decoded transcript line, or None when it has no words to find
    (progress, file snapshots, thinking only, lines of another format)."""
    parts = _Parts()
    message = line.get("message")
    if isinstance(message, Mapping):
        _blocks(message.get("content"), parts)
    elif isinstance(line.get("content"), str):
        parts.texts.append(line["content"])
    if isinstance(line.get("summary"), str):
        parts.texts.append(line["summary"])
    role = _role(line, parts)
    text = "\n".join(t for t in parts.texts if t.strip())
    if role is None or not text:
        return None
    uuid = line.get("uuid")
    stamp = line.get("timestamp")
    return Indexed(
        uuid=uuid if isinstance(uuid, str) else None,
        role=role,
        type=str(line.get("type")),
        timestamp=stamp if isinstance(stamp, str) else None,
        text=text,
        tool_use_id=parts.result_of,
        call_ids=tuple(parts.calls),
        named=tuple(dict.fromkeys(parts.named)),
        written=tuple(dict.fromkeys(parts.written)),
        correction=role == "user" and is_correction(text),
    )


def is_correction(text: str) -> bool:
    """Whether a person's message opens by correcting or revoking what came before."""
    return bool(_CORRECTION.match(" ".join(words(text[:200]))))


def file_key(path: str) -> str:
    """How the revision rule compares paths: by file name, case folded."""
    return os.path.basename(path.rstrip("/")).casefold()


# -- queries ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed recall query: an entry to fetch, or the FTS5 expressions to try in order."""

    text: str
    fetch_uuid: str | None = None
    fetch_from: int = 0  # a character offset into the fetched entry (``recall:<uuid>+N``)
    # (name, FTS5 expression), in the order the index tries them; the names are ALL_WORDS,
    # PREFIXES and SOME_WORDS (docs/recall.md#ranking).
    stages: tuple[tuple[str, str], ...] = ()
    terms: tuple[str, ...] = ()  # the folded words, for snippets and the substring fallback


# The search stages, by the name a hit reports (docs/recall.md#ranking).
ALL_WORDS: Final = "all words"
PREFIXES: Final = "prefixes"
SUBSTRING: Final = "substring"
SOME_WORDS: Final = "some words"


def _phrase(tokens: list[str]) -> str:
    return '"' + " ".join(tokens) + '"'


def parse_query(text: str) -> Query:
    """The search a query asks for (docs/recall.md#queries).

    ``recall:<uuid>`` (optionally ``+<offset>``) fetches an entry. Otherwise quoted parts are
    phrases, and so is any chunk with punctuation inside (a path, ``foo.py``, ``--flag=x``): its
    words must stand together. The other words are tried all together, then all as prefixes,
    then any of them (BM25 ranks the entries that have more of them first).
    """
    pointer = _POINTER.match(text)
    if pointer is not None:
        return Query(text, fetch_uuid=pointer.group(1), fetch_from=int(pointer.group(2) or 0))
    phrases: list[list[str]] = []
    loose: list[str] = []
    phrases.extend(words(quoted) for quoted in _QUOTED.findall(text))
    rest = _QUOTED.sub(" ", text)
    for chunk in rest.split():
        found = words(chunk)
        if len(found) > 1:
            phrases.append(found)
        else:
            loose.extend(found)
    phrases = [p for p in phrases if p]
    loose = list(dict.fromkeys(loose))
    fixed = [_phrase(p) for p in phrases]
    every = fixed + [_phrase([w]) for w in loose]
    terms = tuple(dict.fromkeys([w for p in phrases for w in p] + loose))
    if not every:
        return Query(text, terms=terms)
    stages = [(ALL_WORDS, " AND ".join(every))]
    prefixed = fixed + [_phrase([w]) + "*" for w in loose]
    if loose:
        stages.append((PREFIXES, " AND ".join(prefixed)))
    if len(prefixed) > 1:
        stages.append((SOME_WORDS, " OR ".join(prefixed)))
    return Query(text, stages=tuple(stages), terms=terms)
