"""Tests for compactd.core.tokens: estimation, the anchored count, limits, thresholds, breakdown."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactd.core import constants as c
from compactd.core import tokens as tokens_module
from compactd.core.tokens import (
    CATEGORY_ASSISTANT,
    CATEGORY_ATTACHMENTS,
    CATEGORY_HUMAN,
    CATEGORY_LOCAL_COMMAND_OUTPUT,
    CATEGORY_META,
    CATEGORY_TOOL_REQUESTS,
    CATEGORY_TOOL_RESULTS,
    CompactFlags,
    Limits,
    ThresholdTracker,
    TokenCount,
    TokenCounter,
    apportion,
    breakdown,
    count_tokens,
    counts_toward_context,
    estimate_block_raw,
    estimate_entries,
    estimate_entry_raw,
    estimate_record_raw,
    estimate_records_raw,
    flags,
    model_limits,
    pad,
    resolve_limits,
    thresholds,
    token_status,
)
from compactd.transcript.model import (
    Block,
    Entry,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    Usage,
    record_from_dict,
)
from tests import helpers
from tests.conftest import fixture_transcripts, load_fixture
from tests.helpers import tool_use_block

# -- builders -----------------------------------------------------------------------------------


def usage(inp: int = 0, create: int = 0, read: int = 0, out: int = 0) -> dict[str, int]:
    return {
        "input_tokens": inp,
        "cache_creation_input_tokens": create,
        "cache_read_input_tokens": read,
        "output_tokens": out,
    }


def entry(obj: dict[str, Any]) -> Entry:
    """Go through the real parser, as the daemon does for appended entries."""
    return record_from_dict(obj).entry


def assistant(
    content: list[dict[str, Any]] | str,
    *,
    msg_id: str | None = "msg_1",
    use: dict[str, int] | None = None,
    model: str = "claude-sonnet-4-5-20250929",
    api_error: bool = False,
) -> Entry:
    fields = {"isApiErrorMessage": True} if api_error else {}
    return entry(helpers.assistant(content, msg_id=msg_id, model=model, usage=use, **fields))


def user(content: list[dict[str, Any]] | str, **extra: Any) -> Entry:
    return entry(helpers.user(content, **extra))


def tool_use(tool_id: str, name: str = "Bash", **inp: Any) -> dict[str, Any]:
    return tool_use_block(tool_id, name, inp)


def tool_result(tool_id: str, text: str) -> Entry:
    return entry(helpers.tool_result(tool_id, text))


def attachment(payload: dict[str, Any]) -> Entry:
    return entry({"type": "attachment", "attachment": payload})


def system(subtype: str = "informational") -> Entry:
    return entry({"type": "system", "subtype": subtype, "content": "x" * 400})


# -- estimation ---------------------------------------------------------------------------------


def test_block_estimates() -> None:
    assert estimate_block_raw(TextBlock(text="abcdefgh")) == 2
    assert estimate_block_raw(TextBlock(text="abcdefghij")) == 3  # 2.5 rounds half up
    assert estimate_block_raw(TextBlock(text="abcdefghi")) == 2  # 2.25 rounds down
    assert estimate_block_raw(ImageBlock()) == c.IMAGE_TOKEN_ESTIMATE
    # name + compact JSON of the input: "Read" + '{"file_path":"/a"}' = 4 + 18 characters
    block = ToolUseBlock(id="t", name="Read", input_json=msgspec.Raw(b'{"file_path":"/a"}'))
    assert estimate_block_raw(block) == 6
    assert estimate_block_raw(ThinkingBlock(thinking="x" * 40)) == 10
    assert estimate_block_raw(RedactedThinkingBlock(data="y" * 8)) == 2
    unknown = UnknownBlock(kind="server_tool_use", data={"type": "server_tool_use", "id": "s"})
    assert estimate_block_raw(unknown) == round(len('{"type":"server_tool_use","id":"s"}') / 4)


def test_tool_result_estimates_nested_content() -> None:
    assert estimate_block_raw(ToolResultBlock(tool_use_id="t", content="z" * 100)) == 25
    nested = ToolResultBlock(
        tool_use_id="t", content=[TextBlock(text="z" * 100), ImageBlock(), TextBlock(text="ab")]
    )
    assert estimate_block_raw(nested) == 25 + c.IMAGE_TOKEN_ESTIMATE + 1
    assert estimate_block_raw(ToolResultBlock(tool_use_id="t")) == 0


def test_entry_estimates_and_padding() -> None:
    text = user("q" * 400)
    att = attachment({"type": "todo", "items": ["a", "b"]})
    assert estimate_entry_raw(text) == 100
    assert estimate_entry_raw(att) == round(len('{"type":"todo","items":["a","b"]}') / 4)
    assert estimate_entry_raw(system()) == 0  # never sent to the model
    assert pad(0) == 0
    assert pad(3) == 4
    assert pad(4) == 6  # 5.33 rounds up
    assert pad(100) == 134
    # raw estimates are summed first, then padded once
    assert estimate_entries([text, text, system()]) == pad(200)


def test_counts_toward_context() -> None:
    assert counts_toward_context(user("hi"))
    assert counts_toward_context(assistant("hi"))
    assert counts_toward_context(attachment({"type": "date"}))
    assert counts_toward_context(assistant("boom", model=c.SYNTHETIC_MODEL, api_error=True))
    for kind in ("system", "progress", "summary", "queue-operation", "last-prompt", "mode"):
        assert not counts_toward_context(entry({"type": kind}))


# -- the anchored count -------------------------------------------------------------------------


U = usage(inp=1_000, create=2_000, read=50_000, out=300)
U_TOTAL = 53_300


def _wrong_rule_last_entry(entries: list[Entry]) -> int:
    """The rejected rule: anchor at the LAST entry carrying usage, estimate only what follows."""
    last = max(i for i, e in enumerate(entries) if e.type == "assistant")
    message = entries[last].message
    assert message is not None and message.usage is not None
    return message.usage.total() + estimate_entries(entries[last + 1 :])


def test_parallel_tool_calls_anchor_at_first_entry_of_the_response() -> None:
    a1 = assistant([tool_use("t1", command="ls")], msg_id="m", use=U)
    r1 = tool_result("t1", "r" * 4_000)
    a2 = assistant([tool_use("t2", command="pwd")], msg_id="m", use=U)
    r2 = tool_result("t2", "s" * 800)
    entries = [user("go"), a1, r1, a2, r2]

    count = count_tokens(entries)
    expected_estimate = pad(estimate_entry_raw(r1) + estimate_entry_raw(r2))
    assert (count.tokens, count.exact, count.estimated) == (
        U_TOTAL + expected_estimate,
        U_TOTAL,
        expected_estimate,
    )
    # a2 is the same response as a1: covered by the usage, not estimated again
    assert count.estimated == pad(1_000 + 200)

    wrong = _wrong_rule_last_entry(entries)
    assert wrong == U_TOTAL + pad(200)
    assert count.tokens - wrong == pad(1_200) - pad(200)  # r1 would be missed entirely


def test_split_entries_take_usage_once_as_the_maximum() -> None:
    smaller = usage(inp=10, read=1_000, out=5)
    larger = usage(inp=10, read=1_000, out=90)
    entries = [
        assistant("thinking it over", msg_id="m", use=smaller),
        assistant("answer", msg_id="m", use=larger),
    ]
    count = count_tokens(entries)
    assert count.exact == 1_100
    assert count.estimated == 0


def test_latest_response_is_the_anchor() -> None:
    old = assistant("old", msg_id="m1", use=usage(inp=10))
    new = assistant("new", msg_id="m2", use=usage(inp=500, out=20))
    tail = user("u" * 40)
    count = count_tokens([user("x" * 4_000), old, user("y" * 400), new, tail])
    assert (count.tokens, count.exact, count.estimated) == (520 + pad(10), 520, pad(10))


@pytest.mark.parametrize(
    "bad",
    [
        {"use": None},
        {"use": usage()},
        {"use": usage(inp=900), "model": c.SYNTHETIC_MODEL},
        {"use": usage(inp=900), "api_error": True},
    ],
    ids=["missing", "zero", "synthetic", "api-error"],
)
def test_unusable_usage_falls_back_to_estimation(bad: dict[str, Any]) -> None:
    entries = [user("a" * 400), assistant("b" * 40, **bad), user("c" * 80)]
    count = count_tokens(entries)
    assert (count.tokens, count.exact, count.estimated) == (pad(100 + 10 + 20), 0, pad(130))


def test_synthetic_entry_after_a_real_response_is_estimated_not_anchored() -> None:
    real = assistant("ok", msg_id="m1", use=usage(inp=5_000))
    synthetic = assistant("API Error", msg_id=None, use=usage(inp=1), model=c.SYNTHETIC_MODEL)
    count = count_tokens([user("hi"), real, user("d" * 40), synthetic])
    assert count.exact == 5_000
    assert count.estimated == pad(10 + estimate_entry_raw(synthetic))


def test_bookkeeping_entries_add_nothing() -> None:
    a = assistant("x", use=usage(inp=100))
    assert count_tokens([a, system(), entry({"type": "progress", "data": {"x": 1}})]).tokens == 100


def test_empty_conversation() -> None:
    assert count_tokens([]) == TokenCount(0, 0, 0)
    assert TokenCounter().current == TokenCount(0, 0, 0)


# -- incremental counter ------------------------------------------------------------------------


_MSG_IDS = st.sampled_from([None, "m1", "m2", "m3", "m4"])
_USAGE = st.one_of(
    st.none(),
    st.just(Usage()),
    st.builds(
        Usage,
        input_tokens=st.integers(0, 5_000),
        cache_creation_input_tokens=st.integers(0, 5_000),
        cache_read_input_tokens=st.integers(0, 100_000),
        output_tokens=st.integers(0, 2_000),
    ),
)
_TEXT = st.text(alphabet="ab c", max_size=60)


@st.composite
def _entries(draw: st.DrawFn) -> Entry:
    kind = draw(st.sampled_from(["assistant", "assistant", "user", "attachment", "system"]))
    if kind == "assistant":
        synthetic = draw(st.booleans()) and draw(st.booleans())
        content: list[Block] = draw(
            st.lists(
                st.one_of(
                    st.builds(TextBlock, text=_TEXT),
                    st.builds(
                        ToolUseBlock,
                        id=st.just("t"),
                        name=st.just("Bash"),
                        input_json=st.just(msgspec.Raw(b"{}")),
                    ),
                ),
                max_size=3,
            )
        )
        message = Message(
            role="assistant",
            id=draw(_MSG_IDS),
            model=c.SYNTHETIC_MODEL if synthetic else "claude-sonnet-4-5",
            usage=draw(_USAGE),
            content=content,
        )
        return Entry(type="assistant", message=message, is_api_error_message=synthetic or None)
    if kind == "user":
        text = draw(_TEXT)
        result = ToolResultBlock(tool_use_id="t", content=text)
        content2: list[Block] = draw(st.sampled_from([[TextBlock(text=text)], [result]]))
        return Entry(type="user", message=Message(role="user", content=content2))
    if kind == "attachment":
        return Entry(type="attachment", attachment={"type": "note", "text": draw(_TEXT)})
    return Entry(type="system", subtype="informational", content=draw(_TEXT))


@settings(max_examples=300, deadline=None)
@given(entries=st.lists(_entries(), max_size=40), cuts=st.lists(st.integers(0, 40), max_size=8))
def test_incremental_counter_matches_full_recount(entries: list[Entry], cuts: list[int]) -> None:
    counter = TokenCounter()
    bounds = sorted({min(cut, len(entries)) for cut in cuts} | {0, len(entries)})
    for start, stop in zip(bounds, bounds[1:], strict=False):
        counter.extend(entries[start:stop])
        assert counter.current == count_tokens(entries[:stop])
    assert counter.current == count_tokens(entries)


def test_incremental_new_anchor_whose_first_entry_came_in_the_same_batch() -> None:
    counter = TokenCounter([user("a" * 400), assistant("x", msg_id="m1", use=usage(inp=900))])
    batch = [
        assistant([tool_use("t1")], msg_id="m2"),  # first entry of m2, no usage yet
        tool_result("t1", "r" * 40),
        assistant([tool_use("t2")], msg_id="m2", use=usage(inp=2_000)),
        tool_result("t2", "s" * 80),
    ]
    counter.extend(batch)
    whole = [user("a" * 400), assistant("x", msg_id="m1", use=usage(inp=900)), *batch]
    assert counter.current == count_tokens(whole)
    now = counter.current
    assert (now.tokens, now.exact, now.estimated) == (2_000 + pad(30), 2_000, pad(30))


def test_saving_applies_until_the_next_response() -> None:
    counter = TokenCounter([user("go"), assistant("x", msg_id="m1", use=usage(inp=10_000))])
    counter.extend([tool_result("t", "r" * 4_000)])
    before = counter.current.tokens
    counter.apply_saving(3_000)
    assert counter.current.tokens == before - 3_000
    assert counter.current.saved == 3_000
    # another entry of the same response is not a new usage report
    counter.extend([assistant("more", msg_id="m1", use=usage(inp=10_000))])
    assert counter.current.saved == 3_000
    counter.extend([assistant("next", msg_id="m2", use=usage(inp=8_000))])
    now = counter.current
    assert (now.tokens, now.exact, now.estimated) == (8_000, 8_000, 0)
    counter.apply_saving(100_000)
    assert counter.current.tokens == 0  # never negative


def test_reset_recounts_from_scratch() -> None:
    counter = TokenCounter([user("x" * 4_000), assistant("y", use=usage(inp=70_000))])
    counter.apply_saving(500)
    after_compaction = [user("summary " * 50)]
    counter.reset(after_compaction)
    assert counter.current == count_tokens(after_compaction)
    assert counter.current.exact == 0


# -- limits -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "window", "output"),
    [
        ("claude-haiku-4-5-20251001", 200_000, 64_000),
        ("claude-sonnet-4-5-20250929", 200_000, 64_000),
        ("claude-sonnet-4-5", 200_000, 64_000),
        ("claude-sonnet-4-20250514", 200_000, 64_000),
        ("claude-3-7-sonnet-20250219", 200_000, 64_000),
        ("claude-opus-4-1-20250805", 200_000, 32_000),
        ("claude-opus-4-20250514", 200_000, 32_000),
        ("claude-opus-4-5-20251101", 200_000, 64_000),
        ("claude-sonnet-4-6", 1_000_000, 128_000),
        ("claude-opus-4-6", 1_000_000, 128_000),
        ("claude-opus-4-7-20260101", 1_000_000, 128_000),
        ("claude-opus-5-5", 1_000_000, 128_000),
        ("claude-sonnet-5", 1_000_000, 128_000),
        ("us.anthropic.claude-sonnet-5-1-v1:0", 1_000_000, 128_000),
        ("claude-sonnet-4-5-20250929[1m]", 1_000_000, 64_000),
        ("claude-sonnet-4[1M]", 1_000_000, 64_000),
        ("claude-3-5-haiku-20241022", 200_000, 8_192),
        ("gpt-oss-120b", 200_000, 32_000),
        ("", 200_000, 32_000),
    ],
)
def test_model_table(model: str, window: int, output: int) -> None:
    assert model_limits(model) == Limits(window, output)


def test_resolve_limits_overrides() -> None:
    model = "claude-sonnet-4-5"
    assert resolve_limits(model) == Limits(200_000, 64_000)
    assert resolve_limits(model, context_window=500_000) == Limits(500_000, 64_000)
    env = {c.ENV_MAX_OUTPUT_TOKENS: "16000"}
    assert resolve_limits(model, env=env) == Limits(200_000, 16_000)
    # the client's value wins over the environment
    assert resolve_limits(model, max_output_tokens=8_000, env=env) == Limits(200_000, 8_000)
    for bad in ("", "abc", "0", "-5", "1.5"):
        assert resolve_limits(model, env={c.ENV_MAX_OUTPUT_TOKENS: bad}).max_output_tokens == 64_000


# -- thresholds ---------------------------------------------------------------------------------


def test_thresholds_200k() -> None:
    t = thresholds(Limits(200_000, 64_000), {}, True)
    assert t.effective_window == 180_000
    assert t.auto_compact_threshold == 167_000
    assert t.warning_threshold == t.error_threshold == 147_000
    assert t.blocking_limit == 177_000


def test_thresholds_1m() -> None:
    t = thresholds(Limits(1_000_000, 128_000), {}, True)
    assert t.effective_window == 980_000
    assert t.auto_compact_threshold == 967_000
    assert t.blocking_limit == 977_000


def test_small_max_output_reserves_only_what_it_needs() -> None:
    t = thresholds(Limits(200_000, 8_192), {}, True)
    assert t.effective_window == 191_808
    assert t.auto_compact_threshold == 178_808


def test_pct_override() -> None:
    limits = Limits(1_000_000, 128_000)
    env = {c.ENV_AUTOCOMPACT_PCT_OVERRIDE: "50"}
    assert thresholds(limits, env, True).auto_compact_threshold == 490_000
    assert (
        thresholds(limits, {c.ENV_AUTOCOMPACT_PCT_OVERRIDE: "12.5"}, True).auto_compact_threshold
        == 122_500
    )
    # it can only lower the threshold
    assert (
        thresholds(limits, {c.ENV_AUTOCOMPACT_PCT_OVERRIDE: "100"}, True).auto_compact_threshold
        == 967_000
    )
    assert (
        thresholds(limits, {c.ENV_AUTOCOMPACT_PCT_OVERRIDE: "99"}, True).auto_compact_threshold
        == 967_000
    )


@pytest.mark.parametrize("bad", ["", "abc", "0", "-10", "150", "nan", "inf"])
def test_invalid_pct_is_ignored(bad: str) -> None:
    t = thresholds(Limits(200_000, 64_000), {c.ENV_AUTOCOMPACT_PCT_OVERRIDE: bad}, True)
    assert t.auto_compact_threshold == 167_000


def test_auto_compact_window_override() -> None:
    limits = Limits(1_000_000, 128_000)
    t = thresholds(limits, {c.ENV_AUTO_COMPACT_WINDOW: "400000"}, True)
    assert t.effective_window == 380_000
    assert t.auto_compact_threshold == 367_000
    assert t.blocking_limit == 377_000
    # a value above the model's own window cannot enlarge it; junk is ignored
    for ignored in ("2000000", "abc", "0"):
        env = {c.ENV_AUTO_COMPACT_WINDOW: ignored}
        assert thresholds(limits, env, True).auto_compact_threshold == 967_000


def test_blocking_limit_override() -> None:
    limits = Limits(200_000, 64_000)
    assert (
        thresholds(limits, {c.ENV_BLOCKING_LIMIT_OVERRIDE: "150000"}, True).blocking_limit
        == 150_000
    )
    assert thresholds(limits, {c.ENV_BLOCKING_LIMIT_OVERRIDE: "-1"}, True).blocking_limit == 177_000


def test_warning_measured_from_window_when_auto_compact_is_off() -> None:
    t = thresholds(Limits(200_000, 64_000), {}, False)
    assert t.auto_compact_threshold == 167_000
    assert t.warning_threshold == t.error_threshold == 160_000


def test_flags() -> None:
    assert flags({}) == CompactFlags(True, True, True)
    assert flags({c.ENV_DISABLE_AUTO_COMPACT: "TRUE"}) == CompactFlags(True, False, True)
    assert flags({c.ENV_DISABLE_MICROCOMPACT: "yes"}) == CompactFlags(True, True, False)
    assert flags({c.ENV_DISABLE_COMPACT: "1"}) == CompactFlags(False, False, False)
    assert flags({c.ENV_DISABLE_COMPACT: "0", c.ENV_DISABLE_AUTO_COMPACT: "off"}) == CompactFlags(
        True, True, True
    )


# -- status and crossings -----------------------------------------------------------------------

LIMITS_200K = Limits(200_000, 64_000)
LEVELS_200K = thresholds(LIMITS_200K, {}, True)
ON = CompactFlags(True, True, True)


def status_at(tokens: int, fl: CompactFlags = ON) -> Any:
    levels = thresholds(LIMITS_200K, {}, fl.auto_compact_enabled)
    return token_status(TokenCount(tokens, tokens, 0), LIMITS_200K, levels, fl, False, 0)


def test_token_status() -> None:
    s = status_at(100_000)
    assert s.percent_left == round((167_000 - 100_000) / 167_000 * 100)
    assert not s.is_above_warning_threshold
    assert s.context_window == 200_000
    assert s.max_output_tokens == 64_000
    s = status_at(147_000)
    assert s.is_above_warning_threshold and s.is_above_error_threshold
    assert not s.is_above_auto_compact_threshold
    s = status_at(167_000)
    assert s.is_above_auto_compact_threshold and s.percent_left == 0
    assert not s.is_at_blocking_limit
    s = status_at(190_000)
    assert s.is_at_blocking_limit and s.percent_left == 0
    off = CompactFlags(True, False, True)
    s = status_at(170_000, off)
    assert not s.is_above_auto_compact_threshold and not s.auto_compact_enabled
    assert s.percent_left == round((180_000 - 170_000) / 180_000 * 100)
    failing = token_status(TokenCount(5, 0, 5), LIMITS_200K, LEVELS_200K, ON, True, 3)
    assert failing.circuit_open and failing.consecutive_failures == 3
    assert failing.exact_tokens == 0 and failing.estimated_tokens == 5


def test_percent_left_rounds_half_up() -> None:
    # 4_175 left of 167_000 is exactly 2.5%: half up gives 3 (Python's round() would give 2)
    assert status_at(167_000 - 4_175).percent_left == 3
    assert status_at(500_000).percent_left == 0  # never negative


def test_threshold_tracker_fires_once_and_rearms() -> None:
    tracker = ThresholdTracker()
    assert tracker.update(status_at(100_000)) == []
    assert tracker.update(status_at(150_000)) == ["warning", "error"]
    assert tracker.update(status_at(155_000)) == []
    assert tracker.update(status_at(168_000)) == ["autoCompact"]
    assert tracker.update(status_at(169_000)) == []
    # compaction brings the count down: everything re-arms
    assert tracker.update(status_at(30_000)) == []
    assert tracker.update(status_at(178_000)) == ["warning", "error", "autoCompact", "blocking"]
    # dropping below only the blocking limit re-arms only that level
    assert tracker.update(status_at(170_000)) == []
    assert tracker.update(status_at(177_000)) == ["blocking"]
    tracker.reset()
    assert tracker.update(status_at(177_000)) == ["warning", "error", "autoCompact", "blocking"]


# -- breakdown ----------------------------------------------------------------------------------


def _session() -> list[Entry]:
    return [
        user("please fix the bug " * 10),
        user("<local-command-caveat>caveat text</local-command-caveat>", isMeta=True),
        user("<local-command-stdout>" + "o" * 400 + "</local-command-stdout>"),
        attachment({"type": "todo", "content": "t" * 200}),
        attachment({"type": "nested_memory", "content": "n" * 100}),
        assistant(
            [
                {"type": "thinking", "thinking": "h" * 80},
                {"type": "text", "text": "Reading."},
                tool_use("r1", "Read", file_path="/p/a.py"),
                tool_use("g1", "Grep", pattern="foo"),
            ],
            msg_id="m1",
            use=usage(inp=100),
        ),
        tool_result("r1", "a" * 4_000),
        tool_result("g1", "g" * 400),
        assistant([tool_use("r2", "Read", file_path="/p/a.py")], msg_id="m2"),
        tool_result("r2", "b" * 2_000),
        assistant([tool_use("r3", "Read", file_path="/p/b.py")], msg_id="m3"),
        tool_result("r3", "c" * 800),
        assistant([tool_use("r4", "Read", file_path="/p/a.py")], msg_id="m4"),
        tool_result("r4", "d" * 1_200),
        system(),
    ]


def test_breakdown_categories() -> None:
    result = breakdown(_session())
    by_name = {row.name: row for row in result.categories}
    assert [row.name for row in result.categories] == [
        CATEGORY_HUMAN,
        CATEGORY_ASSISTANT,
        CATEGORY_LOCAL_COMMAND_OUTPUT,
        CATEGORY_META,
        CATEGORY_TOOL_REQUESTS,
        CATEGORY_TOOL_RESULTS,
        CATEGORY_ATTACHMENTS,
    ]
    assert by_name[CATEGORY_HUMAN].tokens == pad(round(190 / 4))
    assert by_name[CATEGORY_ASSISTANT].tokens == pad(20 + 2)
    assert by_name[CATEGORY_LOCAL_COMMAND_OUTPUT].count == 1
    assert by_name[CATEGORY_META].count == 1
    assert by_name[CATEGORY_TOOL_RESULTS].tokens == pad(1_000 + 100 + 500 + 200 + 300)
    assert by_name[CATEGORY_TOOL_REQUESTS].count == 5
    assert by_name[CATEGORY_ATTACHMENTS].count == 2
    assert result.total_tokens == sum(row.tokens for row in result.categories)
    # Each split by tool or type adds up to its category's row.
    assert sum(row.tokens for row in result.tool_results) == by_name[CATEGORY_TOOL_RESULTS].tokens
    assert sum(r.tokens for r in result.tool_requests) == by_name[CATEGORY_TOOL_REQUESTS].tokens
    assert sum(row.tokens for row in result.attachments) == by_name[CATEGORY_ATTACHMENTS].tokens
    assert sum(row.percent for row in result.categories) == pytest.approx(100, abs=0.5)
    for row in result.categories:
        assert row.percent == round(row.tokens * 100 / result.total_tokens, 1)

    results = {row.name: row for row in result.tool_results}
    # Each tool's padded estimate, give or take the token that makes them add up to the row.
    assert results["Read"].tokens == pytest.approx(pad(1_000 + 500 + 200 + 300), abs=1)
    assert results["Read"].count == 4
    assert results["Grep"].tokens == pytest.approx(pad(100), abs=1)
    assert [row.name for row in result.tool_results] == ["Read", "Grep"]  # largest first
    requests = {row.name: row.count for row in result.tool_requests}
    assert requests == {"Read": 4, "Grep": 1}
    assert {row.name for row in result.attachments} == {"todo", "nested_memory"}


def test_apportion_adds_up_to_the_rounded_sum() -> None:
    assert apportion([1.5, 1.5, 1.0]) == [2, 1, 1]  # the first of two equal remainders wins
    assert apportion([0.4, 0.4, 0.4]) == [1, 0, 0]
    assert apportion([]) == []
    assert apportion([10.4, 20.4], total=32) == [11, 21]  # a table that must reach another's row
    assert apportion([10.6, 20.6], total=30) == [10, 20]
    rng = random.Random(7)
    for _ in range(200):
        amounts = [rng.uniform(0, 5_000) for _ in range(rng.randint(1, 9))]
        shares = apportion(amounts)
        assert sum(shares) == round(sum(amounts))
        assert all(abs(share - amount) < 1 for share, amount in zip(shares, amounts, strict=True))


def test_breakdown_duplicate_reads() -> None:
    result = breakdown(_session())
    assert len(result.duplicate_reads) == 1
    dup = result.duplicate_reads[0]
    assert dup.path == "/p/a.py"
    assert dup.reads == 3
    assert dup.wasted_tokens == pad(1_000) + pad(500)  # every read but the last
    assert result.duplicate_read_tokens == dup.wasted_tokens


def test_breakdown_empty_and_unknown_tool() -> None:
    empty = breakdown([])
    assert empty.total_tokens == 0
    assert all(row.percent == 0.0 for row in empty.categories)
    orphan = breakdown([tool_result("nope", "x" * 40)])
    assert [row.name for row in orphan.tool_results] == ["unknown"]


# -- real transcripts ---------------------------------------------------------------------------


def _boundary_cases() -> list[tuple[str, int, list[Entry], int]]:
    """(fixture, boundary index, entries since the previous boundary, recorded preTokens)."""
    cases = []
    for path in fixture_transcripts():
        entries = [record.entry for record in load_fixture(path.name)]
        segment: list[Entry] = []
        for index, item in enumerate(entries):
            if item.is_compact_boundary:
                meta = item.compact_metadata
                if meta is not None and meta.pre_tokens:
                    cases.append((path.name, index, segment, meta.pre_tokens))
                segment = []
            else:
                segment.append(item)
    return cases


_CASES = _boundary_cases()


def test_fixtures_have_boundaries() -> None:
    assert _CASES, "expected at least one compact_boundary among the fixtures"


@pytest.mark.parametrize(
    ("name", "index", "segment", "pre_tokens"),
    _CASES,
    ids=[f"{case[0]}@{case[1]}" for case in _CASES],
)
def test_count_matches_recorded_pre_tokens(
    name: str, index: int, segment: list[Entry], pre_tokens: int
) -> None:
    count = count_tokens(segment)
    error = (count.tokens - pre_tokens) / pre_tokens
    print(
        f"{name} boundary@{index}: counted {count.tokens} (exact {count.exact} + "
        f"estimated {count.estimated}) vs preTokens {pre_tokens}: {error:+.4%}"
    )
    incremental = TokenCounter()
    for item in segment:
        incremental.extend([item])
    assert incremental.current == count
    if count.exact > 0:
        assert abs(error) <= 0.02


def test_record_estimates_match_entries_and_are_kept_while_live(tmp_path: Path) -> None:
    lines = [
        {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "x" * 400}},
        {
            "type": "assistant",
            "uuid": "a1",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "y" * 100}]},
        },
        {"type": "system", "uuid": "s1", "subtype": "informational", "content": "bookkeeping"},
    ]
    records = [record_from_dict(obj) for obj in lines]
    assert [estimate_record_raw(r) for r in records] == [
        estimate_entry_raw(r.entry) for r in records
    ]
    assert estimate_records_raw(records) == 100 + 25
    assert [r.raw_tokens for r in records] == [100, 25, 0]
    path = tmp_path / "t.jsonl"
    path.write_bytes(records[0].raw + b"\n")
    records[0].locate(str(path), 0)
    records[0].release()
    assert records[0].raw_tokens == -1
    assert estimate_record_raw(records[0]) == 100
    assert records[0].raw_tokens == -1  # a released record keeps nothing


def test_the_fixed_prefix_is_learned_from_usage_and_carried_across_a_rewrite() -> None:
    # 900 input tokens reported for ~100 + ~3 tokens of messages: the rest is the prefix.
    first = [user("a" * 400), assistant("x" * 12, msg_id="m1", use=usage(inp=900))]
    counter = TokenCounter(first)
    now = counter.current
    covered = pad(100 + 3)
    assert now.prefix_source == "usage"
    assert now.fixed_prefix == 900 - covered
    assert now.fixed_prefix + now.messages + now.attachments - now.saved == now.tokens
    # A compaction rewrote the context: no usage yet, the prefix is carried.
    rewritten = TokenCounter([user("s" * 800)], carried_prefix=counter.fixed_prefix)
    after = rewritten.current
    assert after.prefix_source == "carried"
    assert after.tokens == counter.fixed_prefix + pad(200)
    assert after.fixed_prefix + after.messages == after.tokens
    # The next response's usage anchors the total; the prefix stays the carried one, learned
    # from a response that covered fewer messages than this one (the summary and its own).
    rewritten.extend([assistant("y" * 4, msg_id="m2", use=usage(inp=1_000))])
    assert rewritten.current.tokens == 1_000  # the usage
    assert rewritten.current.prefix_source == "carried"
    assert rewritten.current.fixed_prefix == counter.fixed_prefix
    assert rewritten.learned_prefix == 1_000 - pad(200 + 1)  # what it would have implied
    # A context with nothing carried (a session's first) learns it from its first response.
    assert TokenCounter(first).current.prefix_source == "usage"


def test_the_prefix_is_never_less_than_what_the_client_described() -> None:
    entries = [user("a" * 4_000), assistant("x" * 12, msg_id="m1", use=usage(inp=1_500))]
    implied = 1_500 - pad(1_000 + 3)
    assert TokenCounter(entries).fixed_prefix == implied
    floored = TokenCounter(entries, known_prefix=800)
    assert floored.fixed_prefix == 800 and floored.current.fixed_prefix == 800
    assert floored.current.tokens == 1_500  # the total is the usage either way
    # Above the floor, the usage's own figure stands.
    assert TokenCounter(entries, known_prefix=100).fixed_prefix == implied
    # Before any usage the floor is counted, as a carried figure would be.
    fresh = TokenCounter([user("a" * 400)], known_prefix=800).current
    assert fresh.fixed_prefix == 800 and fresh.prefix_source == "carried"
    assert fresh.tokens == 800 + pad(100)


def test_a_session_estimates_its_described_prefix_once_per_cache_safe_params(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from compactd.engine.session import Session
    from compactd.services.store import SessionMeta

    calls: list[object] = []
    real = tokens_module.estimate_prefix

    def counting(params: Any) -> int:
        calls.append(params)
        return real(params)

    monkeypatch.setattr(tokens_module, "estimate_prefix", counting)
    described = {"system": "s" * 4_000, "tools": [{"name": "Read"}]}
    meta = SessionMeta(
        session_id="s", cwd="/", model="claude-sonnet-4-5", cache_safe_params=described
    )
    session = Session(meta=meta, transcript_path="/dev/null", records=[])
    for _ in range(5):  # compactions and undos rebuild the view
        session.rebuild()
    assert len(calls) == 1
    assert session.counter.known_prefix == real(described) > 900
    # New cacheSafeParams (a reopen with others) are estimated again.
    session.meta = msgspec.structs.replace(meta, cache_safe_params={"system": "short"})
    session.rebuild()
    assert len(calls) == 2 and session.counter.known_prefix == real({"system": "short"})
