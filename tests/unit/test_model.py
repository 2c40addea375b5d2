"""Transcript model: every fixture loads; lines round-trip byte for byte; bad lines are counted."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compactd.transcript.model import (
    ParseReport,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    block_to_builtins,
    parse_lines,
    read_line,
    record_from_dict,
    transcript_timestamp,
)
from tests.conftest import fixture_transcripts


def test_every_fixture_loads_without_skipping() -> None:
    files = fixture_transcripts()
    assert len(files) == 7, [path.name for path in files]
    for path in files:
        report = ParseReport()
        records = list(parse_lines(path.read_bytes().splitlines(), report))
        assert report.skipped == 0, (path.name, report.first_error)
        assert len(records) == report.lines
        conversational = [r for r in records if r.entry.type in ("user", "assistant")]
        assert conversational, path.name
        for r in conversational:
            assert r.entry.message is not None, (path.name, r.raw[:120])


def test_corrupt_and_truncated_lines_are_skipped_and_counted() -> None:
    lines = [
        json.dumps(
            {"type": "user", "uuid": "a", "message": {"role": "user", "content": "hi"}}
        ).encode(),
        b'{"type": "assistant", "message": {"content": [',  # truncated by a crash
        b"\xff\xfe garbage",
        b"42",
        b"",
    ]
    report = ParseReport()
    records = list(parse_lines(lines, report))
    assert [r.entry.uuid for r in records] == ["a"]
    assert (report.lines, report.skipped) == (4, 3)
    # The first bad line is named (the decoder words the reason).
    assert report.first_error is not None and report.first_error.startswith("line 2: ")


def test_unknown_block_kinds_survive_in_views() -> None:
    rec = record_from_dict(
        {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "a"},
                    {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}},
                    {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/x"}},
                ],
            },
        }
    )
    blocks = rec.entry.blocks
    assert isinstance(blocks[0], TextBlock)
    assert isinstance(blocks[1], UnknownBlock) and blocks[1].kind == "server_tool_use"
    assert block_to_builtins(blocks[1]) == {
        "type": "server_tool_use",
        "id": "s1",
        "name": "web_search",
        "input": {},
    }
    assert isinstance(blocks[2], ToolUseBlock)


def test_tool_result_with_block_content() -> None:
    content = [
        {"type": "text", "text": "out"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
        {"type": "mystery", "x": 1},
    ]
    rec = record_from_dict(_tool_result_entry(content))
    block = rec.entry.blocks[0]
    assert isinstance(block, ToolResultBlock)
    assert isinstance(block.content, list) and isinstance(block.content[2], UnknownBlock)
    # Text, image source and the unknown block's payload all survive, nested blocks included.
    assert block_to_builtins(block)["content"] == content


def _tool_result_entry(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "user",
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": content}],
        },
    }


# -- property: read -> write -> read is the identity, unknown fields included --------------------

_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.text(max_size=20),
    st.floats(allow_nan=False, allow_infinity=False),
)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=40)}),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_use"),
            "id": st.text(min_size=1, max_size=8),
            "name": st.sampled_from(["Read", "Bash", "Edit"]),
            "input": st.dictionaries(st.text(max_size=5), _json, max_size=3),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("tool_result"),
            "tool_use_id": st.text(min_size=1, max_size=8),
            "content": st.one_of(
                st.text(max_size=40),
                st.lists(
                    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=10)}),
                    max_size=2,
                ),
            ),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("thinking"),
            "thinking": st.text(max_size=30),
            "signature": st.text(max_size=10),
        }
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["future_block", "server_tool_use"]), "payload": _json}
    ),
)
_entry = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            ["user", "assistant", "system", "attachment", "progress", "brand-new-type"]
        ),
        "uuid": st.uuids().map(str),
        "parentUuid": st.one_of(st.none(), st.uuids().map(str)),
        "message": st.fixed_dictionaries(
            {
                "role": st.sampled_from(["user", "assistant"]),
                "content": st.one_of(st.text(max_size=50), st.lists(_block, max_size=4)),
            }
        ),
    },
    optional={
        "unknownTopLevel": _json,
        "isMeta": st.booleans(),
        "toolUseResult": _json,
        "compactMetadata": st.fixed_dictionaries(
            {
                "trigger": st.sampled_from(["auto", "manual"]),
                "preTokens": st.integers(0, 10**6),
                "futureKey": _json,
            }
        ),
    },
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_entry, min_size=1, max_size=8))
def test_read_write_read_is_identity(entries: list[dict[str, Any]]) -> None:
    first = [record_from_dict(e) for e in entries]
    written = b"".join(r.raw + b"\n" for r in first)
    second = list(parse_lines(written.splitlines()))
    assert [r.raw for r in second] == [r.raw for r in first]
    assert [r.entry for r in second] == [r.entry for r in first]
    assert [r.to_builtins() for r in second] == entries


def test_released_records_read_back_from_their_file(tmp_path: Any) -> None:
    from compactd.services.store import SessionMeta, Store, atomic_write

    store = Store(tmp_path)
    store.write_meta(SessionMeta(session_id="s", cwd="/w", model="m"))
    recs = [
        record_from_dict(
            {"type": "user", "uuid": f"u{i}", "message": {"role": "user", "content": "x" * i}}
        )
        for i in range(1, 6)
    ]
    created = list(store.create_transcript("s", b"".join(r.raw + b"\n" for r in recs[:2])).records)
    store.append("s", recs[2:])
    recs[:2] = created
    expected = [r.raw for r in recs]
    for r in recs:
        r.release()
    assert all(r.released for r in recs)
    assert [r.raw for r in recs] == expected
    assert recs[3].entry.uuid == "u4"
    # A replaced file (load-time repair) is not read through a stale descriptor.
    path = store.transcript_path("s")
    atomic_write(path, b"".join(e + b"\n" for e in expected))
    assert [r.raw for r in recs] == expected
    loaded = store.load("s").records
    for r in loaded:
        r.release()
    assert [r.raw for r in loaded] == expected


def test_transcript_timestamps_have_milliseconds_and_a_z() -> None:
    assert transcript_timestamp(0) == "1970-01-01T00:00:00.000Z"
    assert transcript_timestamp(1_700_000_000.1234) == "2023-11-14T22:13:20.123Z"
    now = transcript_timestamp()
    assert len(now) == len("2026-11-22T00:00:00.000Z") and now.endswith("Z")


def test_read_line_closes_the_oldest_descriptor_when_full(tmp_path: Any) -> None:
    from compactd.transcript import lines as model

    paths = []
    for i in range(model._READ_FDS_MAX + 1):
        path = tmp_path / f"t{i}.jsonl"
        path.write_bytes(b"line %d\n" % i)
        paths.append(str(path))
    try:
        for path in paths:
            read_line(path, 0, 4)
        assert paths[0] not in model._READ_FDS  # the oldest went, not the newest
        assert paths[-1] in model._READ_FDS and paths[-2] in model._READ_FDS
    finally:
        for path in paths:
            model.forget_file(path)
