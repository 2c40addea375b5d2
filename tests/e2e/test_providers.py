"""Summarizers on any provider, end to end over stdio (docs/providers.md, docs/thresholds.md).

Each test spawns the real daemon as a process and drives it over its pipes; its summarizers
talk to the loopback emulator through the real SDKs over HTTP: ``openai`` to the emulator's Chat
Completions API, ``anthropic`` to its Messages API. A summarizer that is "down" points at a
port nothing listens on.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from compactd_client import Client, RpcError

from compactd import protocol as p
from tests.conftest import daemon_log, spawn
from tests.e2e.test_claude_code_export import R2_AUTO, _project
from tests.e2e.test_cli import SMALL_WINDOW as SMALL_CLI_WINDOW
from tests.e2e.test_cli import VIEWER
from tests.e2e.test_compact_support import open_session, session_entries
from tests.emulator import Emulator, api_error
from tests.emulator.chat import chat_prompt_tokens
from tests.fidelity import items_of, recalls, view_text
from tests.helpers import run_cli

pytestmark = pytest.mark.asyncio

SMALL_MODEL = "local-8k"
SMALL_WINDOW = 8_192


def _closed_port_url() -> str:
    """A loopback URL nothing listens on (the port was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _openai(emu: Emulator | None, **extra: Any) -> dict[str, Any]:
    base = f"{emu.base_url}/v1" if emu is not None else _closed_port_url()
    return {"provider": "openai", "baseUrl": base, "maxRetries": 0, **extra}


def _anthropic(emu: Emulator, **extra: Any) -> dict[str, Any]:
    return {"provider": "anthropic", "baseUrl": emu.base_url, "apiKey": "test", **extra}


def _options(summarizer: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "summarizer": summarizer,
        "keepAliveIntervalMs": 200,
        "backgroundCompaction": {"enabled": False},
        **extra,
    }


async def test_an_8k_openai_summarizer_compacts_a_60k_session_in_pieces(tmp_path: Path) -> None:
    entries = session_entries(entries=400, tokens=78_000)
    with Emulator(chat_server="llama") as emu, daemon_log(tmp_path) as log:
        emu.set_context_window(SMALL_MODEL, SMALL_WINDOW)
        summarizer = _openai(emu, model=SMALL_MODEL, contextWindow=SMALL_WINDOW)
        async with spawn(tmp_path / "data", _options(summarizer), log=log) as client:
            sid = await open_session(client, entries)
            before = await client.tokens_status(sid)
            assert before.tokens >= 60_000
            result = await client.compact_full(sid)
            view = (await client.messages(sid)).messages
            stats = await client.stats(sid)
        requests = emu.chat_requests
        assert emu.message_requests == []  # nothing went to the Messages API
    report = result.summarized_by
    assert report is not None and report.provider == "openai" and report.model == SMALL_MODEL
    assert report.pieces == len(requests) >= 5
    for rec in requests:
        body = rec.body
        assert rec.status == 200 and body["model"] == SMALL_MODEL and body["stream"] is True
        # None above the window: the prompt and the reply it allows.
        assert chat_prompt_tokens(body) + body["max_tokens"] <= SMALL_WINDOW
    # The provider's summary is in the view (the emulated model's own lines), and every user
    # message survives (quoted by the model or restored from the ledger).
    text = view_text(view)
    assert "emulated model: none extracted" in text
    messages, _, _ = recalls(items_of(entries), text)
    assert messages.found == messages.total > 0
    assert result.post_compact_tokens < before.tokens // 4
    (row,) = stats.summarizer_usage
    assert (row.provider, row.model, row.requests) == ("openai", SMALL_MODEL, len(requests))
    assert row.input_tokens == sum(r.usage["prompt_tokens"] for r in requests if r.usage)


async def test_a_context_length_error_is_split_not_failed(tmp_path: Path) -> None:
    """No contextWindow and a model compactd does not know: the first request is the whole
    conversation, the server's context-length error (Ollama's, which names no window) is
    recognized, and the conversation goes in pieces instead."""
    entries = session_entries(entries=120, tokens=20_000)
    with Emulator(chat_server="ollama") as emu, daemon_log(tmp_path) as log:
        emu.set_context_window(SMALL_MODEL, SMALL_WINDOW)
        async with spawn(
            tmp_path / "data", _options(_openai(emu, model=SMALL_MODEL)), log=log
        ) as client:
            sid = await open_session(client, entries)
            result = await client.compact_full(sid)
        outcomes = [r.status for r in emu.chat_requests]
    # The whole conversation is refused; then pieces, planned smaller after each refusal
    # (Ollama names no window), until they fit.
    assert outcomes[0] == 400 and outcomes[-1] == 200
    report = result.summarized_by
    assert report is not None and report.provider == "openai" and report.passed_over == []
    assert report.pieces == outcomes.count(200) >= 2
    assert result.summarizer == "pieces" and not result.warnings


async def test_a_primary_that_is_down_hands_over_to_its_fallback(tmp_path: Path) -> None:
    with Emulator() as emu, daemon_log(tmp_path) as log:
        summarizer = _openai(None, model="gpt-4o-mini", fallback=[_anthropic(emu)])
        async with spawn(tmp_path / "data", _options(summarizer), log=log) as client:
            sid = await open_session(client)
            result = await client.compact_full(sid)
            stats = await client.stats(sid)
        assert len(emu.message_requests) == 1
    report = result.summarized_by
    assert report is not None and report.provider == "anthropic"
    (passed,) = report.passed_over
    assert passed.provider == "openai" and passed.model == "gpt-4o-mini"
    assert "cannot reach the API" in passed.reason
    assert result.summarizer == "cacheShared" and not result.warnings
    usage = {(row.provider, row.failures, row.requests) for row in stats.summarizer_usage}
    assert usage == {("openai", 1, 0), ("anthropic", 0, 1)}


async def test_when_every_summarizer_is_down_the_summary_is_built_offline(
    tmp_path: Path,
) -> None:
    with Emulator() as emu, daemon_log(tmp_path) as log:
        emu.set_default(api_error(retry_after_ms=5))
        summarizer = _openai(None, fallback=[_anthropic(emu, maxRetries=0)])
        async with spawn(tmp_path / "data", _options(summarizer), log=log) as client:
            sid = await open_session(client)
            result = await client.compact_full(sid)
    assert result.summarizer == "offlineFallback"
    report = result.summarized_by
    assert report is not None and report.provider == "offline"
    reasons = {x.provider: x.reason for x in report.passed_over}
    assert "cannot reach the API" in reasons["openai"]
    assert "API error 500" in reasons["anthropic"]
    assert result.warnings and "built offline" in result.warnings[0]


async def test_without_the_offline_fallback_the_error_names_every_summarizer(
    tmp_path: Path,
) -> None:
    with Emulator() as emu, daemon_log(tmp_path) as log:
        emu.set_default(api_error(retry_after_ms=5))
        summarizer = _openai(None, offlineFallback=False, fallback=[_anthropic(emu, maxRetries=0)])
        async with spawn(tmp_path / "data", _options(summarizer), log=log) as client:
            sid = await open_session(client)
            with pytest.raises(RpcError) as info:
                await client.compact_full(sid)
            assert (await client.tokens_status(sid)).tokens > 0
    assert info.value.data["code"] == p.ErrorCode.SUMMARY_FAILED
    assert "every summarizer failed" in str(info.value)
    assert "openai" in str(info.value) and "anthropic" in str(info.value)


async def _open(client: Client, entries: list[dict[str, Any]], **fields: Any) -> str:
    return await open_session(client, entries, cache_safe=None, **fields)


async def test_an_absolute_level_compacts_a_1m_window_session_early(tmp_path: Path) -> None:
    entries = session_entries(entries=300, tokens=310_000)
    with Emulator() as emu, daemon_log(tmp_path) as log:
        emu.set_context_window("claude-sonnet-4-5", 1_000_000)
        options = _options(_anthropic(emu), autoCompactTokens=300_000)
        async with spawn(tmp_path / "data", options, log=log) as client:
            # The daemon's level (300K) applies, and the session (about 220K) is below it.
            daemon_level = await _open(client, entries, contextWindow=1_000_000)
            status = await client.tokens_status(daemon_level)
            assert (status.auto_compact_threshold, status.auto_compact_source) == (
                300_000,
                "tokens",
            )
            untouched = await client.compact_auto(daemon_level)
            assert not untouched.was_compacted
            # The session's own level (200K) wins over the daemon's, and the session compacts.
            sid = await _open(client, entries, contextWindow=1_000_000, autoCompactTokens=200_000)
            status = await client.tokens_status(sid)
            assert status.auto_compact_threshold == 200_000
            assert status.auto_compact_source == "tokens" and status.is_above_auto_compact_threshold
            done = await client.compact_auto(sid)
            # (Clearing old tool results is enough here: the level decides when, not how.)
            assert done.was_compacted and done.mechanism in ("micro", "full")
            assert done.status is not None and done.status.tokens < 200_000
            # On a 200K window the share of the window (167K) is lower than the daemon's level.
            small = await _open(client, session_entries(entries=20, tokens=2_000))
            status = await client.tokens_status(small)
            assert (status.auto_compact_threshold, status.auto_compact_source) == (
                167_000,
                "window",
            )


async def test_a_pending_prompt_tips_compact_auto(tmp_path: Path) -> None:
    entries = session_entries(entries=160, tokens=18_000)
    with Emulator() as emu, daemon_log(tmp_path) as log:
        async with spawn(tmp_path / "data", _options(_anthropic(emu)), log=log) as client:
            sid = await _open(client, entries, autoCompactTokens=20_000)
            status = await client.tokens_status(sid)
            assert status.tokens < 20_000 and not status.is_above_auto_compact_threshold
            pending = 20_000 - status.tokens + 500
            below = await client.compact_auto(sid)
            assert not below.was_compacted and below.reason_code == "belowThreshold"
            preview = await client.compact_preview(sid, "auto", pending_tokens=pending)
            assert preview.would_compact and preview.pre_tokens == status.tokens + pending
            done = await client.compact_auto(sid, pending_tokens=pending)
            assert done.was_compacted
            assert emu.message_requests  # a summary was written
            # A negative size is refused and changes nothing.
            with pytest.raises(RpcError) as info:
                await client.request(p.COMPACT_AUTO, {"sessionId": sid, "pendingTokens": -1})
            assert info.value.code == p.ErrorCode.INVALID_PARAMS and info.value.number == -32602


# -- the command line ------------------------------------------------------------------------


async def test_cli_status_says_which_level_is_in_force() -> None:
    code, out, err = await run_cli("status", str(VIEWER), "--plain")
    assert code == 0, err
    assert "(the absolute level)" not in out
    code, out, err = await run_cli(
        "status", str(VIEWER), "--plain", "--auto-compact-tokens", "5000"
    )
    assert code == 0, err
    assert "auto-compact at 5,000 (the absolute level)" in out
    code, out, err = await run_cli("status", str(VIEWER), "--json", "--auto-compact-tokens", "5000")
    assert json.loads(out)["status"]["autoCompactSource"] == "tokens"
    code, _, err = await run_cli("status", str(VIEWER), "--auto-compact-tokens", "0")
    assert code == 1 and "--auto-compact-tokens" in err and "Traceback" not in err


async def test_cli_compact_takes_provider_model_and_base_url(tmp_path: Path) -> None:
    source, _ = _project(tmp_path, R2_AUTO)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    with Emulator() as emu:
        args = ["--provider", "openai", "--model", "small", "--base-url", f"{emu.base_url}/v1"]
        code, out, err = await run_cli("compact", str(source), "--json", *args, env=env)
        assert code == 0, err
        assert emu.chat_requests and emu.message_requests == []
        assert {r.body["model"] for r in emu.chat_requests} == {"small"}
        code, out, err = await run_cli(
            "replay",
            str(VIEWER),
            *SMALL_CLI_WINDOW,
            "--provider",
            "openai",
            "--summarizer-model",
            "small",
            "--base-url",
            f"{emu.base_url}/v1",
            env=env,
        )
        assert code == 0, err
        assert f"compacting with the Chat Completions API at {emu.base_url}/v1" in out
        # A model wrote the summaries: the replay counts them as model calls, none offline.
        assert re.search(r"^model calls: [1-9]\d* \(summaries\)", out, re.M), out
        assert "built offline" not in out
    code, _, err = await run_cli("compact", str(source), "--provider", "openai", env=env)
    assert code == 2 and "--provider openai needs OPENAI_API_KEY or --base-url" in err
    code, _, err = await run_cli("compact", str(source), "--base-url", "http://x/v1", env=env)
    assert code == 2 and "--base-url needs --provider" in err
