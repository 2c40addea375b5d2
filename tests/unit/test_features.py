"""Per-session features (docs/engine.md#features): one state object per feature and session,
hooks called in order, a failing feature isolated.

In process: an ``App`` over a temporary store with two features of the test's own registered
beside the daemon's; appends, a compaction and a close go through the real engine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence, Set
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


class Derived(Feature):
    """Derives the number of records the model sees, noting whether it ran off the event loop
    (the event loop runs in the main thread here)."""

    def __init__(self) -> None:
        self.length: int | None = None
        self.off_loop: list[bool] = []

    def derive(
        self, session: Session, context: Sequence[Record], cleared: Set[str]
    ) -> Callable[[], None]:
        self.off_loop.append(threading.current_thread() is not threading.main_thread())
        length = len(context)

        def adopt() -> None:
            self.length = length

        return adopt


class Broken(Feature):
    def derive(
        self, session: Session, context: Sequence[Record], cleared: Set[str]
    ) -> Callable[[], None]:
        raise RuntimeError("broken feature")

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
    assert "Broken.derive failed" in caplog.text


async def test_a_feature_derives_its_state_with_the_session_off_the_event_loop(
    tmp_path: Path,
) -> None:
    def app_with(feature: type[Feature]) -> App:
        app = App(
            p.InitializationOptions(summarizer=p.SummarizerOptions(offline=True)),
            base_env={},
            data_dir=tmp_path / "data",
        )
        app.features.register(Broken, lambda session: Broken())
        app.features.register(feature, lambda session: feature())
        return app

    app = app_with(Derived)
    opened = await app.open_session(p.OpenParams(cwd=str(tmp_path), model=MODEL))
    session = await app.get_session(opened.session_id)
    state = app.features.state(session, Derived)
    assert state.length == 0  # derived when made, with the new session

    # The first conversation entries rebuild the view (until then sidechains would count).
    await app.append(session, _exchange(6))
    assert state.length == 12
    # Other appends extend the view: the hooks follow them, nothing is derived again.
    await app.append(session, [user("one more question", uuid="u-more")])
    assert state.length == 12
    await run_full(app, session, None, _no_progress)
    assert state.length == session.context_size < 12  # the compaction derived it again
    await app.close_session(session.session_id)

    # A restart: the load derives the state of every feature with the session's.
    again = app_with(Derived)
    loaded = await again.get_session(session.session_id)
    reloaded = again.features.state(loaded, Derived)
    assert reloaded.length == loaded.context_size == session.context_size
    assert state.off_loop == [True, True, True] and reloaded.off_loop == [True]
    await again.close_session(session.session_id)
