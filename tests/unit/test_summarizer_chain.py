"""The summarizer chain (compactd/services/summarizers): which summarizers it is made of, and
its breaker, driven through the real SDKs against the loopback emulator."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from compactd import protocol as p
from compactd.services.summarizer import Summarizer, SummarizerError, SummaryRequest
from tests.emulator import Emulator, api_error

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


def _request(session_id: str = "s1") -> SummaryRequest:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "please fix the parser"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "fixed"}]},
    ]
    return SummaryRequest(
        messages=messages,
        instruction="write <analysis> then <summary>",
        model="claude-sonnet-4-5",
        session_id=session_id,
    )


def _options(**fields: object) -> p.SummarizerOptions:
    import msgspec

    return msgspec.convert(fields, p.SummarizerOptions)


def test_the_chain_and_offline() -> None:
    assert Summarizer(None, {}).offline  # no key anywhere
    assert not Summarizer(None, {"ANTHROPIC_API_KEY": "k"}).offline
    assert Summarizer(_options(offline=True), {"ANTHROPIC_API_KEY": "k"}).offline
    assert Summarizer(_options(provider="offline"), {"ANTHROPIC_API_KEY": "k"}).offline
    # A local server needs no key; OpenAI itself does.
    assert not Summarizer(_options(provider="openai", baseUrl="http://h/v1"), {}).offline
    assert Summarizer(_options(provider="openai"), {}).offline
    keyed = Summarizer(_options(provider="openai", apiKeyEnv="MY_KEY"), {"MY_KEY": "k"})
    assert [s.api_key for s in keyed.chain] == ["k"]
    # A primary without a key hands over to its fallback; offline ends the chain.
    chain = Summarizer(
        _options(
            fallback=[
                {"provider": "openai", "baseUrl": "http://h/v1"},
                {"provider": "offline"},
                {"provider": "anthropic", "apiKey": "never reached"},
            ]
        ),
        {},
    )
    assert not chain.offline
    assert [s.provider for s in chain.chain] == ["anthropic", "openai"]
    assert Summarizer(_options(offlineFallback=False), {}).offline_fallback is False


async def test_a_failing_primary_opens_its_breaker_and_is_passed_over(emu: Emulator) -> None:
    now = [0.0]
    summarizer = Summarizer(
        _options(
            provider="openai",
            baseUrl=f"{emu.base_url}/v1",
            model="m",
            maxRetries=0,
            fallback=[{"provider": "anthropic", "baseUrl": emu.base_url, "apiKey": "t"}],
        ),
        {},
        clock=lambda: now[0],
    )
    try:
        for _ in range(3):
            emu.script(api_error())
            outcome = await summarizer.summarize(_request())
            assert outcome.report is not None and outcome.report.provider == "anthropic"
        assert len(emu.chat_requests) == 3
        outcome = await summarizer.summarize(_request())
        assert len(emu.chat_requests) == 3  # skipped: its breaker is open
        assert outcome.report is not None
        assert outcome.report.passed_over[0].reason == "breaker open after 3 failures"
        now[0] += 301.0  # the cooldown passed: it is tried again, and answers
        outcome = await summarizer.summarize(_request())
        assert outcome.report is not None and outcome.report.provider == "openai"
        assert outcome.report.passed_over == []
        usage = {(u.provider, u.requests, u.failures) for u in summarizer.usage("s1")}
        assert usage == {("openai", 1, 3), ("anthropic", 4, 0)}
        assert summarizer.usage("other") == []
    finally:
        await summarizer.aclose()


async def test_a_lone_summarizer_never_skips_itself(emu: Emulator) -> None:
    summarizer = Summarizer(
        _options(provider="openai", baseUrl=f"{emu.base_url}/v1", model="m", maxRetries=0), {}
    )
    try:
        emu.set_default(api_error())
        for _ in range(4):
            with pytest.raises(SummarizerError) as info:
                await summarizer.summarize(_request())
            assert info.value.api_failure and "API error 500" in info.value.message
            assert info.value.report is not None and info.value.report.provider == "offline"
        assert len(emu.chat_requests) == 4
    finally:
        await summarizer.aclose()
