"""Summarizing in pieces: a conversation larger than the summarizer's window, cut into parts
that fit, each summarized with the summary of the parts before it (docs/providers.md#pieces).

``piece_budget`` works out how many characters of conversation one request may carry for a
window; ``plan_pieces`` cuts the rendered conversation (one text per API round, from
``render_rounds``) into parts within that budget, a round larger than the budget cut on line
breaks; ``piece_prompt`` is the text of one request. ``context_limit`` recognizes the
context-length errors providers send and what they say the window is; ``known_window`` is the
window of a summarizer model compactd knows. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from compactd.core import constants as c
from compactd.core.split import group_api_rounds, parse_prompt_too_long
from compactd.core.tokens import chars_to_tokens, pad

__all__ = [
    "ContextLimit",
    "PieceBudget",
    "context_limit",
    "known_window",
    "piece_budget",
    "piece_prompt",
    "plan_pieces",
    "render_rounds",
    "text_tokens",
]

# A piece's reply may use at most this share of the window (the rest is the piece itself and
# the summary carried from the parts before it); compactd's own choice.
PIECE_OUTPUT_SHARE: Final = 4
# Below this many characters of conversation per request, summarizing in pieces would take
# hundreds of requests: the window is too small to summarize with (compactd's own figure).
MIN_PIECE_CHARS: Final = 2_000
# The estimate of a request's tokens is padded by this share of the window for what the
# estimate cannot see (a provider's chat template, its tokenizer); compactd's own choice.
WINDOW_MARGIN_SHARE: Final = 20

# Windows of summarizer models compactd knows without being told, from the providers' model
# pages (docs/providers.md#window). Claude models come from the session limits table.
KNOWN_WINDOWS: Final[tuple[tuple[str, int], ...]] = (
    ("gpt-4.1", 1_047_576),
    ("gpt-5", 400_000),
    ("gpt-4o", 128_000),
    ("o4-mini", 200_000),
    ("o3", 200_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-3.5-turbo", 16_385),
)


def text_tokens(text: str) -> int:
    """compactd's estimate of a text's tokens (docs/thresholds.md#estimate)."""
    return pad(chars_to_tokens(len(text)))


def known_window(model: str | None) -> int | None:
    """The window of a non-Claude summarizer model compactd knows by name, else None."""
    name = (model or "").strip().lower()
    for prefix, window in KNOWN_WINDOWS:
        if name.startswith(prefix) or f"/{prefix}" in name:
            return window
    return None


@dataclass(frozen=True, slots=True)
class ContextLimit:
    """A context-length error: the window it names (None when it names none) and the
    prompt's size it names."""

    window: int | None
    prompt_tokens: int | None


# OpenAI and vLLM: "This model's maximum context length is 8192 tokens. However, your
# messages resulted in 9000 tokens"; llama-server: "request (4476 tokens) exceeds the
# available context size (4096 tokens)" or "the request exceeds the available context size";
# Ollama: "the input length exceeds the context length"; Anthropic: "prompt is too long".
_MAXIMUM: Final = re.compile(r"maximum context length is (\d[\d,_]*) tokens", re.IGNORECASE)
_RESULTED: Final = re.compile(
    r"(?:resulted in|requested(?: about)?) (\d[\d,_]*) tokens", re.IGNORECASE
)
_LLAMA: Final = re.compile(
    r"\((\d+) tokens\) exceeds the available context size \((\d+) tokens\)", re.IGNORECASE
)
_PHRASES: Final = (
    "context_length_exceeded",
    "maximum context length",
    "exceeds the available context size",
    "exceed_context_size_error",
    "input length exceeds the context length",
    "exceeds the context length",
    "context length exceeded",
    "prompt is too long",
    "context window",
)


def _number(text: str) -> int:
    return int(re.sub(r"[,_]", "", text))


def context_limit(message: str, body: Any = None) -> ContextLimit | None:
    """What a provider's error says when it is a context-length error, else None.

    ``body`` is the error object when the provider sent one (llama-server puts ``n_ctx`` and
    ``n_prompt_tokens`` beside its message; OpenAI a ``code``)."""
    fields = body if isinstance(body, dict) else {}
    code = str(fields.get("code") or "") + " " + str(fields.get("type") or "")
    lowered = f"{message} {code}".lower()
    if not any(phrase in lowered for phrase in _PHRASES):
        return None
    window = fields.get("n_ctx")
    prompt = fields.get("n_prompt_tokens")
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        window = None
    if not isinstance(prompt, int) or isinstance(prompt, bool) or prompt <= 0:
        prompt = None
    llama = _LLAMA.search(message)
    if llama is not None:
        prompt, window = prompt or _number(llama.group(1)), window or _number(llama.group(2))
    maximum = _MAXIMUM.search(message)
    if maximum is not None and window is None:
        window = _number(maximum.group(1))
    resulted = _RESULTED.search(message)
    if resulted is not None and prompt is None:
        prompt = _number(resulted.group(1))
    ptl = parse_prompt_too_long(message)
    if ptl is not None:
        prompt, window = prompt or ptl[0], window or ptl[1]
    return ContextLimit(window=window, prompt_tokens=prompt)


@dataclass(frozen=True, slots=True)
class PieceBudget:
    """How one request of a summary in pieces spends a window."""

    # The reply's limit (``max_tokens``).
    output_tokens: int
    # Characters of conversation one request may carry.
    piece_chars: int


def piece_budget(window: int, fixed_text: str) -> PieceBudget | None:
    """The budget of a request in a ``window``-token summarizer, beside ``fixed_text`` (the
    system prompt, the instruction and the piece's framing); None when the window is too small
    to summarize with (under ``MIN_PIECE_CHARS`` of conversation per request).

    A request carries the piece, the summary of the parts before it (at most one reply long)
    and the fixed text, and leaves room for its reply.
    """
    output = min(c.COMPACT_MAX_OUTPUT_TOKENS, window // PIECE_OUTPUT_SHARE)
    margin = window // WINDOW_MARGIN_SHARE
    room = window - 2 * output - margin - text_tokens(fixed_text)
    # compactd's estimate is chars / 4 padded by 4/3: a token of room is three characters.
    chars = room * 3
    if chars < MIN_PIECE_CHARS:
        return None
    return PieceBudget(output_tokens=output, piece_chars=chars)


def _block_text(block: dict[str, Any]) -> str:
    if block.get("type") == "text":
        return str(block.get("text", ""))
    return json.dumps(block, ensure_ascii=False)


def render_rounds(messages: Sequence[dict[str, Any]]) -> list[str]:
    """The conversation as text, one text per API round (a response and the tool results
    that answer it), each message headed by its role. ``messages`` are plain API messages
    (tool blocks already rendered as text)."""
    rounds: list[str] = []
    for group in group_api_rounds(messages):
        parts: list[str] = []
        for message in group:
            content = message.get("content")
            if isinstance(content, str):
                text = content
            else:
                text = "\n".join(_block_text(b) for b in content or [] if isinstance(b, dict))
            parts.append(f"[{message.get('role', 'user')}]\n{text}")
        rounds.append("\n\n".join(parts))
    return rounds


def _cut(text: str, limit: int) -> list[str]:
    """``text`` in slices of at most ``limit`` characters, cut at a line break when one is in
    the second half of the slice."""
    out: list[str] = []
    while len(text) > limit:
        at = text.rfind("\n", limit // 2, limit)
        at = limit if at <= 0 else at
        out.append(text[:at])
        text = text[at:].lstrip("\n")
    if text:
        out.append(text)
    return out


def plan_pieces(rounds: Sequence[str], piece_chars: int) -> list[str]:
    """``rounds`` gathered in order into pieces of at most ``piece_chars`` characters; a round
    larger than that is cut into several pieces. Every character of every round is in exactly
    one piece, in order (the separators between rounds aside)."""
    if piece_chars <= 0:
        raise ValueError("piece_chars must be positive")
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for text in rounds:
        for part in _cut(text, piece_chars):
            added = len(part) + (2 if current else 0)
            if current and size + added > piece_chars:
                pieces.append("\n\n".join(current))
                current, size = [], 0
                added = len(part)
            current.append(part)
            size += added
    if current:
        pieces.append("\n\n".join(current))
    return pieces


_PIECE_INTRO: Final = (
    "The conversation below is too long for one request, so it comes in {total} parts and "
    "this is part {index}. Summarize everything so far as instructed at the end: "
)
_FIRST: Final = "this part is the start of the conversation."
_LATER: Final = (
    "the summary of the parts before this one comes first; fold it into your summary, which "
    "must cover those parts and this one together, keeping every user message they quote."
)
_EARLIER_HEADING: Final = "Summary of the earlier parts:"
_PART_HEADING: Final = "Part {index} of the conversation:"


def piece_frame(total: int) -> str:
    """The framing text of a piece without its conversation (for the budget)."""
    return (
        _PIECE_INTRO.format(total=total, index=total)
        + _LATER
        + _EARLIER_HEADING
        + _PART_HEADING.format(index=total)
    )


def piece_prompt(piece: str, index: int, total: int, earlier: str | None, instruction: str) -> str:
    """The one user message of request ``index`` (1-based) of ``total``: the framing, the
    summary of the parts before (``earlier``), the piece, then the summary instruction, the
    same as for a conversation summarized at once."""
    intro = _PIECE_INTRO.format(total=total, index=index) + (_LATER if earlier else _FIRST)
    parts = [intro]
    if earlier:
        parts.append(f"{_EARLIER_HEADING}\n\n{earlier}")
    parts.append(f"{_PART_HEADING.format(index=index)}\n\n{piece}")
    parts.append(instruction)
    return "\n\n".join(parts)
