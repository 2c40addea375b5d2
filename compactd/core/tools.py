"""What a tool call names and what a tool result says: the one place that knows tools' shapes.

Claude Code's file tools name their file in ``file_path`` (Read, Edit, MultiEdit, Write),
``notebook_path`` (NotebookEdit, NotebookRead); search tools name a folder or file in ``path``
(Grep, Glob, LS). Which tools read and which write is in ``core.constants``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from compactd.core import constants as c
from compactd.core.normalize import DOCUMENT_MARKER, IMAGE_MARKER
from compactd.transcript.model import Block, DocumentBlock, ImageBlock, TextBlock, ToolResultBlock

__all__ = ["FILE_ARGS", "PATH_ARGS", "file_path", "named_path", "result_text"]

# Arguments that name the one file a file tool works on.
FILE_ARGS: Final = ("file_path", "notebook_path")
# Every argument that names a path, file tools' first.
PATH_ARGS: Final = (*FILE_ARGS, "path", "filePath")


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
    if name not in c.FILE_READ_TOOLS and name not in c.FILE_WRITE_TOOLS:
        return None
    return _first(args, FILE_ARGS)


def named_path(args: Any) -> str | None:
    """The path any tool call names (a file tool's file, a search's folder), or None."""
    return _first(args, PATH_ARGS)


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
