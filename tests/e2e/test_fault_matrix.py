"""The fault matrix: every way the summarizer can fail, and exactly what a client sees.

One row per fault; each row is checked against four calls on fresh sessions: ``compact/full``
and ``compact/auto`` (forced) on a daemon with ``offlineFallback: false`` ("strict"), and the
same two on a daemon with the default offline fallback. The expectations here are the
"Failure behaviour" table of README.md, row for row: keep the two in step. After every
failure the session must be exactly as it was (same API view, same transcript bytes).

Faults are installed as the emulator's default behaviour, so they persist through the SDK's
own retries, compactd's stream retry and the fallback from the cache-sharing request to the
plain one. Some single cases also have focused tests in test_compact_errors.py (request
counts, retry shapes); this module is the one place that covers every row for both methods.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
import pytest_asyncio
from compactd_client import Client, RpcError

from compactd import protocol as p
from tests.conftest import FIXTURES, spawn
from tests.e2e.test_compact_support import compact_full_fails, open_session, phases, snapshot
from tests.emulator import (
    Emulator,
    Reply,
    api_error,
    authentication_error,
    cut_stream,
    empty_reply,
    mid_stream_error,
    no_message_stop,
    overloaded,
    prompt_too_long,
    rate_limited,
    truncated_stream,
)
from tests.helpers import drain, emulator_options, run_cli
from tests.inproc import inproc

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio(loop_scope="module")]

# Short enough to keep the timeout row fast, long enough for every other row's retries.
TIMEOUT_MS = 1_500
# The timeout row's reply starts this late: well past TIMEOUT_MS.
SLOW_REPLY_S = 4.0

NO_HOOKS: dict[str, Any] = {"hooks": {}}


def _pre_compact(command: str, **extra: Any) -> dict[str, Any]:
    hook = {"type": "command", "command": command, **extra}
    return {"hooks": {"PreCompact": [{"matcher": "*", "hooks": [hook]}]}}


Fault = Callable[[], Any]


@dataclass(frozen=True)
class Row:
    """One fault and its expected outcome.

    ``strict``: (error code, message fragment) of ``compact/full`` without the offline fallback,
    or None when the compaction succeeds anyway. ``rescued``: whether the default offline
    fallback turns the failure into a success (summarizer ``offlineFallback``). ``down``: the
    daemon's ``baseUrl`` points at a closed port instead of the emulator.
    """

    id: str
    fault: Fault | None
    strict: tuple[str, str] | None
    rescued: bool
    hooks: dict[str, Any] | None = None
    down: bool = False
    hook_check: Callable[[p.HookResult], bool] | None = None


# Retryable HTTP errors carry retry-after-ms so the SDK's two retries take milliseconds.
ROWS = [
    Row(
        # Dropping the oldest rounds, then pieces, never fit: the window the errors name is
        # too small to summarize with, and the offline summary takes over.
        "400-prompt-too-long",
        lambda: prompt_too_long(over_by=10),
        (p.ErrorCode.SUMMARY_FAILED, "too small to summarize with"),
        rescued=True,
    ),
    Row(
        "401",
        authentication_error,
        (p.ErrorCode.SUMMARY_FAILED, "API error 401: invalid x-api-key"),
        rescued=True,
    ),
    Row(
        "429",
        lambda: rate_limited(retry_after_ms=5),
        (p.ErrorCode.SUMMARY_FAILED, "API error 429"),
        rescued=True,
    ),
    Row(
        "500",
        lambda: api_error(retry_after_ms=5),
        (p.ErrorCode.SUMMARY_FAILED, "API error 500: Internal server error"),
        rescued=True,
    ),
    Row(
        "529",
        lambda: overloaded(retry_after_ms=5),
        (p.ErrorCode.SUMMARY_FAILED, "API error 529: Overloaded"),
        rescued=True,
    ),
    Row(
        "mid-stream-error",
        mid_stream_error,
        (p.ErrorCode.SUMMARY_FAILED, "the stream broke twice: Overloaded"),
        rescued=True,
    ),
    Row(
        "cut-stream",
        cut_stream,
        (p.ErrorCode.SUMMARY_FAILED, "the stream broke twice: connection lost"),
        rescued=True,
    ),
    Row(
        "truncated-stream",
        truncated_stream,
        (p.ErrorCode.SUMMARY_FAILED, "the stream broke twice: the stream ended without"),
        rescued=True,
    ),
    Row(
        "no-message-stop",
        no_message_stop,
        (p.ErrorCode.SUMMARY_FAILED, "the stream broke twice: the stream ended without"),
        rescued=True,
    ),
    Row(
        "empty-summary",
        empty_reply,
        (p.ErrorCode.SUMMARY_FAILED, "the model returned no summary text"),
        rescued=False,
    ),
    Row(
        "timeout",
        lambda: Reply(delay=SLOW_REPLY_S),
        (p.ErrorCode.SUMMARY_FAILED, f"did not finish within {TIMEOUT_MS / 1000:g} s"),
        rescued=True,
    ),
    Row(
        "connection-refused",
        None,
        (p.ErrorCode.SUMMARY_FAILED, "cannot reach the API"),
        rescued=True,
        down=True,
    ),
    Row(
        "pre-compact-hook-fails",
        None,
        None,
        rescued=False,
        hooks=_pre_compact("echo broken >&2; exit 3"),
        hook_check=lambda r: not r.ok and r.exit_code == 3 and "broken" in r.stderr,
    ),
    Row(
        "pre-compact-hook-times-out",
        None,
        None,
        rescued=False,
        hooks=_pre_compact("sleep 5", timeout=0.3),
        hook_check=lambda r: not r.ok and r.timed_out,
    ),
]


@dataclass
class Daemons:
    """Four daemons: strict / with fallback, against the emulator / against a closed port."""

    emu: Emulator
    hooks_path: Path
    clients: dict[tuple[bool, bool], Client]  # (strict, down) -> client

    def client(self, *, strict: bool, down: bool) -> Client:
        return self.clients[(strict, down)]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def daemons(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Daemons]:
    root = tmp_path_factory.mktemp("faults")
    hooks_path = root / "hooks.json"
    hooks_path.write_text(json.dumps(NO_HOOKS))
    dead_url = f"http://127.0.0.1:{_closed_port()}"
    with Emulator() as emu:
        async with AsyncExitStack() as stack:
            clients: dict[tuple[bool, bool], Client] = {}
            for strict in (True, False):
                for down in (False, True):
                    summarizer: dict[str, Any] = {"timeoutMs": TIMEOUT_MS}
                    if strict:
                        summarizer["offlineFallback"] = False
                    if down:
                        # The SDK's retries of a refused connection back off for about 1.5 s;
                        # without them the row shows the error itself, not the timeout.
                        summarizer.update(baseUrl=dead_url, maxRetries=0)
                    opts = emulator_options(
                        emu, summarizer=summarizer, hooksSettingsPath=str(hooks_path)
                    )
                    name = f"data-{'strict' if strict else 'fallback'}-{'down' if down else 'up'}"
                    clients[(strict, down)] = await stack.enter_async_context(
                        inproc(root / name, opts)
                    )
            yield Daemons(emu, hooks_path, clients)


def _install(d: Daemons, row: Row) -> None:
    d.emu.reset()
    if row.fault is not None:
        d.emu.set_default(row.fault())
    d.hooks_path.write_text(json.dumps(row.hooks or NO_HOOKS))


def _check_hooks(row: Row, result: p.CompactResult) -> None:
    if row.hook_check is None:
        return
    pre = [r for r in result.hook_results if r.event == "PreCompact"]
    assert len(pre) == 1 and row.hook_check(pre[0]), pre


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "fallback"])
async def test_compact_full(daemons: Daemons, row: Row, strict: bool) -> None:
    _install(daemons, row)
    client = daemons.client(strict=strict, down=row.down)
    sid = await open_session(client)
    fails = row.strict is not None and (strict or not row.rescued)
    if fails:
        assert row.strict is not None
        code, fragment = row.strict
        await compact_full_fails(client, sid, code, fragment)
        status = await client.tokens_status(sid)
        assert status.consecutive_failures == 0  # a manual failure never trips the breaker
    else:
        result = await client.compact_full(sid)
        expected = "offlineFallback" if row.strict is not None else "cacheShared"
        assert result.summarizer == expected
        if expected == "offlineFallback":
            assert result.warnings and "built offline" in result.warnings[0]
        _check_hooks(row, result)
        assert (await client.messages(sid)).boundary_uuid == result.boundary["uuid"]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "fallback"])
async def test_compact_auto(daemons: Daemons, row: Row, strict: bool) -> None:
    _install(daemons, row)
    client = daemons.client(strict=strict, down=row.down)
    sid = await open_session(client)
    before = await snapshot(client, sid)
    fails = row.strict is not None and (strict or not row.rescued)
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        auto = await client.compact_auto(sid, force=True)
        notes = drain(queue)
    status = await client.tokens_status(sid)
    assert phases(notes)[0] == "started", phases(notes)
    assert all(n["trigger"] == "auto" and n["sessionId"] == sid for n in notes)
    assert phases(notes)[-1] == ("failed" if fails else "completed"), phases(notes)
    if fails:
        assert row.strict is not None
        code, fragment = row.strict
        assert not auto.was_compacted and auto.mechanism is None and auto.result is None
        assert auto.reason is not None
        assert auto.reason.startswith(f"{code}: ") and fragment in auto.reason, auto.reason
        assert status.consecutive_failures == 1 and not status.circuit_open
        assert auto.status is not None and auto.status.consecutive_failures == 1
        assert await snapshot(client, sid) == before
    else:
        assert auto.was_compacted and auto.mechanism == "full" and auto.result is not None
        expected = "offlineFallback" if row.strict is not None else "cacheShared"
        assert auto.result.summarizer == expected
        _check_hooks(row, auto.result)
        assert status.consecutive_failures == 0


async def test_three_auto_failures_open_the_breaker_and_a_success_closes_it(
    daemons: Daemons,
) -> None:
    d = daemons
    _install(d, ROWS[4])  # 529
    client = d.client(strict=True, down=False)
    sid = await open_session(client)
    for n in (1, 2, 3):
        auto = await client.compact_auto(sid, force=True)
        assert not auto.was_compacted and auto.status is not None
        assert auto.status.consecutive_failures == n
    assert (await client.tokens_status(sid)).circuit_open
    asked = len(d.emu.message_requests)
    paused = await client.compact_auto(sid, force=True)
    assert not paused.was_compacted
    assert paused.reason and "paused after 3 consecutive failures" in paused.reason
    assert "529" in paused.reason  # the last error is named
    assert len(d.emu.message_requests) == asked  # no model call while the breaker is open

    # A manual compaction still runs, and its success closes the breaker.
    d.emu.reset()
    await client.compact_full(sid)
    status = await client.tokens_status(sid)
    assert status.consecutive_failures == 0 and not status.circuit_open


# -- an upstream that echoes the key in every error (docs/secrets.md) -------------------------

# Keys of the providers' shapes, and a key of the upstream's own (a proxy's) that compactd was
# never given: redacted by its shape.
ANTHROPIC_KEY = "sk-ant-api03-" + "Kq3" * 30 + "-AA"
OPENAI_KEY = "sk-proj-" + "Vw8" * 24
FOREIGN_KEY = "sk-live-" + "Zz9" * 16
CLAUDE_CODE_TRANSCRIPT = FIXTURES / "claude-code-2.1.330__r16_manual.jsonl"


@dataclass(frozen=True)
class KeySource:
    id: str
    key: str
    env: dict[str, str]
    summarizer: dict[str, Any]


def _key_sources(emu: Emulator) -> list[KeySource]:
    openai_url = f"{emu.base_url}/v1"
    return [
        KeySource("ANTHROPIC_API_KEY", ANTHROPIC_KEY, {"ANTHROPIC_API_KEY": ANTHROPIC_KEY},
                  {"baseUrl": emu.base_url}),
        KeySource("summarizer.apiKey", ANTHROPIC_KEY, {}, {"baseUrl": emu.base_url,
                  "apiKey": ANTHROPIC_KEY}),
        KeySource("OPENAI_API_KEY", OPENAI_KEY, {"OPENAI_API_KEY": OPENAI_KEY},
                  {"provider": "openai", "baseUrl": openai_url}),
        KeySource("openai apiKey", OPENAI_KEY, {}, {"provider": "openai", "baseUrl": openai_url,
                  "apiKey": OPENAI_KEY}),
    ]  # fmt: skip


def _echoing(kind: str) -> Callable[[Any], Any]:
    """The emulator's answer to every request: an error of ``kind`` whose text repeats the key
    the request carried, as sent and JSON-quoted, and a key of the upstream's own."""

    def answer(request: Any) -> Any:
        sent = request.headers.get("x-api-key") or request.headers.get("authorization") or ""
        bare = sent.removeprefix("Bearer ").strip()
        text = (
            f"invalid x-api-key: Bearer {bare}; request headers: {sent!r}; "
            f'body: {{"api_key": "{bare}"}}; our upstream key {FOREIGN_KEY} was refused'
        )
        if kind == "mid-stream":
            return mid_stream_error(error=api_error(message=text))
        if kind == "overloaded":
            return overloaded(message=text)
        return authentication_error(message=text)

    return answer


def _leaked(key: str, text: str) -> list[str]:
    """The parts of ``key`` (or of the upstream's own key) found in ``text``."""
    parts = [key, key[12:40], FOREIGN_KEY, FOREIGN_KEY[8:30]]
    return [part for part in parts if part in text]


def _files_text(root: Path) -> str:
    return "\n".join(
        p.read_bytes().decode("utf-8", "replace") for p in sorted(root.rglob("*")) if p.is_file()
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["authentication", "overloaded", "mid-stream"])
async def test_an_upstream_echoing_the_key_in_every_error(tmp_path: Path, kind: str) -> None:
    """Every key source against every failure of an echoing upstream: the key (and a key of the
    upstream's own) is in no result, error, notification, log line, file or CLI output. The
    first kind runs all four key sources and the CLI, the others one key of each provider."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    seen: list[str] = []  # everything the daemons said: results, errors, notifications
    tried = 0
    with Emulator() as emu:
        emu.set_default(_echoing(kind))
        sources = _key_sources(emu)
        if kind != "authentication":
            sources = [sources[0], sources[3]]
        for source in sources:
            for strict in (True, False):
                data = tmp_path / f"{source.id}-{strict}"
                summarizer = {**source.summarizer, "maxRetries": 0, "timeoutMs": 30_000}
                if strict:
                    summarizer["offlineFallback"] = False
                options = {"summarizer": summarizer, "backgroundCompaction": {"enabled": False}}
                with (tmp_path / "daemon.log").open("ab") as log:
                    async with (
                        spawn(data, options, log=log, env={**env, **source.env}) as client,
                        client.subscribe(None) as queue,
                    ):
                        sid = await open_session(client)
                        try:
                            seen.append(
                                msgspec.json.encode(await client.compact_full(sid)).decode()
                            )
                            assert not strict
                        except RpcError as exc:
                            assert strict and exc.code == p.ErrorCode.SUMMARY_FAILED
                            seen.append(f"{exc.message} {json.dumps(exc.data)}")
                        copy = tmp_path / f"cc-{source.id}-{strict}.jsonl"
                        copy.write_bytes(CLAUDE_CODE_TRANSCRIPT.read_bytes())
                        try:
                            done = await client.claude_code_compact(str(copy), online=True)
                            seen.append(msgspec.json.encode(done).decode())
                            seen.append(Path(done.new_transcript_path).read_text())
                        except RpcError as exc:
                            seen.append(f"{exc.message} {json.dumps(exc.data)}")
                        seen.extend(json.dumps(n) for n in drain(queue))
                    tried += 2
                seen.append(_files_text(data))
        # The CLI: `compactd compact --online` with the key in its environment (its own daemon,
        # its own log on stderr).
        for as_json in (True, False) if kind == "authentication" else ():
            copy = tmp_path / f"cli-{as_json}.jsonl"
            copy.write_bytes(CLAUDE_CODE_TRANSCRIPT.read_bytes())
            cli_env = {
                **env,
                "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
                "ANTHROPIC_BASE_URL": emu.base_url,
            }
            code, out, err = await run_cli(
                "compact", "--online", *(["--json"] if as_json else []), str(copy), env=cli_env
            )
            seen.extend([out, err])
            tried += 1
        # The upstream really saw the keys (the echo is real), and every request failed.
        sent = {
            r.headers.get("x-api-key") or r.headers.get("authorization", "") for r in emu.requests
        }
        assert any(ANTHROPIC_KEY in s for s in sent) and any(OPENAI_KEY in s for s in sent)
    seen.append((tmp_path / "daemon.log").read_text())
    everything = "\n".join(seen)
    assert "[redacted]" in everything
    files = _files_text(tmp_path)  # data dirs, logs, the Claude Code sessions written
    for key in (ANTHROPIC_KEY, OPENAI_KEY):
        leaks = [text[:300] for text in [*seen, files] if _leaked(key, text)]
        assert leaks == []
    assert tried == (18 if kind == "authentication" else 8)
