"""Content blocks and messages of transcript entries, as Claude Code writes them.

Each known block kind is a tagged struct; a kind compactd does not know is kept whole in an
``UnknownBlock`` and written back exactly as it came (``block_to_builtins``).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = [
    "Block",
    "DocumentBlock",
    "ImageBlock",
    "KNOWN_BLOCK_TYPES",
    "Message",
    "RedactedThinkingBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "UnknownBlock",
    "Usage",
    "block_to_builtins",
    "wrap_unknown_blocks",
]

# The structs of a decoded line are not tracked by the cycle collector (``gc=False``): a line
# decodes to a tree that never refers back to itself, and a long context holds hundreds of
# thousands of them, which the collector would otherwise walk again and again while a large
# transcript loads, stopping every thread (other sessions' requests included) each time.


class _BlockBase(msgspec.Struct, tag_field="type", omit_defaults=True, kw_only=True, gc=False):
    cache_control: dict[str, Any] | None = None


class TextBlock(_BlockBase, tag="text"):
    text: str = ""
    citations: list[Any] | None = None


# A call without arguments.
_NO_ARGUMENTS: Final = msgspec.Raw(b"{}")
_decode_value: Final = msgspec.json.Decoder().decode


class ToolUseBlock(_BlockBase, tag="tool_use"):
    id: str = ""
    name: str = ""
    # The call's arguments as their JSON text (a slice of the line it was read from): decoded
    # when read (``input``), which few calls are (those of file tools, commands), while a
    # context holds every call's. Decoded at once, they were a fifth of a transcript's decoded
    # memory and of its decoding time (docs/durability.md#how-fast).
    input_json: msgspec.Raw = msgspec.field(default=_NO_ARGUMENTS, name="input")

    @property
    def input(self) -> Any:
        """The call's arguments (decoded anew at each read: keep the value if it is read twice)."""
        return _decode_value(self.input_json)

    def arguments(self) -> dict[str, Any]:
        """The call's arguments as an object (empty when they are anything else)."""
        value = _decode_value(self.input_json)
        return value if isinstance(value, dict) else {}


class ImageBlock(_BlockBase, tag="image"):
    source: dict[str, Any] = msgspec.field(default_factory=dict)


class DocumentBlock(_BlockBase, tag="document"):
    source: dict[str, Any] = msgspec.field(default_factory=dict)
    title: str | None = None
    context: str | None = None
    citations: Any = None


class ThinkingBlock(_BlockBase, tag="thinking"):
    thinking: str = ""
    signature: str | None = None


class RedactedThinkingBlock(_BlockBase, tag="redacted_thinking"):
    data: str = ""


class ToolResultBlock(_BlockBase, tag="tool_result"):
    tool_use_id: str = ""
    content: str | list[Block] | None = None
    is_error: bool | None = None


class UnknownBlock(_BlockBase, tag="__unknown__"):
    """A block kind compactd does not know; ``data`` is the block exactly as it came."""

    kind: str = ""
    data: dict[str, Any] = msgspec.field(default_factory=dict)


Block = (
    TextBlock
    | ToolUseBlock
    | ToolResultBlock
    | ImageBlock
    | DocumentBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | UnknownBlock
)

# The block kinds the typed view knows; any other kind is kept as an ``UnknownBlock``.
KNOWN_BLOCK_TYPES: Final = frozenset(
    {"text", "tool_use", "tool_result", "image", "document", "thinking", "redacted_thinking"}
)


class Usage(msgspec.Struct, omit_defaults=True, kw_only=True, gc=False):
    input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    output_tokens: int | None = None

    def total(self) -> int:
        """Context size the response saw: input + cache writes + cache reads + output."""
        return (
            (self.input_tokens or 0)
            + (self.cache_creation_input_tokens or 0)
            + (self.cache_read_input_tokens or 0)
            + (self.output_tokens or 0)
        )


class Message(msgspec.Struct, omit_defaults=True, kw_only=True, gc=False):
    role: str = ""
    content: str | list[Block] = ""
    id: str | None = None
    model: str | None = None
    usage: Usage | None = None
    stop_reason: str | None = None


def wrap_unknown_blocks(value: Any) -> Any:
    """Rewrite blocks of unknown kinds (at any depth) into ``UnknownBlock`` form, and a tool
    call's arguments into their JSON text (the form ``ToolUseBlock`` keeps them in)."""
    if isinstance(value, list):
        return [wrap_unknown_blocks(v) for v in value]
    if not isinstance(value, dict):
        return value
    kind = value.get("type")
    if isinstance(kind, str) and kind not in KNOWN_BLOCK_TYPES:
        return {"type": "__unknown__", "kind": kind, "data": value}
    if kind == "tool_result" and isinstance(value.get("content"), list):
        return {**value, "content": wrap_unknown_blocks(value["content"])}
    if kind == "tool_use" and "input" in value:
        # Kept as its JSON text (``ToolUseBlock.input_json``).
        return {**value, "input": msgspec.Raw(_encode_value(value["input"]))}
    return value


def block_to_builtins(block: Block) -> dict[str, Any]:
    """A block as API JSON; unknown kinds come back exactly as they were received."""
    if isinstance(block, UnknownBlock):
        return dict(block.data)
    value = msgspec.to_builtins(block, enc_hook=_raw_value)
    assert isinstance(value, dict)
    if isinstance(block, ToolResultBlock) and isinstance(block.content, list):
        # Nested blocks of unknown kinds must come back as received, not in wrapped form.
        value["content"] = [block_to_builtins(b) for b in block.content]
    return value


_encode_value: Final = msgspec.json.Encoder().encode


def _raw_value(value: Any) -> Any:
    """A JSON text kept undecoded (``msgspec.Raw``) as the value it holds."""
    if isinstance(value, msgspec.Raw):
        return _decode_value(value)
    raise NotImplementedError(f"cannot convert {type(value).__name__}")
