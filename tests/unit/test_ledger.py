"""Unit tests of the survival ledger and the summary check (core/ledger.py)."""

from __future__ import annotations

from typing import Any

from compactd.core.ledger import (
    LEDGER_SECTION_TITLE,
    LEDGER_VERBATIM_PREFIX_CHARS,
    build_ledger,
    check_summary,
    complete_summary,
)
from compactd.core.offline_summary import offline_summary
from compactd.core.prompts import format_summary
from compactd.transcript.model import Record, record_from_dict


def _user(uid: str, content: Any, **extra: Any) -> Record:
    return record_from_dict(
        {"type": "user", "uuid": uid, "message": {"role": "user", "content": content}, **extra}
    )


def _call(uid: str, tid: str, name: str, inp: dict[str, Any]) -> Record:
    block = {"type": "tool_use", "id": tid, "name": name, "input": inp}
    return record_from_dict(
        {
            "type": "assistant",
            "uuid": uid,
            "message": {"role": "assistant", "id": f"m{uid}", "content": [block]},
        }
    )


def _result(uid: str, tid: str, text: str, error: bool = False) -> Record:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tid, "content": text}
    if error:
        block["is_error"] = True
    return _user(uid, [block])


LONG = "Refactor the tokenizer so that " + "every branch is covered, " * 40 + "and stop."

RECORDS = [
    _user("u1", "Please fix the parser.\nYou must never edit   config.py by hand."),
    _call("a1", "t1", "Read", {"file_path": "/repo/parser.py"}),
    _result("r1", "t1", "def parse(): ..."),
    _call("a2", "t2", "Bash", {"command": "pytest -q"}),
    _result("r2", "t2", "1 failed", error=True),
    _user("m1", "<system-reminder>\nnot typed by a person\n</system-reminder>"),
    _user("m2", "meta text", isMeta=True),
    _user("u2", LONG),
    _call("a3", "t3", "Edit", {"file_path": "/repo/lexer.py", "old_string": "a"}),
]


def test_ledger_collects_messages_paths_commands_errors_and_constraints() -> None:
    ledger = build_ledger(RECORDS)
    assert ledger.user_messages == [
        "Please fix the parser.\nYou must never edit   config.py by hand.",
        LONG,
    ]
    assert ledger.file_paths == ["/repo/lexer.py", "/repo/parser.py"]
    assert [(c.command, c.ok) for c in ledger.commands] == [("pytest -q", False)]
    assert [e.message for e in ledger.errors] == ["1 failed"]
    assert ledger.constraints == ["You must never edit config.py by hand."]


def test_missing_user_message_constraint_and_path_are_restored() -> None:
    summary = "Summary:\n1. Work on /repo/parser.py. Refactor the tokenizer so that every"
    text, restored = complete_summary(summary, build_ledger(RECORDS))
    assert text.startswith(summary)
    section = text[len(summary) :]
    assert LEDGER_SECTION_TITLE in section
    assert "> Please fix the parser." in section
    assert "/repo/lexer.py" in section and "/repo/parser.py" not in section
    assert restored[0].startswith("user message: Please fix the parser.")
    assert "file: /repo/lexer.py" in restored
    # A few words of the long message are not enough to count as quoted.
    assert any(r.startswith("user message: Refactor") for r in restored)


def test_long_message_counts_as_present_with_a_verbatim_prefix() -> None:
    prefix = " ".join(LONG.split())[:LEDGER_VERBATIM_PREFIX_CHARS]
    summary = f"Summary: Please fix the parser. You must never edit config.py by hand.\n{prefix}"
    missing = check_summary(build_ledger(RECORDS), summary + " /repo/lexer.py /repo/parser.py")
    assert not missing


def test_constraint_in_the_unquoted_tail_of_a_long_message_is_restored() -> None:
    long = "Port the lexer. " + "Keep the public names stable. " * 20 + "Never push to main."
    records = [_user("u", long)]
    prefix = " ".join(long.split())[:LEDGER_VERBATIM_PREFIX_CHARS]
    text, restored = complete_summary(f"Summary: {prefix} [...]", build_ledger(records))
    assert restored == ["constraint: Never push to main."]
    assert "Constraints the user stated:\n   - Never push to main." in text


def test_constraint_inside_a_missing_message_is_not_listed_twice() -> None:
    missing = check_summary(build_ledger(RECORDS[:1]), "Summary: nothing")
    assert len(missing.user_messages) == 1
    assert missing.constraints == []


def test_nothing_added_when_the_summary_is_complete() -> None:
    summary = format_summary(offline_summary(RECORDS))
    text, restored = complete_summary(summary, build_ledger(RECORDS))
    assert restored == []
    assert text == summary


def test_whitespace_and_quote_markers_do_not_matter() -> None:
    records = [_user("u", "line one\n\nline   two")]
    _, restored = complete_summary(
        "Summary:\n   > line one\n   >\n   > line two", build_ledger(records)
    )
    assert restored == []
