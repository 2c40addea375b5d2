"""Token counting, model limits, compaction thresholds and the context breakdown.

The size of a conversation is the usage the API reported for the most recent response, plus a
padded character-based estimate of what was appended after that response started
(docs/thresholds.md#token-count). This package computes that count in full (``count_tokens``) and
incrementally (``TokenCounter``), resolves a model's window and output limits, derives the
warning / error / auto-compact / blocking levels from them and the environment, tracks upward
crossings of those levels, and splits a conversation's estimate into categories for
``tokens/breakdown``.

The package holds one idea per module: ``estimate`` (characters to tokens), ``count`` (the
anchored count), ``limits`` (model limits), ``env`` (the environment variables), ``levels``
(thresholds, status and crossings) and ``categories`` (the breakdown); the names callers use
are re-exported here. Pure: no I/O, and the environment arrives as a mapping.
"""

from __future__ import annotations

from compactd.core.tokens.categories import (
    CATEGORY_ASSISTANT,
    CATEGORY_ATTACHMENTS,
    CATEGORY_CLEARED,
    CATEGORY_FIXED_PREFIX,
    CATEGORY_HUMAN,
    CATEGORY_LOCAL_COMMAND_OUTPUT,
    CATEGORY_META,
    CATEGORY_TOOL_REQUESTS,
    CATEGORY_TOOL_RESULTS,
    apportion,
    breakdown,
)
from compactd.core.tokens.count import (
    TokenCount,
    TokenCounter,
    compacted_tokens,
    count_tokens,
    has_usable_usage,
)
from compactd.core.tokens.env import CompactFlags, flags
from compactd.core.tokens.estimate import (
    chars_to_tokens,
    counts_toward_context,
    estimate_block_raw,
    estimate_entries,
    estimate_entries_raw,
    estimate_entry_raw,
    estimate_prefix,
    estimate_record_raw,
    estimate_records_raw,
    estimate_text_tokens,
    pad,
    prefix_sizes,
)
from compactd.core.tokens.levels import Thresholds, ThresholdTracker, thresholds, token_status
from compactd.core.tokens.limits import (
    Limits,
    known_model,
    model_limits,
    recorded_model,
    resolve_limits,
)

__all__ = [
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
    "compacted_tokens",
    "apportion",
    "breakdown",
    "chars_to_tokens",
    "count_tokens",
    "counts_toward_context",
    "estimate_block_raw",
    "estimate_entries",
    "estimate_entries_raw",
    "estimate_entry_raw",
    "estimate_prefix",
    "estimate_record_raw",
    "estimate_records_raw",
    "estimate_text_tokens",
    "flags",
    "has_usable_usage",
    "known_model",
    "model_limits",
    "pad",
    "prefix_sizes",
    "recorded_model",
    "resolve_limits",
    "thresholds",
    "token_status",
]
