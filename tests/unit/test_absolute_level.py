"""The absolute auto-compact level and the pending tokens (docs/thresholds.md#absolute-level)."""

from __future__ import annotations

from compactd.core import auto_policy
from compactd.core import constants as c
from compactd.core.tokens import CompactFlags, Limits, TokenCount, resolve_limits, thresholds
from compactd.core.tokens.levels import token_status


def test_the_lowest_level_applies_and_is_named() -> None:
    one_m = Limits(1_000_000, 128_000)
    assert thresholds(one_m).auto_compact_threshold == 967_000
    assert thresholds(one_m).auto_compact_source == "window"
    capped = Limits(1_000_000, 128_000, auto_compact_tokens=200_000)
    assert (thresholds(capped).auto_compact_threshold, thresholds(capped).auto_compact_source) == (
        200_000,
        "tokens",
    )
    # A level above the share of the window changes nothing.
    above = Limits(200_000, 64_000, auto_compact_tokens=300_000)
    assert (thresholds(above).auto_compact_threshold, thresholds(above).auto_compact_source) == (
        167_000,
        "window",
    )
    # The environment's percentage, when lower, is named "env".
    env = {c.ENV_AUTOCOMPACT_PCT_OVERRIDE: "10"}
    th = thresholds(capped, env)
    assert (th.auto_compact_threshold, th.auto_compact_source) == (98_000, "env")
    # Warning and error follow the level in force.
    assert thresholds(capped).warning_threshold == 200_000 - c.WARNING_BUFFER


def test_the_session_level_wins_over_the_daemon_level() -> None:
    env = {c.ENV_AUTO_COMPACT_TOKENS: "300000"}
    assert resolve_limits("claude-sonnet-4-5", 1_000_000, env=env).auto_compact_tokens == 300_000
    limits = resolve_limits("claude-sonnet-4-5", 1_000_000, env=env, auto_compact_tokens=200_000)
    assert limits.auto_compact_tokens == 200_000
    assert resolve_limits("claude-sonnet-4-5", env={c.ENV_AUTO_COMPACT_TOKENS: "x"}) == Limits(
        200_000, 64_000
    )


def test_pending_tokens_count_in_the_status_the_decision_sees() -> None:
    limits = Limits(200_000, 64_000, auto_compact_tokens=20_000)
    th = thresholds(limits)
    count = TokenCount(tokens=19_000, exact=19_000, estimated=0)
    status = token_status(count, limits, th, CompactFlags(True, True, True))
    assert not status.is_above_auto_compact_threshold
    assert auto_policy.with_pending(status, 0) is status
    tipped = auto_policy.with_pending(status, 1_500)
    assert tipped.tokens == 20_500 and tipped.is_above_auto_compact_threshold
    assert tipped.auto_compact_source == "tokens"
    situation = auto_policy.Situation(status=tipped, entries=10)
    assert auto_policy.gate(situation) is None
    assert auto_policy.gate(auto_policy.Situation(status=status, entries=10)) is not None
