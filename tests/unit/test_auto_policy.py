"""Unit tests of core/auto_policy: the gate's order, each branch of decide() and its estimates."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

from compactd.core import auto_policy, tokens
from compactd.core import constants as c
from compactd.core import microcompact as mc
from compactd.core.auto_policy import Decision, Outlooks, Situation, SummaryOutlook, decide, gate
from tests.helpers import MODEL, assistant, to_records, tool_call, tool_result, user

# The default model's levels: a 200K window, the auto-compact threshold at 167K.
LIMITS = tokens.model_limits(MODEL)
THRESHOLD = tokens.thresholds(LIMITS).auto_compact_threshold
ABOVE = THRESHOLD + 10_000
# The most an automatic compaction may leave (docs/thresholds.md#accounting).
ROOM = int(THRESHOLD * 0.75)


def situation(
    count: int = ABOVE,
    *,
    env: dict[str, str] | None = None,
    failures: int = 0,
    force: bool = False,
    compacting: bool = False,
    last_error: str | None = None,
) -> Situation:
    flags = tokens.flags(env or {})
    status = tokens.token_status(
        tokens.TokenCount(tokens=count, exact=count, estimated=0),
        LIMITS,
        tokens.thresholds(LIMITS, auto_compact_enabled=flags.auto_compact_enabled),
        flags,
        circuit_open=failures >= c.MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES,
        consecutive_failures=failures,
    )
    return Situation(status, 120, force, compacting, last_error)


def micro_plan(saved: int) -> mc.MicroPlan:
    if not saved:
        return mc.MicroPlan("count", reason="nothing worth clearing")
    cleared = (mc.ToolResult("toolu_1", "Read", raw_tokens=saved),)
    return mc.MicroPlan("count", cleared, saved)


FULL = SummaryOutlook(post_tokens=9_000, summarized=110, kept=0, bound=True)
NOTES = SummaryOutlook(post_tokens=30_000, summarized=80, kept=40)


def outlooks(
    saved: int = 0, notes: SummaryOutlook | None = None, *, micro_on: bool = True
) -> Outlooks:
    return Outlooks(micro=micro_plan(saved) if micro_on else None, full=FULL, session_memory=notes)


# -- the gate -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("s", "reason"),
    [
        (
            situation(env={"DISABLE_COMPACT": "1"}, compacting=True, failures=3),
            "compactionDisabled",
        ),
        (situation(env={"DISABLE_AUTO_COMPACT": "1"}, compacting=True), "autoCompactDisabled"),
        (situation(compacting=True, failures=3), "compacting"),
        (situation(failures=3, force=True), "circuitOpen"),
        (situation(THRESHOLD - 1), "belowThreshold"),
    ],
)
def test_the_gate_stops_for_the_first_reason_in_order(s: Situation, reason: str) -> None:
    stopped = gate(s)
    assert stopped is not None and stopped.reason == reason
    # decide() starts with the gate and needs no outlook then.
    assert decide(s) == stopped
    assert stopped.mechanism == "none" and stopped.micro is None
    assert stopped.estimate_post == stopped.pre_tokens == s.status.tokens
    assert (stopped.entries_summarized, stopped.entries_kept) == (0, s.entries)


def test_the_threshold_itself_is_above_and_force_skips_it() -> None:
    assert gate(situation(THRESHOLD)) is None
    assert gate(situation(THRESHOLD - 1, force=True)) is None
    assert gate(situation(failures=2)) is None  # the breaker opens at three


def test_the_breaker_message_names_the_last_error() -> None:
    stopped = gate(situation(failures=3, last_error="summaryFailed: empty"))
    assert stopped is not None
    assert "after 3 consecutive failures (last: summaryFailed: empty)" in stopped.message


def test_past_the_gate_decide_needs_the_outlooks() -> None:
    with pytest.raises(ValueError, match="outlooks"):
        decide(situation())


# -- the fallback chain ------------------------------------------------------------------------------


def test_microcompact_alone_when_it_leaves_the_headroom() -> None:
    s = situation(ABOVE)
    d = decide(s, outlooks(saved=ABOVE - ROOM, notes=NOTES))
    assert (d.mechanism, d.reason) == ("micro", "microcompactEnough")
    assert d.micro is not None and d.micro.tokens_saved == ABOVE - ROOM
    assert d.estimate_post == ROOM == auto_policy.micro_post(ABOVE, d.micro)
    assert (d.entries_summarized, d.entries_kept) == (0, s.entries)


def test_microcompact_alone_needs_no_prediction_of_a_summary() -> None:
    s = situation(ABOVE)
    enough = Outlooks(micro=micro_plan(ABOVE - ROOM))
    assert decide(s, enough) == auto_policy.micro_alone(s, enough.micro)
    short = Outlooks(micro=micro_plan(ABOVE - ROOM - 1))
    assert auto_policy.micro_alone(s, short.micro) is None
    with pytest.raises(ValueError, match="full compaction's outlook"):
        decide(s, short)


def test_microcompact_that_leaves_less_headroom_is_not_enough() -> None:
    # Under the threshold, but above 75% of it: it would cross again within a few turns.
    d = decide(situation(ABOVE), outlooks(saved=ABOVE - THRESHOLD + 1, notes=NOTES))
    assert (d.mechanism, d.reason) == ("sessionMemory", "sessionMemoryFits")
    # It still runs first: the outlooks of the later mechanisms assume it did.
    assert d.micro is not None and d.micro.cleared


def test_force_skips_microcompact_alone() -> None:
    d = decide(situation(ABOVE, force=True), outlooks(saved=50_000))
    assert (d.mechanism, d.reason) == ("full", "noSessionMemory")
    assert d.micro is not None and d.micro.tokens_saved == 50_000


def test_session_memory_when_the_notes_fit() -> None:
    d = decide(situation(ABOVE), outlooks(notes=NOTES))
    assert (d.mechanism, d.reason) == ("sessionMemory", "sessionMemoryFits")
    assert (d.estimate_post, d.entries_summarized, d.entries_kept) == (30_000, 80, 40)
    assert d.pre_tokens == ABOVE and not d.bound
    assert d.micro is not None and not d.micro.cleared  # ran, cleared nothing


def test_full_when_the_notes_leave_less_headroom() -> None:
    large = dataclasses.replace(NOTES, post_tokens=ROOM + 1)
    d = decide(situation(ABOVE), outlooks(notes=large))
    assert (d.mechanism, d.reason) == ("full", "sessionMemoryTooLarge")
    assert f"about {ROOM + 1:,} tokens" in d.message and f"at most {ROOM:,}" in d.message


def test_the_prefix_is_described_only_when_it_is_refused() -> None:
    calls: list[int] = []

    def describe() -> str:
        calls.append(1)
        return "tools about 9 tokens"

    assert gate(dataclasses.replace(situation(ABOVE), prefix_parts=describe)) is None
    assert calls == []


def test_a_fixed_prefix_above_the_threshold_stops_before_any_outlook() -> None:
    s = dataclasses.replace(
        situation(ABOVE, force=True),
        prefix_parts=lambda: "tools about 150,000 tokens",
    )
    status = msgspec.structs.replace(s.status, fixed_prefix_tokens=THRESHOLD + 5)
    d = decide(dataclasses.replace(s, status=status))
    assert (d.mechanism, d.reason) == ("none", "fixedPrefixTooLarge")
    assert f"{THRESHOLD + 5:,} tokens (tools about 150,000 tokens)" in d.message
    assert f"{THRESHOLD:,}" in d.message


def test_full_without_notes_reports_its_bound() -> None:
    d = decide(situation(ABOVE), outlooks(micro_on=False))
    assert d == Decision(
        "full",
        "noSessionMemory",
        d.message,
        ABOVE,
        FULL.post_tokens,
        FULL.summarized,
        FULL.kept,
        None,
        bound=True,
    )
    assert "about 9,000 tokens" in d.message


# -- estimates ----------------------------------------------------------------------------------------


def test_micro_post_subtracts_the_saving_and_never_goes_negative() -> None:
    assert auto_policy.micro_post(50_000, micro_plan(20_000)) == 30_000
    assert auto_policy.micro_post(10_000, micro_plan(20_000)) == 0
    assert auto_policy.micro_post(10_000, micro_plan(0)) == 10_000


def test_summary_post_counts_the_new_context_as_the_token_counter_does() -> None:
    kept = to_records(
        [
            user("Now fix the parser.", uuid="u1"),
            tool_call("toolu_9", "Read", {"file_path": "/w/parser.py"}, uuid="a1", msg_id="m1"),
            tool_result("toolu_9", "def parse(): ...\n" * 300, uuid="r1"),
            assistant("Fixed.", uuid="a2", msg_id="m2"),
        ]
    )
    continuation = "This session continues... Summary:\n" + "did things. " * 500
    attachment = {"type": "attachment", "attachment": {"type": "todo", "content": ["a", "b"]}}
    post = auto_policy.summary_post(continuation, attachments=[attachment], kept=kept)
    # The same entries, counted the way tokens/status counts a compacted context before any
    # response measures it (the session settles its counter after a compaction).
    written = to_records(
        [{"type": "user", "message": {"role": "user", "content": continuation}}, attachment]
    )
    counter = tokens.TokenCounter([r.entry for r in [*written, *kept]])
    counter.settle()
    assert post == counter.current.tokens > 0
    # Unpadded: the plain estimate of what the compaction wrote and kept.
    raw = tokens.estimate_entries_raw(r.entry for r in [*written, *kept])
    assert post == tokens.compacted_tokens(0, raw) == raw

    assert auto_policy.summary_post(continuation, attachments=[], kept=kept, saving=100) == (
        auto_policy.summary_post(continuation, attachments=[], kept=kept) - 100
    )
    budget = auto_policy.summary_post(continuation, attachments=[], kept=[], summary_budget=3_000)
    bare = tokens.estimate_records_raw(written[:1])
    assert budget == tokens.compacted_tokens(0, bare + 3_000)


def test_the_summary_budget_is_the_output_cap_or_what_it_replaces() -> None:
    small = to_records([user("x" * 400), assistant("y" * 400)])
    assert auto_policy.summary_budget(small) == tokens.estimate_records_raw(small) == 200
    big = to_records([user("x" * 4 * (c.COMPACT_MAX_OUTPUT_TOKENS + 5))])
    assert auto_policy.summary_budget(big) == c.COMPACT_MAX_OUTPUT_TOKENS
