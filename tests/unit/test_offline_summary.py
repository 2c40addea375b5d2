"""Unit tests of compactd.core.offline_summary on hand-built and synthetic transcripts."""

from __future__ import annotations

from typing import Any

from compactd.core import prompts
from compactd.core.offline_summary import collect_ledger, offline_summary
from compactd.model import Record, record_from_dict
from compactd.synthetic import make_session


def _user(uid: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "user", "uuid": uid, "message": {"role": "user", "content": content}, **extra}


def _assistant(uid: str, mid: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "assistant",
        "uuid": uid,
        "message": {"id": mid, "role": "assistant", "content": blocks},
    }


def _result(uid: str, tid: str, content: Any, is_error: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tid, "content": content}
    if is_error:
        block["is_error"] = True
    return _user(uid, [block])


def _records(entries: list[dict[str, Any]]) -> list[Record]:
    return [record_from_dict(e) for e in entries]


def _conversation() -> list[Record]:
    return _records(
        [
            _user("u1", "Please fix the failing parser test in src/parse.py"),
            _assistant(
                "a1",
                "m1",
                [
                    {"type": "text", "text": "Reading the file."},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "Read",
                        "input": {"file_path": "/p/src/parse.py"},
                    },
                ],
            ),
            _result("r1", "t1", "def parse(): ..."),
            _assistant(
                "a2",
                "m2",
                [
                    {
                        "type": "tool_use",
                        "id": "t2",
                        "name": "Bash",
                        "input": {"command": "pytest -q"},
                    }
                ],
            ),
            _result("r2", "t2", "collected 3\nE AssertionError: 1 != 2\n1 failed", is_error=True),
            _user("meta", "caveat: local command output follows", isMeta=True),
            _user("u2", [{"type": "text", "text": "Also keep the old API working."}]),
            _assistant(
                "a3",
                "m3",
                [
                    {
                        "type": "tool_use",
                        "id": "t3",
                        "name": "Edit",
                        "input": {
                            "file_path": "/p/src/parse.py",
                            "old_string": "a",
                            "new_string": "b",
                        },
                    },
                    {
                        "type": "tool_use",
                        "id": "t4",
                        "name": "TodoWrite",
                        "input": {
                            "todos": [
                                {"content": "fix parser", "status": "completed"},
                                {"content": "keep old API", "status": "in_progress"},
                            ]
                        },
                    },
                ],
            ),
            _result("r3", "t3", "updated"),
            _result("r4", "t4", "ok"),
            _assistant("a4", "m4", [{"type": "text", "text": "The parser is fixed; now the API."}]),
            {"type": "system", "uuid": "s1", "subtype": "info", "content": "ignored"},
        ]
    )


def test_ledger_collects_facts() -> None:
    ledger = collect_ledger(_conversation())
    assert ledger.user_messages == [
        "Please fix the failing parser test in src/parse.py",
        "Also keep the old API working.",
    ]
    assert ledger.files_read == {"/p/src/parse.py": 1}
    assert ledger.files_edited == {"/p/src/parse.py": 1}
    assert len(ledger.commands) == 1
    assert ledger.commands[0].command == "pytest -q" and ledger.commands[0].ok is False
    assert "1 failed" in ledger.commands[0].output_tail
    assert [e.tool for e in ledger.errors] == ["Bash"]
    assert ledger.todos is not None and ledger.todos[1]["status"] == "in_progress"
    assert ledger.last_assistant_text == "The parser is fixed; now the API."


def test_offline_summary_has_nine_sections_and_formats_like_a_model_summary() -> None:
    raw = offline_summary(_conversation())
    assert raw.startswith("<summary>") and raw.endswith("</summary>")
    text = prompts.format_summary(raw)
    assert text.startswith("Summary:")
    for n in range(1, 10):
        assert f"\n{n}. " in text
    assert "Please fix the failing parser test in src/parse.py" in text
    assert "Also keep the old API working." in text
    assert "caveat" not in text  # meta entries are not user messages
    assert "`pytest -q`: FAILED" in text
    assert "changed: /p/src/parse.py" in text and "read: /p/src/parse.py" in text
    assert "[in_progress] keep old API" in text
    assert "Continue the task in progress: keep old API" in text
    assert "The parser is fixed; now the API." in text


def test_cleared_results_are_not_quoted_and_previous_summary_is_carried() -> None:
    recs = _conversation()
    previous = prompts.continuation_message(
        "Summary:\nEarlier: the user wanted a parser.", transcript_path="/x", trigger="auto"
    )
    recs.insert(0, record_from_dict(_user("sum", previous, isCompactSummary=True)))
    text = offline_summary(recs, cleared_tool_ids=frozenset({"t2"}))
    assert "1 failed" not in text
    assert "Earlier: the user wanted a parser." in text
    assert "without asking" not in text  # the wrapper of the old summary is dropped
    assert "Summary:" not in text.split("Carried over", 1)[0]


def test_offline_summary_of_a_large_synthetic_session_is_much_smaller() -> None:
    entries = make_session(entries=600, target_tokens=60_000)
    recs = _records(entries)
    text = offline_summary(recs)
    raw_chars = sum(len(r.raw) for r in recs)
    assert len(text) < raw_chars / 5
    user_prompts = [
        e["message"]["content"]
        for e in entries
        if e["type"] == "user" and isinstance(e["message"]["content"], str)
    ]
    assert user_prompts and all(p in text for p in user_prompts)


def test_long_user_message_is_clipped_with_a_marker() -> None:
    text = offline_summary(_records([_user("u", "x" * 20_000)]))
    assert "more characters in the transcript" in text
    assert len(text) < 8_000
