"""Pure session-memory logic: the kept part, the trigger rule, the notes and their truncation."""

from __future__ import annotations

from typing import Any

from compactd.core import session_memory as sm
from compactd.core import split, tokens
from compactd.core.ledger import build_ledger
from compactd.transcript.model import Entry
from tests.helpers import (
    assistant,
    text_block,
    to_entries,
    to_records,
    tool_call,
    tool_result,
    tool_use_block,
    user,
)

# One token per 4 characters: a 4,000-character text is about 1,000 raw tokens.
CHUNK = "x" * 4_000


def _ls(tid: str) -> dict[str, Any]:
    return tool_use_block(tid, "Bash", {"command": "ls"})


def chat(turns: int, size: str = CHUNK) -> list[Entry]:
    """``turns`` rounds of: user prompt, assistant text (each ~1,000 raw tokens)."""
    out = []
    for i in range(turns):
        out.append(user(f"request {i} " + size, uuid=f"u{i}"))
        out.append(assistant([text_block(f"answer {i} " + size)], uuid=f"a{i}", msg_id=f"m{i}"))
    return to_entries(out)


def kept_tokens(entries: list[Entry], start: int) -> int:
    return tokens.pad(sum(tokens.estimate_entry_raw(e) for e in entries[start:]))


# -- kept entries -------------------------------------------------------------------------------


def test_expands_back_until_min_tokens() -> None:
    entries = chat(20)  # 40 entries of ~1,000 raw (1,334 padded with the rest) tokens each
    start = sm.kept_start(entries, len(entries), 0, sm.KeepRule(min_tokens=10_000))
    assert kept_tokens(entries, start) >= 10_000
    # One entry fewer would not have been enough (it stops as soon as the minimum is met).
    assert kept_tokens(entries, start + 1) < 10_000


def test_expands_back_until_min_text_entries() -> None:
    entries = chat(20, size="y" * 40)  # tiny entries: the token minimum is never met
    rule = sm.KeepRule(min_tokens=0, min_text_entries=7, max_tokens=40_000)
    start = sm.kept_start(entries, len(entries), 0, rule)
    # Exactly 7: a new response is a safe place to cut, so no adjustment is needed.
    assert len(entries) - start == 7
    rule = sm.KeepRule(min_tokens=0, min_text_entries=8, max_tokens=40_000)
    assert len(entries) - sm.kept_start(entries, len(entries), 0, rule) == 8


def test_both_minimums_must_hold() -> None:
    entries = chat(20)
    rule = sm.KeepRule(min_tokens=1, min_text_entries=6, max_tokens=100_000)
    assert len(entries) - sm.kept_start(entries, len(entries), 0, rule) == 6
    rule = sm.KeepRule(min_tokens=8_000, min_text_entries=1, max_tokens=100_000)
    start = sm.kept_start(entries, len(entries), 0, rule)
    assert kept_tokens(entries, start) >= 8_000 and len(entries) - start > 1


def test_stops_at_max_tokens() -> None:
    entries = chat(20)
    rule = sm.KeepRule(min_tokens=1_000_000, min_text_entries=100, max_tokens=12_000)
    start = sm.kept_start(entries, len(entries), 0, rule)
    assert kept_tokens(entries, start) <= 12_000
    assert kept_tokens(entries, start - 2) > 12_000  # the previous safe cut is over the cap


def test_unsummarized_tail_above_max_is_kept_whole() -> None:
    entries = chat(20)
    rule = sm.KeepRule(max_tokens=5_000)
    # The notes cover only the first 4 entries: everything after must stay, whatever its size.
    assert sm.kept_start(entries, 4, 0, rule) == 4


def test_never_before_the_floor() -> None:
    entries = chat(20)
    rule = sm.KeepRule(min_tokens=1_000_000, min_text_entries=1_000, max_tokens=10_000_000)
    assert sm.kept_start(entries, len(entries), 6, rule) == 6
    # A first-unsummarized index before the floor is raised to it.
    assert sm.kept_start(entries, 2, 6, rule) == 6


def test_tool_pairs_and_responses_stay_intact() -> None:
    entries = to_entries(
        [
            user("start " + CHUNK, uuid="u0"),
            # One response written as two entries, each with a tool call, results in between.
            assistant([text_block("working"), _ls("t1")], uuid="a1", msg_id="m1"),
            tool_result("t1", CHUNK, uuid="r1"),
            assistant([_ls("t2")], uuid="a2", msg_id="m1"),
            tool_result("t2", CHUNK, uuid="r2"),
            assistant([text_block("done " + CHUNK)], uuid="a3", msg_id="m2"),
            user("next " + CHUNK, uuid="u1"),
            assistant([text_block("ok")], uuid="a4", msg_id="m3"),
        ]
    )
    for want in range(1, 5):
        # Every start inside the first response is pulled back before it.
        rule = sm.KeepRule(min_tokens=0, min_text_entries=0, max_tokens=100_000)
        start = sm.kept_start(entries, want, 0, rule)
        assert start in (0, 1), want
        assert split.is_safe_cut(entries, start)
    # A cut that would have to move before the floor moves forward instead.
    rule = sm.KeepRule(min_tokens=0, min_text_entries=0, max_tokens=100_000)
    start = sm.kept_start(entries, 3, 2, rule)
    assert start == 5 and split.is_safe_cut(entries, start)


# -- trigger ------------------------------------------------------------------------------------


def test_trigger_rule() -> None:
    rule = sm.TriggerRule(min_init_tokens=10_000, min_token_growth=5_000, min_tool_calls=3)

    def go(now: int, last: int | None, calls: int, last_turn_tools: bool) -> bool:
        return sm.should_extract(
            rule,
            tokens_now=now,
            tokens_at_last=last,
            tool_calls_since=calls,
            last_turn_tool_calls=last_turn_tools,
        )

    assert not go(9_999, None, 10, True)  # not enough to start notes
    assert go(10_000, None, 3, True)
    assert not go(14_999, 10_000, 10, False)  # growth below the minimum
    assert go(15_000, 10_000, 3, True)  # enough tool calls
    assert not go(15_000, 10_000, 2, True)  # too few tool calls, last turn still calling
    assert go(15_000, 10_000, 0, False)  # ... unless the last turn made no tool call
    assert not go(4_000, 10_000, 10, False)  # shrank (a compaction): no growth


def test_tool_call_counting() -> None:
    entries = to_entries(
        [
            user("go", uuid="u0"),
            assistant([_ls("t1"), _ls("t2")], uuid="a1", msg_id="m1"),
            tool_result("t1", "ok", uuid="r1"),
            assistant([text_block("done")], uuid="a2", msg_id="m2"),
        ]
    )
    assert sm.tool_call_count(entries) == 2
    assert sm.last_turn_has_tool_calls(entries) is False
    assert sm.last_turn_has_tool_calls(entries[:3]) is True
    assert sm.last_turn_has_tool_calls(entries[:1]) is None
    # Several entries of one response: a tool call in any of them counts.
    split_response = to_entries(
        [
            assistant([_ls("t1")], uuid="a1", msg_id="m1"),
            tool_result("t1", "ok", uuid="r1"),
            assistant([text_block("and")], uuid="a2", msg_id="m1"),
        ]
    )
    assert sm.last_turn_has_tool_calls(split_response) is True


# -- notes --------------------------------------------------------------------------------------


def test_template_has_the_ten_sections_and_no_content() -> None:
    notes = sm.template()
    headings = [h for h, _ in sm.parse_sections(notes)]
    assert headings == [s.heading for s in sm.SECTIONS] and len(headings) == 10
    assert not sm.has_content(notes)
    filled = notes.replace("# Worklog\n", "# Worklog\n", 1) + "- ran the tests\n"
    assert sm.has_content(filled)


def test_truncation_per_section_with_marker() -> None:
    sections = {s.heading: "" for s in sm.SECTIONS}
    sections["Current State"] = "short state"
    sections["Worklog"] = "\n".join(f"- step {i} " + "z" * 60 for i in range(400))  # ~28K chars
    notes = "\n".join(f"# {h}\n{b}\n" for h, b in sections.items())
    out = sm.notes_for_summary(notes, "/data/s/notes.md", max_chars=8_000)
    parsed = dict(sm.parse_sections(out))
    assert parsed["Current State"] == "short state"
    worklog = parsed["Worklog"]
    assert len(worklog) < 8_000 + 200
    assert "/data/s/notes.md" in worklog and "more characters" in worklog
    assert worklog.startswith("- step 0 ")
    assert "- step 399" not in worklog
    assert "/data/s/notes.md" not in parsed["Current State"]
    # Guide lines and empty sections are left out of the summary.
    from_template = sm.template().replace("# Learnings\n", "# Learnings\n- use uv\n", 1)
    assert sm.notes_for_summary(from_template, "/n.md").startswith("# Learnings\n")
    assert sm.notes_for_summary(from_template, "/n.md").endswith("- use uv")


def test_oversized_sections_trigger_condense_instruction() -> None:
    small = sm.template()
    assert sm.oversized_sections(small) == ([], False)
    assert "Condense" not in sm.extraction_instruction(small, "/n.md")
    big = small.replace("# Learnings\n", "# Learnings\n" + "w" * 9_000 + "\n", 1)
    over, total = sm.oversized_sections(big)
    assert over == ["Learnings"] and not total
    instruction = sm.extraction_instruction(big, "/n.md")
    assert "Condense" in instruction and "'Learnings'" in instruction
    assert f"<{sm.NOTES_REPLY_TAG}>" in instruction and "/n.md" in instruction


def test_parse_notes_reply() -> None:
    notes = "# Session Title\nFix the parser\n"
    assert sm.parse_notes_reply(f"blah <session_notes>\n{notes}</session_notes>") == notes
    assert sm.parse_notes_reply(f"```markdown\n{notes}```") == notes
    assert sm.parse_notes_reply("I will now read the file.") is None
    assert sm.parse_notes_reply("<session_notes>no headings</session_notes>") is None


def test_offline_notes_from_the_ledger() -> None:
    recs = to_records(
        [
            user("Please fix the flaky test in tests/test_io.py", uuid="u0"),
            tool_call(
                "t1", "Bash", {"command": "pytest -x tests/test_io.py"}, uuid="a1", msg_id="m1"
            ),
            tool_result("t1", "1 failed", uuid="r1"),
            assistant([text_block("The test races on a temp file.")], uuid="a2", msg_id="m2"),
        ]
    )
    notes = sm.offline_notes(build_ledger(recs))
    parsed = dict(sm.parse_sections(notes))
    assert [h for h, _ in sm.parse_sections(notes)] == [s.heading for s in sm.SECTIONS]
    assert "flaky test" in parsed["Session Title"]
    assert "races on a temp file" in parsed["Current State"]
    assert "pytest -x tests/test_io.py" in parsed["Workflow"]
    assert sm.has_content(notes)
    # The title of earlier notes is kept.
    again = sm.offline_notes(build_ledger(recs), notes.replace("Please fix", "Fixing", 1))
    assert "Fixing" in dict(sm.parse_sections(again))["Session Title"]
