"""Fingerprints of a request's cache-key inputs: what the API keys its prompt cache on (system
blocks, tools, model, betas, thinking / effort, the cache_control layout) reduced to hashes and
a few small descriptors, so no prompt or tool text is kept (docs/cache.md).

Pure.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from typing import Any, Final

import msgspec

__all__ = [
    "CACHE_DEFAULT_TTL_SECONDS",
    "CACHE_LONG_TTL_SECONDS",
    "DEFAULT_TTL_LABEL",
    "Fingerprint",
    "Marker",
    "SystemPrint",
    "fingerprint",
    "stable_hash",
    "ttl_order",
]

# Idle time after which an unexplained drop is put down to the cache's time-to-live: 5 minutes
# (docs/cache.md#explanations), the default ephemeral TTL. When every breakpoint of the
# previous request asked for the 1-hour TTL (docs/anthropic-api.md#prompt-caching) that TTL
# applies instead.
CACHE_DEFAULT_TTL_SECONDS: Final = 5 * 60
CACHE_LONG_TTL_SECONDS: Final = 60 * 60
_TTL_SECONDS: Final = {"5m": CACHE_DEFAULT_TTL_SECONDS, "1h": CACHE_LONG_TTL_SECONDS}
DEFAULT_TTL_LABEL: Final = "5m"

# Longest descriptor kept for a thinking config (it is config, not content, but unbounded).
_MAX_DESCRIPTOR: Final = 120

_encoder: Final = msgspec.json.Encoder(order="sorted")


def stable_hash(value: Any) -> str:
    """A short, order-independent (for mappings) digest of a JSON value."""
    data = _encoder.encode(value)
    return hashlib.blake2b(data, digest_size=10).hexdigest()


@dataclass(frozen=True, slots=True)
class Marker:
    """One cache breakpoint: where it sits, its TTL label and its scope (no content)."""

    where: str
    ttl: str
    scope: str | None


@dataclass(frozen=True, slots=True)
class SystemPrint:
    digest: str
    chars: int
    blocks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """Hashes and descriptors of one request's cache-key inputs; ``None`` means not reported.

    A field the client leaves out of a report is inherited from its previous report of the same
    query source (``inherit``), so a client may send only what it knows changed.
    """

    model: str | None = None
    system: SystemPrint | None = None
    # (tool name, digest of its definition without cache_control), in request order.
    tools: tuple[tuple[str, str], ...] | None = None
    betas: tuple[str, ...] | None = None
    # (short description, digest) of the thinking config.
    thinking: tuple[str, str] | None = None
    effort: str | None = None
    # Breakpoints from the explicit ``cacheControl`` report and found on system blocks / tools.
    layout: tuple[Marker, ...] | None = None
    system_markers: tuple[Marker, ...] | None = None
    tool_markers: tuple[Marker, ...] | None = None
    cache_edits: frozenset[str] | None = None

    def inherit(self, previous: Fingerprint | None) -> Fingerprint:
        """Fill the fields this report left out from ``previous``."""
        if previous is None:
            return self
        changes = {
            name: getattr(previous, name)
            for name in self.__slots__
            if getattr(self, name) is None and getattr(previous, name) is not None
        }
        return replace(self, **changes) if changes else self

    @property
    def markers(self) -> tuple[Marker, ...]:
        return (self.layout or ()) + (self.system_markers or ()) + (self.tool_markers or ())

    def idle_limit(self) -> float:
        """Seconds of idleness after which this request's cached prefix has expired."""
        ttls = [_TTL_SECONDS.get(m.ttl, CACHE_DEFAULT_TTL_SECONDS) for m in self.markers]
        return float(min(ttls)) if ttls else float(CACHE_DEFAULT_TTL_SECONDS)

    def ttl_label(self) -> str:
        labels = sorted({m.ttl for m in self.markers}, key=ttl_order)
        return labels[0] if labels else DEFAULT_TTL_LABEL


def ttl_order(label: str) -> float:
    """Shorter TTLs first; labels the API does not know last."""
    return _TTL_SECONDS.get(label, math.inf)


def _marker(where: str, cc: Any) -> Marker:
    if not isinstance(cc, dict):
        raise ValueError(f"{where}: cache_control must be an object")
    ttl = cc.get("ttl", DEFAULT_TTL_LABEL)
    scope = cc.get("scope")
    if not isinstance(ttl, str):
        raise ValueError(f"{where}: cache_control.ttl must be a string")
    if scope is not None and not isinstance(scope, str):
        raise ValueError(f"{where}: cache_control.scope must be a string")
    return Marker(where=where, ttl=ttl, scope=scope)


def _without_cache_control(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _system_print(system: str | list[dict[str, Any]]) -> tuple[SystemPrint, tuple[Marker, ...]]:
    if isinstance(system, str):
        return SystemPrint(digest=stable_hash(system), chars=len(system), blocks=()), ()
    blocks: list[str] = []
    markers: list[Marker] = []
    chars = 0
    for i, block in enumerate(system):
        if not isinstance(block, dict):
            raise ValueError(f"system[{i}] must be an object")
        text = block.get("text")
        chars += len(text) if isinstance(text, str) else len(_encoder.encode(block))
        blocks.append(stable_hash(_without_cache_control(block)))
        if block.get("cache_control") is not None:
            markers.append(_marker(f"system[{i}]", block["cache_control"]))
    digest = stable_hash(blocks)
    return SystemPrint(digest=digest, chars=chars, blocks=tuple(blocks)), tuple(markers)


def _tools_print(
    tools: list[dict[str, Any]],
) -> tuple[tuple[tuple[str, str], ...], tuple[Marker, ...]]:
    rows: list[tuple[str, str]] = []
    markers: list[Marker] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise ValueError(f"tools[{i}] must be an object")
        name = tool.get("name")
        if name is not None and not isinstance(name, str):
            raise ValueError(f"tools[{i}].name must be a string")
        label = name or f"#{i}"
        rows.append((label, stable_hash(_without_cache_control(tool))))
        if tool.get("cache_control") is not None:
            markers.append(_marker(f"tools[{label}]", tool["cache_control"]))
    return tuple(rows), tuple(markers)


def _describe_thinking(thinking: dict[str, Any]) -> str:
    kind = thinking.get("type")
    label = kind if isinstance(kind, str) and kind else "custom"
    budget = thinking.get("budget_tokens")
    if isinstance(budget, int) and not isinstance(budget, bool):
        label += f" (budget {budget:,})"
    return label[:_MAX_DESCRIPTOR]


def fingerprint(
    *,
    model: str | None = None,
    system: str | list[dict[str, Any]] | None = None,
    tools: list[dict[str, Any]] | None = None,
    betas: list[str] | None = None,
    thinking: dict[str, Any] | None = None,
    effort: str | None = None,
    cache_control: list[dict[str, Any]] | None = None,
    cache_edits: list[dict[str, Any]] | None = None,
) -> Fingerprint:
    """Hash a request's cache-key inputs. Raises ``ValueError`` on malformed input."""
    sys_print: SystemPrint | None = None
    sys_markers: tuple[Marker, ...] | None = None
    if system is not None:
        sys_print, sys_markers = _system_print(system)
    tool_rows: tuple[tuple[str, str], ...] | None = None
    tool_markers: tuple[Marker, ...] | None = None
    if tools is not None:
        tool_rows, tool_markers = _tools_print(tools)
    layout: tuple[Marker, ...] | None = None
    if cache_control is not None:
        found = []
        for i, cc in enumerate(cache_control):
            if not isinstance(cc, dict):
                raise ValueError(f"cacheControl[{i}] must be an object")
            # Clients may say where a breakpoint sits; otherwise its rank identifies it.
            where = cc.get("where")
            found.append(_marker(where if isinstance(where, str) else f"cacheControl[{i}]", cc))
        layout = tuple(found)
    think: tuple[str, str] | None = None
    if thinking is not None:
        think = (_describe_thinking(thinking), stable_hash(thinking))
    edits: frozenset[str] | None = None
    if cache_edits is not None:
        for i, edit in enumerate(cache_edits):
            if not isinstance(edit, dict):
                raise ValueError(f"cacheEdits[{i}] must be an object")
        edits = frozenset(stable_hash(e) for e in cache_edits)
    if betas is not None and not all(isinstance(b, str) for b in betas):
        raise ValueError("betas must be strings")
    return Fingerprint(
        model=model,
        system=sys_print,
        tools=tool_rows,
        betas=tuple(sorted(set(betas))) if betas is not None else None,
        thinking=think,
        effort=effort,
        layout=layout,
        system_markers=sys_markers,
        tool_markers=tool_markers,
        cache_edits=edits,
    )
