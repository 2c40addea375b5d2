"""The clearable tool results of a conversation, oldest first, and what clearing them frees
(docs/microcompact.md#what-a-clearing-saves).

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from compactd.core.microcompact.config import DEFAULT_CONFIG, MicroConfig
from compactd.core.normalize import CLEARED_TOOL_RESULT_PLACEHOLDER
from compactd.core.tokens import estimate_block_raw
from compactd.core.tools import call_file
from compactd.core.vocabulary import vocabulary
from compactd.transcript.model import Entry, ToolResultBlock, ToolUseBlock

__all__ = [
    "ToolResult",
    "clearable_results",
    "dropped_paths",
    "result_saving",
    "total_saving",
    "worth_clearing",
]

# Raw (unpadded) estimate of the placeholder a cleared result shows instead of its content:
# clearing a result smaller than this would make the context bigger, so such results stay.
_PLACEHOLDER_RAW: Final = estimate_block_raw(
    ToolResultBlock(tool_use_id="", content=CLEARED_TOOL_RESULT_PLACEHOLDER)
)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A clearable tool result still shown in full, in conversation order."""

    tool_use_id: str
    tool_name: str
    # Unpadded token estimate of the result's content (images and documents 2_000 each).
    raw_tokens: int
    # The file a Read / Edit / Write call touched (they feed the read-file state).
    file_path: str | None = None


def clearable_results(
    entries: Iterable[Entry],
    config: MicroConfig = DEFAULT_CONFIG,
    cleared: frozenset[str] | set[str] = frozenset(),
) -> list[ToolResult]:
    """The tool results of allowlisted tools that are not cleared yet, oldest first.

    A result counts once, under the first tool_result block answering its tool_use; results
    whose tool_use is not in ``entries`` (e.g. before a compact boundary) are not clearable.
    """
    calls: dict[str, ToolUseBlock] = {}
    seen: set[str] = set()
    out: list[ToolResult] = []
    allow = config.clearable_tools
    tracked = vocabulary().file_state
    for entry in entries:
        message = entry.message
        if message is None or isinstance(message.content, str):
            continue
        if entry.type == "assistant":
            for block in message.content:
                if isinstance(block, ToolUseBlock) and block.name in allow and block.id:
                    calls[block.id] = block
        elif entry.type == "user":
            for block in message.content:
                if not isinstance(block, ToolResultBlock):
                    continue
                tid = block.tool_use_id
                call = calls.get(tid)
                if call is None or tid in seen or tid in cleared:
                    continue
                seen.add(tid)
                path = call_file(call)
                out.append(
                    ToolResult(
                        tool_use_id=tid,
                        tool_name=call.name,
                        raw_tokens=estimate_block_raw(block),
                        file_path=path if call.name in tracked and isinstance(path, str) else None,
                    )
                )
    return out


def result_saving(result: ToolResult) -> int:
    """Raw tokens freed by replacing the result's content with the placeholder (never < 0)."""
    return max(0, result.raw_tokens - _PLACEHOLDER_RAW)


def worth_clearing(result: ToolResult) -> bool:
    return result.raw_tokens > _PLACEHOLDER_RAW


def total_saving(results: Iterable[ToolResult]) -> int:
    """What clearing ``results`` takes off the count (docs/microcompact.md#what-a-clearing-saves).

    Unpadded: a cleared result is usually covered by the latest usage, which measured it
    exactly, and the plain estimate is the best guess of what the API counted for it. Padding
    it, as the count pads what it adds, would take more off than the request loses.
    """
    return sum(result_saving(r) for r in results)


def dropped_paths(results: Sequence[ToolResult], cleared: Iterable[ToolResult]) -> tuple[str, ...]:
    """Files whose latest Read / Edit / Write result among ``results`` is being cleared.

    Those leave the read-file state; a file read again (or edited) later stays in it.
    """
    latest: dict[str, str] = {}
    for r in results:
        if r.file_path:
            latest[r.file_path] = r.tool_use_id
    ids = {r.tool_use_id for r in cleared}
    return tuple(path for path, tid in latest.items() if tid in ids)
