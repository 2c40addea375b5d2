"""Pytest fixtures for the Messages API emulator.

Import into a conftest (or a test module) with::

    from tests.emulator.fixtures import emulator  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .server import Emulator


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    """A started ``Emulator`` on a free loopback port, stopped after the test."""
    emu = Emulator()
    emu.start()
    try:
        yield emu
    finally:
        emu.stop()
