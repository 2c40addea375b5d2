"""Shared fixtures: a real daemon over stdio, and paths to the shared fixtures."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from compactd_client import Client

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT.parent / "shared" / "fixtures" / "transcripts"


def fixture_transcripts() -> list[Path]:
    return sorted(FIXTURES.glob("*.jsonl")) if FIXTURES.is_dir() else []


def daemon_args(data_dir: Path) -> list[str]:
    return [sys.executable, "-m", "compactd", "serve", "--data-dir", str(data_dir), "-v"]


SpawnDaemon = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
def spawn_daemon(tmp_path: Path) -> Iterator[SpawnDaemon]:
    """Spawn a daemon: ``async with spawn_daemon(options={...}, data_dir=...) as client``.

    The daemon's stderr (its log, at INFO) goes to ``tmp_path / "daemon.log"``.
    """
    log = open(tmp_path / "daemon.log", "ab")  # noqa: SIM115 - closed at teardown

    def spawn(
        options: dict[str, Any] | None = None,
        data_dir: Path | None = None,
        env: dict[str, str] | None = None,
        capabilities: dict[str, Any] | None = None,
    ) -> AbstractAsyncContextManager[Client]:
        return Client.spawn(
            daemon_args(data_dir or tmp_path / "data"),
            initialization_options=options or {},
            env=env,
            stderr=log,
            capabilities=capabilities,
        )

    yield spawn
    log.close()


@pytest.fixture
async def daemon(spawn_daemon: SpawnDaemon) -> AsyncIterator[Client]:
    async with spawn_daemon() as client:
        yield client
