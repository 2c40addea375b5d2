"""The import's fast paths agree with the plain ones they stand for (docs/durability.md#imported-transcripts).

A whole transcript is read by ``read_buffer`` in one loop, adopted by ``History.adopt`` in bulk
and counted by ``TokenCounter.add_records``, which leaves the estimates the count cannot depend
on for later. Each is checked here against the one-line-at-a-time way it replaces.
"""

from __future__ import annotations

import gc
import sys
from itertools import accumulate
from pathlib import Path
from typing import Any
from unittest.mock import patch

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from compactd.core import constants as c
from compactd.core.file_state import build_file_state, content_hash
from compactd.core.tokens import TokenCounter, estimate_record_raw
from compactd.core.tokens import count as count_module
from compactd.core.tokens.count import _LAZY_MIN
from compactd.services.store import Store
from compactd.transcript.bulk import collector_paused
from compactd.transcript.history import History
from compactd.transcript.model import (
    ParseReport,
    Record,
    locate_all,
    parse_lines,
    record_from_dict,
)
from compactd.transcript.reading import read_buffer

# -- entries of every kind the counter tells apart ------------------------------------------------

_text = st.integers(0, 400).map(lambda n: "w" * n)
_usage = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "input_tokens": st.integers(0, 50),
            "cache_read_input_tokens": st.integers(0, 5_000),
            "output_tokens": st.integers(0, 300),
        }
    ),
)


@st.composite
def _entry(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["user", "user", "assistant", "assistant", "attachment", "system"]))
    if kind == "user":
        content: Any = draw(
            st.one_of(
                _text,
                st.lists(
                    st.fixed_dictionaries(
                        {
                            "type": st.just("tool_result"),
                            "tool_use_id": st.just("t"),
                            "content": _text,
                        }
                    ),
                    min_size=1,
                    max_size=2,
                ),
            )
        )
        return {"type": "user", "message": {"role": "user", "content": content}}
    if kind == "assistant":
        message: dict[str, Any] = {
            "role": "assistant",
            "content": [{"type": "text", "text": draw(_text)}],
            "model": draw(st.sampled_from(["claude-sonnet-4-5", c.SYNTHETIC_MODEL])),
        }
        # A few ids, so that one response is often written as several entries; some none.
        msg_id = draw(st.sampled_from([None, "", "m1", "m2", "m3", "m4", "m5", "m6"]))
        if msg_id is not None:
            message["id"] = msg_id
        usage = draw(_usage)
        if usage is not None:
            message["usage"] = usage
        out: dict[str, Any] = {"type": "assistant", "message": message}
        if draw(st.integers(0, 9)) == 0:
            out["isApiErrorMessage"] = True
        return out
    if kind == "attachment":
        return {"type": "attachment", "attachment": {"type": "note", "text": draw(_text)}}
    return {"type": "system", "subtype": "informational", "content": "x"}


def _records(objs: list[Any]) -> list[Record | int]:
    """Records of the entries (an int stays: a microcompact's saving)."""
    return [
        o if isinstance(o, int) else record_from_dict({**o, "uuid": f"u{i}"})
        for i, o in enumerate(objs)
    ]


def _one_by_one(items: list[Record | int]) -> TokenCounter:
    counter = TokenCounter()
    for item in items:
        if isinstance(item, int):
            counter.apply_saving(item)
        else:
            counter.add(item.entry, estimate_record_raw(item))
    return counter


_savings = st.integers(0, 300)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.one_of(_entry(), _savings), min_size=1, max_size=14),
    st.lists(st.one_of(_entry(), _savings), max_size=6),
    st.booleans(),
)
def test_a_context_counted_at_once_counts_as_one_entry_at_a_time(
    objs: list[Any], later: list[Any], settled: bool
) -> None:
    # Every run counted at once, however short (the daemon does so from _LAZY_MIN records on).
    with patch.object(count_module, "_LAZY_MIN", 1):
        at_once = TokenCounter()
        at_once.add_records(_records(objs))
        plain = _one_by_one(_records(objs))
        assert at_once.current == plain.current
        assert at_once.fixed_prefix == plain.fixed_prefix
        if settled:
            at_once.settle()
            plain.settle()
        # It goes on the same as entries are appended, whatever they continue.
        for item in _records(later):
            for counter in (at_once, plain):
                if isinstance(item, int):
                    counter.apply_saving(item)
                else:
                    counter.add(item.entry, estimate_record_raw(item))
            assert at_once.current == plain.current
            assert at_once.fixed_prefix == plain.fixed_prefix


def test_the_estimates_left_for_later_are_those_between_the_first_and_last_responses() -> None:
    def response(i: int) -> dict[str, Any]:
        return {
            "type": "assistant",
            "message": {
                "id": f"m{i}",
                "role": "assistant",
                "content": [{"type": "text", "text": "a" * 40}],
                "usage": {"input_tokens": 10 + i, "output_tokens": 5},
            },
        }

    objs: list[dict[str, Any]] = []
    for i in range(_LAZY_MIN):
        objs += [{"type": "user", "message": {"role": "user", "content": "q" * 80}}, response(i)]
    records = [r for r in _records(objs) if isinstance(r, Record)]
    counter = TokenCounter()
    counter.add_records(list(records))
    assert counter.current == _one_by_one(_records(objs)).current
    estimated = [r.raw_tokens >= 0 for r in records]
    # The first exchange (where the prefix is learned) and the last response are estimated...
    assert estimated[:2] == [True, True] and estimated[-1]
    # ...and what lies between is not, until someone asks.
    assert not any(estimated[2:-1])
    assert estimate_record_raw(records[4]) == 20  # a question of 80 characters


# -- reading a whole buffer ---------------------------------------------------------------------


def test_read_buffer_reads_what_parse_lines_reads() -> None:
    good = [
        record_from_dict(
            {"type": "user", "uuid": f"u{i}", "message": {"role": "user", "content": f"m{i}"}}
        )
        for i in range(3)
    ]
    boundary = record_from_dict({"type": "system", "subtype": "compact_boundary", "uuid": "b"})
    # A block kind compactd does not know (kept whole), and a field of the wrong type (degraded).
    unknown = b'{"type":"assistant","uuid":"d","message":{"role":"assistant","content":[{"type":"new_kind","x":1}]}}'
    degraded = b'{"type":"user","uuid":"e","isMeta":"yes"}'
    data = (
        b"\n".join(
            [
                good[0].raw,
                b"",
                b"  " + good[1].raw + b"  ",
                b"not json",
                boundary.raw,
                unknown,
                degraded,
            ]
        )
        + b"\n"
        + good[2].raw
    )
    report, plain_report = ParseReport(), ParseReport()
    read = read_buffer(data, report)
    plain = list(parse_lines(data.split(b"\n"), plain_report))
    assert [r.raw for r in read.records] == [r.raw for r in plain]
    assert [r.entry for r in read.records] == [r.entry for r in plain]
    assert report == plain_report and report.skipped == 1 and report.degraded == 1
    assert [data[s : s + n] for s, n in zip(read.starts, read.lengths, strict=True)] == [
        r.raw for r in plain
    ]
    assert read.uuids == ["u0", "u1", "b", "d", "e", "u2"]
    assert read.boundaries == [2]
    assert not read.verbatim  # a blank line, padding, a bad line, no final newline
    assert read_buffer(b"".join(r.raw + b"\n" for r in good)).verbatim
    packed = read_buffer(data, packed=True)
    assert packed.starts == list(accumulate((n + 1 for n in packed.lengths[:-1]), initial=0))
    # Read in place, the same records come out, and where each line starts is where it lies.
    shared = read_buffer(data, shared=True)
    assert [r.raw for r in shared.records] == [r.raw for r in plain]
    assert [r.entry for r in shared.records] == [r.entry for r in plain]
    assert shared.starts == read.starts and shared.lengths == read.lengths


def test_records_read_in_place_leave_the_buffer_when_moved_or_kept_alone() -> None:
    result = {"file": {"content": "x = 2\n"}, "type": "text"}
    call = {"type": "tool_use", "id": "t", "name": "Read", "input": {"file_path": "/x.py"}}
    lines = [
        msgspec.json.encode(
            {
                "type": "user",
                "uuid": f"u{i}",
                "toolUseResult": result,
                "message": {"role": "user", "content": [{"type": "text", "text": f"m{i}"}, call]},
            }
        )
        for i in range(4)
    ]
    data = b"\n".join(lines) + b"\n"
    held = sys.getrefcount(data)
    read = read_buffer(data, shared=True)
    assert sys.getrefcount(data) > held  # the records read their lines from it
    # Located where they were read, they go on reading it; located elsewhere (lines written
    # back to back after a line was dropped), each takes its own line along.
    locate_all(read.records[:1], "/t", read.starts[:1])
    moved = [s - 5 for s in read.starts[1:]]
    locate_all(read.records[1:], "/t", moved)
    assert [r.raw for r in read.records] == lines
    assert [r.location() for r in read.records[1:]] == [
        ("/t", s, len(x)) for s, x in zip(moved, lines[1:], strict=True)
    ]
    for record in read.records:
        record.detach()
    assert [r.raw for r in read.records] == lines
    assert [msgspec.json.decode(r.entry.tool_use_result) for r in read.records] == [result] * 4
    assert [r.entry.blocks[1].input for r in read.records] == [call["input"]] * 4
    del read
    assert sys.getrefcount(data) == held  # nothing points into it now: it can go


def test_tool_use_results_stay_json_until_read() -> None:
    result = {"file": {"content": "a = 1\n", "numLines": 1}, "type": "text"}
    record = record_from_dict({"type": "user", "uuid": "u", "toolUseResult": result})
    assert isinstance(record.entry.tool_use_result, msgspec.Raw)
    assert msgspec.json.decode(record.entry.tool_use_result) == result
    assert not record_from_dict({"type": "user", "uuid": "v"}).entry.tool_use_result
    # A line that only decodes degraded keeps it the same way.
    odd = record_from_dict(
        {
            "type": "user",
            "uuid": "w",
            "toolUseResult": result,
            "message": {"role": "user", "content": [{"type": "new_kind"}]},
        }
    )
    assert msgspec.json.decode(odd.entry.tool_use_result) == result


# -- the history of a whole transcript ----------------------------------------------------------


def test_an_adopted_history_answers_as_one_built_line_by_line(tmp_path: Path) -> None:
    objs: list[dict[str, Any]] = []
    for i in range(3000):
        objs.append(
            {
                "type": "user",
                "uuid": f"u{i % 2500}",
                "message": {"role": "user", "content": f"m{i}"},
            }
        )
        if i % 700 == 5:
            objs.append({"type": "system", "subtype": "microcompact_boundary", "uuid": f"mb{i}"})
    objs.append({"type": "system", "subtype": "compact_boundary", "uuid": "cb"})
    objs.append({"type": "user", "uuid": "after", "message": {"role": "user", "content": "late"}})
    data = b"".join(record_from_dict(o).raw + b"\n" for o in objs)
    loaded = Store(tmp_path).create_transcript("s", data)
    adopted = loaded.records
    plain = History(list(parse_lines(data.split(b"\n"))))
    assert len(adopted) == len(plain)
    assert adopted.boundary_lines() == plain.boundary_lines()
    for uuid in ["u0", "u7", "u2499", "u100", "cb", "after", "mb5", "nope"]:
        # Duplicated uuids (u0..u499 twice) answer the last line holding them.
        assert adopted.index_of(uuid) == plain.index_of(uuid), uuid
    assert [(r.kind, r.subtype) for r in adopted] == [(r.kind, r.subtype) for r in plain]
    # Lines before the last compact boundary are released; what follows it stays decoded.
    assert adopted.live_count() == 2
    assert [r.raw for r in adopted] == [r.raw for r in plain]
    # The copy is the bytes read when they were clean: same file, same offsets.
    path = Store(tmp_path).transcript_path("s")
    assert path.read_bytes() == data


def test_the_file_state_takes_what_the_tool_calls_and_their_records_say() -> None:
    def call(i: int, name: str, path: str) -> dict[str, Any]:
        return {
            "type": "assistant",
            "uuid": f"a{i}",
            "timestamp": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}.000Z",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "reading"},
                    {"type": "tool_use", "id": f"t{i}", "name": name, "input": {"file_path": path}},
                ],
            },
        }

    def result(i: int, record: Any) -> dict[str, Any]:
        return {
            "type": "user",
            "uuid": f"r{i}",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "1\tx"}],
            },
            "toolUseResult": record,
        }

    objs = [
        call(0, "Read", "a.py"),
        result(0, {"type": "text", "file": {"filePath": "/p/a.py", "content": "a = 1\n"}}),
        call(1, "Bash", "b.py"),  # not a file tool: nothing recorded
        result(1, {"stdout": "ok"}),
        call(2, "Read", "c.py"),
        result(2, "a string, not a record"),
        call(3, "Read", "d.py"),
        result(3, {"file": {"content": 7}}),  # not text: no content
    ]
    state = build_file_state(_records(objs), "/p")  # type: ignore[arg-type]
    assert sorted(state.files) == ["/p/a.py", "/p/c.py", "/p/d.py"]
    assert state.files["/p/a.py"].digest() == content_hash(b"a = 1\n")
    assert state.files["/p/c.py"].digest() is None
    assert state.files["/p/d.py"].digest() is None
    assert state.files["/p/a.py"].timestamp == 1767225600.0  # its entry's own time


def test_the_collector_is_back_on_and_walked_nothing_after_a_bulk_read() -> None:
    with collector_paused():
        made = [[i] for i in range(50_000)]
        assert not gc.isenabled()
    assert gc.isenabled()
    # What was made during the pause went to the oldest generation at once, without a walk of
    # the young ones (which would have taken it there one generation at a time).
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert id(made) in oldest and id(made[-1]) in oldest
    assert gc.get_count()[0] < 1_000
