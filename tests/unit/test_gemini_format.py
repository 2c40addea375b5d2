"""Gemini CLI's chats read as compactd's records (docs/gemini.md#how-compactd-reads-a-chat): the
captured chats, the older ``.json`` format and synthetic edge cases (tests/gemini_chats.py), each
read whole and chunk by chunk; the compressions as compactions and what each one dropped; the
tokens as written; where the chats are."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from compactd import port
from compactd.agents.gemini.format import GEMINI, GeminiStream
from compactd.core.handback import hand_back, last_compaction
from compactd.core.outlook import outlook
from compactd.core.view import context_records
from compactd.transcript.model import ParseReport, Record
from tests.gemini_chats import CAPTURED, LEGACY, Chat, edge_chat, legacy, long_chat

COMPRESSED = next(p for p in CAPTURED if "compressed_on_resume" in p.name)
HOOK_CONTEXT = next(p for p in CAPTURED if "hook_context" in p.name)
FIRST = "FIRST: read notes.txt, then run the alpha check and count the notes"


def _records(data: bytes) -> list[Record]:
    return port.records(port.complete(data))


def _last_total(data: bytes) -> int:
    """The ``tokens.total`` of the chat's last answer, as the file writes it."""
    if data.lstrip().startswith(b"{\n"):
        messages = json.loads(data)["messages"]
    else:
        messages = [json.loads(line) for line in data.splitlines() if line.strip()]
    return [m for m in messages if m.get("type") == "gemini" and "tokens" in m][-1]["tokens"][
        "total"
    ]


def _compactions(records: list[Record]) -> list[object]:
    out = []
    for i, record in enumerate(records):
        if record.entry.type == "user" and record.entry.is_compact_summary:
            out.append(last_compaction(records[: i + 1]))
    return out


def _dropped(records: list[Record]) -> list[dict[str, set[str]]]:
    """What each compaction's summary left out: messages, commands, files (by name)."""
    out = []
    for compaction in _compactions(records):
        missing = hand_back(compaction, limit=10**9, agent="Gemini CLI").missing  # type: ignore[arg-type]
        out.append(
            {
                "messages": {m.text for m in missing.messages if not m.carried},
                "commands": {c.command for c in missing.commands},
                "files": {Path(f.path).name for f in missing.files},
            }
        )
    return out


def _expected(chat: Chat) -> list[dict[str, set[str]]]:
    return [
        {
            "messages": set(span["messages"]),
            "commands": set(span["commands"]),
            "files": {Path(f).name for f in span["files"]},
        }
        for span in chat.spans
    ]


# -- the captured chats -------------------------------------------------------------------------


def test_a_captured_chat_reads_as_one_compaction_with_its_tokens_as_written() -> None:
    data = COMPRESSED.read_bytes()
    assert port.detect(data).name == "Gemini CLI"
    report = ParseReport()
    records = port.records(data, report)
    assert report.skipped == 0 and report.lines == len(data.splitlines())
    status = outlook(records, {}).gauge.status
    assert status.exact_tokens == _last_total(data) and status.estimated_tokens == 0
    (dropped,) = _dropped(records)
    assert dropped == {
        "messages": {FIRST},
        "commands": {"echo alpha-check-7d1", "wc -l notes.txt"},
        "files": {"notes.txt"},
    }
    # Each tool result once, however many times the file holds it (three copies here).
    results = [b for r in records for b in r.entry.blocks if type(b).__name__ == "ToolResultBlock"]
    assert len(results) == len({b.tool_use_id for b in results}) == 4  # type: ignore[attr-defined]
    # A record written again as it grew is one response: one message id, its text once.
    answers = [r for r in records if r.entry.type == "assistant"]
    texts = [b.text for r in answers for b in r.entry.blocks if hasattr(b, "text")]
    assert texts.count("Reading the notes.") == 1
    # The paths a call names are made absolute against the project folder.
    reads = [b for r in answers for b in r.entry.blocks if getattr(b, "name", "") == "read_file"]
    assert reads[0].input["file_path"].endswith("/project/notes.txt")  # type: ignore[attr-defined]
    limits = port.recorded_limits(data)
    assert limits is not None and limits.context_window == 1_048_576
    assert limits.auto_compact_tokens == 524_288 and limits.model == "gemini-3.8-flash"


def test_the_view_after_the_compression_holds_the_snapshot_not_the_dropped_turn() -> None:
    records = _records(COMPRESSED.read_bytes())
    view = context_records(records)
    text = json.dumps([r.to_builtins() for r in view])
    assert "<state_snapshot>" in text and "SECOND: now run the beta check" in text
    assert FIRST not in text and "echo alpha-check-7d1" not in text


def test_reading_chunk_by_chunk_gives_what_reading_whole_gives() -> None:
    for data in (COMPRESSED.read_bytes(), edge_chat().data(), LEGACY.read_bytes()):
        whole = [r.raw for r in port.records(port.complete(data))]
        reading = port.Reading()
        chunked: list[bytes] = []
        lines = data.splitlines(keepends=True)
        for at in range(0, len(lines), 3):
            chunked += [r.raw for r in reading.records(b"".join(lines[at : at + 3]))]
        assert chunked == whole


def test_hook_context_is_not_the_user_s_words() -> None:
    records = _records(HOOK_CONTEXT.read_bytes())
    words = [r.entry.blocks[0].text for r in records  # type: ignore[attr-defined]
             if r.entry.type == "user" and not r.entry.is_meta]  # fmt: skip
    assert words == [
        "ONE: plan the release notes",
        "TWO: list what changed since 1.4",
        "THREE: write the notes",
    ]
    meta = [r for r in records if r.entry.is_meta and "hook_context" in r.raw.decode()]
    assert len(meta) == 3


# -- the older format --------------------------------------------------------------------------


def test_an_older_chat_reads_with_its_noted_compression() -> None:
    # Built from the capture by the pre-0.39 rules (tests/data/README.md), not captured.
    data = LEGACY.read_bytes()
    assert port.detect(data).name == "Gemini CLI"
    records = _records(data)
    status = outlook(records, {}).gauge.status
    assert status.exact_tokens == _last_total(data)
    (dropped,) = _dropped(records)
    assert dropped["messages"] == {FIRST}
    assert dropped["commands"] == {"echo alpha-check-7d1", "wc -l notes.txt"}
    # Tool results live in their calls only: each is read once.
    results = [b for r in records for b in r.entry.blocks if type(b).__name__ == "ToolResultBlock"]
    assert len(results) == 4


def test_an_older_chat_being_rewritten_is_read_once_whole() -> None:
    data = LEGACY.read_bytes()
    half = data[: len(data) // 2]
    assert GEMINI.complete(half) == 0 and GEMINI.complete(data) == len(data)
    stream = GeminiStream()
    assert stream.feed(half) == []
    assert [r.raw for r in stream.feed(data[len(half) :])] == [r.raw for r in _records(data)]


# -- synthetic edge cases ------------------------------------------------------------------------


def test_the_edge_cases_read_as_written() -> None:
    chat = edge_chat()
    data = chat.data(corrupt=True, torn=True)
    assert GEMINI.complete(data) == data.rindex(b"\n") + 1  # the torn line waits
    report = ParseReport()
    records = port.records(port.complete(data), report)
    # The damaged line and the line of no known kind are skipped, and counted.
    assert report.skipped == 1 + chat.unknown
    assert outlook(records, {}).gauge.status.exact_tokens == chat.last_total
    assert _dropped(records) == _expected(chat)
    # The rewound prompt stays in compactd's copy; nothing else comes of the $rewindTo.
    assert any("Something I did not mean" in r.raw.decode() for r in records)
    # Masked outputs and a resume writing the list back add no record.
    uuids = [r.uuid for r in records]
    assert len(uuids) == len(set(uuids))


def test_a_compression_mid_turn_keeps_the_turn_once() -> None:
    chat = edge_chat()
    records = _records(chat.data())
    view = context_records(records)
    said = [r.raw.decode() for r in view]
    kept = "Now write the changelog entry for the importer fix"
    assert sum(kept in line for line in said) == 1
    assert sum("git log --oneline -3" in line for line in said) == 1
    assert not any("Keep the old CSV dialect" in line for line in said)


def test_a_long_chat_s_compressions_each_drop_what_they_replaced() -> None:
    chat = long_chat(seed=3, turns=30)
    records = _records(chat.data())
    assert len(_compactions(records)) == len(chat.spans) == 2
    assert _dropped(records) == _expected(chat)
    assert outlook(records, {}).gauge.status.exact_tokens == chat.last_total
    # The older format of the same chat: the same compactions; it never said what a compression
    # kept, so everything before its note counts as dropped (the turn a compression mid-turn kept
    # with it).
    old = _dropped(_records(legacy(chat)))
    assert len(old) == 2 and old[0] == _expected(chat)[0]
    assert all(old[1][k] >= _expected(chat)[1][k] for k in old[1])


def test_tokens_are_the_record_s_total() -> None:
    line = {"id": "a1", "type": "gemini", "content": "ok", "model": "gemini-2.5-pro",
            "tokens": {"input": 1000, "output": 50, "cached": 600, "thoughts": 30, "tool": 20,
                       "total": 1100}}  # fmt: skip
    (record,) = GeminiStream().records([json.dumps(line).encode()])
    usage = record.entry.message.usage  # type: ignore[union-attr]
    assert usage is not None and usage.total() == 1100
    assert usage.cache_read_input_tokens == 600


@pytest.mark.parametrize(
    "line,claimed",
    [
        (b'{"sessionId":"s","projectHash":"h","startTime":"t","kind":"main"}\n', True),
        (b'{"$set":{"messages":[]}}\n', True),
        (b'{"id":"x","timestamp":"t","type":"user","content":[{"text":"hi"}]}\n', True),
        (b'{"type":"user","uuid":"u1","sessionId":"s","message":{"role":"user","content":"hi"}}\n', False),
        (b'{"timestamp":"t","type":"session_meta","payload":{"id":"x"}}\n', False),
        (b'{\n  "sessionId": "s",\n  "projectHash": "h",\n  "messages": [\n', True),
    ],
    ids=["metadata", "$set", "record", "claude-code", "codex", "older"],
)  # fmt: skip
def test_the_format_is_told_from_the_content(line: bytes, claimed: bool) -> None:
    assert GEMINI.claims(line) is claimed


# -- where the chats are -----------------------------------------------------------------------


def test_chats_of_a_project_are_found_stubs_and_continued_json_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compactd.agents.gemini.services import sessions

    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    project = tmp_path / "work" / "pelican"
    project.mkdir(parents=True)
    chats = tmp_path / ".gemini" / "tmp" / "pelican" / "chats"
    chats.mkdir(parents=True)
    (tmp_path / ".gemini" / "projects.json").write_text(
        json.dumps({"projects": {str(project): "pelican"}})
    )
    chat = chats / "session-2026-05-01T10-00-5b1c0e55.jsonl"
    chat.write_bytes(edge_chat().data())
    stub = chats / "session-2026-05-01T10-07-5b1c0e55.jsonl"
    stub.write_bytes(b"\n".join(edge_chat().data().splitlines()[:2]) + b"\n")
    old = chats / "session-2026-04-01T09-30-c051a701.json"
    old.write_bytes(LEGACY.read_bytes())
    continued = chats / "session-2026-04-01T09-30-c051a701.jsonl"
    continued.write_bytes(COMPRESSED.read_bytes())
    os.utime(chat, (1, 1_000))
    os.utime(continued, (1, 500))
    found = sessions.sessions_of_folder([str(project)])
    assert [s.path for s in found] == [chat, continued]
    assert [s.path for s in port.sessions_in(chats)][:2] == [chat, continued]
    assert sessions.chats_of(str(project)) == chats
    named = sessions.named(str(project), "5b1c0e55-4f0e-4a57-9d0c-2c7f5f9d1e01")
    assert named is not None and named.transcript == chat
    current = sessions.current(tmp_path / "data", str(project))
    assert current is not None and current.transcript == chat and "newest" in current.how
    assert sessions.sessions_of_folder([str(tmp_path / "elsewhere")]) == []
