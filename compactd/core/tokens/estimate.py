"""Estimating tokens from characters: blocks, entries, records and the fixed prefix.

What the API has not measured yet is estimated from its characters and padded by 4/3
(docs/thresholds.md#estimate): text and JSON tool inputs count their characters, images and
documents a fixed amount, and only entry types sent to the model count at all. The fixed prefix
(system prompt and tools) a client describes is estimated the same way. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from compactd.core import constants as c
from compactd.core.normalize import SILENT_ATTACHMENTS, rendered_blocks
from compactd.transcript.model import (
    Block,
    DocumentBlock,
    Entry,
    ImageBlock,
    Record,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
)

# Entry types whose content is sent to the model. Everything else in a transcript (system
# notices, progress, summaries, queue operations, request bookkeeping) never reaches the API.
_CONTEXT_ENTRY_TYPES: Final = frozenset({"user", "assistant", "attachment"})

_json_encoder: Final = msgspec.json.Encoder()


def chars_to_tokens(chars: int) -> int:
    """The one rule from characters to tokens: ``chars / 4`` rounded half up, as the reference
    estimator does (docs/thresholds.md#estimate). Every estimate in compactd goes through it."""
    return (chars + c.CHARS_PER_TOKEN // 2) // c.CHARS_PER_TOKEN


def _json_length(value: Any) -> int:
    """Length in characters of ``value`` as compact JSON (the shape the API receives)."""
    try:
        encoded = _json_encoder.encode(value)
    except (TypeError, msgspec.EncodeError):
        return len(repr(value))
    # ASCII (nearly always): one character a byte, no need to decode.
    return len(encoded) if encoded.isascii() else len(encoded.decode("utf-8"))


def _text_length(text: msgspec.Raw) -> int:
    """Length in characters of JSON text kept as it was read (compact, as Claude Code writes
    it and as the API receives it)."""
    data = bytes(text)
    return len(data) if data.isascii() else len(data.decode("utf-8"))


def estimate_block_raw(block: Block) -> int:
    """Unpadded token estimate of one content block."""
    if isinstance(block, TextBlock):
        return chars_to_tokens(len(block.text))
    if isinstance(block, ImageBlock | DocumentBlock):
        return c.IMAGE_TOKEN_ESTIMATE
    if isinstance(block, ToolUseBlock):
        return chars_to_tokens(len(block.name) + _text_length(block.input_json))
    if isinstance(block, ToolResultBlock):
        content = block.content
        if content is None:
            return 0
        if isinstance(content, str):
            return chars_to_tokens(len(content))
        return sum(estimate_block_raw(inner) for inner in content)
    if isinstance(block, ThinkingBlock):
        return chars_to_tokens(len(block.thinking))
    if isinstance(block, RedactedThinkingBlock):
        return chars_to_tokens(len(block.data))
    if isinstance(block, UnknownBlock):
        return chars_to_tokens(_json_length(block.data))
    return 0  # pragma: no cover - the Block union is exhaustive


def counts_toward_context(entry: Entry) -> bool:
    """Whether the entry's content is part of what the model sees (user, assistant, attachment).

    Synthetic API-error entries count here (their text is estimated); they are only excluded
    from anchoring the count, see ``has_usable_usage``.
    """
    return entry.type in _CONTEXT_ENTRY_TYPES


def estimate_entry_raw(entry: Entry) -> int:
    """Unpadded estimate of what the entry adds to the context; 0 for bookkeeping entries.

    An attachment is estimated from what Claude Code sent for it, the ``rendered`` copy its
    line carries (2.1.2xx and later); an older line has only the payload, whose JSON is then
    the estimate (docs/thresholds.md#estimate).
    """
    kind = entry.type
    if kind == "user" or kind == "assistant":
        message = entry.message
        if message is None:
            return 0
        content = message.content
        if isinstance(content, str):  # one text block (none when empty: 0 either way)
            return chars_to_tokens(len(content))
        total = 0
        for block in content:
            # The commonest blocks first: this runs for every entry of a context estimated.
            if isinstance(block, TextBlock):
                total += chars_to_tokens(len(block.text))
            elif isinstance(block, ToolResultBlock) and isinstance(block.content, str):
                total += chars_to_tokens(len(block.content))
            else:
                total += estimate_block_raw(block)
        return total
    if kind == "attachment":
        if entry.rendered:
            return _rendered_raw(entry.rendered)
        payload = entry.attachment
        if not payload or payload.get("type") in SILENT_ATTACHMENTS:
            return 0  # nothing of it is sent (a copy of the system prompt, bookkeeping)
        return chars_to_tokens(_json_length(payload))
    return 0


def _rendered_raw(rendered: msgspec.Raw) -> int:
    """Unpadded estimate of an attachment's rendered copy: its blocks as the API view has them
    (``core.normalize``), text by its length, an image or a document at the flat figure."""
    try:
        value = msgspec.json.decode(rendered)
    except msgspec.DecodeError:
        return 0
    total = 0
    for block in rendered_blocks(value):
        kind = block.get("type")
        text = block.get("text")
        if kind == "text" and isinstance(text, str):
            total += chars_to_tokens(len(text))
        elif kind in ("image", "document"):
            total += c.IMAGE_TOKEN_ESTIMATE
        else:
            total += chars_to_tokens(_json_length(block))
    return total


def pad(raw: int) -> int:
    """Pad a raw estimate by 4/3, rounding up."""
    if raw <= 0:
        return 0
    return -(-raw * c.ESTIMATE_PADDING_NUMERATOR // c.ESTIMATE_PADDING_DENOMINATOR)


def estimate_text_tokens(text: str) -> int:
    """Tokens of plain text (``chars_to_tokens`` of its length)."""
    return chars_to_tokens(len(text))


def estimate_entries_raw(entries: Iterable[Entry]) -> int:
    """Unpadded estimate of a list of entries; bookkeeping entries add nothing."""
    return sum(estimate_entry_raw(entry) for entry in entries)


def estimate_record_raw(record: Record) -> int:
    """``estimate_entry_raw`` of the record's entry, computed once while the record is live."""
    raw = record.raw_tokens
    if raw < 0:
        raw = estimate_entry_raw(record.entry)
        if not record.released:
            record.raw_tokens = raw
    return raw


def estimate_records_raw(records: Iterable[Record]) -> int:
    """Unpadded estimate of a list of records (see ``estimate_record_raw``)."""
    return sum(estimate_record_raw(record) for record in records)


def prefix_sizes(cache_safe: Mapping[str, Any] | None) -> dict[str, int]:
    """Estimated tokens of the parts of the fixed prefix the client described in its
    ``cacheSafeParams``: the system prompt and the tool definitions, as the JSON sent."""
    sizes: dict[str, int] = {}
    for key, name in (("system", "system prompt"), ("tools", "tools")):
        value = (cache_safe or {}).get(key)
        if value:
            sizes[name] = chars_to_tokens(_json_length(value))
    return sizes


def estimate_prefix(cache_safe: Mapping[str, Any] | None) -> int:
    """The fixed prefix estimated from ``cacheSafeParams``, before any usage says better."""
    return sum(prefix_sizes(cache_safe).values())


def estimate_entries(entries: Iterable[Entry]) -> int:
    """Padded estimate of a list of entries (the raw estimates are summed, then padded once)."""
    return pad(estimate_entries_raw(entries))
