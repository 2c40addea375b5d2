"""Per-session features (docs/engine.md#features): one state object per feature and session,
hooks called in order, a failing feature isolated.

In process: an ``App`` over a temporary store with two features of the test's own registered
beside the daemon's; appends, a compaction and a close go through the real engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from compactd import protocol as p
from compactd.app import App
from compactd.engine.background import run_full
from compactd.engine.features import Feature
from compactd.engine.session import Session
from compactd.transcript.model import Record
from tests.helpers import assistant, user

MODEL = "claude-sonnet-4-5"


@dataclass(eq=False)
class Recorder(Feature):
    calls: list[str] = field(default_factory=list)

    def on_open(self, session: Session) -> None:
        self.calls.append("open")

    def on_append(self, session: Session, records: Sequence[Record]) -> None:
        self.calls.append(f"append {len(records)}")

    def on_compacted(self, session: Session, records: Sequence[Record]) -> None:
        self.calls.append("compacted")

    async def on_close(self, session: Session) -> None:
        self.calls.append("close")


class Broken(Feature):
    def on_append(self, session: Session, records: Sequence[Record]) -> None:
        raise RuntimeError("broken feature")

    def on_compacted(self, session: Session, records: Sequence[Record]) -> None:
        raise RuntimeError("broken feature")

    async def on_close(self, session: Session) -> None:
        raise RuntimeError("broken feature")


async def _no_progress(title: str) -> None:
    return None


def _exchange(n: int) -> list[dict[str, object]]:
    """``n`` user messages, each answered, long enough for a compaction to shrink them."""
    out: list[dict[str, object]] = []
    for i in range(n):
        out.append(user(f"question {i}: " + "why is the sky blue " * 40, uuid=f"u{i}"))
        out.append(assistant([{"type": "text", "text": "because " * 200}], uuid=f"a{i}"))
    return out


async def test_each_session_gets_its_own_state_and_a_broken_feature_fails_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = App(
        p.InitializationOptions(summarizer=p.SummarizerOptions(offline=True)),
        base_env={},
        data_dir=tmp_path / "data",
    )
    # The broken one first: the recorder after it must still hear of everything.
    app.features.register(Broken, lambda session: Broken())
    app.features.register(Recorder, lambda session: Recorder())
    sessions = []
    for _ in range(2):
        opened = await app.open_session(p.OpenParams(cwd=str(tmp_path), model=MODEL))
        sessions.append(await app.get_session(opened.session_id))
    first, second = (app.features.state(s, Recorder) for s in sessions)
    assert first is not second

    result = await app.append(sessions[0], _exchange(6))
    assert result.appended == 12
    await run_full(app, sessions[0], None, _no_progress)
    assert await app.close_session(sessions[0].session_id)

    assert first.calls == ["open", "append 12", "compacted", "close"]
    assert second.calls == ["open"]
    assert sessions[0].features == {}
    assert "Broken.on_append failed" in caplog.text
    assert "Broken.on_compacted failed" in caplog.text
    assert "Broken.on_close failed" in caplog.text
