"""core/handback: what Claude Code's summary dropped, found in the span it replaced and handed
back within the character budget; core/agent_gauge: the count against the threshold."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from compactd.core.agent_gauge import gauge, status_line, warning_text
from compactd.core.handback import (
    HANDBACK_TITLE,
    compaction_in_progress,
    hand_back,
    last_compaction,
)
from compactd.core.ledger import build_ledger, check_summary
from compactd.core.recall import pointer
from compactd.transcript.model import Record, record_from_dict
from tests.conftest import load_fixture

COMPACTED = [
    "claude-code-2.1.330__r2_auto.jsonl",
    "claude-code-2.1.330__r16_manual.jsonl",
    "NotTahaAli__sessclone__compaction.jsonl",
]
LIMIT = 9_000


def _user(uid: str, text: str, parent: str | None = None) -> dict[str, Any]:
    return {
        "type": "user",
        "uuid": uid,
        "parentUuid": parent,
        "message": {"role": "user", "content": text},
    }


def _tool(uid: str, name: str, args: dict[str, Any], n: int = 1) -> list[dict[str, Any]]:
    """A tool call of the assistant (with usage) and its result."""
    tid = f"toolu_{uid}"
    call = {"type": "tool_use", "id": tid, "name": name, "input": args}
    result = {"type": "tool_result", "tool_use_id": tid, "content": "ok"}
    usage = {"input_tokens": 100 * n, "output_tokens": 10}
    return [
        {
            "type": "assistant",
            "uuid": f"{uid}-a",
            "message": {
                "role": "assistant",
                "id": f"msg_{uid}",
                "content": [call],
                "usage": usage,
                "model": "claude-sonnet-4-5",
            },
        },  # fmt: skip
        {"type": "user", "uuid": f"{uid}-r", "message": {"role": "user", "content": [result]}},
    ]


def _bash(uid: str, command: str, n: int) -> list[dict[str, Any]]:
    return _tool(uid, "Bash", {"command": command}, n)


def _read(uid: str, path: str) -> list[dict[str, Any]]:
    return _tool(uid, "Read", {"file_path": path})


def _boundary(uid: str) -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "compact_boundary",
        "uuid": uid,
        "parentUuid": None,
        "content": "Conversation compacted",
        "compactMetadata": {"trigger": "auto", "preTokens": 1000, "postTokens": 300},
    }


def _summary(uid: str, text: str) -> dict[str, Any]:
    out = _user(uid, text)
    out["isCompactSummary"] = True
    return out


def _records(lines: list[dict[str, Any]]) -> list[Record]:
    return [record_from_dict(line) for line in lines]


def _session(messages: int = 3, long: int = 0) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for i in range(messages):
        text = f"request {i}: please fix the zebra parser, word {i}" + (" filler" * long)
        lines.append(_user(f"u{i}", text))
        lines += _bash(f"b{i}", f"pytest tests/test_zebra_{i}.py", i + 1)
        lines += _read(f"r{i}", f"/proj/src/zebra_{i}.py")
    return lines


def _accounted(text: str, missing_messages: list[Any]) -> None:
    """Each dropped message is quoted, or named by its pointer, or counted with the others."""
    counted = re.search(r"(\d+) earlier messages", text)
    n = int(counted.group(1)) if counted else 0
    unnamed = [
        m for m in missing_messages if m.text[:60] not in text and pointer(m.uuid) not in text
    ]
    assert len(unnamed) <= n, [m.text[:60] for m in unnamed]


@pytest.mark.parametrize("name", COMPACTED)
def test_fixture_hand_back_holds_what_the_summary_dropped(name: str) -> None:
    records = load_fixture(name)
    compaction = last_compaction(records)
    assert compaction is not None and compaction.summary
    back = hand_back(compaction, limit=LIMIT, cwd="/home/dev/project")
    ledger = build_ledger(compaction.replaced, cwd="/home/dev/project")
    missing = check_summary(ledger, compaction.summary)
    assert missing.messages, "each fixture's summary drops the user's exact words"
    assert back.text.startswith(HANDBACK_TITLE) and len(back.text) <= LIMIT
    for m in missing.messages:
        assert m.text in back.text
    for run in missing.commands:
        assert run.command in back.text
    for f in missing.files:
        assert f.shown in back.text


def test_r2_auto_span_leaves_out_the_preserved_segment() -> None:
    compaction = last_compaction(load_fixture("claude-code-2.1.330__r2_auto.jsonl"))
    assert compaction is not None
    replaced = {r.entry.uuid for r in compaction.replaced}
    assert "23cd08a2-06fe-4389-94b8-15b8dc646543" not in replaced  # preservedSegment head
    assert "a5ed5101-4446-400e-86c2-52b822cb8df1" in replaced  # the user's prompt
    assert compaction.trigger == "auto" and compaction.post_tokens == 2939


def test_no_boundary_yet() -> None:
    records = _records(_session())
    assert last_compaction(records) is None
    fresh = compaction_in_progress(records, "", "auto")
    back = hand_back(fresh, limit=LIMIT)
    for i in range(3):
        assert f"request {i}: please fix the zebra parser" in back.text
        assert f"pytest tests/test_zebra_{i}.py" in back.text
        assert f"zebra_{i}.py" in back.text


def test_boundary_without_its_summary_is_no_compaction_yet() -> None:
    records = _records([*_session(), _boundary("B1")])
    assert last_compaction(records) is None


def test_summary_with_nothing_missing() -> None:
    lines = _session(2)
    quoted = "\n".join(
        [f"- {line['message']['content']}" for line in lines if line["uuid"].startswith("u")]
        + ["pytest tests/test_zebra_0.py", "pytest tests/test_zebra_1.py"]
        + ["/proj/src/zebra_0.py", "/proj/src/zebra_1.py"]
    )
    records = _records([*lines, _boundary("B1"), _summary("S1", quoted)])
    compaction = last_compaction(records)
    assert compaction is not None
    back = hand_back(compaction, limit=LIMIT)
    assert back.text == "" and back.counts == (0, 0, 0)
    assert back.kept_line() == "2 of 2 user messages, 2 of 2 commands, 2 of 2 files"


def test_legacy_summary_without_a_boundary() -> None:
    records = _records([*_session(2), _summary("S1", "The user worked on a parser.")])
    compaction = last_compaction(records)
    assert compaction is not None and compaction.boundary_id == "S1"
    back = hand_back(compaction, limit=LIMIT)
    assert "request 1: please fix the zebra parser, word 1" in back.text


def test_second_compaction_span_starts_at_the_first_and_carries_its_items() -> None:
    first = _session(2)
    second = [_user("v1", "now the giraffe exporter please")]
    lines = [*first, _boundary("B1"), _summary("S1", "first summary"), *second]
    lines += [_boundary("B2"), _summary("S2", "second summary")]
    records = _records(lines)
    compaction = last_compaction(records)
    assert compaction is not None and compaction.previous_boundary_id == "B1"
    assert [r.entry.uuid for r in compaction.replaced if r.entry.uuid == "u0"] == []
    earlier = hand_back(last_compaction(records[: len(first) + 2]) or compaction, limit=LIMIT)
    back = hand_back(compaction, limit=LIMIT, carry=earlier.carry)
    assert "now the giraffe exporter please" in back.text
    assert "request 0: please fix the zebra parser" in back.text  # carried from round one
    assert hand_back(compaction, limit=LIMIT).text.count("zebra parser") == 0


@pytest.mark.parametrize("messages,long", [(300, 0), (40, 400), (5, 4000)])
def test_always_within_budget_and_nothing_cut_silently(messages: int, long: int) -> None:
    records = _records([*_session(messages, long), _boundary("B1"), _summary("S1", "short")])
    compaction = last_compaction(records)
    assert compaction is not None
    back = hand_back(compaction, limit=LIMIT)
    assert len(back.text) <= LIMIT
    assert len(json.dumps({"additionalContext": back.text})) < 10_000
    _accounted(back.text, list(back.missing.messages))
    if long >= 4000:  # a long message: its opening words and a pointer to the whole
        assert pointer("u0") in back.text and "request 0: please fix" in back.text


def test_gauge_one_million_window_and_status_line() -> None:
    big = gauge(500_000, "claude-sonnet-4-5", {})
    assert big.window == 1_000_000 and big.level is None
    g = gauge(170_000, "claude-sonnet-4-5", {}, 200_000)
    assert g.level == "autoCompact" and g.share > 1
    assert "auto-compact threshold" in warning_text(g)
    # Claude Code's warning and error levels are the same distance below the threshold.
    assert gauge(150_000, "claude-sonnet-4-5", {}, 200_000).level in ("warning", "error")
    assert gauge(100_000, "claude-sonnet-4-5", {}, 200_000).level is None
    override = gauge(
        150_000, "claude-sonnet-4-5", {"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "50"}, 200_000
    )
    assert override.limit < g.limit and override.level == "autoCompact"
    line = status_line(g, "last compaction: restored 2 msgs", 160_000)
    assert line.startswith("compactd · 170,000 tok") and "⚠" in line and "\n" not in line
    assert "⚠" not in status_line(g, None, 10_000)
    assert "auto-compact" not in status_line(
        gauge(1, None, {"DISABLE_AUTO_COMPACT": "1"}), None, None
    )
