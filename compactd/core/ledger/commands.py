"""Reading a shell command: the program it runs, the family of its runs, the text it is known by.

The ledger counts the runs of one command once and groups older commands by program; a failure
is resolved by a later successful run of the same family (``git push``, ``npm run build``).
``cd`` and leading variable assignments are skipped. A command is known by its first
``COMMAND_KEY_CHARS`` characters: the check looks for them in a summary, and a shortened
command keeps them (``clip_command``). Pure: no I/O.
"""

from __future__ import annotations

import os
import re
from typing import Final

from compactd.core.ledger.text import flatten

# A command counts as present in a summary when its first this-many characters (whitespace
# collapsed) are there; so a command is never shortened below them. compactd's own choice.
COMMAND_KEY_CHARS: Final = 48

_ENV_ASSIGN: Final = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)+")
_SEGMENTS: Final = re.compile(r"\s*(?:&&|\|\||;)\s*")


def program_of(command: str) -> str:
    """The program a shell command runs first (``cd`` and variable assignments skipped)."""
    for part in _SEGMENTS.split(flatten(command)):
        part = _ENV_ASSIGN.sub("", part)
        word = part.split(" ", 1)[0] if part else ""
        if word and word != "cd":
            return os.path.basename(word) or word
    return "sh"


_SUBCOMMAND: Final = re.compile(r"[a-z][a-z0-9:_-]*")


def command_family(command: str) -> tuple[str, ...]:
    """A command's program and its subcommand words, if any (``git push``, ``npm run build``)."""
    for part in _SEGMENTS.split(flatten(command)):
        words = _ENV_ASSIGN.sub("", part).split(" ")
        if words and words[0] and words[0] != "cd":
            family = [os.path.basename(words[0]) or words[0]]
            for word in words[1:3]:
                if not _SUBCOMMAND.fullmatch(word):
                    break
                family.append(word)
            return tuple(family)
    return ("sh",)


def clip_command(command: str, limit: int) -> str:
    """``command`` on one line in at most ``limit`` characters (and never fewer than its first
    ``COMMAND_KEY_CHARS``), with an ellipsis when cut. It is cut between words only past that
    prefix: what tells one command from another is its start, cut to the character."""
    flat = flatten(command)
    limit = max(limit, COMMAND_KEY_CHARS + 1)
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    if space >= COMMAND_KEY_CHARS:
        cut = cut[:space]
    return cut + "…"
