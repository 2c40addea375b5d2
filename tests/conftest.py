"""Shared fixtures: a real daemon over stdio, the Messages API emulator, and the fixture
transcripts kept in ``tests/data/transcripts`` (see ``tests/data/README.md``)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest
from compactd_client import Client

from compactd.transcript.model import Record, parse_lines
from tests.emulator import Emulator
from tests.emulator.fixtures import emulator  # noqa: F401 - fixture
from tests.helpers import emulator_options
from tests.inproc import InProc, InProcClient, inproc

if TYPE_CHECKING:
    from tests.e2e.test_compact_support import Harness

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "data" / "transcripts"


def fixture_transcripts() -> list[Path]:
    """Every fixture transcript, sorted by name. They are part of the repository, so an empty
    list is a broken checkout: say so instead of letting parametrized tests vanish."""
    paths = sorted(FIXTURES.glob("*.jsonl"))
    assert paths, f"no fixture transcripts in {FIXTURES}"
    return paths


def load_fixture(name: str) -> list[Record]:
    """The records of the fixture transcript ``name`` (a missing file is an error)."""
    with (FIXTURES / name).open("rb") as fh:
        return list(parse_lines(fh))


def daemon_args(data_dir: Path) -> list[str]:
    return [sys.executable, "-m", "compactd", "serve", "--data-dir", str(data_dir), "-v"]


def daemon_log(root: Path) -> IO[bytes]:
    """``root / "daemon.log"``, opened for a daemon's stderr (its log, at INFO)."""
    return open(root / "daemon.log", "ab")  # noqa: SIM115 - the caller closes it


def spawn(
    data_dir: Path,
    options: dict[str, Any] | None = None,
    *,
    log: IO[bytes] | None = None,
    env: dict[str, str] | None = None,
    capabilities: dict[str, Any] | None = None,
) -> AbstractAsyncContextManager[Client]:
    """A daemon on ``data_dir``, initialized with ``options`` and shut down at exit."""
    return Client.spawn(
        daemon_args(data_dir),
        initialization_options=options or {},
        env=env,
        stderr=log,
        capabilities=capabilities,
    )


SpawnDaemon = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
def spawn_daemon(tmp_path: Path) -> Iterator[SpawnDaemon]:
    """Spawn a daemon: ``async with spawn_daemon(options={...}, data_dir=...) as client``.

    The daemon's stderr (its log, at INFO) goes to ``tmp_path / "daemon.log"``.
    """
    log = daemon_log(tmp_path)

    def spawn_one(
        options: dict[str, Any] | None = None,
        data_dir: Path | None = None,
        env: dict[str, str] | None = None,
        capabilities: dict[str, Any] | None = None,
    ) -> AbstractAsyncContextManager[Client]:
        return spawn(
            data_dir or tmp_path / "data", options, log=log, env=env, capabilities=capabilities
        )

    yield spawn_one
    log.close()


@pytest.fixture
def spawn_emulated(spawn_daemon: SpawnDaemon, emulator: Emulator) -> SpawnDaemon:  # noqa: F811
    """``spawn_daemon`` with the summarizer on the test's ``emulator``:
    ``async with spawn_emulated(summarizer={...}, data_dir=..., env=...) as client``; keyword
    arguments other than data_dir, env and capabilities go to ``emulator_options``."""

    def spawn_one(
        data_dir: Path | None = None,
        env: dict[str, str] | None = None,
        capabilities: dict[str, Any] | None = None,
        **extra: Any,
    ) -> AbstractAsyncContextManager[Client]:
        options = emulator_options(emulator, **extra)
        return spawn_daemon(options, data_dir, env, capabilities)

    return spawn_one


@pytest.fixture
def app_daemon(tmp_path: Path) -> InProc:
    """``spawn_daemon``'s call surface over an in-process ``App`` (tests/inproc.py), for tests
    that need no wire: ``async with app_daemon(options={...}, data_dir=..., env=...) as
    client``. ``capabilities`` is accepted and ignored: the harness has no progress."""

    def start_one(
        options: dict[str, Any] | None = None,
        data_dir: Path | None = None,
        env: dict[str, str] | None = None,
        capabilities: dict[str, Any] | None = None,
    ) -> AbstractAsyncContextManager[InProcClient]:
        return inproc(data_dir or tmp_path / "data", options, env=env)

    return start_one


@pytest.fixture
def app_emulated(app_daemon: InProc, emulator: Emulator) -> InProc:  # noqa: F811
    """``spawn_emulated`` in process: the summarizer on the test's ``emulator``."""

    def start_one(
        data_dir: Path | None = None,
        env: dict[str, str] | None = None,
        capabilities: dict[str, Any] | None = None,
        **extra: Any,
    ) -> AbstractAsyncContextManager[InProcClient]:
        return app_daemon(emulator_options(emulator, **extra), data_dir, env, capabilities)

    return start_one


@pytest.fixture
async def app_client(app_daemon: InProc) -> AsyncIterator[InProcClient]:
    """``daemon`` in process."""
    async with app_daemon() as client:
        yield client


@pytest.fixture
async def daemon(spawn_daemon: SpawnDaemon) -> AsyncIterator[Client]:
    async with spawn_daemon() as client:
        yield client


@pytest.fixture
def h(harness: Harness) -> Harness:
    """The module's harness (``harness = harness_fixture(...)`` in the test module, see
    tests/e2e/test_compact_support.py) with a fresh emulator script, request log and cache."""
    harness.emu.reset()
    return harness
