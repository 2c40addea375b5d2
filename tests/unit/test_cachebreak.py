"""Unit tests of compactd.core.cachebreak: fingerprints, break threshold, explanations, resets."""

from __future__ import annotations

from typing import Any

import pytest

from compactd.core import cachebreak as cb
from compactd.transcript.model import Record, record_from_dict
from tests.helpers import user

T0 = 1_700_000_000.0

TOOLS = [
    {"name": "Read", "description": "read a file", "input_schema": {"type": "object"}},
    {"name": "Bash", "description": "run a command", "input_schema": {"type": "object"}},
]
SYSTEM = [
    {"type": "text", "text": "You are a coding agent."},
    {"type": "text", "text": "Project notes " * 50, "cache_control": {"type": "ephemeral"}},
]


def inputs(**overrides: Any) -> cb.Fingerprint:
    fields: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "system": SYSTEM,
        "tools": TOOLS,
        "betas": ["b1"],
        "thinking": {"type": "enabled", "budget_tokens": 8000},
        "effort": "high",
    }
    fields.update(overrides)
    return cb.fingerprint(**fields)


def pair(
    first: cb.Fingerprint,
    second: cb.Fingerprint,
    *,
    reads: tuple[int, int] = (100_000, 10_000),
    gap: float = 30.0,
) -> cb.ResponseOutcome:
    """Two requests of "main"; the second one's response returns ``reads[1]`` cache reads."""
    det = cb.CacheBreakDetector()
    det.before("main", first, T0)
    assert det.after("main", reads[0], T0 + 1).finding is None
    det.before("main", second, T0 + 1 + gap)
    return det.after("main", reads[1], T0 + 2 + gap)


def finding_of(outcome: cb.ResponseOutcome) -> cb.CacheBreakFinding:
    assert outcome.finding is not None
    return outcome.finding


# -- the threshold ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("previous", "current", "expected"),
    [
        (100_000, 94_000, True),  # 6% and 6,000 tokens
        (100_000, 95_000, False),  # exactly 5%: not more than 5%
        (100_000, 95_001, False),
        (30_000, 27_999, True),  # 6.7% and 2,001 tokens
        (30_000, 28_000, False),  # exactly 2,000 tokens: not more than 2,000
        (20_000, 17_500, True),
        (10_000, 8_500, False),  # 15% but only 1,500 tokens
        (1_000_000, 960_000, False),  # 4% of a large cache: 40,000 tokens is not enough
        (50_000, 60_000, False),  # reads went up
    ],
)
def test_break_needs_both_fraction_and_tokens(previous: int, current: int, expected: bool) -> None:
    assert cb.is_break(previous, current) is expected


def test_threshold_is_configurable() -> None:
    cfg = cb.DetectorConfig(min_drop_fraction=0.5, min_drop_tokens=100)
    assert not cb.is_break(10_000, 6_000, cfg)
    assert cb.is_break(10_000, 4_000, cfg)


# -- fingerprints -------------------------------------------------------------------------------


def test_fingerprint_keeps_hashes_not_content() -> None:
    secret = "TOP-SECRET-PROMPT-TEXT"
    fp = cb.fingerprint(
        system=[{"type": "text", "text": secret}],
        tools=[{"name": "Read", "description": secret}],
        model="m",
    )
    assert secret not in repr(fp)
    assert fp.system is not None and fp.system.chars == len(secret)


def test_fingerprint_is_independent_of_key_order() -> None:
    a = cb.fingerprint(tools=[{"name": "X", "input_schema": {"a": 1, "b": 2}}])
    b = cb.fingerprint(tools=[{"input_schema": {"b": 2, "a": 1}, "name": "X"}])
    assert a == b


def test_cache_control_on_blocks_is_layout_not_content() -> None:
    plain = cb.fingerprint(system=[{"type": "text", "text": "hi"}])
    marked = cb.fingerprint(
        system=[{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]
    )
    assert plain.system == marked.system
    assert marked.system_markers == (cb.Marker(where="system[0]", ttl="5m", scope=None),)
    assert cb.describe_changes(plain, marked) == [
        (cb.CAUSE_CACHE_CONTROL, "cache_control breakpoints added (0 -> 1 breakpoints)")
    ]
    assert cb.describe_changes(marked, plain)[0][1].startswith("cache_control breakpoints removed")
    assert cb.describe_changes(marked, marked) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"system": ["not a block"]},
        {"tools": ["Read"]},
        {"tools": [{"name": 3}]},
        {"cache_control": [{"ttl": 5}]},
        {"cache_edits": ["x"]},
        {"betas": [1]},
        {"system": [{"type": "text", "text": "a", "cache_control": "yes"}]},
    ],
)
def test_malformed_inputs_raise_value_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        cb.fingerprint(**kwargs)


# -- explanations -------------------------------------------------------------------------------


def test_no_break_when_nothing_dropped_enough() -> None:
    out = pair(inputs(), inputs(), reads=(100_000, 97_000))
    assert out.finding is None and not out.baseline_reset


def test_model_change() -> None:
    found = finding_of(pair(inputs(), inputs(model="claude-opus-4-6")))
    assert found.causes == (cb.CAUSE_MODEL,)
    assert found.reasons == ("model changed: claude-sonnet-4-5 -> claude-opus-4-6",)
    assert found.previous_cache_read == 100_000 and found.cache_read == 10_000
    assert found.dropped_tokens == 90_000
    assert "fell from 100,000 to 10,000 tokens" in found.explanation


def test_system_change_reports_size_delta_and_block() -> None:
    longer = [SYSTEM[0], {**SYSTEM[1], "text": SYSTEM[1]["text"] + "x" * 400}]
    found = finding_of(pair(inputs(), inputs(system=longer)))
    assert found.causes == (cb.CAUSE_SYSTEM,)
    (reason,) = found.reasons
    old_chars = sum(len(b["text"]) for b in SYSTEM)
    assert f"{old_chars:,} -> {old_chars + 400:,} characters" in reason
    assert "(+400, about +100 tokens)" in reason
    assert "block 2 of 2 differs" in reason


def test_system_string_shrinks() -> None:
    found = finding_of(pair(inputs(system="a" * 1000), inputs(system="a" * 600)))
    assert found.reasons == (
        "system prompt changed: 1,000 -> 600 characters (-400, about -100 tokens)",
    )


def test_tools_added_and_removed_by_name() -> None:
    new_tools = [TOOLS[0], {"name": "WebFetch"}, {"name": "Grep"}]
    found = finding_of(pair(inputs(), inputs(tools=new_tools)))
    assert found.causes == (cb.CAUSE_TOOLS,)
    assert found.reasons == ("tools added: WebFetch, Grep", "tools removed: Bash")


def test_tool_definition_and_order_changes() -> None:
    edited = [TOOLS[0], {**TOOLS[1], "description": "run a shell command"}]
    found = finding_of(pair(inputs(), inputs(tools=edited)))
    assert found.reasons == ("tool definitions changed: Bash",)
    found = finding_of(pair(inputs(), inputs(tools=list(reversed(TOOLS)))))
    assert found.reasons == ("tool order changed",)


def test_many_tools_are_abbreviated() -> None:
    many = TOOLS + [{"name": f"mcp_{i}"} for i in range(15)]
    (reason,) = finding_of(pair(inputs(), inputs(tools=many))).reasons
    assert reason.startswith("tools added: mcp_0, mcp_1,")
    assert reason.endswith("and 5 more")


def test_cache_control_ttl_and_scope() -> None:
    one_hour = [SYSTEM[0], {**SYSTEM[1], "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    found = finding_of(pair(inputs(), inputs(system=one_hour)))
    assert found.causes == (cb.CAUSE_CACHE_CONTROL,)
    assert found.reasons == ("cache_control TTL changed: 5m -> 1h",)

    scoped = [{**SYSTEM[0], "cache_control": {"type": "ephemeral", "scope": "global"}}, SYSTEM[1]]
    found = finding_of(pair(inputs(), inputs(system=scoped)))
    assert found.reasons == ("cache_control scope changed: default -> default/global",)


def test_cache_control_breakpoints_moved_via_explicit_layout() -> None:
    a = inputs(cache_control=[{"where": "messages[-2]"}])
    b = inputs(cache_control=[{"where": "messages[-3]"}, {"where": "tools[-1]"}])
    found = finding_of(pair(a, b))
    assert found.reasons == ("cache_control breakpoints moved (2 -> 3 breakpoints)",)


def test_betas_thinking_effort() -> None:
    found = finding_of(
        pair(
            inputs(),
            inputs(betas=["b2"], thinking={"type": "disabled"}, effort="low"),
        )
    )
    assert found.causes == (cb.CAUSE_BETAS, cb.CAUSE_THINKING, cb.CAUSE_EFFORT)
    assert found.reasons == (
        "betas changed: added b2; removed b1",
        "thinking changed: enabled (budget 8,000) -> disabled",
        "effort changed: high -> low",
    )
    found = finding_of(
        pair(inputs(), inputs(thinking={"type": "enabled", "budget_tokens": 8000, "x": 1}))
    )
    assert found.reasons == ("thinking config changed",)


def test_idle_gap_over_five_minutes_is_possible_ttl_expiry() -> None:
    found = finding_of(pair(inputs(), inputs(), gap=6 * 60))
    assert found.causes == (cb.CAUSE_TTL_EXPIRY,)
    (reason,) = found.reasons
    assert reason.startswith("possible TTL expiry: 6.0 minutes")
    assert found.idle_seconds == pytest.approx(6 * 60)


def test_gap_is_measured_to_the_request_not_the_response() -> None:
    # The request went out 4 minutes after the previous response; the response came back
    # 2 minutes later. The cache was read at request time: within the 5-minute TTL.
    det = cb.CacheBreakDetector()
    det.before("main", inputs(), T0)
    det.after("main", 100_000, T0 + 1)
    det.before("main", inputs(), T0 + 1 + 240)
    found = det.after("main", 10_000, T0 + 1 + 360).finding
    assert found is not None and found.causes == (cb.CAUSE_SERVER_SIDE,)


def test_one_hour_ttl_does_not_expire_after_ten_minutes() -> None:
    one_hour = [SYSTEM[0], {**SYSTEM[1], "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    found = finding_of(pair(inputs(system=one_hour), inputs(system=one_hour), gap=600))
    assert found.causes == (cb.CAUSE_SERVER_SIDE,)
    found = finding_of(pair(inputs(system=one_hour), inputs(system=one_hour), gap=3700))
    assert found.causes == (cb.CAUSE_TTL_EXPIRY,)
    assert "(cache TTL 1h)" in found.reasons[0]


def test_change_and_gap_are_both_reported() -> None:
    found = finding_of(pair(inputs(), inputs(model="other"), gap=900))
    assert found.causes == (cb.CAUSE_MODEL, cb.CAUSE_TTL_EXPIRY)


def test_nothing_changed_is_likely_server_side() -> None:
    found = finding_of(pair(inputs(), inputs()))
    assert found.causes == (cb.CAUSE_SERVER_SIDE,)
    assert found.reasons[0].startswith("likely server-side: no cache-key input changed")


def test_without_before_reports_the_cause_is_unattributed() -> None:
    det = cb.CacheBreakDetector()
    det.after("main", 50_000, T0)
    found = det.after("main", 1_000, T0 + 5).finding
    assert found is not None and found.causes == (cb.CAUSE_SERVER_SIDE,)
    assert "no cache-key inputs were reported" in found.reasons[0]


def test_omitted_inputs_are_inherited_not_changed() -> None:
    # The second report leaves tools and system out: they did not change.
    found = finding_of(pair(inputs(), cb.fingerprint(model="claude-sonnet-4-5")))
    assert found.causes == (cb.CAUSE_SERVER_SIDE,)


def test_baseline_follows_the_latest_response() -> None:
    det = cb.CacheBreakDetector()
    for i, reads in enumerate([10_000, 50_000, 120_000]):
        det.before("main", inputs(), T0 + i)
        assert det.after("main", reads, T0 + i).finding is None
    det.before("main", inputs(), T0 + 10)
    found = det.after("main", 60_000, T0 + 11).finding
    assert found is not None and found.previous_cache_read == 120_000
    assert det.breaks == [found]


# -- query sources ------------------------------------------------------------------------------


def test_query_sources_are_tracked_separately() -> None:
    det = cb.CacheBreakDetector()
    det.before("main", inputs(), T0)
    det.after("main", 100_000, T0)
    # A sub-agent with a small cache is not compared against the main thread's reads.
    det.before("agent-1", inputs(tools=[TOOLS[0]]), T0 + 1)
    assert det.after("agent-1", 5_000, T0 + 2).finding is None
    # Nor does its different tool list count as a change for the main thread.
    det.before("main", inputs(), T0 + 3)
    assert det.after("main", 101_000, T0 + 4).finding is None
    # 1,000 fewer tokens is 20% of the sub-agent's reads but not more than 2,000 tokens.
    det.before("agent-1", inputs(tools=TOOLS), T0 + 5)
    assert det.after("agent-1", 4_000, T0 + 6).finding is None
    assert det.sources == ["main", "agent-1"]


def test_sub_agent_break_names_its_source() -> None:
    det = cb.CacheBreakDetector()
    det.before("agent-7", inputs(), T0)
    det.after("agent-7", 40_000, T0)
    det.before("agent-7", inputs(tools=[TOOLS[0]]), T0 + 1)
    found = det.after("agent-7", 1_000, T0 + 2).finding
    assert found is not None and found.query_source == "agent-7"
    assert "for agent-7" in found.explanation
    assert found.reasons == ("tools removed: Bash",)


def test_tracked_sources_and_breaks_are_bounded() -> None:
    det = cb.CacheBreakDetector(config=cb.DetectorConfig(max_sources=3, max_breaks=2))
    for i in range(5):
        det.after(f"s{i}", 10_000, T0)
    assert det.sources == ["s2", "s3", "s4"]
    for i in range(4):
        det.after("s4", 100_000, T0 + i)
        det.after("s4", 10_000, T0 + i)
    assert len(det.breaks) == 2


# -- resets -------------------------------------------------------------------------------------


def _boundary(subtype: str) -> Record:
    return record_from_dict({"type": "system", "subtype": subtype, "uuid": subtype})


def _user(uid: str) -> Record:
    return record_from_dict(user("hi", uuid=uid))


@pytest.mark.parametrize("subtype", ["compact_boundary", "microcompact_boundary"])
def test_compaction_resets_the_baseline_once(subtype: str) -> None:
    det = cb.CacheBreakDetector()
    records = [_user("a")]
    det.sync(records)
    det.before("main", inputs(), T0)
    det.after("main", 150_000, T0)
    records += [_boundary(subtype), _user("b")]
    assert det.sync(records) == 1
    det.before("main", inputs(), T0 + 10)
    out = det.after("main", 3_000, T0 + 11)
    assert out.finding is None and out.baseline_reset
    # The reset is consumed: the next drop from the new baseline is a break again.
    det.before("main", inputs(), T0 + 12)
    det.after("main", 40_000, T0 + 13)
    det.before("main", inputs(), T0 + 14)
    found = finding_of(det.after("main", 2_000, T0 + 15))
    assert (found.previous_cache_read, found.cache_read) == (40_000, 2_000)


def test_reset_applies_to_every_source_with_a_baseline() -> None:
    det = cb.CacheBreakDetector()
    det.after("main", 100_000, T0)
    det.after("agent", 100_000, T0)
    # A history shorter than the one seen before was rewritten: a reset.
    det.sync([_user("a"), _user("b")])
    assert det.sync([_user("a")]) == 1
    assert det.after("main", 1_000, T0 + 1).baseline_reset
    assert det.after("agent", 1_000, T0 + 1).baseline_reset


def test_sync_reads_only_the_tail_and_detects_rewrites() -> None:
    det = cb.CacheBreakDetector()
    records = [_user("a"), _boundary("compact_boundary")]
    assert det.sync(records) == 1
    assert det.sync(records) == 0
    records.append(_user("b"))
    assert det.sync(records) == 0
    assert det.sync(records[:1]) == 1  # history got shorter: treat as a reset


def test_new_cache_deletion_resets_pinned_ones_do_not() -> None:
    det = cb.CacheBreakDetector()
    edit1 = {"type": "delete", "cache_reference": "toolu_1"}
    edit2 = {"type": "delete", "cache_reference": "toolu_2"}
    det.before("main", inputs(cache_edits=[]), T0)
    det.after("main", 100_000, T0)
    det.before("main", inputs(cache_edits=[edit1]), T0 + 1)
    assert det.after("main", 80_000, T0 + 2).baseline_reset
    # The same (pinned) edit re-sent with the next request is not a new deletion.
    det.before("main", inputs(cache_edits=[edit1]), T0 + 3)
    found = det.after("main", 20_000, T0 + 4).finding
    assert found is not None
    # A retried request keeps the deletion of the attempt it replaced.
    det.before("main", inputs(cache_edits=[edit1, edit2]), T0 + 5)
    det.before("main", inputs(cache_edits=[edit1, edit2]), T0 + 6)
    assert det.after("main", 1_000, T0 + 7).baseline_reset
