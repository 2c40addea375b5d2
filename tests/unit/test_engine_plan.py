"""compact/auto decides once: the plan it decides on is the plan it carries out.

In process (an ``App`` over a temporary store, the offline summarizer): the survival ledger
and the offline summary of a compaction are counted where they are built, and compact/auto
above the threshold must build each once (docs/engine.md#plan), with session memory off and
on. The counting wraps the real functions and calls through to them.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from compactd import protocol as p
from compactd.app import App
from compactd.cli.synthetic import make_session
from compactd.core.constants import ENV_DISABLE_MICROCOMPACT
from compactd.engine import plan, summary_source
from compactd.engine.auto import decide_auto, run_auto
from compactd.engine.rehydrate import rehydrate_now
from compactd.engine.session import Session
from tests.helpers import counting_calls

MODEL = "claude-sonnet-4-5"


def _recent(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Recent timestamps: no time-based microcompact gets in the way of the decision.
    now = time.time()
    for i, entry in enumerate(entries):
        stamp = datetime.fromtimestamp(now - (len(entries) - i), UTC).isoformat()
        entry["timestamp"] = stamp.replace("+00:00", "Z")
    return entries


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    counted: Counter[str] = Counter()
    # Every place a compaction builds them (session memory's own extraction is not counted).
    for module in (plan, summary_source):
        ledger = counting_calls(counted, "ledger", module.build_ledger)
        monkeypatch.setattr(module, "build_ledger", ledger)
        summary = counting_calls(counted, "summary", module.offline_summary)
        monkeypatch.setattr(module, "offline_summary", summary)
    return counted


async def _opened(
    tmp_path: Path, notes: bool, entries: list[dict[str, Any]], env: dict[str, str] | None = None
) -> tuple[App, Session]:
    options = p.InitializationOptions(
        summarizer=p.SummarizerOptions(offline=True),
        session_memory=p.SessionMemoryOptions(enabled=True) if notes else None,
    )
    app = App(options, base_env=env or {}, data_dir=tmp_path / "data")
    opened = await app.open_session(
        p.OpenParams(cwd=str(tmp_path), model=MODEL, context_window=200_000)
    )
    session = await app.get_session(opened.session_id)
    await app.append(session, entries)
    return app, session


async def _no_progress(title: str) -> None:
    return None


ENTRIES = _recent(make_session(entries=1400, target_tokens=205_000, model=MODEL))


async def test_auto_without_session_memory_builds_the_ledger_and_summary_once(
    tmp_path: Path, counts: Counter[str]
) -> None:
    # Microcompact off: above the threshold, the full compaction is the only mechanism.
    app, session = await _opened(tmp_path, False, ENTRIES, {ENV_DISABLE_MICROCOMPACT: "1"})
    assert app.status(session).is_above_auto_compact_threshold
    result = await run_auto(app, app.session_memory, session, False, _no_progress)
    assert result.was_compacted and result.mechanism == "full", result.reason
    assert counts == Counter(ledger=1, summary=1)


async def test_the_plan_survives_the_microcompact_auto_commits_first(
    tmp_path: Path, counts: Counter[str]
) -> None:
    # Forced: microcompact commits first, then the full compaction carries out the plan made
    # before it (rebased past the microcompact's boundary, not planned again).
    app, session = await _opened(tmp_path, False, ENTRIES)
    result = await run_auto(app, app.session_memory, session, True, _no_progress)
    assert result.was_compacted and result.mechanism == "full", result.reason
    assert result.micro is not None and result.micro.tokens_saved > 0
    assert counts == Counter(ledger=1, summary=1)


async def test_the_preview_plans_what_auto_then_does_once_more_from_scratch(
    tmp_path: Path, counts: Counter[str]
) -> None:
    # The counter can fail: a preview plans (one ledger, one summary), and compact/auto after
    # it plans its own decision once again, with nothing more when it carries it out.
    app, session = await _opened(tmp_path, False, ENTRIES, {ENV_DISABLE_MICROCOMPACT: "1"})
    planned = await decide_auto(app, app.session_memory, session, False)
    assert planned.decision.mechanism == "full" and planned.compaction is not None
    assert counts == Counter(ledger=1, summary=1)
    await run_auto(app, app.session_memory, session, False, _no_progress)
    assert counts == Counter(ledger=2, summary=2)


async def test_auto_with_session_memory_builds_each_once(
    tmp_path: Path, counts: Counter[str]
) -> None:
    # Notes written halfway: what they leave unsummarized is too large, so the full
    # compaction is planned too; each plan builds its own ledger once, and the one summary
    # written is the full compaction's.
    half = len(ENTRIES) // 2
    app, session = await _opened(tmp_path, True, ENTRIES[:half])
    await app.session_memory.extract(session)
    await app.append(session, ENTRIES[half:])
    result = await run_auto(app, app.session_memory, session, True, _no_progress)
    assert result.was_compacted, result.reason
    if result.mechanism == "full":
        assert counts == Counter(ledger=2, summary=1)
    else:
        assert result.mechanism == "sessionMemory"
        assert counts == Counter(ledger=1)


async def test_auto_from_fitting_notes_never_plans_the_full_compaction(
    tmp_path: Path, counts: Counter[str]
) -> None:
    app, session = await _opened(tmp_path, True, ENTRIES)
    await app.session_memory.extract(session)
    result = await run_auto(app, app.session_memory, session, True, _no_progress)
    assert result.was_compacted and result.mechanism == "sessionMemory", result.reason
    # The notes are the summary: one ledger (checked against them), no offline summary.
    assert counts == Counter(ledger=1)


async def test_extras_supplied_after_the_decision_make_its_plan_stale(tmp_path: Path) -> None:
    # The plan's rehydration read the extras its snapshot held: new ones (attachments/rehydrate,
    # remembered by the rehydration feature) mean planning again, the same ones do not.
    app, session = await _opened(tmp_path, False, ENTRIES, {ENV_DISABLE_MICROCOMPACT: "1"})
    planned = (await decide_auto(app, app.session_memory, session, False)).compaction
    assert planned is not None and planned.snapshot.extras is None
    assert planned.rebased(session, app.status(session)) is planned
    extras = p.RehydrationExtras(announcements=[{"type": "mcp_instructions_delta"}])
    await rehydrate_now(app, session, extras)
    assert planned.rebased(session, app.status(session)) is None
    replanned = (await decide_auto(app, app.session_memory, session, False)).compaction
    assert replanned is not None and replanned.snapshot.extras is extras
    assert replanned.rebased(session, app.status(session)) is replanned
