"""core/pieces.py: planning a summary in pieces, and context-length errors recognized."""

from __future__ import annotations

import pytest

from compactd.core import constants as c
from compactd.core.pieces import (
    MIN_PIECE_CHARS,
    context_limit,
    known_window,
    piece_budget,
    piece_prompt,
    plan_pieces,
    render_rounds,
    text_tokens,
)


def test_rounds_are_gathered_in_order_within_the_budget() -> None:
    rounds = [f"round {i} " + "x" * 90 for i in range(30)]
    pieces = plan_pieces(rounds, 1_000)
    assert all(len(piece) <= 1_000 for piece in pieces)
    assert "\n\n".join(pieces) == "\n\n".join(rounds)
    assert len(pieces) == 4  # nine rounds of 100 characters and their separators per piece


def test_a_round_larger_than_the_budget_is_cut_on_line_breaks() -> None:
    big = "\n".join(f"line {i:04d} " + "y" * 40 for i in range(100))
    pieces = plan_pieces(["small", big, "tail"], 1_200)
    assert all(len(piece) <= 1_200 for piece in pieces)
    joined = "".join(pieces)
    for i in range(100):
        assert f"line {i:04d} " in joined
    # A cut falls on a line break: no line is split across two pieces.
    assert all(piece.split("\n")[-1].startswith(("line", "tail")) for piece in pieces)


def test_plan_refuses_a_zero_budget() -> None:
    with pytest.raises(ValueError):
        plan_pieces(["a"], 0)


def test_render_rounds_heads_each_message_with_its_role() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "fix it"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "[called Bash with {}]"}]},
        {"role": "user", "content": [{"type": "text", "text": "[Bash result]\nok"}]},
        {"role": "assistant", "content": "done"},
    ]
    assert render_rounds(messages) == [
        "[user]\nfix it",
        "[assistant]\n[called Bash with {}]\n\n[user]\n[Bash result]\nok",
        "[assistant]\ndone",
    ]


def test_budget_of_an_8k_window() -> None:
    budget = piece_budget(8_192, "instruction " * 200)
    assert budget is not None
    assert budget.output_tokens == 2_048
    # Piece, carried summary, fixed text and reply fit the window with the margin.
    used = text_tokens("p" * budget.piece_chars) + 2 * budget.output_tokens
    assert used + text_tokens("instruction " * 200) <= 8_192


def test_budget_caps_the_reply_and_refuses_tiny_windows() -> None:
    big = piece_budget(1_000_000, "")
    assert big is not None and big.output_tokens == c.COMPACT_MAX_OUTPUT_TOKENS
    assert piece_budget(2_000, "x" * 3_000) is None
    small = piece_budget(4_096, "")
    assert small is not None and small.piece_chars >= MIN_PIECE_CHARS


def test_piece_prompt_carries_the_earlier_summary_and_the_instruction_last() -> None:
    first = piece_prompt("PART", 1, 3, None, "INSTRUCTION")
    assert "part 1" in first and "start of the conversation" in first
    assert first.endswith("INSTRUCTION")
    later = piece_prompt("PART", 2, 3, "EARLIER", "INSTRUCTION")
    assert later.index("EARLIER") < later.index("PART") < later.index("INSTRUCTION")


@pytest.mark.parametrize(
    ("message", "body", "window", "prompt"),
    [
        (
            "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9,000 tokens.",
            {"code": "context_length_exceeded"},
            8_192,
            9_000,
        ),
        (
            "request (4476 tokens) exceeds the available context size (4096 tokens), try "
            "increasing it",
            {"type": "exceed_context_size_error", "n_prompt_tokens": 4476, "n_ctx": 4096},
            4_096,
            4_476,
        ),
        (
            "the request exceeds the available context size, try increasing it",
            {"type": "exceed_context_size_error", "n_ctx": 2048},
            2_048,
            None,
        ),
        ("the input length exceeds the context length", None, None, None),
        ("prompt is too long: 219898 tokens > 200000 maximum", None, 200_000, 219_898),
        ("", {"code": "context_length_exceeded"}, None, None),
    ],
    ids=["openai", "llama", "llama-old", "ollama", "anthropic", "code-only"],
)
def test_context_length_errors_of_every_provider(
    message: str, body: object, window: int | None, prompt: int | None
) -> None:
    found = context_limit(message, body)
    assert found is not None
    assert (found.window, found.prompt_tokens) == (window, prompt)


@pytest.mark.parametrize(
    "message", ["Internal server error", "rate limit reached", "invalid x-api-key", "Overloaded"]
)
def test_other_errors_are_not_context_errors(message: str) -> None:
    assert context_limit(message, {"code": "server_error"}) is None


def test_known_windows() -> None:
    assert known_window("gpt-4o-mini") == 128_000
    assert known_window("openai/gpt-4.1-mini") == 1_047_576
    assert known_window("qwen2.5-coder:7b") is None
    assert known_window(None) is None
