"""Unit tests of the pure microcompact core: each rule of docs/microcompact.md and its edges."""

from __future__ import annotations

import itertools
import json
from typing import Any

import msgspec
import pytest

from compactd.core import microcompact as mc
from compactd.core.normalize import CLEARED_TOOL_RESULT_PLACEHOLDER
from compactd.core.tokens import pad
from compactd.engine.session import Session
from compactd.services.store import SessionMeta
from compactd.transcript.model import Entry, record_from_dict
from tests.helpers import (
    MODEL,
    assistant,
    iso,
    text_block,
    to_entries,
    tool_call,
    tool_result,
    user,
)

NOW = 1_800_000_000.0
_ids = itertools.count(1)


def _ts(seconds_ago: float) -> str:
    return iso(NOW - seconds_ago)


def _text_of(raw_tokens: int) -> str:
    """A string the estimator counts as exactly ``raw_tokens`` raw tokens (4 chars each)."""
    return "x" * (4 * raw_tokens)


def _call(
    name: str,
    content: Any,
    *,
    inp: dict[str, Any] | None = None,
    ago: float = 10.0,
    tid: str | None = None,
) -> list[dict[str, Any]]:
    """An assistant tool call and the user entry with its result."""
    tid = tid or f"toolu_{next(_ids):04d}"
    n = next(_ids)
    stamp = _ts(ago)
    return [
        tool_call(tid, name, inp, uuid=f"a{n}", msg_id=f"msg_{n}", model=MODEL, timestamp=stamp),
        tool_result(tid, content, uuid=f"u{n}", timestamp=stamp),
    ]


def _session(sizes: list[int], name: str = "Read", ago: float = 10.0) -> list[Entry]:
    """A conversation with one tool result per size (raw tokens), oldest first."""
    dicts = [user("go", uuid=f"p{next(_ids)}", timestamp=_ts(ago + 1))]
    for size in sizes:
        dicts += _call(name, _text_of(size), inp={"file_path": f"/src/f{size}.py"}, ago=ago)
    return to_entries(dicts)


def _result_ids(entries: list[Entry]) -> list[str]:
    return [r.tool_use_id for r in mc.clearable_results(entries, mc.MicroConfig())]


PLACEHOLDER_RAW = (len(CLEARED_TOOL_RESULT_PLACEHOLDER) + 2) // 4


# -- the allowlist and the result scan ----------------------------------------------------------


def test_default_allowlist_is_the_regenerable_tools() -> None:
    assert {"Read", "Bash", "Grep", "Glob", "WebFetch", "WebSearch", "Edit", "Write"} <= (
        mc.MicroConfig().clearable_tools
    )
    for never in ("AskUserQuestion", "TodoWrite", "Task", "NotebookEdit", "NotebookRead"):
        assert never not in mc.MicroConfig().clearable_tools


def test_clearable_results_keeps_order_sizes_and_read_paths() -> None:
    entries = to_entries(
        _call("Read", _text_of(100), inp={"file_path": "/a.py"}, tid="t1")
        + _call("TodoWrite", _text_of(5000), tid="t2")
        + _call("Bash", _text_of(200), inp={"command": "ls"}, tid="t3")
    )
    results = mc.clearable_results(entries)
    assert [(r.tool_use_id, r.tool_name, r.raw_tokens, r.file_path) for r in results] == [
        ("t1", "Read", 100, "/a.py"),
        ("t3", "Bash", 200, None),
    ]
    assert [r.tool_use_id for r in mc.clearable_results(entries, cleared={"t1"})] == ["t3"]


def test_result_without_its_tool_use_is_not_clearable() -> None:
    orphan = _call("Read", _text_of(50_000), tid="t9")[1:]
    assert mc.clearable_results(to_entries(orphan)) == []


def test_placeholder_estimate_matches_the_token_module() -> None:
    assert mc.result_saving(mc.ToolResult("t", "Read", 100)) == 100 - PLACEHOLDER_RAW
    assert mc.result_saving(mc.ToolResult("t", "Read", 2)) == 0


# -- count-based --------------------------------------------------------------------------------


def _min_savings_session(old_raw: int) -> list[Entry]:
    # Three recent results of 10_000 raw tokens fill the protected window exactly
    # (pad(30_000) == 40_000), so the one old result is always a candidate.
    return _session([old_raw + PLACEHOLDER_RAW, 10_000, 10_000, 10_000])


def test_count_clears_when_saving_reaches_exactly_the_minimum() -> None:
    # The saving is the plain estimate (docs/microcompact.md#what-a-clearing-saves).
    entries = _min_savings_session(20_000)
    plan = mc.plan_count(entries)
    assert plan.tokens_saved == 20_000
    assert plan.cleared_ids == _result_ids(entries)[:1]
    assert plan.strategy == "count" and plan.reason is None


def test_count_does_nothing_just_below_the_minimum() -> None:
    plan = mc.plan_count(_min_savings_session(19_999))
    assert plan.cleared == () and plan.tokens_saved == 0
    assert plan.reason is not None and "19,999" in plan.reason and "20,000" in plan.reason


def test_count_always_keeps_the_last_three() -> None:
    huge = 60_000
    three = _session([huge, huge, huge])
    assert mc.plan_count(three).cleared == ()
    # Even with no protected window and no minimum, the last three stay.
    loose = mc.MicroConfig(protected_tokens=0, min_savings=0)
    four = _session([huge, huge, huge, huge])
    plan = mc.plan_count(four, loose)
    assert plan.cleared_ids == _result_ids(four)[:1]
    assert mc.plan_count(three, loose).cleared == ()


def test_count_keep_recent_is_configurable() -> None:
    entries = _session([30_000] * 4)
    plan = mc.plan_count(entries, mc.MicroConfig(keep_recent=1, protected_tokens=0))
    assert plan.cleared_ids == _result_ids(entries)[:3]


def test_count_protects_the_newest_40000_tokens_of_tool_results() -> None:
    # Ten results of pad(7_500) == 10_000 tokens: clearing stops once what is left fits in
    # the window, i.e. after six, leaving 40_000 tokens of the newest four.
    entries = _session([7_500] * 10)
    plan = mc.plan_count(entries)
    ids = _result_ids(entries)
    assert plan.cleared_ids == ids[:6]
    assert plan.tokens_saved == 6 * (7_500 - PLACEHOLDER_RAW)
    kept = mc.clearable_results(entries, cleared=set(plan.cleared_ids))
    assert pad(sum(r.raw_tokens for r in kept)) == 40_000


def test_count_protected_window_is_configurable() -> None:
    entries = _session([7_500] * 10)
    plan = mc.plan_count(entries, mc.MicroConfig(protected_tokens=20_000, min_savings=0))
    assert plan.cleared_ids == _result_ids(entries)[:7]  # the last three are kept anyway


def test_count_leaves_non_clearable_tools_alone_and_uncounted() -> None:
    dicts: list[dict[str, Any]] = []
    for name in ("TodoWrite", "AskUserQuestion", "NotebookEdit", "Task"):
        dicts += _call(name, _text_of(50_000))
    dicts += _call("Read", _text_of(4_000)) + _call("Read", _text_of(4_000))
    dicts += _call("Read", _text_of(4_000)) + _call("Read", _text_of(4_000))
    entries = to_entries(dicts)
    # 200K tokens of non-clearable output do not push the Read results out of the window.
    plan = mc.plan_count(entries, mc.MicroConfig(min_savings=0))
    assert plan.cleared == ()
    plan = mc.plan_count(entries, mc.MicroConfig(min_savings=0, protected_tokens=0))
    assert [r.tool_name for r in plan.cleared] == ["Read"]


def test_count_allowlist_is_configurable() -> None:
    entries = _session([30_000] * 5, name="TodoWrite")
    assert mc.plan_count(entries).cleared == ()
    plan = mc.plan_count(entries, mc.MicroConfig(clearable_tools=frozenset({"TodoWrite"})))
    assert len(plan.cleared) == 2


def test_second_count_call_is_a_no_op() -> None:
    entries = _session([7_500] * 10)
    first = mc.plan_count(entries)
    assert first.cleared
    second = mc.plan_count(entries, cleared=set(first.cleared_ids))
    assert second.cleared == () and second.tokens_saved == 0
    # Cleared results are not counted again: the rest fits in the window.
    assert "protected" in (second.reason or "")


def test_results_smaller_than_the_placeholder_are_never_cleared() -> None:
    entries = _session([1, 2, 50_000, 50_000, 10, 10, 10])
    plan = mc.plan_count(entries, mc.MicroConfig(min_savings=0, protected_tokens=0))
    ids = _result_ids(entries)
    assert plan.cleared_ids == ids[2:4]


def test_images_and_documents_inside_tool_results_count_and_are_cleared() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A"}}
    doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}}
    content = [{"type": "text", "text": _text_of(5_000)}] + [image] * 5 + [doc] * 3
    dicts = _call("Read", content, inp={"file_path": "/shot.png"}, tid="img")
    for _ in range(3):
        dicts += _call("Bash", _text_of(100))
    entries = to_entries(dicts)
    [first, *_] = mc.clearable_results(entries)
    assert first.raw_tokens == 5_000 + 8 * 2_000
    plan = mc.plan_count(entries, mc.MicroConfig(protected_tokens=0))
    assert plan.cleared_ids == ["img"]
    assert plan.tokens_saved == 21_000 - PLACEHOLDER_RAW
    assert plan.dropped_paths == ("/shot.png",)


def test_only_files_whose_latest_read_or_edit_is_cleared_leave_the_file_state() -> None:
    dicts: list[dict[str, Any]] = []
    dicts += _call("Read", _text_of(20_000), inp={"file_path": "/a.py"})
    dicts += _call("Read", _text_of(20_000), inp={"file_path": "/b.py"})
    dicts += _call("Edit", "ok", inp={"file_path": "/b.py"})  # too small to clear
    dicts += _call("Read", _text_of(20_000), inp={"file_path": "/c.py"})
    dicts += _call("Read", _text_of(10), inp={"file_path": "/a.py"})  # read again, kept
    dicts += _call("Bash", _text_of(10)) + _call("Bash", _text_of(10))
    plan = mc.plan_count(to_entries(dicts), mc.MicroConfig(protected_tokens=0))
    assert [r.file_path for r in plan.cleared] == ["/a.py", "/b.py", "/c.py"]
    assert plan.dropped_paths == ("/c.py",)


# -- time-based ---------------------------------------------------------------------------------


def _idle_session(minutes: float, results: int = 8, size: int = 500) -> list[Entry]:
    return _session([size] * results, ago=minutes * 60)


@pytest.mark.parametrize(("minutes", "expected"), [(59, "count"), (60, "count"), (61, "time")])
def test_default_strategy_by_idle_gap(minutes: float, expected: str) -> None:
    assert mc.choose_strategy(_idle_session(minutes), NOW) == expected
    assert mc.is_idle(_idle_session(minutes), NOW) is (expected == "time")


def test_time_based_at_61_minutes_keeps_only_the_five_most_recent() -> None:
    entries = _idle_session(61, results=8)
    plan = mc.plan_time(entries, NOW)
    assert plan.strategy == "time"
    assert plan.cleared_ids == _result_ids(entries)[:3]
    # No minimum saving applies once the cache is cold.
    assert plan.tokens_saved == 3 * (500 - PLACEHOLDER_RAW) < mc.MIN_SAVINGS


def test_time_based_at_59_minutes_does_nothing() -> None:
    plan = mc.plan_time(_idle_session(59), NOW)
    assert plan.cleared == ()
    assert plan.reason is not None and "59.0 min" in plan.reason


def test_time_based_thresholds_are_configurable() -> None:
    entries = _idle_session(10, results=8)
    config = mc.MicroConfig(idle_minutes=5, idle_keep_recent=2)
    assert mc.choose_strategy(entries, NOW, config) == "time"
    assert mc.plan_time(entries, NOW, config).cleared_ids == _result_ids(entries)[:6]


def test_time_based_skips_already_cleared_results() -> None:
    entries = _idle_session(120, results=8)
    ids = _result_ids(entries)
    plan = mc.plan_time(entries, NOW, cleared=set(ids[:2]))
    assert plan.cleared_ids == [ids[2]]
    assert mc.plan_time(entries, NOW, cleared=set(ids[:3])).cleared == ()


def test_idle_gap_uses_the_last_real_assistant_response() -> None:
    entries = _idle_session(90)
    synthetic = {
        "type": "assistant",
        "uuid": "err",
        "timestamp": _ts(5),
        "isApiErrorMessage": True,
        "message": {"role": "assistant", "model": "<synthetic>", "content": "API Error"},
    }
    later_user = {
        "type": "user",
        "uuid": "late",
        "timestamp": _ts(1),
        "message": {"role": "user", "content": "hello again"},
    }
    entries += to_entries([synthetic, later_user])
    gap = mc.idle_gap_seconds(entries, NOW)
    assert gap is not None and abs(gap - 90 * 60) < 1e-6
    assert mc.idle_gap_seconds(to_entries([later_user]), NOW) is None
    assert mc.plan_time(to_entries([later_user]), NOW).reason == (
        "no assistant response with a timestamp yet"
    )


def test_parse_timestamp_forms() -> None:
    assert mc.parse_timestamp("2027-01-15T08:00:00.000Z") == mc.parse_timestamp(
        "2027-01-15T08:00:00+00:00"
    )
    assert mc.parse_timestamp("2027-01-15T08:00:00") == mc.parse_timestamp("2027-01-15T08:00:00Z")
    assert mc.parse_timestamp("yesterday") is None
    assert mc.parse_timestamp(None) is None


# -- cached (cache_edits) -----------------------------------------------------------------------


def _results(n: int, start: int = 0) -> list[mc.ToolResult]:
    return [mc.ToolResult(f"t{i:02d}", "Read", 1_000) for i in range(start, start + n)]


def test_cached_11_active_tools_queue_nothing() -> None:
    step = mc.advance_cached(mc.CachedState(), _results(11), message_index=4)
    assert step.deleted == ()
    assert step.state.tool_order == tuple(f"t{i:02d}" for i in range(11))
    assert step.state.registered_tools == frozenset(step.state.tool_order)
    assert step.state.pinned_edits == () and step.state.deleted_refs == frozenset()
    assert step.reason == "11 active tool results; cache edits start at 12"


def test_cached_12_active_tools_delete_all_but_the_most_recent() -> None:
    step = mc.advance_cached(mc.CachedState(), _results(12), message_index=7)
    assert step.deleted_ids == [f"t{i:02d}" for i in range(9)]
    assert step.state.active == ["t09", "t10", "t11"]
    assert step.tokens_saved == 9 * (1_000 - PLACEHOLDER_RAW)
    assert step.state.pinned_edits == (
        mc.PinnedEdit(message_index=7, tool_use_ids=tuple(step.deleted_ids)),
    )


def test_cached_13_active_tools_delete_ten() -> None:
    step = mc.advance_cached(mc.CachedState(), _results(13), message_index=1)
    assert len(step.deleted) == 10
    assert step.state.active == ["t10", "t11", "t12"]


def test_cached_rounds_pin_edits_and_never_delete_twice() -> None:
    first = mc.advance_cached(mc.CachedState(), _results(12), message_index=3)
    # Three survivors + eight new = 11 active: below the trigger.
    results = _results(20)
    second = mc.advance_cached(first.state, results, message_index=9)
    assert second.deleted == () and second.state.pinned_edits == first.state.pinned_edits
    third = mc.advance_cached(second.state, _results(21), message_index=11)
    assert third.deleted_ids == [f"t{i:02d}" for i in range(9, 18)]
    assert [p.message_index for p in third.state.pinned_edits] == [3, 11]
    assert set(first.deleted_ids).isdisjoint(third.deleted_ids)
    blocks = mc.cache_edit_blocks(third.state)
    assert blocks[0] == {
        "messageIndex": 3,
        "block": {
            "type": "cache_edits",
            "edits": [{"type": "delete", "cache_reference": f"t{i:02d}"} for i in range(9)],
        },
    }
    assert blocks[1]["messageIndex"] == 11 and len(blocks[1]["block"]["edits"]) == 9


def test_cached_trigger_and_keep_are_configurable() -> None:
    config = mc.MicroConfig(cached_trigger=4, cached_keep_recent=1)
    assert mc.advance_cached(mc.CachedState(), _results(3), 0, config).deleted == ()
    step = mc.advance_cached(mc.CachedState(), _results(4), 0, config)
    assert step.deleted_ids == ["t00", "t01", "t02"]


def test_cached_state_round_trips_through_json() -> None:
    state = mc.advance_cached(mc.CachedState(boundary_uuid="b1"), _results(12), 5).state
    data = msgspec.json.encode(state)
    assert json.loads(data)["toolOrder"][0] == "t00"
    assert msgspec.json.decode(data, type=mc.CachedState) == state


def test_cached_is_the_default_only_when_opted_in_and_warm() -> None:
    warm = _idle_session(3)
    cold = _idle_session(61)
    opted = mc.MicroConfig(cache_edits=True)
    assert mc.choose_strategy(warm, NOW, opted) == "cached"
    assert mc.choose_strategy(warm, NOW) == "count"
    assert mc.choose_strategy(cold, NOW, opted) == "time"


def test_plan_cached_is_a_round_as_a_plan_and_nothing_while_the_cache_is_cold() -> None:
    warm = _idle_session(3, results=12, size=1_000)
    plan = mc.plan_cached(warm, NOW, mc.CachedState(), 4)
    step = mc.advance_cached(mc.CachedState(), mc.clearable_results(warm), 4)
    assert plan.strategy == "cached" and plan.cached_state == step.state
    assert (plan.cleared, plan.tokens_saved) == (step.deleted, step.tokens_saved)
    # The cache is edited, the messages are not: nothing shows as a placeholder.
    assert plan.cleared_ids == step.deleted_ids and plan.compacted_ids == []
    cold = mc.plan_cached(_idle_session(61, results=12), NOW, mc.CachedState(), 4)
    assert cold.cleared == () and cold.cached_state is None
    assert cold.reason is not None and "prompt cache is cold" in cold.reason


# -- API-native context management --------------------------------------------------------------


def test_context_management_lists_thinking_first_and_mirrors_the_rules() -> None:
    cm = mc.context_management(
        mc.MicroConfig(),
        thinking=True,
        idle=False,
        trigger_tokens=147_000,
        exclude_tools=["TodoWrite", "Read", "AskUserQuestion"],
    )
    assert [e["type"] for e in cm["edits"]] == [mc.CLEAR_THINKING_EDIT, mc.CLEAR_TOOL_USES_EDIT]
    assert cm["edits"][0]["keep"] == "all"
    tool = cm["edits"][1]
    assert tool["trigger"] == {"type": "input_tokens", "value": 147_000}
    assert tool["keep"] == {"type": "tool_uses", "value": 3}
    assert tool["clear_at_least"] == {"type": "input_tokens", "value": 20_000}
    assert tool["exclude_tools"] == ["AskUserQuestion", "TodoWrite"]
    assert tool["clear_tool_inputs"] is False
    assert mc.API_CONTEXT_MANAGEMENT_BETA == "context-management-2025-06-27"


def test_context_management_without_thinking_and_when_idle() -> None:
    config = mc.MicroConfig(keep_recent=5, min_savings=1_000, api_clear_tool_inputs=True)
    plain = mc.context_management(
        config, thinking=False, idle=False, trigger_tokens=9, exclude_tools=[]
    )
    assert [e["type"] for e in plain["edits"]] == [mc.CLEAR_TOOL_USES_EDIT]
    assert plain["edits"][0]["keep"]["value"] == 5
    assert plain["edits"][0]["clear_tool_inputs"] is True
    idle = mc.context_management(
        config, thinking=True, idle=True, trigger_tokens=9, exclude_tools=[]
    )
    assert idle["edits"][0]["keep"] == {"type": "thinking_turns", "value": 1}


def test_thinking_enabled_reads_the_request_config() -> None:
    assert mc.thinking_enabled({"type": "enabled", "budget_tokens": 1024})
    assert mc.thinking_enabled({"type": "adaptive"})
    assert not mc.thinking_enabled({"type": "disabled"})
    assert not mc.thinking_enabled(None)


# -- the session applies a boundary's saving in order -------------------------------------------


def _usage_response(uid: str, total: int) -> dict[str, Any]:
    return assistant(
        [text_block("ok")],
        uuid=uid,
        msg_id=f"msg_{uid}",
        model=MODEL,
        usage={"input_tokens": total - 10, "output_tokens": 10},
    )


def _mc_boundary(saved: int, ids: list[str]) -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "microcompact_boundary",
        "uuid": f"mcb{next(_ids)}",
        "microcompactMetadata": {"tokensSaved": saved, "compactedToolIds": ids},
    }


def test_session_subtracts_a_boundary_saving_until_the_next_usage() -> None:
    meta = SessionMeta(session_id="s", cwd="/", model="claude-sonnet-4-5")
    records = [record_from_dict(_usage_response("r1", 100_000))]
    records.append(record_from_dict(_mc_boundary(30_000, ["t1"])))
    session = Session(meta=meta, transcript_path="/dev/null", records=list(records))
    session.rebuild()
    assert session.counter.current.tokens == 70_000
    assert session.cleared_tool_ids == {"t1"}
    # A later response's usage already reflects the clearing: the saving no longer applies.
    session.extend([record_from_dict(_usage_response("r2", 72_000))])
    assert session.counter.current.tokens == 72_000
    session.rebuild()
    assert session.counter.current.tokens == 72_000
    assert session.cleared_tool_ids == {"t1"}
