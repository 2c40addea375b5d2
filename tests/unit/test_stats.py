"""Unit tests of compactd.core.stats: compaction history, re-compactions, microcompact, thrash."""

from __future__ import annotations

from typing import Any

import pytest

from compactd.core import stats
from compactd.transcript.model import Record, record_from_dict
from tests import helpers
from tests.conftest import load_fixture
from tests.helpers import numbering, text_block, to_records, tool_use_block

THRESHOLD = 167_000  # a 200K window's auto-compact threshold

_uid = numbering("u", start=0)


def user(text: str | list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return helpers.user(text, uuid=_uid(), **extra)


def assistant(
    text: str = "ok", usage: int | None = None, tool: tuple[str, str] | None = None
) -> dict[str, Any]:
    content = [text_block(text)]
    if tool is not None:
        content.append(tool_use_block(*tool))
    msg_id = _uid()
    return helpers.assistant(
        content,
        uuid=_uid(),
        msg_id=msg_id,
        usage=None if usage is None else {"input_tokens": usage, "output_tokens": 0},
    )


def tool_result(tool_id: str, chars: int) -> dict[str, Any]:
    return helpers.tool_result(tool_id, "x" * chars, uuid=_uid())


def boundary(**meta: Any) -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "compact_boundary",
        "uuid": _uid(),
        "parentUuid": None,
        "timestamp": "2026-01-01T00:00:00Z",
        "content": "Conversation compacted",
        "compactMetadata": meta,
    }


def summary(text: str = "Summary: earlier work") -> dict[str, Any]:
    return user(text, isCompactSummary=True, isVisibleInTranscriptOnly=True)


def micro(saved: int) -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "microcompact_boundary",
        "uuid": _uid(),
        "microcompactMetadata": {"trigger": "auto", "preTokens": 1, "tokensSaved": saved},
    }


def records(*entries: dict[str, Any]) -> list[Record]:
    return to_records(entries)


# -- user prompts -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (user("fix the bug"), True),
        (user([{"type": "text", "text": "look"}, {"type": "image", "source": {}}]), True),
        (user("<command-name>/compact</command-name>"), False),
        (user("<local-command-stdout>done</local-command-stdout>"), False),
        (user("caveat", isMeta=True), False),
        (summary(), False),
        (user("sub-agent task", isSidechain=True), False),
        (tool_result("t1", 10), False),
        (assistant("hello"), False),
        (user(""), False),
    ],
)
def test_is_user_prompt(entry: dict[str, Any], expected: bool) -> None:
    assert stats.is_user_prompt(record_from_dict(entry).entry) is expected


# -- fixtures: real Claude Code transcripts -----------------------------------------------------


def test_claude_code_auto_compaction_fixture() -> None:
    result = stats.session_stats(load_fixture("claude-code-2.1.330__r2_auto.jsonl"), 967_000)
    (c,) = result.compactions
    assert (c.trigger, c.mechanism) == ("auto", "full")
    assert (c.pre_tokens, c.post_tokens, c.dropped_tokens) == (970_258, 2_939, 967_319)
    assert c.duration_ms == 18
    assert not c.post_tokens_estimated
    assert c.compaction_id == c.boundary_uuid == "9909a6d2-6ad9-4e45-aff5-e4aede217c2e"
    # 18 user / assistant / attachment entries before the boundary, 3 of them kept verbatim.
    assert c.entries_summarized == 15
    assert not c.recompaction and c.turns_since_previous is None
    # The next responses report 20,050 tokens of usage: far below the 1M model's threshold.
    assert not c.thrash and c.refill_contributors is None
    assert result.microcompactions == 0 and result.microcompact_tokens_saved == 0
    assert result.cache_breaks == []


def test_claude_code_manual_partial_fixture() -> None:
    (c,) = stats.compaction_stats(load_fixture("claude-code-2.1.330__r16_manual.jsonl"), THRESHOLD)
    assert (c.trigger, c.mechanism, c.pre_tokens, c.duration_ms) == ("manual", "full", 20_050, 56)
    assert (c.post_tokens, c.dropped_tokens) == (2_980, 17_070)
    # 22 context entries before the boundary; the last assistant text was kept verbatim.
    assert c.entries_summarized == 21
    assert not c.thrash


def test_missing_post_tokens_are_estimated_from_the_compacted_view() -> None:
    def stat(*tail: Record) -> stats.CompactionStat:
        recs = records(
            user("a" * 4_000),
            boundary(trigger="manual", preTokens=9_000),
            summary("s" * 400),
            *tail,
        )
        (c,) = stats.compaction_stats(recs, THRESHOLD)
        assert c.post_tokens_estimated
        return c

    # No response after it yet: only the summary is in the view, 100 tokens padded by 4/3.
    alone = stat(user("next"))
    assert alone.post_tokens == 134 and alone.dropped_tokens == 9_000 - 134
    # The first response after it measured its request exactly, system prompt and tools
    # included (which the estimate of the messages leaves out): that is the figure.
    answered = stat(user("next"), assistant(usage=3_000))
    assert answered.post_tokens == 3_000 and answered.dropped_tokens == 6_000


def test_older_claude_code_fixture() -> None:
    (c,) = stats.compaction_stats(
        load_fixture("NotTahaAli__sessclone__compaction.jsonl"), THRESHOLD
    )
    assert (c.trigger, c.pre_tokens, c.post_tokens, c.dropped_tokens) == (
        "manual",
        53_991,
        24_482,
        29_509,
    )
    assert c.duration_ms == 11_574


# -- compactd's own boundaries, re-compactions, microcompact ------------------------------------


def test_two_compactions_and_the_turns_between() -> None:
    recs = records(
        user("start"),
        assistant(usage=50_000),
        boundary(trigger="manual", preTokens=50_000, postTokens=4_000, durationMs=900),
        summary(),
        user("next task"),
        assistant(usage=30_000),
        micro(1_500),
        user("<command-name>/clear-tools</command-name>"),
        user("and another"),
        assistant(usage=40_000),
        micro(2_500),
        boundary(
            trigger="auto",
            preTokens=40_000,
            postTokens=6_000,
            durationMs=1_200,
            messagesSummarized=7,
            mechanism="sessionMemory",
            compactionId="cmp-2",
        ),
        summary(),
    )
    result = stats.session_stats(recs, THRESHOLD)
    first, second = result.compactions
    assert (first.trigger, first.mechanism, first.recompaction) == ("manual", "full", False)
    assert first.entries_summarized == 2
    assert first.turns_since_previous is None
    assert (second.compaction_id, second.mechanism, second.trigger) == (
        "cmp-2",
        "sessionMemory",
        "auto",
    )
    assert second.recompaction and second.turns_since_previous == 2
    assert (second.pre_tokens, second.post_tokens, second.dropped_tokens) == (40_000, 6_000, 34_000)
    assert second.entries_summarized == 7  # from messagesSummarized
    assert second.duration_ms == 1_200
    assert result.microcompactions == 2 and result.microcompact_tokens_saved == 4_000
    assert not first.thrash and not second.thrash


def test_missing_metadata_gets_defaults() -> None:
    recs = records(user("a"), assistant(), boundary(), summary())
    (c,) = stats.compaction_stats(recs, THRESHOLD)
    assert (c.trigger, c.mechanism, c.pre_tokens, c.duration_ms) == ("unknown", "full", 0, 0)
    assert c.post_tokens_estimated and c.dropped_tokens == 0


def test_cumulative_dropped_tokens_when_post_is_missing() -> None:
    recs = records(user("a"), boundary(preTokens=9_000, cumulativeDroppedTokens=7_000), summary())
    (c,) = stats.compaction_stats(recs, THRESHOLD)
    assert c.dropped_tokens == 7_000


# -- thrash -------------------------------------------------------------------------------------


def test_refill_within_three_turns_is_thrash_naming_contributors() -> None:
    recs = records(
        user("go"),
        assistant(usage=170_000),
        boundary(trigger="auto", preTokens=170_000, postTokens=20_000),
        summary(),
        user("continue"),
        assistant(tool=("t1", "Read")),
        tool_result("t1", 200_000),
        assistant(tool=("t2", "Bash")),
        tool_result("t2", 40_000),
        user("again"),
        assistant(usage=168_000),
    )
    (c,) = stats.compaction_stats(recs, THRESHOLD)
    assert c.thrash
    assert c.refill_turns == 2
    assert c.refill_contributors is not None and len(c.refill_contributors) == 3
    assert c.refill_contributors[0].startswith("Read tool results: 66,667 tokens")
    assert c.refill_contributors[1].startswith("Bash tool results")


def test_refill_after_more_than_three_turns_is_not_thrash() -> None:
    entries = [
        user("go"),
        boundary(trigger="auto", preTokens=170_000, postTokens=20_000),
        summary(),
    ]
    for i in range(4):
        entries += [user(f"prompt {i}"), assistant(usage=60_000 + 20_000 * i)]
    entries += [assistant(usage=169_000)]
    (c,) = stats.compaction_stats(records(*entries), THRESHOLD)
    assert not c.thrash and c.refill_turns is None


def test_refill_seen_only_through_the_next_compaction() -> None:
    recs = records(
        user("go"),
        boundary(trigger="auto", preTokens=170_000, postTokens=20_000),
        summary(),
        user("read everything"),
        assistant(tool=("t1", "Grep")),
        tool_result("t1", 4_000),
        boundary(trigger="auto", preTokens=171_000, postTokens=25_000),
        summary(),
    )
    first, second = stats.compaction_stats(recs, THRESHOLD)
    assert first.thrash and first.refill_turns == 1
    assert first.refill_contributors is not None
    assert first.refill_contributors[0].startswith("Grep tool results")
    assert not second.thrash
    assert second.turns_since_previous == 1


def test_compaction_that_does_not_fit_under_the_threshold_is_thrash() -> None:
    recs = records(
        user("go"), boundary(trigger="auto", preTokens=190_000, postTokens=180_000), summary()
    )
    (c,) = stats.compaction_stats(recs, THRESHOLD)
    assert c.thrash and c.refill_turns == 0
    assert c.refill_contributors is not None
    assert "the compaction result itself: 180,000 tokens" in c.refill_contributors[0]


@pytest.mark.parametrize(("saved", "thrash"), [(0, True), (30_000, False)])
def test_microcompact_after_compaction_counts_against_the_refill(saved: int, thrash: bool) -> None:
    recs = records(
        user("go"),
        boundary(trigger="auto", preTokens=170_000, postTokens=20_000),
        summary(),
        user("work"),
        assistant(usage=160_000),
        micro(saved),
        tool_result("t9", 30_000),  # +10,000 estimated: 170,000 less what microcompact saved
    )
    (c,) = stats.compaction_stats(recs, THRESHOLD)
    assert c.thrash is thrash
