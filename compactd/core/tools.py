"""What a tool call names and what a tool result says: the one place that knows tools' shapes.

Which tools read and which write, and the arguments that name their file or folder, are the
agents' own (``core.vocabulary``: Claude Code's file tools say ``file_path``, its searches
``path``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from compactd.core.normalize import DOCUMENT_MARKER, IMAGE_MARKER
from compactd.core.vocabulary import vocabulary
from compactd.transcript.model import (
    Block,
    DocumentBlock,
    ImageBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

__all__ = ["call_file", "file_path", "named_path", "result_text"]


def _first(args: Any, keys: Iterable[str]) -> str | None:
    if not isinstance(args, dict):
        return None
    for key in keys:
        value = args.get(key)
        if isinstance(value, str) and value and "\x00" not in value:
            return value
    return None


def file_path(name: str, args: Any) -> str | None:
    """The file a file-reading or file-writing tool call works on, or None for other tools."""
    tools = vocabulary()
    if name not in tools.reads and name not in tools.writes:
        return None
    return _first(args, tools.file_args)


def call_file(call: ToolUseBlock) -> str | None:
    """``file_path`` of a call; its arguments, kept as JSON text, are decoded only for a file
    tool's."""
    tools = vocabulary()
    if call.name not in tools.reads and call.name not in tools.writes:
        return None
    return _first(call.input, tools.file_args)


def named_path(args: Any) -> str | None:
    """The path any tool call names (a file tool's file, a search's folder), or None."""
    tools = vocabulary()
    return _first(args, (*tools.file_args, *tools.path_args))


def result_text(block: ToolResultBlock) -> str:
    """A tool result as text: its text blocks joined by line breaks, media as markers."""
    content = block.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return blocks_text(content)


def blocks_text(blocks: Iterable[Block]) -> str:
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            if block.text.strip():
                parts.append(block.text)
        elif isinstance(block, ImageBlock):
            parts.append(IMAGE_MARKER)
        elif isinstance(block, DocumentBlock):
            parts.append(DOCUMENT_MARKER)
    return "\n".join(parts)
