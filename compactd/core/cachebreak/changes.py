"""What changed between the cache-key inputs of two requests, as (cause, reason) pairs: the
explanation a cache break gives (docs/cache.md#explanations).

Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from compactd.core.cachebreak.fingerprint import Fingerprint, Marker, SystemPrint, ttl_order
from compactd.core.tokens import chars_to_tokens

__all__ = [
    "CAUSE_BETAS",
    "CAUSE_CACHE_CONTROL",
    "CAUSE_EFFORT",
    "CAUSE_MODEL",
    "CAUSE_SERVER_SIDE",
    "CAUSE_SYSTEM",
    "CAUSE_THINKING",
    "CAUSE_TOOLS",
    "CAUSE_TTL_EXPIRY",
    "describe_changes",
]

# How many names a reason lists before it says "and N more".
_MAX_NAMES: Final = 10

# The machine-readable kinds of a reason: the wire values of ``CacheBreak.causes``.

CAUSE_MODEL: Final = "model"
CAUSE_SYSTEM: Final = "systemPrompt"
CAUSE_TOOLS: Final = "tools"
CAUSE_CACHE_CONTROL: Final = "cacheControl"
CAUSE_BETAS: Final = "betas"
CAUSE_THINKING: Final = "thinking"
CAUSE_EFFORT: Final = "effort"
CAUSE_TTL_EXPIRY: Final = "ttlExpiry"
CAUSE_SERVER_SIDE: Final = "serverSide"


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_MAX_NAMES])
    more = len(names) - _MAX_NAMES
    return f"{shown} and {more} more" if more > 0 else shown


def _signed(n: int) -> str:
    return f"+{n:,}" if n >= 0 else f"{n:,}"


def _system_change(old: SystemPrint, new: SystemPrint) -> str:
    delta = new.chars - old.chars
    approx = chars_to_tokens(delta) if delta >= 0 else -chars_to_tokens(-delta)
    text = (
        f"system prompt changed: {old.chars:,} -> {new.chars:,} characters "
        f"({_signed(delta)}, about {_signed(approx)} tokens)"
    )
    if old.blocks and len(old.blocks) == len(new.blocks):
        differ = [
            str(i + 1)
            for i, (a, b) in enumerate(zip(old.blocks, new.blocks, strict=True))
            if a != b
        ]
        if differ:
            text += f"; block {', '.join(differ)} of {len(new.blocks)} differs"
    elif old.blocks or new.blocks:
        text += f"; {len(old.blocks)} -> {len(new.blocks)} blocks"
    return text


def _tool_changes(old: tuple[tuple[str, str], ...], new: tuple[tuple[str, str], ...]) -> list[str]:
    old_map, new_map = dict(old), dict(new)
    added = [name for name, _ in new if name not in old_map]
    removed = [name for name, _ in old if name not in new_map]
    changed = [name for name, h in new if name in old_map and old_map[name] != h]
    out = []
    if added:
        out.append(f"tools added: {_names(added)}")
    if removed:
        out.append(f"tools removed: {_names(removed)}")
    if changed:
        out.append(f"tool definitions changed: {_names(changed)}")
    if not out and [n for n, _ in old] != [n for n, _ in new]:
        out.append("tool order changed")
    return out


def _layout_changes(old: tuple[Marker, ...], new: tuple[Marker, ...]) -> list[str]:
    if old == new:
        return []
    if not old or not new:
        # Caching switched on or off entirely: TTL and scope comparisons would say nothing more.
        verb = "added" if new else "removed"
        return [f"cache_control breakpoints {verb} ({len(old)} -> {len(new)} breakpoints)"]
    out = []
    old_ttl = sorted({m.ttl for m in old}, key=ttl_order)
    new_ttl = sorted({m.ttl for m in new}, key=ttl_order)
    if old_ttl != new_ttl:
        out.append(f"cache_control TTL changed: {'/'.join(old_ttl)} -> {'/'.join(new_ttl)}")
    old_scope = sorted({m.scope or "default" for m in old})
    new_scope = sorted({m.scope or "default" for m in new})
    if old_scope != new_scope:
        out.append(f"cache_control scope changed: {'/'.join(old_scope)} -> {'/'.join(new_scope)}")
    if not out:
        out.append(
            f"cache_control breakpoints moved ({len(old)} -> {len(new)} breakpoints)"
            if len(old) != len(new)
            else "cache_control breakpoints moved"
        )
    return out


def describe_changes(old: Fingerprint, new: Fingerprint) -> list[tuple[str, str]]:
    """(cause, reason) for every cache-key input that differs between two requests.

    Inputs one side never reported are not compared: absence of a report is not a change.
    """
    out: list[tuple[str, str]] = []
    if old.model is not None and new.model is not None and old.model != new.model:
        out.append((CAUSE_MODEL, f"model changed: {old.model} -> {new.model}"))
    if old.system is not None and new.system is not None and old.system.digest != new.system.digest:
        out.append((CAUSE_SYSTEM, _system_change(old.system, new.system)))
    if old.tools is not None and new.tools is not None and old.tools != new.tools:
        out.extend((CAUSE_TOOLS, r) for r in _tool_changes(old.tools, new.tools))
    if any(f is not None for f in (old.layout, old.system_markers, old.tool_markers)) and any(
        f is not None for f in (new.layout, new.system_markers, new.tool_markers)
    ):
        out.extend((CAUSE_CACHE_CONTROL, r) for r in _layout_changes(old.markers, new.markers))
    if old.betas is not None and new.betas is not None and old.betas != new.betas:
        added = [b for b in new.betas if b not in old.betas]
        removed = [b for b in old.betas if b not in new.betas]
        parts = []
        if added:
            parts.append(f"added {_names(added)}")
        if removed:
            parts.append(f"removed {_names(removed)}")
        out.append((CAUSE_BETAS, "betas changed: " + "; ".join(parts)))
    if old.thinking is not None and new.thinking is not None and old.thinking != new.thinking:
        if old.thinking[0] != new.thinking[0]:
            text = f"thinking changed: {old.thinking[0]} -> {new.thinking[0]}"
        else:
            text = "thinking config changed"
        out.append((CAUSE_THINKING, text))
    if old.effort is not None and new.effort is not None and old.effort != new.effort:
        out.append((CAUSE_EFFORT, f"effort changed: {old.effort} -> {new.effort}"))
    return out
