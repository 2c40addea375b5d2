"""Unit tests of compactd.core.offline_summary on hand-built and synthetic transcripts."""

from __future__ import annotations

from compactd.core import prompts
from compactd.core.offline_summary import collect_ledger, offline_summary
from compactd.core.synthetic import make_session
from compactd.transcript.model import Record, record_from_dict
from tests.helpers import (
    assistant,
    text_block,
    to_records,
    tool_call,
    tool_result,
    tool_use_block,
    user,
)


def _conversation() -> list[Record]:
    return to_records(
        [
            user("Please fix the failing parser test in src/parse.py", uuid="u1"),
            assistant(
                [
                    text_block("Reading the file."),
                    tool_use_block("t1", "Read", {"file_path": "/p/src/parse.py"}),
                ],
                uuid="a1",
                msg_id="m1",
            ),
            tool_result("t1", "def parse(): ...", uuid="r1"),
            tool_call("t2", "Bash", {"command": "pytest -q"}, uuid="a2", msg_id="m2"),
            tool_result(
                "t2", "collected 3\nE AssertionError: 1 != 2\n1 failed", uuid="r2", is_error=True
            ),
            user("caveat: local command output follows", uuid="meta", isMeta=True),
            user([text_block("Also keep the old API working.")], uuid="u2"),
            assistant(
                [
                    tool_use_block(
                        "t3",
                        "Edit",
                        {"file_path": "/p/src/parse.py", "old_string": "a", "new_string": "b"},
                    ),
                    tool_use_block(
                        "t4",
                        "TodoWrite",
                        {
                            "todos": [
                                {"content": "fix parser", "status": "completed"},
                                {"content": "keep old API", "status": "in_progress"},
                            ]
                        },
                    ),
                ],
                uuid="a3",
                msg_id="m3",
            ),
            tool_result("t3", "updated", uuid="r3"),
            tool_result("t4", "ok", uuid="r4"),
            assistant([text_block("The parser is fixed; now the API.")], uuid="a4", msg_id="m4"),
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
    recs.insert(0, record_from_dict(user(previous, uuid="sum", isCompactSummary=True)))
    text = offline_summary(recs, cleared_tool_ids=frozenset({"t2"}))
    assert "1 failed" not in text
    assert "Earlier: the user wanted a parser." in text
    assert "without asking" not in text  # the wrapper of the old summary is dropped
    assert "Summary:" not in text.split("Carried over", 1)[0]


def test_offline_summary_of_a_large_synthetic_session_is_much_smaller() -> None:
    entries = make_session(entries=600, target_tokens=60_000)
    recs = to_records(entries)
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
    text = offline_summary(to_records([user("x" * 20_000, uuid="u")]))
    assert "more characters in the transcript" in text
    assert len(text) < 8_000
