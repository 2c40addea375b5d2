"""Token counting, model limits, compaction thresholds and the context breakdown.

The size of a conversation is the usage the API reported for the most recent response, plus a
padded character-based estimate of what was appended after that response started
(docs/thresholds.md#token-count). This module computes that count in full (``count_tokens``) and
incrementally (``TokenCounter``), resolves a model's window and output limits, derives the
warning / error / auto-compact / blocking levels from them and the environment, tracks upward
crossings of those levels, and splits a conversation's estimate into categories for
``tokens/breakdown``. It is pure: no I/O, and the environment arrives as a mapping.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

import msgspec

from compactd.core import constants as c
from compactd.core.tools import file_path
from compactd.protocol import (
    BreakdownCategory,
    BreakdownResult,
    DuplicateRead,
    PrefixSource,
    ThresholdLevel,
    TokenStatus,
)
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

__all__ = [
    "chars_to_tokens",
    "CATEGORY_ASSISTANT",
    "CATEGORY_ATTACHMENTS",
    "CATEGORY_CLEARED",
    "CATEGORY_FIXED_PREFIX",
    "CATEGORY_HUMAN",
    "CATEGORY_LOCAL_COMMAND_OUTPUT",
    "CATEGORY_META",
    "CATEGORY_TOOL_REQUESTS",
    "CATEGORY_TOOL_RESULTS",
    "CompactFlags",
    "Limits",
    "ThresholdTracker",
    "Thresholds",
    "TokenCount",
    "TokenCounter",
    "breakdown",
    "count_tokens",
    "counts_toward_context",
    "estimate_block_raw",
    "estimate_entries",
    "estimate_entry_raw",
    "estimate_record_raw",
    "estimate_records_raw",
    "flags",
    "has_usable_usage",
    "model_limits",
    "pad",
    "resolve_limits",
    "thresholds",
    "token_status",
]

_NO_ENV: Final[Mapping[str, str]] = MappingProxyType({})

# Entry types whose content is sent to the model. Everything else in a transcript (system
# notices, progress, summaries, queue operations, request bookkeeping) never reaches the API.
_CONTEXT_ENTRY_TYPES: Final = frozenset({"user", "assistant", "attachment"})

_json_encoder: Final = msgspec.json.Encoder()


# -- estimation ---------------------------------------------------------------------------------


def chars_to_tokens(chars: int) -> int:
    """The one rule from characters to tokens: ``chars / 4`` rounded half up, as the reference
    estimator does (docs/thresholds.md#estimate). Every estimate in compactd goes through it."""
    return (chars + c.CHARS_PER_TOKEN // 2) // c.CHARS_PER_TOKEN


def _json_length(value: Any) -> int:
    """Length in characters of ``value`` as compact JSON (the shape the API receives)."""
    try:
        return len(_json_encoder.encode(value).decode("utf-8"))
    except (TypeError, msgspec.EncodeError):
        return len(repr(value))


def estimate_block_raw(block: Block) -> int:
    """Unpadded token estimate of one content block."""
    if isinstance(block, TextBlock):
        return chars_to_tokens(len(block.text))
    if isinstance(block, ImageBlock | DocumentBlock):
        return c.IMAGE_TOKEN_ESTIMATE
    if isinstance(block, ToolUseBlock):
        return chars_to_tokens(len(block.name) + _json_length(block.input))
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

    Attachments are estimated from their JSON payload: the text Claude Code renders from them
    is not in the transcript, and the payload is a close upper bound of it.
    """
    if not counts_toward_context(entry):
        return 0
    if entry.type == "attachment":
        return chars_to_tokens(_json_length(entry.attachment)) if entry.attachment else 0
    return sum(estimate_block_raw(block) for block in entry.blocks)


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


# -- the count ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenCount:
    """What the next request carries, in named parts (docs/thresholds.md#accounting).

    ``exact`` is the API usage of the latest response in the context and ``estimated`` what
    came after it; ``saved`` is what microcompact cleared since that usage was reported.
    ``tokens`` is ``exact + estimated - saved`` (never negative).

    The same total in parts: ``fixed_prefix`` (system prompt, tools and whatever else the
    client sends besides the messages), ``attachments`` and ``messages``, less ``saved``.
    While a response's usage anchors the count the prefix is learned from it (its usage minus
    the estimate of the messages it covered); without one (a compaction just rewrote the
    context) the prefix carried from before is part of the estimate.
    """

    tokens: int
    exact: int
    estimated: int
    saved: int = 0
    fixed_prefix: int = 0
    attachments: int = 0
    # Where the prefix figure comes from: "usage" (learned now), "carried" (learned before a
    # compaction, or told by the client) or "none" (nothing known yet).
    prefix_source: PrefixSource = "none"

    @property
    def messages(self) -> int:
        return max(0, self.tokens + self.saved - self.fixed_prefix - self.attachments)


def has_usable_usage(entry: Entry) -> bool:
    """Whether the entry is an assistant response whose API usage can anchor the count."""
    if entry.type != "assistant" or entry.is_api_error_message:
        return False
    message = entry.message
    if message is None or message.usage is None or message.model == c.SYNTHETIC_MODEL:
        return False
    return message.usage.total() > 0


def _usage_total(entry: Entry) -> int:
    message = entry.message
    assert message is not None and message.usage is not None
    return message.usage.total()


# Identifies the API response an assistant entry belongs to: its ``message.id`` when present,
# else the entry's position (an entry without id is a response of its own).
_ResponseKey = str | int


def _response_key(entry: Entry, index: int) -> _ResponseKey | None:
    if entry.type != "assistant":
        return None
    message_id = entry.message_id
    return message_id if message_id else index


def _make_count(
    exact: int,
    raw_after: int,
    saved: int,
    *,
    prefix: int = 0,
    source: PrefixSource = "none",
    attachment_raw: int = 0,
    anchored: bool = True,
) -> TokenCount:
    estimated = pad(raw_after) + (0 if anchored else prefix)
    tokens = max(0, exact + estimated - saved)
    return TokenCount(
        tokens=tokens,
        exact=exact,
        estimated=estimated,
        saved=saved,
        fixed_prefix=min(prefix, tokens + saved),
        attachments=min(pad(attachment_raw), max(0, tokens + saved - prefix)),
        prefix_source=source,
    )


def count_tokens(entries: Sequence[Entry]) -> TokenCount:
    """Full recount of a conversation (the entries after the last compact boundary).

    The anchor is the most recent response with usable usage. One response may be written as
    several entries sharing ``message.id``, with tool results between them, so the estimate
    starts after the response's FIRST entry; the response's own later entries are covered by
    its usage and skipped, the interleaved tool results are not. Split entries repeat the same
    usage: the largest is taken once.
    """
    anchor: _ResponseKey | None = None
    for index in range(len(entries) - 1, -1, -1):
        if has_usable_usage(entries[index]):
            anchor = _response_key(entries[index], index)
            break
    if anchor is None:
        attachment_raw = sum(estimate_entry_raw(e) for e in entries if e.type == "attachment")
        return _make_count(
            0,
            sum(estimate_entry_raw(e) for e in entries),
            0,
            attachment_raw=attachment_raw,
            anchored=False,
        )

    exact = 0
    raw_after = 0
    seen_first = False
    for index, entry in enumerate(entries):
        same_response = _response_key(entry, index) == anchor
        if same_response:
            if has_usable_usage(entry):
                exact = max(exact, _usage_total(entry))
            seen_first = True
            continue
        if seen_first:
            raw_after += estimate_entry_raw(entry)
    attachment_raw = sum(estimate_entry_raw(e) for e in entries if e.type == "attachment")
    # The prefix rule (the largest figure any usage implies) is the counter's; not repeated.
    prefix = TokenCounter(entries).learned_prefix or 0
    return _make_count(
        exact, raw_after, 0, prefix=prefix, source="usage", attachment_raw=attachment_raw
    )


class TokenCounter:
    """Keeps ``count_tokens`` of a growing entry list up to date in time proportional to appends.

    It keeps a running sum of raw estimates and, per response, the running sum just after its
    first entry, the estimate of its later entries and its largest usage. The count anchored at
    any response is then a subtraction, so a response whose first entry arrived long ago (or
    earlier in the same batch) can become the anchor without rescanning.
    """

    __slots__ = (
        "_anchor",
        "_attachment_raw",
        "_best_prefix",
        "_cumulative_raw",
        "_first_cumulative",
        "_later_own_raw",
        "_max_usage",
        "_saved",
        "_seen",
        "carried_prefix",
        "known_prefix",
    )

    def __init__(
        self, entries: Iterable[Entry] = (), carried_prefix: int = 0, known_prefix: int = 0
    ) -> None:
        # The fixed prefix known from before this context (a compaction, the client's
        # cacheSafeParams): counted until a response in the context reports usage.
        self.carried_prefix = carried_prefix
        # What the client says every request carries (the estimate of its cacheSafeParams):
        # the prefix is never taken to be smaller.
        self.known_prefix = known_prefix
        self._best_prefix: int | None = None
        self._attachment_raw = 0
        self._seen = 0
        self._cumulative_raw = 0
        self._first_cumulative: dict[_ResponseKey, int] = {}
        self._later_own_raw: dict[_ResponseKey, int] = {}
        self._max_usage: dict[_ResponseKey, int] = {}
        self._anchor: _ResponseKey | None = None
        self._saved = 0
        self.extend(entries)

    def _clear(self) -> None:
        self._best_prefix = None
        self._attachment_raw = 0
        self._seen = 0
        self._cumulative_raw = 0
        self._first_cumulative.clear()
        self._later_own_raw.clear()
        self._max_usage.clear()
        self._anchor = None
        self._saved = 0

    def extend(self, entries: Iterable[Entry]) -> None:
        """Account for entries appended after the ones already seen."""
        for entry in entries:
            self.add(entry, estimate_entry_raw(entry))

    def add(self, entry: Entry, raw: int) -> None:
        """Account for one appended entry whose unpadded estimate is ``raw``."""
        index = self._seen
        self._seen += 1
        self._cumulative_raw += raw
        if entry.type == "attachment":
            self._attachment_raw += raw
        key = _response_key(entry, index)
        if key is None:
            return
        usable = has_usable_usage(entry)
        if key not in self._first_cumulative:
            # An id-less entry without usage can never anchor nor recur: nothing to keep.
            if isinstance(key, int) and not usable:
                return
            self._first_cumulative[key] = self._cumulative_raw
            self._later_own_raw[key] = 0
        else:
            self._later_own_raw[key] += raw
        if usable:
            self._max_usage[key] = max(self._max_usage.get(key, 0), _usage_total(entry))
            if key != self._anchor:
                # A new response's usage already reflects any clearing done before it.
                self._anchor = key
                self._saved = 0
            implied = self._implied_prefix(key)
            if self._best_prefix is None or implied > self._best_prefix:
                self._best_prefix = implied

    def reset(self, entries: Iterable[Entry] = ()) -> None:
        """Forget everything and recount ``entries`` (after a compaction rewrote the context)."""
        self._clear()
        self.extend(entries)

    def apply_saving(self, tokens: int) -> None:
        """Subtract tokens cleared by microcompact until the next response reports usage."""
        if tokens > 0:
            self._saved += tokens

    def _implied_prefix(self, key: _ResponseKey) -> int:
        """What the response's usage says the prefix is: its usage less the padded estimate of
        the messages it covered (everything before it, and itself)."""
        covered = self._first_cumulative[key] + self._later_own_raw[key]
        return max(0, self._max_usage[key] - pad(covered))

    @property
    def learned_prefix(self) -> int | None:
        """The fixed prefix learned from the usage in this context, or None without any.

        Each response's usage implies a figure; the largest is kept, and never less than what
        the client says it sends (``known_prefix``). The padded estimate errs high on text and
        attachments, so a usage covering mostly those implies too small a prefix; the floor
        and the largest figure keep the prefix from being forgotten that way
        (docs/thresholds.md#accounting).
        """
        if self._best_prefix is None:
            return None
        return max(self._best_prefix, self.known_prefix)

    @property
    def fixed_prefix(self) -> int:
        """The best figure of the fixed prefix now: learned from usage, else carried."""
        learned = self.learned_prefix
        return max(self.carried_prefix, self.known_prefix) if learned is None else learned

    @property
    def current(self) -> TokenCount:
        anchor = self._anchor
        if anchor is None:
            prefix = self.fixed_prefix
            return _make_count(
                0,
                self._cumulative_raw,
                self._saved,
                prefix=prefix,
                source="carried" if prefix else "none",
                attachment_raw=self._attachment_raw,
                anchored=False,
            )
        raw_after = (
            self._cumulative_raw - self._first_cumulative[anchor] - self._later_own_raw[anchor]
        )
        prefix = self.learned_prefix or 0
        return _make_count(
            self._max_usage[anchor],
            raw_after,
            self._saved,
            prefix=prefix,
            source="usage",
            attachment_raw=self._attachment_raw,
        )


# -- model limits -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Limits:
    context_window: int
    max_output_tokens: int


# "claude-sonnet-4-5-20250929", "claude-opus-4-1@20250805", "us.anthropic.claude-opus-5-5-v1":
# family, major, optional 1-2 digit minor (a dated suffix has 8 digits and is not a minor).
_NEW_STYLE_NAME: Final = re.compile(r"claude-(opus|sonnet|haiku)-(\d+)(?:[-.](\d{1,2}))?(?!\d)")
# "claude-3-7-sonnet-20250219", "claude-3-opus-20240229": version first, family after.
_OLD_STYLE_NAME: Final = re.compile(r"claude-(\d+)(?:[-.](\d{1,2}))?-(opus|sonnet|haiku)")


def _parse_model(name: str) -> tuple[str, tuple[int, int]] | None:
    match = _NEW_STYLE_NAME.search(name)
    if match is not None:
        return match.group(1), (int(match.group(2)), int(match.group(3) or 0))
    match = _OLD_STYLE_NAME.search(name)
    if match is not None:
        return match.group(3), (int(match.group(1)), int(match.group(2) or 0))
    return None


def recorded_model(newest_first: Iterable[Entry]) -> str | None:
    """The model the latest response names among ``newest_first`` (entries, newest first),
    when its window is known: a session recorded with a 1M-token model must not be measured
    against the default's 200K. API-error entries name ``<synthetic>`` and are passed over."""
    for entry in newest_first:
        message = entry.message if entry.type == "assistant" else None
        model = message.model if message is not None else None
        if model and known_model(model):
            return model
    return None


def known_model(model: str) -> bool:
    """Whether ``model`` names a Claude model the limits table knows (else defaults apply)."""
    return _parse_model(model.strip().lower().replace(c.ONE_MILLION_SUFFIX, "")) is not None


def model_limits(model: str) -> Limits:
    """The table limits of a model name (dated and provider-prefixed names included).

    A ``[1m]`` suffix selects the 1M-token window; unknown models get the defaults.
    """
    name = model.strip().lower()
    one_million = c.ONE_MILLION_SUFFIX in name
    name = name.replace(c.ONE_MILLION_SUFFIX, "")
    window, max_output = c.DEFAULT_CONTEXT_WINDOW, c.DEFAULT_MAX_OUTPUT_TOKENS
    parsed = _parse_model(name)
    if parsed is not None:
        family, version = parsed
        best: tuple[int, int] | None = None
        for row_family, since, row_window, row_output in c.MODEL_LIMITS:
            if row_family == family and since <= version and (best is None or since > best):
                best = since
                window, max_output = row_window, row_output
    if one_million:
        window = c.ONE_MILLION_CONTEXT_WINDOW
    return Limits(context_window=window, max_output_tokens=max_output)


def _positive_int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        return None
    return number if number > 0 else None


def resolve_limits(
    model: str,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    env: Mapping[str, str] = _NO_ENV,
) -> Limits:
    """A session's limits: client values win, then ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``, then the
    model table."""
    table = model_limits(model)
    window = context_window if context_window and context_window > 0 else table.context_window
    if max_output_tokens and max_output_tokens > 0:
        max_output = max_output_tokens
    else:
        env_output = _positive_int(env, c.ENV_MAX_OUTPUT_TOKENS)
        max_output = env_output if env_output is not None else table.max_output_tokens
    return Limits(context_window=window, max_output_tokens=max_output)


# -- thresholds ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Thresholds:
    effective_window: int
    auto_compact_threshold: int
    warning_threshold: int
    error_threshold: int
    blocking_limit: int


@dataclass(frozen=True, slots=True)
class CompactFlags:
    compaction_enabled: bool
    auto_compact_enabled: bool
    microcompact_enabled: bool


def _percent(env: Mapping[str, str], name: str) -> float | None:
    value = env.get(name)
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    if not math.isfinite(number) or not 0 < number <= 100:
        return None
    return number


def thresholds(
    limits: Limits, env: Mapping[str, str] = _NO_ENV, auto_compact_enabled: bool = True
) -> Thresholds:
    """The levels derived from a session's limits (docs/thresholds.md).

    Warning and error are measured from the auto-compact threshold when auto-compact is on,
    from the effective window otherwise (there is then no threshold to warn about).
    """
    window = limits.context_window
    window_override = _positive_int(env, c.ENV_AUTO_COMPACT_WINDOW)
    if window_override is not None:
        window = min(window, window_override)
    effective = window - min(limits.max_output_tokens, c.OUTPUT_RESERVE_CAP)
    auto_threshold = effective - c.AUTO_COMPACT_BUFFER
    pct = _percent(env, c.ENV_AUTOCOMPACT_PCT_OVERRIDE)
    if pct is not None:
        auto_threshold = min(math.floor(effective * pct / 100), auto_threshold)
    base = auto_threshold if auto_compact_enabled else effective
    blocking = _positive_int(env, c.ENV_BLOCKING_LIMIT_OVERRIDE)
    # The reference's fixed buffers assume large windows; on a tiny one a level would go
    # negative, which no client can display sensibly. Levels never go below zero.
    return Thresholds(
        effective_window=max(0, effective),
        auto_compact_threshold=max(0, auto_threshold),
        warning_threshold=max(0, base - c.WARNING_BUFFER),
        error_threshold=max(0, base - c.ERROR_BUFFER),
        blocking_limit=blocking if blocking is not None else max(0, effective - c.BLOCKING_BUFFER),
    )


def _truthy(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in c.ENV_TRUTHY_VALUES


def flags(env: Mapping[str, str] = _NO_ENV) -> CompactFlags:
    """Which compaction mechanisms the environment leaves on. ``DISABLE_COMPACT`` turns off all."""
    compaction = not _truthy(env, c.ENV_DISABLE_COMPACT)
    return CompactFlags(
        compaction_enabled=compaction,
        auto_compact_enabled=compaction and not _truthy(env, c.ENV_DISABLE_AUTO_COMPACT),
        microcompact_enabled=compaction and not _truthy(env, c.ENV_DISABLE_MICROCOMPACT),
    )


def token_status(
    count: TokenCount,
    limits: Limits,
    thresholds: Thresholds,
    flags: CompactFlags,
    circuit_open: bool = False,
    consecutive_failures: int = 0,
) -> TokenStatus:
    """The ``tokens/status`` view of a count.

    ``isAboveAutoCompactThreshold`` is only set while auto-compaction is enabled: it means "an
    automatic compaction is due", which cannot be true when it is switched off.
    """
    used = count.tokens
    levels = thresholds
    auto_on = flags.auto_compact_enabled
    limit = levels.auto_compact_threshold if auto_on else levels.effective_window
    percent_left = max(0, math.floor((limit - used) / limit * 100 + 0.5)) if limit > 0 else 0
    return TokenStatus(
        tokens=used,
        exact_tokens=count.exact,
        estimated_tokens=count.estimated,
        context_window=limits.context_window,
        max_output_tokens=limits.max_output_tokens,
        effective_window=levels.effective_window,
        auto_compact_threshold=levels.auto_compact_threshold,
        warning_threshold=levels.warning_threshold,
        error_threshold=levels.error_threshold,
        blocking_limit=levels.blocking_limit,
        percent_left=percent_left,
        is_above_warning_threshold=used >= levels.warning_threshold,
        is_above_error_threshold=used >= levels.error_threshold,
        is_above_auto_compact_threshold=auto_on and used >= levels.auto_compact_threshold,
        is_at_blocking_limit=used >= levels.blocking_limit,
        auto_compact_enabled=auto_on,
        compaction_enabled=flags.compaction_enabled,
        circuit_open=circuit_open,
        consecutive_failures=consecutive_failures,
        fixed_prefix_tokens=count.fixed_prefix,
        fixed_prefix_source=count.prefix_source,
        message_tokens=count.messages,
        attachment_tokens=count.attachments,
        cleared_tokens=count.saved,
    )


_LEVEL_ORDER: Final[tuple[ThresholdLevel, ...]] = ("warning", "error", "autoCompact", "blocking")


def _levels_above(status: TokenStatus) -> dict[ThresholdLevel, bool]:
    return {
        "warning": status.is_above_warning_threshold,
        "error": status.is_above_error_threshold,
        "autoCompact": status.is_above_auto_compact_threshold,
        "blocking": status.is_at_blocking_limit,
    }


class ThresholdTracker:
    """Reports each level once when the count rises to it; it re-arms once the count drops below.

    Warning and error share a value, so one crossing reports both.
    """

    __slots__ = ("_above",)

    def __init__(self) -> None:
        self._above: set[ThresholdLevel] = set()

    def update(self, status: TokenStatus) -> list[ThresholdLevel]:
        """Levels crossed upward since the previous update, lowest first."""
        fired: list[ThresholdLevel] = []
        above = _levels_above(status)
        for level in _LEVEL_ORDER:
            if above[level]:
                if level not in self._above:
                    self._above.add(level)
                    fired.append(level)
            else:
                self._above.discard(level)
        return fired

    def reset(self) -> None:
        """Re-arm every level (e.g. when the session's limits change)."""
        self._above.clear()


# -- breakdown ----------------------------------------------------------------------------------

CATEGORY_HUMAN: Final = "human"
CATEGORY_ASSISTANT: Final = "assistant"
CATEGORY_LOCAL_COMMAND_OUTPUT: Final = "localCommandOutput"
CATEGORY_META: Final = "meta"
CATEGORY_TOOL_REQUESTS: Final = "toolRequests"
CATEGORY_TOOL_RESULTS: Final = "toolResults"
CATEGORY_ATTACHMENTS: Final = "attachments"
# The parts of the accounting that are not conversation: what every request carries besides the
# messages, and what microcompact cleared since the last usage (a negative row).
CATEGORY_FIXED_PREFIX: Final = "fixedPrefix"
CATEGORY_CLEARED: Final = "clearedByMicrocompact"

_CATEGORY_ORDER: Final = (
    CATEGORY_HUMAN,
    CATEGORY_ASSISTANT,
    CATEGORY_LOCAL_COMMAND_OUTPUT,
    CATEGORY_META,
    CATEGORY_TOOL_REQUESTS,
    CATEGORY_TOOL_RESULTS,
    CATEGORY_ATTACHMENTS,
)

# Tags Claude Code wraps around the output of local slash commands and `!` shell commands.
_LOCAL_OUTPUT_TAGS: Final = (
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-stdout>",
    "<bash-stderr>",
)

_UNKNOWN: Final = "unknown"


class _Tally:
    """Raw token sums and item counts per name, in first-seen order."""

    __slots__ = ("raw", "count")

    def __init__(self) -> None:
        self.raw: dict[str, int] = {}
        self.count: dict[str, int] = {}

    def add(self, name: str, raw: int) -> None:
        self.raw[name] = self.raw.get(name, 0) + raw
        self.count[name] = self.count.get(name, 0) + 1

    def categories(
        self, total: int, *, sort: bool, scale: float = 1.0, adds_up_to: int | None = None
    ) -> list[BreakdownCategory]:
        shares = apportion([pad(raw) * scale for raw in self.raw.values()], adds_up_to)
        rows = [
            BreakdownCategory(
                name=name,
                tokens=tokens,
                percent=_percent_of(tokens, total),
                count=self.count[name],
            )
            for name, tokens in zip(self.raw, shares, strict=True)
        ]
        if sort:
            rows.sort(key=lambda row: (-row.tokens, row.name))
        return rows


def apportion(amounts: Sequence[float], total: int | None = None) -> list[int]:
    """``amounts`` rounded to whole tokens that add up to ``total`` (default: their rounded sum).

    Rounding each row on its own lets a table's rows miss its total by a few tokens; the
    largest-remainder rule hands the tokens lost to rounding down to the rows that lost the
    most, so a breakdown adds up exactly. ``total`` may differ from the sum by a rounding
    error of another table (a category split by tool): the difference is spread the same way.
    """
    floors = [math.floor(a) for a in amounts]
    target = round(sum(amounts)) if total is None else total
    missing = target - sum(floors)
    by_remainder = sorted(range(len(amounts)), key=lambda i: floors[i] - amounts[i])
    while missing > 0 and by_remainder:
        for i in by_remainder[:missing]:
            floors[i] += 1
        missing = target - sum(floors)
    while missing < 0 and any(floors):
        for i in reversed(by_remainder):
            if missing < 0 and floors[i] > 0:
                floors[i] -= 1
                missing += 1
    return floors


def _percent_of(tokens: int, total: int) -> float:
    return round(tokens * 100 / total, 1) if total > 0 else 0.0


def _user_block_category(entry: Entry, block: Block) -> str:
    if isinstance(block, TextBlock) and any(tag in block.text for tag in _LOCAL_OUTPUT_TAGS):
        return CATEGORY_LOCAL_COMMAND_OUTPUT
    if entry.is_meta or entry.is_compact_summary:
        return CATEGORY_META
    return CATEGORY_HUMAN


def breakdown(entries: Sequence[Entry], count: TokenCount | None = None) -> BreakdownResult:
    """Where the next request's tokens go, from padded estimates (usage cannot be split).

    Top-level categories partition the conversation; with ``count`` (the session's accounting)
    they are joined by the fixed prefix and, when microcompact cleared results since the last
    usage, by that saving as a negative row, so that the total is the status's total
    (docs/thresholds.md#accounting). Tool requests, tool results and attachments are further
    split by tool name / attachment type. A file read more than once wastes the tokens of every
    read but the last.
    """
    tool_names: dict[str, str] = {}
    for entry in entries:
        if entry.type == "assistant":
            for block in entry.blocks:
                if isinstance(block, ToolUseBlock) and block.id:
                    tool_names[block.id] = block.name

    top = _Tally()
    for name in _CATEGORY_ORDER:
        top.raw[name] = 0
        top.count[name] = 0
    requests, results, attachments = _Tally(), _Tally(), _Tally()
    reads: dict[str, list[str]] = {}
    result_raw: dict[str, int] = {}

    for entry in entries:
        if not counts_toward_context(entry):
            continue
        if entry.type == "attachment":
            raw = estimate_entry_raw(entry)
            kind = (entry.attachment or {}).get("type")
            attachments.add(kind if isinstance(kind, str) and kind else _UNKNOWN, raw)
            top.add(CATEGORY_ATTACHMENTS, raw)
            continue
        for block in entry.blocks:
            raw = estimate_block_raw(block)
            if isinstance(block, ToolUseBlock):
                requests.add(block.name or _UNKNOWN, raw)
                top.add(CATEGORY_TOOL_REQUESTS, raw)
                path = file_path(block.name, block.input)
                if block.name in c.FILE_READ_TOOLS and path is not None and block.id:
                    reads.setdefault(path, []).append(block.id)
            elif isinstance(block, ToolResultBlock):
                results.add(tool_names.get(block.tool_use_id, _UNKNOWN), raw)
                top.add(CATEGORY_TOOL_RESULTS, raw)
                result_raw[block.tool_use_id] = result_raw.get(block.tool_use_id, 0) + raw
            elif entry.type == "assistant":
                top.add(CATEGORY_ASSISTANT, raw)
            else:
                top.add(_user_block_category(entry, block), raw)

    conversation = sum(pad(raw) for raw in top.raw.values())
    prefix = count.fixed_prefix if count is not None else 0
    cleared = count.saved if count is not None else 0
    # Usage measures the conversation as a whole; the estimates only say how it divides. With
    # the session's count, the categories share out what the count gives the conversation.
    scale = 1.0
    if count is not None and conversation > 0:
        scale = max(0, count.tokens + cleared - prefix) / conversation
    total = max(0, prefix + round(conversation * scale) - cleared)
    rows = top.categories(total, sort=False, scale=scale)
    row_tokens = {row.name: row.tokens for row in rows}
    if prefix:
        rows.insert(
            0,
            BreakdownCategory(
                name=CATEGORY_FIXED_PREFIX, tokens=prefix, percent=_percent_of(prefix, total)
            ),
        )
    if cleared:
        rows.append(
            BreakdownCategory(
                name=CATEGORY_CLEARED, tokens=-cleared, percent=-_percent_of(cleared, total)
            )
        )
    duplicates = [
        DuplicateRead(
            path=path,
            reads=len(ids),
            wasted_tokens=round(
                sum(pad(result_raw.get(tool_id, 0)) for tool_id in ids[:-1]) * scale
            ),
        )
        for path, ids in reads.items()
        if len(ids) > 1
    ]
    duplicates.sort(key=lambda row: (-row.wasted_tokens, row.path))
    return BreakdownResult(
        total_tokens=total,
        categories=rows,
        # Each split adds up to its category's row.
        tool_requests=requests.categories(
            total, sort=True, scale=scale, adds_up_to=row_tokens[CATEGORY_TOOL_REQUESTS]
        ),
        tool_results=results.categories(
            total, sort=True, scale=scale, adds_up_to=row_tokens[CATEGORY_TOOL_RESULTS]
        ),
        attachments=attachments.categories(
            total, sort=True, scale=scale, adds_up_to=row_tokens[CATEGORY_ATTACHMENTS]
        ),
        duplicate_reads=duplicates,
        duplicate_read_tokens=sum(row.wasted_tokens for row in duplicates),
    )
