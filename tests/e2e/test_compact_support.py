"""Shared helpers of the compaction e2e tests (no tests here).

The daemon is spawned with its summarizer pointed at the loopback emulator of the Messages API
(``tests/emulator``), so every compaction goes through the real ``anthropic`` SDK over HTTP.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from compactd_client import Client, RpcError

from compactd import protocol as p
from compactd.cli.synthetic import make_session
from tests.conftest import daemon_log, spawn
from tests.emulator import Emulator
from tests.helpers import CWD, MODEL, drain, emulator_options
from tests.inproc import inproc

# The main loop's cache key inputs, as a client would pass them in ``session/open``.
SYSTEM: list[dict[str, Any]] = [
    {"type": "text", "text": "You are a careful coding agent working in a repository."},
    {
        "type": "text",
        "text": "Follow the project's conventions. " * 60,
        "cache_control": {"type": "ephemeral"},
    },
]
TOOLS: list[dict[str, Any]] = [
    {
        "name": name,
        "description": f"The {name} tool. " * 20,
        "input_schema": {"type": "object", "properties": {"arg": {"type": "string"}}},
    }
    for name in ("Read", "Bash", "Grep", "Edit", "TodoWrite")
]
THINKING: dict[str, Any] = {"type": "enabled", "budget_tokens": 1024}
CACHE_SAFE: dict[str, Any] = {"system": SYSTEM, "tools": TOOLS, "thinking": THINKING}


def session_entries(
    entries: int = 160, tokens: int = 16_000, seed: int = 7, *, recent: bool = True
) -> list[dict[str, Any]]:
    """A synthetic session; ``recent`` stamps it up to now, so that time-based microcompact
    (an hour of idleness) does not kick in before a full compaction."""
    out = make_session(entries=entries, target_tokens=tokens, seed=seed, model=MODEL)
    if recent:
        now = time.time()
        for i, entry in enumerate(out):
            t = now - (len(out) - i) * 0.5
            stamp = datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")
            entry["timestamp"] = stamp.replace("+00:00", "Z")
    return out


async def open_session(
    client: Client,
    entries: list[dict[str, Any]] | None = None,
    *,
    cache_safe: dict[str, Any] | None = CACHE_SAFE,
    **fields: Any,
) -> str:
    opened = await client.request(
        p.SESSION_OPEN,
        {"cwd": CWD, "model": MODEL, "cacheSafeParams": cache_safe, **fields}
        if cache_safe is not None
        else {"cwd": CWD, "model": MODEL, **fields},
    )
    sid = str(opened["sessionId"])
    await client.append(sid, entries if entries is not None else session_entries())
    return sid


async def transcript_path(client: Client, sid: str) -> str:
    listed = await client.list_sessions()
    return next(s.transcript_path for s in listed.sessions if s.session_id == sid)


async def transcript_bytes(client: Client, sid: str) -> bytes:
    return Path(await transcript_path(client, sid)).read_bytes()


async def snapshot(client: Client, sid: str, *, tokens: bool = False) -> tuple[Any, ...]:
    """What a failed or cancelled operation must leave as it was: the API view and the
    transcript bytes, and with ``tokens`` the token count."""
    view = (await client.messages(sid)).messages
    state: tuple[Any, ...] = (view, await transcript_bytes(client, sid))
    if tokens:
        state += ((await client.tokens_status(sid)).tokens,)
    return state


def phases(notes: list[dict[str, Any]]) -> list[str]:
    return [n["phase"] for n in notes]


async def compact_full_fails(client: Client, sid: str, code: str, fragment: str) -> RpcError:
    """Run ``compact/full`` on ``sid``, which must fail with ``code`` and a message holding
    ``fragment``, leave the session as it was, and end its ``compact/status`` notifications
    with ``failed`` and the same message."""
    before = await snapshot(client, sid)
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        with pytest.raises(RpcError) as info:
            await client.compact_full(sid)
        notes = drain(queue)
    err = info.value
    assert err.code == code, err
    assert fragment in err.message, err.message
    assert await snapshot(client, sid) == before
    assert phases(notes)[0] == "started" and phases(notes)[-1] == "failed", phases(notes)
    assert notes[-1]["message"] == err.message
    assert len({n["compactionId"] for n in notes}) == 1
    assert all(n["trigger"] == "manual" and n["sessionId"] == sid for n in notes)
    return err


def last_request_body(emu: Emulator) -> dict[str, Any]:
    body = emu.message_requests[-1].body
    assert isinstance(body, dict)
    return body


@dataclass
class Harness:
    """One daemon and one emulator shared by the tests of a module (each test opens its own
    session): starting a daemon and loading the SDK cost seconds, the tests milliseconds. The
    daemon is in process (tests/inproc.py) unless the module asks for the wire."""

    client: Client
    emu: Emulator
    root: Path


def harness_fixture(*, wire: bool = False, **extra_options: Any) -> Callable[..., Any]:
    """A module-scoped ``harness`` fixture; use with ``pytest.mark.asyncio(loop_scope="module")``
    and take the ``h`` fixture (tests/conftest.py) in each test.

    ``extra_options`` are added to the initializationOptions (a callable gets the root dir).
    With ``wire`` the daemon is a real process over stdio, for what only the wire shows
    (keep-alive notifications on the pipe, cancellation of a request in flight).
    """

    @pytest_asyncio.fixture(scope="module", loop_scope="module")
    async def harness(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Harness]:
        root = tmp_path_factory.mktemp("compact")
        extra = {k: (v(root) if callable(v) else v) for k, v in extra_options.items()}
        with Emulator() as emu, daemon_log(root) as log:
            options = emulator_options(emu, **extra)
            daemon = (
                spawn(root / "data", options, log=log) if wire else inproc(root / "data", options)
            )
            async with daemon as client:
                yield Harness(client, emu, root)

    return harness
