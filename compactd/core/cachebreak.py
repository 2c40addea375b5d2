"""Prompt-cache break detection: fingerprints of a request's cache-key inputs and a detector.

Before each main-loop request the client reports what the API keys its prompt cache on (system
blocks, tools, model, betas, thinking / effort, the cache_control layout); ``fingerprint``
reduces that to hashes and a few small descriptors, so no prompt or tool text is kept. After the
response, the client reports its usage; ``CacheBreakDetector.after`` compares the cache reads
with the previous response of the same query source (the main thread, each sub-agent) and, when
they fell by more than 5% and more than 2,000 tokens (docs/cache.md#break-rule), explains the drop
by what changed between the two requests, by idle time beyond the cache TTL, or as likely
server-side. A compaction or a cache deletion in between makes the drop expected: the detector
starts a new baseline instead of flagging it. The module is pure; the clock is passed in.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import msgspec

from compactd.core.tokens import chars_to_tokens
from compactd.transcript.model import Record

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
    "CACHE_BREAK_MIN_DROP_FRACTION",
    "CACHE_BREAK_MIN_DROP_TOKENS",
    "CacheBreakDetector",
    "CacheBreakFinding",
    "DEFAULT_QUERY_SOURCE",
    "DetectorConfig",
    "Fingerprint",
    "Marker",
    "ResponseOutcome",
    "describe_changes",
    "fingerprint",
    "is_break",
    "stable_hash",
]

# -- numbers (docs/cache.md) ------------------------------------------------------------------

# A drop in cache reads is a break only when it exceeds BOTH 5% of the previous reads and
# 2,000 tokens (docs/cache.md#break-rule): small wobbles from the moving message breakpoint
# are normal.
CACHE_BREAK_MIN_DROP_FRACTION: Final = 0.05
CACHE_BREAK_MIN_DROP_TOKENS: Final = 2_000

# Idle time after which an unexplained drop is put down to the cache's time-to-live: 5 minutes
# (docs/cache.md#explanations), the default ephemeral TTL. When every breakpoint of the
# previous request asked for the 1-hour TTL (docs/anthropic-api.md#prompt-caching) that TTL
# applies instead.
CACHE_DEFAULT_TTL_SECONDS: Final = 5 * 60
CACHE_LONG_TTL_SECONDS: Final = 60 * 60
_TTL_SECONDS: Final = {"5m": CACHE_DEFAULT_TTL_SECONDS, "1h": CACHE_LONG_TTL_SECONDS}
_DEFAULT_TTL_LABEL: Final = "5m"

# The query source of the main conversation thread; sub-agents report their own ids.
DEFAULT_QUERY_SOURCE: Final = "main"

# Bounds on what one session keeps, so that a client reporting endless distinct sources or
# breaks cannot grow the daemon's memory (compactd's own limits, not from the reference).
MAX_TRACKED_SOURCES: Final = 256
MAX_RECORDED_BREAKS: Final = 200

# How many names a reason lists before it says "and N more".
_MAX_NAMES: Final = 10
# Longest descriptor kept for a thinking config (it is config, not content, but unbounded).
_MAX_DESCRIPTOR: Final = 120

# -- causes (the machine-readable kinds of a reason; wire values of ``CacheBreak.causes``) --------

CAUSE_MODEL: Final = "model"
CAUSE_SYSTEM: Final = "systemPrompt"
CAUSE_TOOLS: Final = "tools"
CAUSE_CACHE_CONTROL: Final = "cacheControl"
CAUSE_BETAS: Final = "betas"
CAUSE_THINKING: Final = "thinking"
CAUSE_EFFORT: Final = "effort"
CAUSE_TTL_EXPIRY: Final = "ttlExpiry"
CAUSE_SERVER_SIDE: Final = "serverSide"

_encoder: Final = msgspec.json.Encoder(order="sorted")


def stable_hash(value: Any) -> str:
    """A short, order-independent (for mappings) digest of a JSON value."""
    data = _encoder.encode(value)
    return hashlib.blake2b(data, digest_size=10).hexdigest()


# -- fingerprints -------------------------------------------------------------------------------


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
        labels = sorted({m.ttl for m in self.markers}, key=_ttl_order)
        return labels[0] if labels else _DEFAULT_TTL_LABEL


def _ttl_order(label: str) -> float:
    return _TTL_SECONDS.get(label, math.inf)


def _marker(where: str, cc: Any) -> Marker:
    if not isinstance(cc, dict):
        raise ValueError(f"{where}: cache_control must be an object")
    ttl = cc.get("ttl", _DEFAULT_TTL_LABEL)
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


# -- explaining a change ------------------------------------------------------------------------


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
    old_ttl = sorted({m.ttl for m in old}, key=_ttl_order)
    new_ttl = sorted({m.ttl for m in new}, key=_ttl_order)
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


# -- the detector -------------------------------------------------------------------------------


def is_break(previous: int, current: int, config: DetectorConfig | None = None) -> bool:
    """Whether cache reads falling from ``previous`` to ``current`` is a cache break."""
    cfg = config or DetectorConfig()
    drop = previous - current
    return drop > previous * cfg.min_drop_fraction and drop > cfg.min_drop_tokens


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    min_drop_fraction: float = CACHE_BREAK_MIN_DROP_FRACTION
    min_drop_tokens: int = CACHE_BREAK_MIN_DROP_TOKENS
    max_sources: int = MAX_TRACKED_SOURCES
    max_breaks: int = MAX_RECORDED_BREAKS


@dataclass(frozen=True, slots=True)
class CacheBreakFinding:
    """One detected break and its explanation (the wire form is ``protocol.CacheBreak``)."""

    query_source: str
    previous_cache_read: int
    cache_read: int
    dropped_tokens: int
    reasons: tuple[str, ...]
    causes: tuple[str, ...]
    explanation: str
    idle_seconds: float | None
    timestamp: float


@dataclass(frozen=True, slots=True)
class ResponseOutcome:
    """What ``after`` made of a response: a break, a baseline reset, or an ordinary reading."""

    finding: CacheBreakFinding | None = None
    baseline_reset: bool = False


@dataclass(slots=True)
class _Source:
    pending: Fingerprint | None = None
    pending_at: float | None = None
    pending_new_edits: bool = False
    # The inputs of the request whose response set the baseline.
    last: Fingerprint | None = None
    baseline: int | None = None
    last_response_at: float | None = None
    resets_seen: int = 0


@dataclass(slots=True)
class CacheBreakDetector:
    """Per-session state: one baseline per query source, and the breaks found so far.

    ``resets`` counts events that make a drop in cache reads expected (compact and microcompact
    boundaries in the transcript, cache deletions). A source whose previous response predates
    the latest reset starts a new baseline instead of comparing against the old one.
    """

    config: DetectorConfig = field(default_factory=DetectorConfig)
    resets: int = 0
    breaks: list[CacheBreakFinding] = field(default_factory=list)
    _sources: OrderedDict[str, _Source] = field(default_factory=OrderedDict)
    _records_seen: int = 0

    def _source(self, name: str) -> _Source:
        state = self._sources.get(name)
        if state is None:
            state = _Source(resets_seen=self.resets)
            self._sources[name] = state
            while len(self._sources) > self.config.max_sources:
                self._sources.popitem(last=False)
        else:
            self._sources.move_to_end(name)
        return state

    @property
    def sources(self) -> list[str]:
        return list(self._sources)

    def sync(self, records: Sequence[Record]) -> int:
        """Count compactions appended to ``records`` since the last call; returns how many.

        Transcripts are append-only, so only the tail is examined. A shorter list than before
        means history was rewritten: that counts as a reset too.
        """
        found = 0
        if len(records) < self._records_seen:
            self._records_seen = 0
            found += 1
        found += sum(1 for r in _tail(records, self._records_seen) if _is_reset(r))
        self._records_seen = len(records)
        self.resets += found
        return found

    def before(self, source: str, inputs: Fingerprint, now: float) -> None:
        """A request of ``source`` is about to be sent with ``inputs``."""
        state = self._source(source)
        known = state.pending if state.pending is not None else state.last
        new_edits = False
        if inputs.cache_edits:
            seen = known.cache_edits if known is not None and known.cache_edits else frozenset()
            new_edits = bool(inputs.cache_edits - seen)
        state.pending = inputs.inherit(known)
        state.pending_at = now
        # A retried request keeps the unconsumed deletion of the attempt it replaces.
        state.pending_new_edits = state.pending_new_edits or new_edits

    def after(self, source: str, cache_read: int, now: float) -> ResponseOutcome:
        """The response of ``source`` came back having read ``cache_read`` tokens from cache."""
        state = self._source(source)
        current = state.pending if state.pending is not None else state.last
        reset = state.resets_seen != self.resets or state.pending_new_edits
        previous, previous_at, previous_inputs = (
            state.baseline,
            state.last_response_at,
            state.last,
        )
        request_at = state.pending_at if state.pending_at is not None else now
        state.baseline = cache_read
        state.last = current
        state.last_response_at = now
        state.pending = None
        state.pending_at = None
        state.pending_new_edits = False
        state.resets_seen = self.resets
        if previous is None:
            return ResponseOutcome()
        if reset:
            return ResponseOutcome(baseline_reset=True)
        if not is_break(previous, cache_read, self.config):
            return ResponseOutcome()
        idle = request_at - previous_at if previous_at is not None else None
        finding = _explain(
            source, previous, cache_read, previous_inputs, current, idle, timestamp=now
        )
        self.breaks.append(finding)
        if len(self.breaks) > self.config.max_breaks:
            del self.breaks[: len(self.breaks) - self.config.max_breaks]
        return ResponseOutcome(finding=finding)


def _tail(records: Sequence[Record], start: int) -> Iterable[Record]:
    return (records[i] for i in range(start, len(records)))


def _is_reset(record: Record) -> bool:
    entry = record.entry
    return entry.is_compact_boundary or entry.is_microcompact_boundary


def _explain(
    source: str,
    previous: int,
    current: int,
    old: Fingerprint | None,
    new: Fingerprint | None,
    idle: float | None,
    *,
    timestamp: float,
) -> CacheBreakFinding:
    found: list[tuple[str, str]] = []
    if old is not None and new is not None:
        found = describe_changes(old, new)
    limit = old.idle_limit() if old is not None else float(CACHE_DEFAULT_TTL_SECONDS)
    if idle is not None and idle > limit:
        ttl = old.ttl_label() if old is not None else _DEFAULT_TTL_LABEL
        found.append(
            (
                CAUSE_TTL_EXPIRY,
                f"possible TTL expiry: {idle / 60:.1f} minutes since the previous response "
                f"(cache TTL {ttl})",
            )
        )
    if not found:
        detail = (
            "no cache-key input changed"
            if old is not None and new is not None
            else "no cache-key inputs were reported to compare"
        )
        if idle is not None:
            detail += f" and the previous response was {idle:.0f} seconds earlier"
        found.append((CAUSE_SERVER_SIDE, f"likely server-side: {detail}"))
    dropped = previous - current
    percent = dropped * 100 / previous if previous else 100.0
    reasons = tuple(reason for _, reason in found)
    causes = tuple(dict.fromkeys(cause for cause, _ in found))
    explanation = (
        f"Prompt cache reads for {source} fell from {previous:,} to {current:,} tokens "
        f"({dropped:,} fewer, {percent:.0f}%): " + "; ".join(reasons) + "."
    )
    return CacheBreakFinding(
        query_source=source,
        previous_cache_read=previous,
        cache_read=current,
        dropped_tokens=dropped,
        reasons=reasons,
        causes=causes,
        explanation=explanation,
        idle_seconds=idle,
        timestamp=timestamp,
    )
