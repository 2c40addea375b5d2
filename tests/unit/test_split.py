"""Tests for compactd.core.split: rounds, safe cuts (with a property test) and PTL truncation."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactd.core.normalize import to_api_messages
from compactd.core.split import (
    TRUNCATION_MARKER,
    Round,
    adjust_cut,
    group_api_rounds,
    group_rounds,
    is_safe_cut,
    parse_prompt_too_long,
    prompt_too_long_gap,
    safe_cut_points,
    truncate_head_for_ptl,
)
from compactd.core.view import context_records, main_thread
from compactd.transcript.model import (
    Entry,
    Record,
    ToolResultBlock,
    ToolUseBlock,
    record_from_dict,
)
from tests.conftest import fixture_transcripts, load_fixture
from tests.helpers import assistant, text_block, tool_result_block, tool_use_block, user

FIXTURE_NAMES = [path.name for path in fixture_transcripts()]


# -- builders --------------------------------------------------------------------------------------


class Builder:
    """Appends transcript records with fresh uuids."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    def _add(self, obj: dict[str, Any]) -> None:
        obj.setdefault("uuid", f"u{len(self.records)}")
        self.records.append(record_from_dict(obj))

    def prompt(self, text: str = "please", **extra: Any) -> None:
        self._add(user(text, **extra))

    def results(self, *tids: str, **extra: Any) -> None:
        self._add(user([tool_result_block(t) for t in tids], **extra))

    def part(self, mid: str, *blocks: dict[str, Any], **extra: Any) -> None:
        self._add(assistant(list(blocks), msg_id=mid, **extra))

    def noise(self, kind: str = "progress") -> None:
        self._add({"type": kind, "data": {}})

    def attachment(self) -> None:
        self._add(
            {"type": "attachment", "attachment": {"type": "x"}, "rendered": [{"content": "att"}]}
        )

    @property
    def entries(self) -> list[Entry]:
        return [r.entry for r in self.records]


def _sample() -> Builder:
    b = Builder()
    b.prompt("start")  # 0
    b.part("m1", text_block("a"))  # 1
    b.part("m1", tool_use_block("t1"))  # 2
    b.results("t1")  # 3
    b.part("m1", tool_use_block("t2"))  # 4
    b.results("t2")  # 5
    b.part("m2", text_block("done"))  # 6
    b.prompt("next")  # 7
    b.noise()  # 8
    b.part("m3", tool_use_block("t3"))  # 9
    b.results("t3")  # 10
    return b


# -- rounds and cut points -------------------------------------------------------------------------


def test_group_rounds() -> None:
    rounds = group_rounds(_sample().entries)
    assert rounds == [
        Round(0, 1, None),
        Round(1, 6, "m1"),
        Round(6, 9, "m2"),
        Round(9, 11, "m3"),
    ]
    assert [len(r) for r in rounds] == [1, 5, 3, 2]


def test_group_rounds_edge_cases() -> None:
    assert group_rounds([]) == []
    b = Builder()
    b.prompt()
    b.prompt()
    assert group_rounds(b.entries) == [Round(0, 2, None)]
    b = Builder()
    b.part("m1", text_block("x"))
    b.part("m2", text_block("y"))
    assert group_rounds(b.entries) == [Round(0, 1, "m1"), Round(1, 2, "m2")]


def test_group_rounds_keeps_inline_sidechain_in_the_response() -> None:
    b = Builder()
    b.prompt()  # 0
    b.part("m1", tool_use_block("t1"))  # 1
    b.prompt("sub task", isSidechain=True)  # 2
    b.part("s1", text_block("sub answer"), isSidechain=True)  # 3
    b.part("m1", tool_use_block("t2"))  # 4
    b.results("t1", "t2")  # 5
    b.part("m2", text_block("done"))  # 6
    assert group_rounds(b.entries) == [Round(0, 1, None), Round(1, 6, "m1"), Round(6, 7, "m2")]
    assert safe_cut_points(b.entries) == [0, 1, 6, 7]


def test_safe_cut_points() -> None:
    entries = _sample().entries
    # Not inside response m1 (2..5), not between a tool use and its result (10), not before
    # a tool result (3, 5) or noise (8).
    assert safe_cut_points(entries) == [0, 1, 6, 7, 9, 11]
    assert [i for i in range(12) if is_safe_cut(entries, i)] == [0, 1, 6, 7, 9, 11]
    assert safe_cut_points([]) == [0]


def test_adjust_cut() -> None:
    entries = _sample().entries
    assert adjust_cut(entries, 4) == 1
    assert adjust_cut(entries, 4, "forward") == 6
    assert adjust_cut(entries, 8, "back") == 7
    assert adjust_cut(entries, 8, "forward") == 9
    assert adjust_cut(entries, 10, "forward") == 11
    assert adjust_cut(entries, 6) == 6
    assert adjust_cut(entries, -5) == 0
    assert adjust_cut(entries, 99, "forward") == 11
    with pytest.raises(ValueError):
        adjust_cut(entries, 3, "sideways")  # type: ignore[arg-type]


def test_cut_blocked_by_late_tool_result() -> None:
    # A result written after a later prompt still pins the cut.
    b = Builder()
    b.prompt()  # 0
    b.part("m1", tool_use_block("t1"))  # 1
    b.prompt("interjection")  # 2
    b.results("t1")  # 3
    assert safe_cut_points(b.entries) == [0, 1, 4]


# -- property test over random sessions -----------------------------------------------------------


@st.composite
def sessions(draw: st.DrawFn) -> list[Record]:
    """Random sessions: prompts, responses split over 1-3 entries, interleaved tool results."""
    b = Builder()
    tool_no = 0
    response_no = 0
    for _ in range(draw(st.integers(0, 5))):
        b.prompt()
        if draw(st.booleans()):
            b.attachment()
        for _ in range(draw(st.integers(1, 3))):
            response_no += 1
            mid = f"m{response_no}"
            tids = [f"t{tool_no + k}" for k in range(draw(st.integers(0, 3)))]
            tool_no += len(tids)
            blocks = [text_block("say")] if draw(st.booleans()) or not tids else []
            blocks += [tool_use_block(t) for t in tids]
            n_parts = draw(st.integers(1, min(3, len(blocks))))
            cuts: list[int] = []
            if n_parts > 1:
                positions = st.integers(1, len(blocks) - 1)
                size = n_parts - 1
                cuts = sorted(draw(st.lists(positions, min_size=size, max_size=size, unique=True)))
            parts = [blocks[i:j] for i, j in zip([0, *cuts], [*cuts, len(blocks)], strict=True)]
            interleave = draw(st.booleans())
            pending: list[str] = []
            for k, part in enumerate(parts):
                if k > 0:
                    # Entries that look like turns but sit inside this response: a meta user
                    # message, or an inline sub-agent run (its own prompt, response and tool).
                    extra = draw(st.sampled_from(["none", "none", "meta", "sidechain"]))
                    if extra == "meta":
                        b.prompt("hook feedback", isMeta=True)
                    elif extra == "sidechain":
                        response_no += 1
                        side_tool = f"s{tool_no}"
                        tool_no += 1
                        b.prompt("sub task", isSidechain=True)
                        b.part(f"m{response_no}", tool_use_block(side_tool), isSidechain=True)
                        b.results(side_tool, isSidechain=True)
                b.part(mid, *part)
                ids = [blk["id"] for blk in part if blk["type"] == "tool_use"]
                together = draw(st.booleans())
                if interleave:
                    if ids and together:
                        b.results(*ids)
                    else:
                        for t in ids:
                            b.results(t)
                else:
                    pending += ids
                if draw(st.integers(0, 4)) == 0:
                    b.noise()
            for t in draw(st.permutations(pending)):
                b.results(t)
    return b.records


def _ids(entries: list[Entry]) -> tuple[set[str], set[str], set[str]]:
    mids = {e.message_id for e in entries if e.type == "assistant" and e.message_id}
    uses = {b.id for e in entries for b in e.blocks if isinstance(b, ToolUseBlock)}
    results = {b.tool_use_id for e in entries for b in e.blocks if isinstance(b, ToolResultBlock)}
    return mids, uses, results


@settings(max_examples=300, deadline=None)
@given(records=sessions(), data=st.data())
def test_adjust_cut_never_breaks_pairs(records: list[Record], data: st.DataObject) -> None:
    entries = [r.entry for r in records]
    n = len(entries)
    pivot = data.draw(st.integers(0, n), label="pivot")
    direction: Literal["back", "forward"] = "forward" if data.draw(st.booleans()) else "back"
    cut = adjust_cut(entries, pivot, direction)
    assert (cut <= pivot) if direction == "back" else (cut >= pivot)
    assert cut in safe_cut_points(entries)
    before, after = entries[:cut], entries[cut:]
    assert before + after == entries
    mids_b, uses_b, res_b = _ids(before)
    mids_a, uses_a, res_a = _ids(after)
    assert not (mids_b & mids_a), "a response was split"
    assert uses_b == res_b, "orphan before the cut"
    assert uses_a == res_a, "orphan after the cut"
    # Each side normalizes without losing a single main-thread tool call to orphan repair.
    for side in (records[:cut], records[cut:]):
        msgs = to_api_messages(side)
        kept = sum(1 for m in msgs for blk in m["content"] if blk["type"] == "tool_use")
        assert kept == len(_ids([r.entry for r in main_thread(side)])[1])


@settings(max_examples=200, deadline=None)
@given(records=sessions())
def test_rounds_partition_and_keep_responses_whole(records: list[Record]) -> None:
    entries = [r.entry for r in records]
    rounds = group_rounds(entries)
    covered = [i for r in rounds for i in range(r.start, r.end)]
    assert covered == list(range(len(entries)))
    for r in rounds:
        assert len(r) > 0
        if r.start > 0:
            assert r.start in safe_cut_points(entries)
    owner: dict[str, int] = {}
    for k, r in enumerate(rounds):
        for e in entries[r.start : r.end]:
            if e.type == "assistant" and e.message_id:
                assert owner.setdefault(e.message_id, k) == k


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_cut_points_are_safe(name: str) -> None:
    records = main_thread(context_records(load_fixture(name)))
    entries = [r.entry for r in records]
    points = safe_cut_points(entries)
    assert points[0] == 0 and points[-1] == len(entries)
    for cut in points:
        mids_b, uses_b, res_b = _ids(entries[:cut])
        mids_a, uses_a, res_a = _ids(entries[cut:])
        assert not (mids_b & mids_a)
        assert not (uses_b & res_a) and not (res_b & uses_a)


# -- prompt too long -------------------------------------------------------------------------------


def test_parse_prompt_too_long() -> None:
    msg = "prompt is too long: 219898 tokens > 200000 maximum"
    assert parse_prompt_too_long(msg) == (219_898, 200_000)
    wrapped = (
        'Error code: 400 - {"error": {"message": "Prompt is too long: 1,000 tokens > 900 maximum"}}'
    )
    assert parse_prompt_too_long(wrapped) == (1000, 900)
    assert prompt_too_long_gap(msg) == 19_898
    assert parse_prompt_too_long("overloaded") is None
    assert prompt_too_long_gap("overloaded") is None


def _u(t: str) -> dict[str, Any]:
    return {"role": "user", "content": [text_block(t)]}


def _a(t: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [text_block(t)]}


def _conversation(rounds: int) -> list[dict[str, Any]]:
    msgs = [_u("u0")]
    for k in range(1, rounds + 1):
        msgs += [_a(f"a{k}"), _u(f"u{k}")]
    return msgs


def _size(_: dict[str, Any]) -> int:
    return 100


def _texts(msgs: list[dict[str, Any]] | None) -> list[str]:
    assert msgs is not None
    return [m["content"][0]["text"] for m in msgs]


def test_group_api_rounds() -> None:
    groups = group_api_rounds(_conversation(2))
    assert [[m["content"][0]["text"] for m in g] for g in groups] == [
        ["u0"],
        ["a1", "u1"],
        ["a2", "u2"],
    ]


def test_ptl_gap_is_covered() -> None:
    msgs = _conversation(5)  # groups: [u0] [a1 u1] ... [a5 u5]
    # 250 tokens over: [u0] is 100, [a1 u1] 200 -> two groups cover it.
    out = truncate_head_for_ptl(msgs, 250, _size)
    assert _texts(out) == [TRUNCATION_MARKER, "a2", "u2", "a3", "u3", "a4", "u4", "a5", "u5"]
    # A gap of exactly one group's worth drops one group (u0) and needs a marker.
    out = truncate_head_for_ptl(msgs, 100, _size)
    assert _texts(out)[:2] == [TRUNCATION_MARKER, "a1"]


def test_ptl_unknown_gap_drops_a_fifth() -> None:
    msgs = _conversation(9)  # 10 groups -> drop 2
    out = truncate_head_for_ptl(msgs, None, _size)
    assert _texts(out)[:2] == [TRUNCATION_MARKER, "a2"]
    out = truncate_head_for_ptl(_conversation(2), None, _size)  # 3 groups -> at least one
    assert _texts(out)[:2] == [TRUNCATION_MARKER, "a1"]


def test_ptl_strips_the_previous_marker() -> None:
    first = truncate_head_for_ptl(_conversation(5), None, _size)
    assert first is not None and _texts(first)[0] == TRUNCATION_MARKER
    second = truncate_head_for_ptl(first, None, _size)
    # The old marker is not counted as a group, and only one marker is at the head.
    assert _texts(second) == [TRUNCATION_MARKER, "a2", "u2", "a3", "u3", "a4", "u4", "a5", "u5"]
    assert _texts(second).count(TRUNCATION_MARKER) == 1
    string_marker = [{"role": "user", "content": TRUNCATION_MARKER}, *_conversation(1)[1:]]
    assert _texts(truncate_head_for_ptl(string_marker + [_a("a2"), _u("u2")], None, _size)) == [
        TRUNCATION_MARKER,
        "a2",
        "u2",
    ]


def test_ptl_no_marker_when_starting_with_user() -> None:
    msgs = [_u("lead"), _a("a1"), _u("u1"), _u("u1b")]
    # Leading group [lead] dropped; rest starts with assistant -> marker. Construct instead a
    # list whose remainder starts with a user message: two leading user groups are impossible,
    # so check the untouched tail keeps its own user message.
    out = truncate_head_for_ptl(msgs, 50, _size)
    assert _texts(out) == [TRUNCATION_MARKER, "a1", "u1", "u1b"]


def test_ptl_nothing_left() -> None:
    assert truncate_head_for_ptl([], None, _size) is None
    assert truncate_head_for_ptl([_u("only")], None, _size) is None
    assert truncate_head_for_ptl(_conversation(2), 10_000, _size) is None
    marker_only = [{"role": "user", "content": [text_block(TRUNCATION_MARKER)]}]
    assert truncate_head_for_ptl(marker_only, None, _size) is None


def test_ptl_keeps_tool_pairs_together() -> None:
    b = Builder()
    b.prompt("go")
    for k in range(4):
        b.part(f"m{k}", text_block("x"), tool_use_block(f"t{k}"))
        b.results(f"t{k}")
    msgs = to_api_messages(b.records)
    out = truncate_head_for_ptl(msgs, None, _size)
    assert out is not None
    for prev, cur in zip(out, out[1:], strict=False):
        if cur["role"] == "user":
            uses = {blk["id"] for blk in prev["content"] if blk["type"] == "tool_use"}
            res = {blk["tool_use_id"] for blk in cur["content"] if blk["type"] == "tool_result"}
            assert res <= uses
