"""API-native context management: the ``context_management`` field that lets the API clear
old tool results and thinking blocks itself (docs/microcompact.md#api-context-management).

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from compactd.core.microcompact.config import MicroConfig

__all__ = [
    "API_CONTEXT_MANAGEMENT_BETA",
    "CLEAR_THINKING_EDIT",
    "CLEAR_TOOL_USES_EDIT",
    "context_management",
    "thinking_enabled",
]

# API-native context management (docs/microcompact.md#api-context-management): the
# edit types, listed thinking first, and the beta header that enables them.
CLEAR_THINKING_EDIT: Final = "clear_thinking_20251015"
CLEAR_TOOL_USES_EDIT: Final = "clear_tool_uses_20250919"
API_CONTEXT_MANAGEMENT_BETA: Final = "context-management-2025-06-27"

# Thinking configurations under which the API produces thinking blocks; clear_thinking is only
# accepted with thinking on (Anthropic's context-editing docs).
_THINKING_ON: Final = frozenset({"enabled", "adaptive"})


def thinking_enabled(thinking: dict[str, Any] | None) -> bool:
    """Whether a request's ``thinking`` config turns thinking on."""
    return isinstance(thinking, dict) and thinking.get("type") in _THINKING_ON


def context_management(
    config: MicroConfig,
    *,
    thinking: bool,
    idle: bool,
    trigger_tokens: int,
    exclude_tools: Iterable[str],
) -> dict[str, Any]:
    """The ``context_management`` request field that makes the API clear old tool results.

    Thinking clearing comes first (the API applies edits in order). While the cache is warm it
    keeps every thinking block, so the cached prefix survives; after an idle gap the cache is
    gone and only the last turn's thinking is kept. Tool-use clearing mirrors the count-based
    rules: keep the last ``keep_recent`` uses, free at least ``min_savings`` tokens, and never
    touch the tools outside the clearable allowlist (``exclude_tools``).
    """
    edits: list[dict[str, Any]] = []
    if thinking:
        keep: Any = {"type": "thinking_turns", "value": 1} if idle else "all"
        edits.append({"type": CLEAR_THINKING_EDIT, "keep": keep})
    edits.append(
        {
            "type": CLEAR_TOOL_USES_EDIT,
            "trigger": {"type": "input_tokens", "value": trigger_tokens},
            "keep": {"type": "tool_uses", "value": max(0, config.keep_recent)},
            "clear_at_least": {"type": "input_tokens", "value": config.min_savings},
            "exclude_tools": sorted(set(exclude_tools) - config.clearable_tools),
            "clear_tool_inputs": config.api_clear_tool_inputs,
        }
    )
    return {"edits": edits}
