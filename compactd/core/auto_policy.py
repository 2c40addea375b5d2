"""One decision for ``compact/auto`` and ``compact/preview``: whether to compact, how, and to what.

``compact/auto`` asks before each turn whether the session should be compacted and by which
mechanism; ``compact/preview`` asks the same question and returns the answer instead of acting
on it. Both call ``decide``, so the preview names the mechanism that auto then uses and predicts
the tokens the way this module does, one way for every mechanism.

The order follows the fallback chain of docs/compaction.md#fallback-chain. Nothing happens while compaction or
automatic compaction is switched off, while a compaction of the session runs (no compaction
from inside another), while the circuit breaker is open (docs/compaction.md#circuit-breaker) or, unless forced,
while the context is below the auto-compact threshold. Otherwise microcompact runs first; it is
enough when it brings the context under the threshold. If not, session memory compacts when its
notes and the entries it keeps fit under the threshold; else a full compaction summarizes.

``estimate_post`` is measured with ``core.tokens``, the estimator ``tokens/status`` counts with.
Microcompact leaves the count minus what it clears. A compaction that writes a summary leaves
the continuation entry holding the summary, the attachments written with it and the entries it
keeps (less what a microcompact committed just before saves, when its boundary lands among
them: the count applies it there). The summary's text is known when it is the session notes or
the offline summary; when a model writes it, the offline summary of the same entries stands in
for its length, never more than its budget (the summary call's output cap, and no more than
what it replaces), so the figure is then an estimate. What SessionStart hooks add is not known before they run and is left out.

Pure: the services gather a ``Situation`` and, when the gate lets the session through, the
``Outlooks`` of each mechanism; nothing here reads a file or calls a model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from compactd import protocol as p
from compactd.core import constants as c
from compactd.core.microcompact import MicroPlan
from compactd.core.tokens import (
    compacted_tokens,
    estimate_entries_raw,
    estimate_records_raw,
    prefix_sizes,
)
from compactd.transcript.model import Record, record_from_dict

__all__ = [
    "Decision",
    "Mechanism",
    "Outlooks",
    "Situation",
    "SummaryOutlook",
    "decide",
    "describe_prefix",
    "gate",
    "micro_alone",
    "micro_post",
    "notes_fit",
    "summary_budget",
    "summary_post",
    "with_pending",
]

Mechanism = Literal["none", "micro", "sessionMemory", "full"]


@dataclass(frozen=True, slots=True)
class Situation:
    """What the gate looks at, cheap to gather: the status and the session's compaction state."""

    # ``tokens/status`` of the session: count, threshold, switches and the circuit breaker.
    status: p.TokenStatus
    # Entries of the current context (what a mechanism that summarizes nothing keeps).
    entries: int
    force: bool = False
    # A compaction of this session is running.
    busy: bool = False
    # The last compaction failure, named when the breaker is open.
    last_error: str | None = None
    # Says what the fixed prefix is made of, when known (e.g. "tools about 9,000 tokens"), to
    # explain why a prefix above the threshold cannot be compacted away. Called only then:
    # working it out encodes the client's tool list, which compact/auto should not do each turn.
    prefix_parts: Callable[[], str | None] | None = None


@dataclass(frozen=True, slots=True)
class SummaryOutlook:
    """What a compaction that writes a summary would leave (see ``summary_post``)."""

    post_tokens: int
    summarized: int
    kept: int
    # A model writes the summary: ``post_tokens`` is an estimate of its length, not a count.
    bound: bool = False


@dataclass(frozen=True, slots=True)
class Outlooks:
    """What each mechanism would do now, gathered once the gate lets the session through.

    The session-memory and full outlooks assume that ``micro`` has committed first (its
    cleared results and its saving), as it has by the time ``compact/auto`` runs them. They
    may be left out when ``micro_alone`` decides.
    """

    # None: microcompact is switched off.
    micro: MicroPlan | None
    full: SummaryOutlook | None = None
    # None: no notes to compact from (switched off, not written yet, or nothing they replace).
    session_memory: SummaryOutlook | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """What ``compact/auto`` does and ``compact/preview`` reports."""

    mechanism: Mechanism
    # The branch taken, a stable code; ``message`` says it in words, with the numbers.
    reason: p.DecisionReason
    message: str
    pre_tokens: int
    estimate_post: int
    entries_summarized: int
    entries_kept: int
    # The microcompact that runs first (or is the mechanism); None when switched off.
    micro: MicroPlan | None = None
    # ``estimate_post`` estimates a summary a model writes (see ``SummaryOutlook.bound``).
    bound: bool = False


def _nothing(s: Situation, reason: p.DecisionReason, message: str) -> Decision:
    tokens = s.status.tokens
    return Decision("none", reason, message, tokens, tokens, 0, s.entries)


def gate(s: Situation) -> Decision | None:
    """The decision when nothing may happen, in the order checked; None to go on.

    ``decide`` starts here; a caller may call it first to skip gathering the outlooks.
    """
    status = s.status
    if not status.compaction_enabled:
        return _nothing(
            s, "compactionDisabled", f"compaction is disabled ({c.ENV_DISABLE_COMPACT} is set)"
        )
    if not status.auto_compact_enabled:
        return _nothing(
            s,
            "autoCompactDisabled",
            f"automatic compaction is disabled ({c.ENV_DISABLE_AUTO_COMPACT} is set)",
        )
    if s.busy:
        return _nothing(s, "compacting", "a compaction of this session is already running")
    if status.circuit_open:
        return _nothing(
            s,
            "circuitOpen",
            f"automatic compaction is paused after {status.consecutive_failures} consecutive "
            f"failures (last: {s.last_error}); a successful compaction resets it",
        )
    if not s.force and not status.is_above_auto_compact_threshold:
        return _nothing(
            s,
            "belowThreshold",
            f"below the auto-compact threshold ({status.tokens:,} of "
            f"{status.auto_compact_threshold:,} tokens)",
        )
    refusal = prefix_refusal(status, s.prefix_parts)
    if refusal is not None:
        return _nothing(s, "fixedPrefixTooLarge", refusal)
    return None


def prefix_refusal(
    status: p.TokenStatus, describe: Callable[[], str | None] | None = None
) -> str | None:
    """Why no compaction can help when the fixed prefix alone reaches the threshold; else None.

    ``describe`` says what the prefix is made of; it is called only when the answer is a refusal.
    """
    prefix = status.fixed_prefix_tokens
    threshold = status.auto_compact_threshold
    if prefix < threshold:
        return None
    parts = describe() if describe is not None else None
    made_of = f" ({parts})" if parts else " (system prompt, tools and attachments the client sends)"
    return (
        f"the fixed prefix alone is {prefix:,} tokens{made_of}, at or above the auto-compact "
        f"threshold ({threshold:,}): compacting the conversation cannot bring the next request "
        "under it; shorten the system prompt or the tool list, or use a larger window"
    )


def with_pending(status: p.TokenStatus, pending: int) -> p.TokenStatus:
    """``status`` as it will be once the client sends ``pending`` more tokens (a new prompt,
    tool results not appended yet): the decision counts them (docs/thresholds.md#pending-tokens)."""
    if pending <= 0:
        return status
    tokens = status.tokens + pending
    return msgspec.structs.replace(
        status,
        tokens=tokens,
        estimated_tokens=status.estimated_tokens + pending,
        is_above_warning_threshold=tokens >= status.warning_threshold,
        is_above_error_threshold=tokens >= status.error_threshold,
        is_above_auto_compact_threshold=status.auto_compact_enabled
        and tokens >= status.auto_compact_threshold,
        is_at_blocking_limit=tokens >= status.blocking_limit,
    )


def describe_prefix(cache_safe: Mapping[str, Any] | None) -> str | None:
    """What the fixed prefix is made of, from the client's cacheSafeParams when it gave them
    (``prefix_refusal``'s ``describe``)."""
    sizes = prefix_sizes(cache_safe)
    if not sizes:
        return None
    return ", ".join(f"{name} about {size:,} tokens" for name, size in sizes.items())


def headroom(status: p.TokenStatus) -> int:
    """The most an automatic compaction may leave (docs/thresholds.md#accounting)."""
    return int(status.auto_compact_threshold * c.AUTO_COMPACT_HEADROOM)


def micro_alone(s: Situation, micro: MicroPlan | None) -> Decision | None:
    """The decision when microcompact alone brings the context under the threshold (never when
    forced); None to go on. ``decide`` asks it after the gate; a caller may ask it first to
    skip predicting the compactions that write a summary."""
    if micro is None or not micro.cleared or s.force:
        return None
    after = micro_post(s.status.tokens, micro)
    limit = headroom(s.status)
    if after > limit:
        return None
    return Decision(
        "micro",
        "microcompactEnough",
        f"clearing old tool results ({micro.strategy}) leaves {after:,} tokens, within the "
        f"headroom under the auto-compact threshold (at most {limit:,} of "
        f"{s.status.auto_compact_threshold:,})",
        s.status.tokens,
        after,
        0,
        s.entries,
        micro,
    )


def notes_fit(s: Situation, notes: SummaryOutlook | None) -> bool:
    """Whether a compaction from the session notes leaves the headroom: then it is the
    mechanism, and the full compaction need not be predicted at all."""
    return notes is not None and notes.post_tokens <= headroom(s.status)


def decide(s: Situation, outlooks: Outlooks | None = None) -> Decision:
    """The mechanism ``compact/auto`` uses now, why, and the tokens it should leave.

    ``outlooks`` may be None when ``gate`` stops the session, and its ``full`` may be None
    when ``micro_alone`` decides or the session notes fit (``notes_fit``); otherwise they are
    needed (ValueError).
    """
    stop = gate(s)
    if stop is not None:
        return stop
    if outlooks is None:
        raise ValueError("past the gate, decide needs the outlooks of the mechanisms")
    alone = micro_alone(s, outlooks.micro)
    if alone is not None:
        return alone
    tokens = s.status.tokens
    limit = headroom(s.status)
    micro = outlooks.micro
    notes = outlooks.session_memory
    if notes_fit(s, notes):
        assert notes is not None
        return _summarizing(
            "sessionMemory",
            "sessionMemoryFits",
            f"the session notes and the recent entries leave about {notes.post_tokens:,} tokens, "
            f"within the headroom under the auto-compact threshold (at most {limit:,})",
            tokens,
            notes,
            micro,
        )
    if outlooks.full is None:
        raise ValueError(
            "past microcompact and session memory, decide needs the full compaction's outlook"
        )
    if notes is None:
        reason: p.DecisionReason = "noSessionMemory"
        why = "there are no session notes to compact from"
    else:
        reason = "sessionMemoryTooLarge"
        why = (
            f"the session notes and the entries they keep would leave about "
            f"{notes.post_tokens:,} tokens, more than the headroom allows (at most {limit:,})"
        )
    if micro is not None and micro.cleared and not s.force and notes is None:
        reason = "microcompactTooSmall"
        why = (
            f"clearing old tool results would leave {micro_post(tokens, micro):,} tokens, more "
            f"than the headroom allows (at most {limit:,}), and {why}"
        )
    full = outlooks.full
    estimate = f"about {full.post_tokens:,}"
    return _summarizing(
        "full",
        reason,
        f"{why}; a full compaction summarizes the conversation ({estimate} tokens after)",
        tokens,
        full,
        micro,
    )


def _summarizing(
    mechanism: Mechanism,
    reason: p.DecisionReason,
    message: str,
    tokens: int,
    outlook: SummaryOutlook,
    micro: MicroPlan | None,
) -> Decision:
    return Decision(
        mechanism,
        reason,
        message,
        tokens,
        outlook.post_tokens,
        outlook.summarized,
        outlook.kept,
        micro,
        outlook.bound,
    )


# -- estimates ------------------------------------------------------------------------------------


def micro_post(tokens: int, plan: MicroPlan) -> int:
    """The count after ``plan`` commits: the session subtracts its saving from the count."""
    return max(0, tokens - plan.tokens_saved)


def summary_budget(summarized: Sequence[Record]) -> int:
    """Raw tokens that stand in for a summary a model writes: at most the summary call's
    output cap (docs/compaction.md#plain-fallback), and at most what it replaces."""
    return min(c.COMPACT_MAX_OUTPUT_TOKENS, estimate_records_raw(summarized))


def summary_post(
    continuation: str,
    *,
    attachments: Sequence[Mapping[str, Any]],
    kept: Sequence[Record],
    summary_budget: int = 0,
    saving: int = 0,
    prefix: int = 0,
) -> int:
    """The count of the context a compaction leaves, estimated as ``tokens/status`` counts it.

    ``continuation``: the text of the summary entry (``summary_budget`` raw tokens are added for
    a summary not written yet); ``attachments``: the attachment entries written after it;
    ``kept``: the entries kept verbatim; ``saving``: what a microcompact boundary among them
    subtracts; ``prefix``: the fixed prefix the next request carries besides the messages.
    Kept entries lose their API usage when relinked after a boundary, so the whole context is
    an estimate, the one ``tokens.compacted_tokens`` makes (docs/thresholds.md#after-a-compaction).
    """
    summary = record_from_dict(
        {"type": "user", "message": {"role": "user", "content": continuation}}
    )
    raw = (
        estimate_records_raw([summary])
        + summary_budget
        + estimate_entries_raw(record_from_dict(dict(a)).entry for a in attachments)
        + estimate_records_raw(kept)
    )
    return compacted_tokens(prefix, raw, saving)
