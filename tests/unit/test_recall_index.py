"""The recall index (services/recall_index.py) and its pure half (core/recall_words.py,
core/recall_render.py): query forms, ranking fallbacks, incremental indexing, the revision rule,
the output budget, and every item Claude Code's summaries dropped found from a few words."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compactd.cli.synthetic import make_session
from compactd.core.recall_render import (
    ANSWER_BUDGET_TOKENS,
    CHARS_PER_TOKEN,
    Found,
    Revision,
    Stored,
    render_fetch,
    render_hits,
)
from compactd.core.recall_words import is_correction, parse_query
from compactd.services.recall_index import RecallIndex, SearchOutcome, index_path, use_index
from compactd.services.safe_io import Deadline
from tests.recall_items import dropped, found_by_index, transcripts


def _user(uid: str, text: str) -> dict[str, Any]:
    return {
        "type": "user",
        "uuid": uid,
        "timestamp": f"2026-01-01T00:00:{len(uid):02d}Z",
        "message": {"role": "user", "content": text},
    }


def _assistant(uid: str, text: str) -> dict[str, Any]:
    return {
        "type": "assistant",
        "uuid": uid,
        "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
    }


def _call(uid: str, call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": args}
    return {"type": "assistant", "uuid": uid, "message": {"role": "assistant", "content": [block]}}


def _result(uid: str, call_id: str, text: str) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": text}
    return {"type": "user", "uuid": uid, "message": {"role": "user", "content": [block]}}


def _write(path: Path, lines: list[dict[str, Any]], mode: str = "w") -> None:
    with path.open(mode) as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def _search(index: RecallIndex, query: str, limit: int = 5) -> SearchOutcome:
    index.refresh()
    return index.search(parse_query(query), limit)


def _uuids(outcome: SearchOutcome) -> list[str | None]:
    return [f.entry.uuid for f in outcome.found]


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    _write(
        path,
        [
            _user("u1", "I was trying to import files that don't exist yet"),
            _assistant("a1", "Let me look at the importer first."),
            _call("a2", "c1", "Read", {"file_path": "/repo/src/importer.py"}),
            _result("r1", "c1", "def load(path): ..."),
            _call("a3", "c2", "Bash", {"command": "pytest tests/test_import.py -q"}),
            _result("r2", "c2", "1 failed, 3 passed"),
            _call("a4", "c3", "Edit", {"file_path": "/repo/src/importer.py", "old_string": "a"}),
            _user("u2", "Use the staging bucket for uploads"),
            _user("u3", "No, actually use the production bucket"),
        ],
    )
    return path


def test_words_in_any_form_find_the_message(tmp_path: Path, transcript: Path) -> None:
    with RecallIndex(tmp_path / "data", transcript) as index:
        # Short words and the apostrophe dropped, as an agent types it.
        assert _uuids(_search(index, "trying import files that dont"))[0] == "u1"
        # Stemming: "imports" finds "import".
        assert "u1" in _uuids(_search(index, "imports files"))
        # A word the entry lacks: the any-word stage still ranks the message first.
        first = _search(index, "trying import files that dont zebra").found[0]
        assert (first.entry.uuid, first.match) == ("u1", "some words")
        # A prefix.
        assert _uuids(_search(index, "impor"))[0] in {"u1", "a2", "a4", "r1"}


def test_phrase_path_and_command(tmp_path: Path, transcript: Path) -> None:
    with RecallIndex(tmp_path / "data", transcript) as index:
        assert _uuids(_search(index, '"staging bucket"')) == ["u2"]
        # A phrase's words must stand in that order.
        assert _search(index, '"bucket staging"').found == []
        assert set(_uuids(_search(index, "src/importer.py"))) == {"a2", "a4"}
        hit = _search(index, "pytest test_import.py").found[0]
        assert hit.entry.uuid == "a3" and hit.entry.role == "assistant"
        assert _search(index, "1 failed").found[0].entry.role == "tool"


def test_substring_fallback_for_punctuation(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    _write(path, [_user("u1", "the arrow => is the problem")])
    with RecallIndex(tmp_path / "data", path) as index:
        assert _search(index, "=>").found[0].match == "substring"
        assert _search(index, "@@").found == []


def test_case_quotes_backslashes_and_diacritics(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    text = 'a "quoted" word \\ with backslash and ünïcode'
    _write(path, [_user("d", text), _user("a", "The Quick brown fox")])
    with RecallIndex(tmp_path / "data", path) as index:
        assert _uuids(_search(index, '"quoted" word \\ with')) == ["d"]
        assert _uuids(_search(index, "ÜNÏCODE")) == ["d"]
        assert _uuids(_search(index, "unicode")) == ["d"]
        assert _uuids(_search(index, "QUICK")) == ["a"]
        assert _search(index, "absent").found == []


def test_a_long_transcript_finds_its_oldest_message(tmp_path: Path) -> None:
    entries = make_session(entries=3000, target_tokens=200_000, seed=3)
    path = tmp_path / "t.jsonl"
    _write(path, entries)
    first = next(
        e for e in entries if e["type"] == "user" and isinstance(e["message"]["content"], str)
    )
    with RecallIndex(tmp_path / "data", path) as index:
        found = _search(index, first["message"]["content"][:40], limit=200)
        assert first["uuid"] in _uuids(found)


def test_revision_rule(tmp_path: Path, transcript: Path) -> None:
    with RecallIndex(tmp_path / "data", transcript) as index:
        # The Read of importer.py is shown with the later Edit of the same file.
        read = next(f for f in _search(index, "importer", 10).found if f.entry.uuid == "a2")
        assert [r.entry.uuid for r in read.revisions] == ["a4"]
        # So is the Read's result (a tool result is about its call's files).
        result = _search(index, "def load").found[0]
        assert [r.entry.uuid for r in result.revisions] == ["a4"]
        # The user's next message corrects the staging one.
        staging = _search(index, "staging bucket").found[0]
        assert [r.entry.uuid for r in staging.revisions] == ["u3"]
        # The last edit has nothing after it.
        edit = next(f for f in _search(index, "importer", 10).found if f.entry.uuid == "a4")
        assert edit.revisions == ()
    assert is_correction("No, actually use production")
    assert is_correction("don't do that")
    assert not is_correction("Now add a test")


def test_incremental_whole_lines_only(tmp_path: Path, transcript: Path) -> None:
    with RecallIndex(tmp_path / "data", transcript) as index:
        index.refresh()
        assert index.refresh() == 0
        # A line being written: not indexed until its newline arrives.
        with transcript.open("a") as f:
            f.write(json.dumps(_user("u4", "remember the kraken"))[:30])
        assert index.refresh() == 0 and _search(index, "kraken").found == []
        with transcript.open("a") as f:
            f.write(json.dumps(_user("u4", "remember the kraken"))[30:] + "\n")
        assert index.refresh() == 1
        assert _uuids(_search(index, "kraken")) == ["u4"]


def test_replaced_or_truncated_transcript_is_indexed_again(
    tmp_path: Path, transcript: Path
) -> None:
    data = tmp_path / "data"
    with RecallIndex(data, transcript) as index:
        assert _uuids(_search(index, "staging")) == ["u2"]
    # Rewritten with other content (same size or not): the old rows are gone.
    _write(transcript, [_user("n1", "a completely different session about octopus")])
    with RecallIndex(data, transcript) as index:
        assert _search(index, "staging").found == []
        assert _uuids(_search(index, "octopus")) == ["n1"]
    # Truncated then grown past the old size with other lines: the tail check catches it.
    _write(transcript, [_user("n2", "squid " * 50)])
    with RecallIndex(data, transcript) as index:
        assert _uuids(_search(index, "squid")) == ["n2"]
        assert _search(index, "octopus").found == []
    # The index lives under the data dir, not beside the transcript.
    assert index_path(data, transcript).is_relative_to(data)
    assert sorted(p.name for p in transcript.parent.iterdir()) == ["data", "t.jsonl"]


def test_a_damaged_index_is_built_again(tmp_path: Path, transcript: Path) -> None:
    data = tmp_path / "data"
    path = index_path(data, transcript)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not a database" * 100)
    outcome, coverage = use_index(
        data, transcript, lambda index: index.search(parse_query("staging"), 5),
        deadline=Deadline(30),
    )  # fmt: skip
    assert _uuids(outcome) == ["u2"] and coverage.complete


def test_a_uuid_written_twice_is_one_entry(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    _write(
        path, [_user("u1", "keep the walrus"), _user("u2", "next"), _user("u1", "keep the walrus")]
    )
    with RecallIndex(tmp_path / "data", path) as index:
        found = _search(index, "walrus").found
        assert [(f.entry.uuid, f.entry.line) for f in found] == [("u1", 0)]


def test_fetch_and_unknown_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        'not json\n{"type": "progress"}\n[1, 2]\n' + json.dumps(_user("u1", "x" * 100)) + "\n"
    )
    with RecallIndex(tmp_path / "data", path) as index:
        index.refresh()
        entry = index.fetch("u1")
        assert entry is not None and entry.text == "x" * 100 and entry.line == 3
        assert index.fetch("nope") is None


def test_query_parsing() -> None:
    q = parse_query("recall:abc-123")
    assert (q.fetch_uuid, q.fetch_from) == ("abc-123", 0)
    assert parse_query("recall:abc+500").fetch_from == 500
    q = parse_query('fix "the parser" src/app.py')
    assert q.stages == (
        ("all words", '"the parser" AND "src app py" AND "fix"'),
        ("prefixes", '"the parser" AND "src app py" AND "fix"*'),
        ("some words", '"the parser" OR "src app py" OR "fix"*'),
    )
    # Phrases alone: no prefix stage, and "some words" is named as such.
    assert [name for name, _ in parse_query('"a b" c.d').stages] == ["all words", "some words"]
    assert parse_query("don't").terms == ("dont",)
    assert parse_query("!!").stages == ()


def _stored(n: int, text: str) -> Stored:
    return Stored(f"id{n}", "user", "user", None, text, n)


def test_output_stays_within_its_budget() -> None:
    hits = [Found(_stored(n, f"word {n} " + "filler " * 2000), "all words") for n in range(200)]
    text = render_hits(hits, ["word"], header="h", total=500)
    assert len(text) <= ANSWER_BUDGET_TOKENS * CHARS_PER_TOKEN + 200
    assert "narrow the query" in text
    shown = text.count("recall:id") // 2
    assert 0 < shown < 200
    assert f"{500 - shown} more matching entries" in text
    # A long hit is cut around the word asked for, naming the pointer to the whole.
    hit = [Found(_stored(1, "a " * 3000 + "needle " + "b " * 3000), "all words")]
    cut = render_hits(hit, ["needle"], header="h", total=1)
    assert "needle" in cut and "recall:id1 returns it whole" in cut
    # A revision is shown under its hit.
    later = Revision(
        _stored(9, "No, use the other bucket"), "the person's next message corrects it"
    )
    shown = render_hits(
        [Found(_stored(1, "use the bucket"), "all words", (later,))], [], header="h", total=1
    )
    assert "  ↳ the person's next message corrects it: user · no time · recall:id9" in shown
    assert "No, use the other bucket" in shown
    # A fetch gives the whole, or says where it continues.
    whole = render_fetch(_stored(2, "z" * 100_000), 0, header="h")
    assert "recall:id2+" in whole and len(whole) < 100_000


@pytest.mark.parametrize("path", transcripts(), ids=lambda p: p.stem[-24:])
def test_every_dropped_item_is_found_from_a_few_words(tmp_path: Path, path: Path) -> None:
    items = dropped(path)
    assert items, "each transcript has dropped items to look for"
    with RecallIndex(tmp_path, path) as index:
        index.refresh()
        missed = [(i.kind, i.query, i.text[:60]) for i in items if not found_by_index(index, i)]
    assert missed == []
