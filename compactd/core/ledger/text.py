"""Shortening text for the ledger: one-line clips and cuts around a recall pointer.

``clip`` flattens whitespace and cuts a text to a length; ``head`` and ``tail`` keep one end;
``head_tail`` keeps both ends of a long message around a pointer that ``recall/search`` resolves
to the whole entry (``core.recall.pointer``), and only when cutting saves more than the note
costs. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Final

from compactd.core.recall import pointer

SPACES: Final = re.compile(r"\s+")


def flatten(text: str) -> str:
    return SPACES.sub(" ", text).strip()


def clip(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters, cut between words with an ellipsis."""
    flat = flatten(text)
    if len(flat) <= limit:
        return flat
    cut = flat[: max(1, limit - 1)]
    space = cut.rfind(" ")
    if space >= len(cut) * 3 // 4:
        cut = cut[:space]
    return cut.rstrip(" ,;:.") + "…"


def clip_head(text: str, limit: int) -> str:
    """The start of ``text`` (lines kept), cut at a line end or between words; all of it when
    it fits ``limit``."""
    if len(text) <= limit:
        return text.rstrip()
    head = text[:limit]
    for sep in ("\n", " "):
        at = head.rfind(sep)
        if at >= limit // 2:
            return head[:at].rstrip()
    return head.rstrip()


def _tail(text: str, limit: int) -> str:
    """The end of ``text`` (lines kept), starting at a line start or between words."""
    tail = text[-limit:]
    for sep in ("\n", " "):
        at = tail.find(sep)
        if 0 <= at <= limit // 2:
            return tail[at + 1 :].lstrip()
    return tail.lstrip()


# What the note in the middle of a cut message costs (the pointer included): a message is cut
# only when cutting saves more than this.
_CUT_NOTE_CHARS: Final = 120


def clip_head_tail(text: str, limit: int, uid: str | None) -> tuple[str, bool]:
    """``text`` as written when it fits ``limit`` (or cutting it would not make it shorter),
    else its head and tail within ``limit`` around a recall pointer."""
    text = text.strip("\n")
    if len(text) <= limit + _CUT_NOTE_CHARS:
        return text, False
    head = clip_head(text, max(60, limit * 2 // 3))
    tail = _tail(text, max(0, limit - len(head)))
    left = len(text) - len(head) - len(tail)
    where = f"{pointer(uid)} returns it whole" if uid else "recall/search finds it whole"
    note = f"[… {left:,} characters of this message left out here; {where} …]"
    return "\n".join(part for part in (head, note, tail) if part), True
