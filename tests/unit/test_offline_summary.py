"""Unit tests of compactd.core.offline_summary on hand-built and synthetic transcripts."""

from __future__ import annotations

import re
from collections import Counter

from compactd.cli.synthetic import make_session
from compactd.core.ledger import build_ledger
from compactd.core.offline_summary import OFFLINE_HEADING, offline_summary
from compactd.transcript.model import Record
from tests.fidelity import items_of, many_commands, normalize
from tests.helpers import (
    assistant,
    text_block,
    to_records,
    tool_call,
    tool_result,
    tool_use_block,
    user,
)

TRACEBACK = "Traceback (most recent call last):\n" + "  File x.py, line 1\n" * 200


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
                "t2",
                "collected 3\n" + TRACEBACK + "E AssertionError: 1 != 2\n1 failed",
                uuid="r2",
                is_error=True,
            ),
            user("caveat: local command output follows", uuid="meta", isMeta=True),
            user(
                [text_block("Also keep the old API working:\n- parse()\n- parse_all()")], uuid="u2"
            ),
            assistant(
                [
                    tool_use_block(
                        "t3",
                        "Edit",
                        {"file_path": "/p/src/parse.py", "old_string": "a", "new_string": "b = 1"},
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
            tool_call("t5", "Bash", {"command": "pytest -q"}, uuid="a5", msg_id="m5"),
            tool_result("t5", "3 passed", uuid="r5"),
            assistant([text_block("The parser is fixed; now the API.")], uuid="a4", msg_id="m4"),
            {"type": "system", "uuid": "s1", "subtype": "info", "content": "ignored"},
        ]
    )


def test_offline_summary_reads_like_a_summary_in_nine_sections() -> None:
    text = offline_summary(build_ledger(_conversation(), cwd="/p"))
    assert text.startswith(OFFLINE_HEADING)
    for n in range(1, 10):
        assert f"\n{n}. " in text
    assert "First request: Please fix the failing parser test in src/parse.py" in text
    # A multi-line message is kept as written, in one block.
    assert "Latest request:\nAlso keep the old API working:\n- parse()\n- parse_all()" in text
    assert "caveat" not in text  # meta entries are not user messages
    assert "- src/parse.py: 1 edit; latest: b = 1" in text
    assert "Last successful build or test command: `pytest -q`" in text
    assert "`pytest -q` ok ×2, failed 1 of 2 runs" in text
    assert (
        "`pytest -q` failed: E AssertionError: 1 != 2 — fixed: it succeeded on a later run" in text
    )
    # The todo list is attached after the summary: it is named, not repeated.
    assert "The todo list is attached after this summary; 1 of its 2 items are open." in text
    assert "fix parser" not in text
    assert "Continue the item in progress in the todo list (item 2 of 2)." in text
    assert "keep old API" not in text
    assert "The parser is fixed; now the API." in text


def test_no_output_dumps_no_repeated_lines_no_cut_words() -> None:
    text = offline_summary(build_ledger(_conversation(), cwd="/p"))
    assert "File x.py" not in text and "collected 3" not in text
    lines = [line for line in text.splitlines() if line.strip()]
    assert [line for line, n in Counter(lines).items() if n > 1] == []
    for line in text.splitlines():
        if line.endswith("…"):
            assert line[-2] != " " and re.search(r"\w…$", line), line


def test_instructions_are_quoted_at_the_end() -> None:
    text = offline_summary(build_ledger(_conversation()), instructions=["Focus on the API."])
    assert text.endswith("which an offline summary cannot follow:\nFocus on the API.")


def test_a_large_session_fits_its_limit_and_keeps_every_user_message() -> None:
    entries = make_session(entries=600, target_tokens=60_000)
    records = to_records(entries)
    raw_chars = sum(len(r.raw) for r in records)
    for limit in (40_000, 12_000):
        text = offline_summary(build_ledger(records), limit=limit)
        assert len(text) <= limit
        assert len(text) < raw_chars / 5
        hay = normalize(text)
        assert all(normalize(m)[:60] in hay for m in items_of(entries).messages)


def test_hundreds_of_commands_are_grouped_not_cut_at_a_count() -> None:
    session = many_commands("/w/project", n=300)
    ledger = build_ledger(to_records(session.entries), cwd="/w/project")
    for limit in (60_000, 24_000):
        text = offline_summary(ledger, limit=limit)
        assert len(text) <= limit
        hay = normalize(text)
        found = [c for c in items_of(session.entries).commands if normalize(c)[:40] in hay]
        assert len(found) == 300, limit
    tight = offline_summary(ledger, limit=24_000)
    assert "Older commands by program" in tight
    assert "earlier commands not listed" not in tight
