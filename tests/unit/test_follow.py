"""Following a transcript (docs/follow.md): reading what a file gained, and a session fed a line at
a time ending up as a fresh load of the same lines."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from compactd.engine.session import Session
from compactd.services.store import SessionMeta, Store
from compactd.services.tail import HEAD_BYTES, Position, position_of, read_new
from tests.conftest import FIXTURES, fixture_transcripts, load_fixture

LIMIT = 1 << 20


def test_only_complete_lines_are_read(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":')
    first = read_new(path, None, LIMIT)
    assert first.reread and first.data == b'{"a":1}\n'
    assert first.position.offset == 8
    # The rest of the line, and a line more.
    with open(path, "ab") as fh:
        fh.write(b'2}\n{"c":3}\n')
    second = read_new(path, first.position, LIMIT)
    assert not second.reread and second.data == b'{"b":2}\n{"c":3}\n'
    assert read_new(path, second.position, LIMIT).data == b""


def test_a_shorter_or_different_file_is_read_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"one\ntwo\n")
    at = read_new(path, None, LIMIT).position
    path.write_bytes(b"one\n")  # truncated
    shorter = read_new(path, at, LIMIT)
    assert shorter.reread and shorter.data == b"one\n"
    # Replaced by a rename: same length and more, different bytes where reading stopped.
    tmp = tmp_path / "new"
    tmp.write_bytes(b"one\nTWO\nthree\n")
    os.replace(tmp, path)
    replaced = read_new(path, at, LIMIT)
    assert replaced.reread and replaced.data == b"one\nTWO\nthree\n"
    # The same prefix with more after it reads on from where it stopped.
    tmp.write_bytes(b"one\nTWO\nthree\nfour\n")
    os.replace(tmp, path)
    grown = read_new(path, replaced.position, LIMIT)
    assert not grown.reread and grown.data == b"four\n"


def test_the_head_grows_until_it_is_full(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    line = b"x" * 300 + b"\n"
    path.write_bytes(line)
    at = read_new(path, None, LIMIT).position
    for _ in range(5):
        with open(path, "ab") as fh:
            fh.write(line)
        at = read_new(path, at, LIMIT).position
    data = path.read_bytes()
    assert at == position_of(data)
    assert at.head == data[:HEAD_BYTES]
    # A change inside the head (not at the end) is seen too.
    path.write_bytes(b"y" + data[1:])
    assert read_new(path, at, LIMIT).reread


def test_too_much_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"0123456789\n" * 10)
    with pytest.raises(OSError):
        read_new(path, None, 50)
    with pytest.raises(OSError):
        read_new(path, Position(11, b"0123456789\n", b"0123456789\n"), 50)


@pytest.mark.parametrize("path", fixture_transcripts(), ids=lambda p: p.stem)
def test_a_session_fed_line_by_line_has_the_view_of_a_fresh_load(path: Path) -> None:
    records = load_fixture(path.name)
    meta = SessionMeta(session_id="s", cwd="/tmp", model="claude-sonnet-4-5")
    fresh = Session(meta=meta, transcript_path=str(path), records=records)
    fresh.rebuild()
    fed = Session(meta=meta, transcript_path=str(path), records=records[:1])
    fed.rebuild()
    for record in records[1:]:
        fed.extend([record])
    assert [r.uuid for r in fed.context()] == [r.uuid for r in fresh.context()]
    assert fed.cleared_tool_ids == fresh.cleared_tool_ids


def test_kept_entries_move_after_a_summary_that_comes_after_its_boundary() -> None:
    records = load_fixture("claude-code-2.1.330__r2_auto.jsonl")
    b = next(i for i, r in enumerate(records) if r.entry.is_compact_boundary)
    meta = SessionMeta(session_id="s", cwd="/tmp", model="claude-sonnet-4-5")
    fed = Session(meta=meta, transcript_path=str(FIXTURES), records=records[: b + 1])
    fed.rebuild()
    summary_at = next(i for i in range(b, len(records)) if records[i].entry.is_compact_summary)
    fed.extend(records[b + 1 : summary_at + 1])
    ctx = fed.context()
    assert ctx[0].entry.is_compact_boundary
    # The summary leads the conversation; what the compaction kept follows it.
    at = [r.uuid for r in ctx].index(records[summary_at].uuid)
    assert all(r.entry.type == "attachment" for r in ctx[1:at])


def test_the_lines_without_a_uuid_are_counted(tmp_path: Path) -> None:
    store = Store(tmp_path)
    lines = [
        b'{"type":"mode","mode":"default"}',
        b'{"type":"user","uuid":"u1","message":{"role":"user","content":"hi"}}',
        b'{"type":"mode","mode":"default"}',
        # A uuid inside, not its own.
        b'{"type":"api-request","body":{"uuid":"x"}}',
    ]
    store.create_transcript("s", b"\n".join(lines) + b"\n")
    assert store.lines_without_uuid("s") == Counter({lines[0]: 2, lines[3]: 1})
