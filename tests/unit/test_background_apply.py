"""Applying a summary prepared in the background reads its check, worked out when it arrived.

In process (an ``App`` over a temporary store, its summarizer on the Messages API emulator, the
real anthropic SDK over HTTP): a session above its threshold prepares a summary in the
background; once it is ready, ``compact/full`` applies it. Completing a summary against the
survival ledger and checking it (``written``, ``check_summary``) are counted where the apply
step would call them: the job already holds their result, so the compaction that applies it
calls neither, and commits what the check worked out (docs/background.md#applying).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from compactd import protocol as p
from compactd.app import App
from compactd.cli.synthetic import make_session
from compactd.engine import summary_source
from compactd.engine.background import preparation_of, run_full
from tests.emulator import Emulator
from tests.helpers import counting_calls, emulator_options

MODEL = "claude-sonnet-4-5"


async def _no_progress(title: str) -> None:
    return None


def _now(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Recent timestamps: no time-based microcompact gets in the way.
    for i, entry in enumerate(entries):
        at = time.gmtime(time.time() - (len(entries) - i))
        entry["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", at)
    return entries


async def test_a_prepared_summary_is_checked_before_the_compaction_that_applies_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = _now(make_session(entries=300, target_tokens=110_000, model=MODEL, seed=7))
    with Emulator() as emu:
        raw = emulator_options(emu, backgroundCompaction={"enabled": True})
        options = msgspec.convert(raw, p.InitializationOptions)
        app = App(options, base_env={}, data_dir=tmp_path / "data")
        async with anyio.create_task_group() as group:
            app.task_group = group
            opened = await app.open_session(
                p.OpenParams(cwd=str(tmp_path), model=MODEL, context_window=100_000)
            )
            session = await app.get_session(opened.session_id)
            await app.append(session, entries)
            assert app.status(session).is_above_auto_compact_threshold
            feature = preparation_of(session)
            assert feature is not None
            running = feature.running()
            assert running is not None  # above the threshold: it started with the append
            with anyio.fail_after(120):  # a guard only: the emulator answers at once
                await running.done.wait()
            job = feature.ready(session)
            assert job is not None and job.checked is not None and not job.checked.lost

            calls: Counter[str] = Counter()
            for name in ("written", "check_summary"):
                counted = counting_calls(calls, name, getattr(summary_source, name))
                monkeypatch.setattr(summary_source, name, counted)
            result = await run_full(app, session, None, _no_progress)
            assert result.prepared
            assert calls == Counter()
            # What was committed is what the check completed.
            assert job.checked.written.summary in result.summary["message"]["content"]
            group.cancel_scope.cancel()
