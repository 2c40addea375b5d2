"""Unit tests of compactd.core.prompts: prompt kinds, formatting, continuation messages."""

from __future__ import annotations

import pytest

from compactd.core import prompts


def test_full_prompt_forbids_tools_at_start_and_end_and_has_nine_sections() -> None:
    text = prompts.compact_prompt("full")
    assert text.startswith(prompts.NO_TOOLS_PREAMBLE)
    assert text.endswith(prompts.NO_TOOLS_REMINDER)
    assert "<analysis>" in text and "<summary>" in text
    for n, title in enumerate(
        [
            "Primary Request and Intent",
            "Key Technical Concepts",
            "Files and Code Sections",
            "Errors and Fixes",
            "Problem Solving",
            "All User Messages",
            "Pending Tasks",
            "Current Work",
            "Optional Next Step",
        ],
        1,
    ):
        assert f"{n}. {title}:" in text
    assert prompts.ADDITIONAL_INSTRUCTIONS_HEADING not in text


def test_custom_instructions_follow_in_order_under_the_heading_before_the_reminder() -> None:
    text = prompts.compact_prompt("full", ["focus on the parser", "", "  mention tests  "])
    heading = text.index(prompts.ADDITIONAL_INSTRUCTIONS_HEADING)
    first = text.index("focus on the parser")
    second = text.index("mention tests")
    assert heading < first < second < text.index(prompts.NO_TOOLS_REMINDER)
    assert text.count(prompts.ADDITIONAL_INSTRUCTIONS_HEADING) == 1


def test_join_instructions_orders_request_then_hook_and_drops_blanks() -> None:
    assert prompts.join_instructions("a", None, "  ", "b") == "a\n\nb"
    assert prompts.join_instructions(None, "") is None


def test_partial_and_subagent_variants() -> None:
    up_to = prompts.compact_prompt("partialUpTo")
    assert "8. Work Completed:" in up_to
    assert "9. Context for Continuing Work:" in up_to
    assert "Current Work:" not in up_to
    from_ = prompts.compact_prompt("partialFrom")
    assert "must not be summarized again" in from_
    sub = prompts.compact_prompt("subagent")
    for title in (
        "Task Overview",
        "Current State",
        "Important Discoveries",
        "Next Steps",
        "Context to Preserve",
    ):
        assert title in sub
    assert "<summary>" in sub
    with pytest.raises(ValueError):
        prompts.compact_prompt("sideways")  # type: ignore[arg-type]


def test_format_summary_drops_analysis_and_collapses_blank_runs() -> None:
    raw = (
        "<analysis>\nscratch work\n</analysis>\n\n<summary>\n1. Primary Request:\n"
        "   build it\n\n\n\n2. Next:\n   ship\n</summary>"
    )
    out = prompts.format_summary(raw)
    assert "scratch" not in out
    assert out.startswith("Summary:\n1. Primary Request:")
    assert "\n\n\n" not in out
    assert "<summary>" not in out and "</summary>" not in out
    assert out.endswith("ship")


def test_format_summary_keeps_a_truncated_summary() -> None:
    raw = "<analysis>\nunfinished draft\n<summary>\n1. Request: partial text"
    out = prompts.format_summary(raw)
    assert out == "Summary:\n1. Request: partial text"


def test_format_summary_of_text_without_tags_is_tidied_text() -> None:
    assert prompts.format_summary("  plain words\n\n\n\nmore  ") == "plain words\n\nmore"


def test_continuation_message_manual_auto_and_partial() -> None:
    manual = prompts.continuation_message(
        "Summary:\nX", transcript_path="/tmp/t.jsonl", trigger="manual"
    )
    assert "Summary:\nX" in manual
    assert "/tmp/t.jsonl" in manual
    assert "without asking" not in manual
    auto = prompts.continuation_message(
        "Summary:\nX", transcript_path=None, trigger="auto", recent_messages_kept=True
    )
    assert "without asking the user" in auto
    assert "recap" in auto
    assert "follow, unchanged" in auto
    assert prompts.strip_continuation(auto) == "Summary:\nX"
    assert prompts.strip_continuation(manual) == "Summary:\nX"
