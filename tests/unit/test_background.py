"""Zero-wait compaction's rules (docs/background.md): when a preparation starts (the start
level and the growth rule, ``core.background``) and when a prepared summary stops being valid
(``engine.background.BackgroundPreparation``'s hooks)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from compactd import protocol as p
from compactd.app import App
from compactd.core import background as bg
from compactd.engine.background import BackgroundPreparation, Job
from compactd.engine.session import Session
from compactd.services.store import SessionMeta
from compactd.services.summarizer import SummaryOutcome
from compactd.transcript.model import Record, record_from_dict
from tests.helpers import CWD, MODEL, assistant, text_block, user

# -- the trigger -------------------------------------------------------------------------------


def test_start_level_is_start_at_of_the_threshold_without_a_measured_rate() -> None:
    t = bg.Trigger(tokens=0, threshold=100_000)
    assert bg.start_level(t) == 80_000
    assert bg.start_level(bg.Trigger(tokens=0, threshold=100_000, start_at=0.9)) == 90_000
    # A rate with no measured duration (or the reverse) changes nothing.
    assert bg.start_level(bg.Trigger(tokens=0, threshold=100_000, rate=500.0)) == 80_000
    no_rate = bg.Trigger(tokens=0, threshold=100_000, last_duration_s=60.0)
    assert bg.start_level(no_rate) == 80_000


def test_fast_growth_moves_the_start_earlier() -> None:
    # 200 tokens/s and a 60 s summarizer: the threshold must be 24,000 tokens away at the start.
    fast = bg.Trigger(tokens=0, threshold=100_000, rate=200.0, last_duration_s=60.0)
    assert bg.start_level(fast) == 100_000 - 24_000
    assert bg.should_start(bg.Trigger(76_000, 100_000, rate=200.0, last_duration_s=60.0))
    assert not bg.should_start(bg.Trigger(75_999, 100_000, rate=200.0, last_duration_s=60.0))
    # Slow growth never moves it later than startAt.
    slow = bg.Trigger(tokens=0, threshold=100_000, rate=1.0, last_duration_s=60.0)
    assert bg.start_level(slow) == 80_000
    # Nor earlier than half the threshold, however fast.
    burst = bg.Trigger(tokens=0, threshold=100_000, rate=1e6, last_duration_s=60.0)
    assert bg.start_level(burst) == 50_000
    # A startAt below half the threshold is the user's: the floor only bounds the growth rule.
    low = bg.Trigger(tokens=0, threshold=100_000, start_at=0.3, rate=1e6, last_duration_s=60.0)
    assert bg.start_level(low) == 30_000
    assert bg.lowest_start(100_000, 0.3) == 30_000 and bg.lowest_start(100_000, 0.8) == 50_000


def test_growth_rate_over_the_samples_restarts_after_a_fall() -> None:
    assert bg.growth_rate([]) is None
    assert bg.growth_rate([(0.0, 100)]) is None
    assert bg.growth_rate([(0.0, 100), (10.0, 1_100)]) == pytest.approx(100.0)
    # A microcompact lowered the count: only what came after it counts.
    assert bg.growth_rate([(0.0, 100), (5.0, 5_000), (6.0, 1_000), (8.0, 2_000)]) == 500.0
    assert bg.growth_rate([(1.0, 100), (1.0, 200)]) is None
    # A small dip is an estimate corrected by a measured count: the trend goes on through it.
    assert bg.growth_rate([(0.0, 1_000), (1.0, 2_000), (2.0, 1_950), (4.0, 5_000)]) == 1_000.0

    # A burst shorter than the span asked for is no trend (the summarizer's last duration).
    burst = [(0.0, 10_000), (0.2, 12_000), (0.3, 14_000)]
    assert bg.growth_rate(burst, min_span=1.0) is None
    assert bg.growth_rate(burst) == pytest.approx(4_000 / 0.3)
    assert bg.growth_rate([*burst, (4.0, 16_000)], min_span=1.0) == pytest.approx(1_500.0)
    # One bulk append (an import) says nothing of the pace: the window restarts after it.
    bulk = [(0.0, 10_000), (10.0, 11_000), (11.0, 71_000)]
    assert bg.growth_rate(bulk, bulk=bg.bulk_step(100_000)) is None
    assert bg.growth_rate([*bulk, (21.0, 72_000)], bulk=bg.bulk_step(100_000)) == 100.0
    assert bg.growth_rate(bulk) == pytest.approx(61_000 / 11)


def test_a_ready_summary_is_refreshed_at_the_threshold_when_that_keeps_far_less() -> None:
    # Grows 1,000 tokens during one summary: the refresh keeps about 1,250 (with the margin).
    slow = bg.Trigger(tokens=100_000, threshold=100_000, rate=100.0, last_duration_s=10.0)
    # Its request read the cached context (a tenth of 100,000); forty requests until the next
    # compaction each read the 18,750 tokens it saves.
    ready_at_80 = bg.Refresh(
        trigger=slow,
        blocking_limit=110_000,
        covered_tokens=80_000,
        request_cost=10_000,
        requests_ahead=40,
    )
    assert bg.refresh_level(ready_at_80) == 100_000  # where a synchronous compaction asks
    assert bg.should_refresh(ready_at_80)
    # Not worth its price: a request that read everything uncached, few requests to serve.
    dear = replace(ready_at_80, request_cost=None, requests_ahead=10)
    assert not bg.should_refresh(dear)
    # Whatever the price, when the ready summary's tail would pass the bound at the threshold.
    assert bg.should_refresh(replace(dear, covered_tokens=65_000))
    below = bg.Refresh(
        trigger=replace(slow, tokens=99_999), blocking_limit=110_000, covered_tokens=80_000
    )
    assert not bg.should_refresh(below)
    # The ready summary keeps little more than a refresh would: not worth a second request.
    late = bg.Refresh(trigger=slow, blocking_limit=110_000, covered_tokens=98_500)
    assert not bg.should_refresh(late)
    # No measured rate: no telling whether it would be ready before the blocking limit.
    unknown = bg.Refresh(
        trigger=replace(slow, rate=None), blocking_limit=110_000, covered_tokens=80_000
    )
    assert bg.refresh_level(unknown) is None and not bg.should_refresh(unknown)


def test_a_fast_session_refreshes_before_the_threshold() -> None:
    # 8,000 tokens during one summary, 10,000 of room above the threshold: the refresh starts
    # 1.25 x 8,000 before the blocking limit, so that it is ready by then.
    fast = bg.Trigger(tokens=100_000, threshold=100_000, rate=800.0, last_duration_s=10.0)
    ready = bg.Refresh(trigger=fast, blocking_limit=110_000, covered_tokens=70_000)
    assert bg.refresh_level(ready) == 100_000
    faster = replace(fast, tokens=95_000, rate=1_200.0)  # 12,000 during one summary
    early = bg.Refresh(trigger=faster, blocking_limit=110_000, covered_tokens=60_000)
    assert bg.refresh_level(early) == 110_000 - 15_000
    assert bg.should_refresh(early)


def test_a_tail_nearing_the_bound_is_brought_in_ahead_of_time() -> None:
    # The bound is 30,000 of a 100,000 threshold; 1,000 tokens during one summary, 1,250 with
    # the margin: due once the tail passes 28,750, the tail at the threshold being past it.
    measured = bg.Trigger(tokens=90_000, threshold=100_000, rate=100.0, last_duration_s=10.0)
    assert not bg.tail_due(28_750, measured)
    assert bg.tail_due(28_751, measured)
    # Applied at the threshold, the tail stays within the bound: nothing to bring in yet.
    fast = replace(measured, rate=10_000.0)
    assert not bg.tail_due(20_000, fast)
    assert bg.tail_due(20_001, fast)  # 30,001 at the threshold
    assert bg.tail_due(31_000, replace(fast, tokens=101_000))  # one turn jumped past it
    # No measured rate (after a bulk append): CATCH_UP_LEAD of the threshold is expected.
    unknown = replace(measured, rate=None)
    assert not bg.tail_due(25_000, unknown)
    assert bg.tail_due(25_001, unknown)
    assert not bg.tail_due(50_000, replace(measured, threshold=0))
    # The cheaper of the two: a summary and its tail uncached, or the context again.
    assert bg.catch_up_cheaper(5_000, 30_000, 1.25 * 120_000)  # a cold cache
    assert not bg.catch_up_cheaper(5_000, 30_000, 0.1 * 120_000)  # the main loop's cache


def test_idle_preparation_only_above_half_the_threshold() -> None:
    assert bg.idle_due(50_000, 100_000)
    assert not bg.idle_due(49_999, 100_000)
    assert not bg.idle_due(10, 0)


# -- validity ----------------------------------------------------------------------------------


def _rec(entry: dict[str, object]) -> Record:
    return record_from_dict(dict(entry))


@pytest.fixture
def state(tmp_path: Path) -> tuple[BackgroundPreparation, Session]:
    # An app without a key: the summarizer is offline, so nothing here starts a preparation.
    app = App(p.InitializationOptions(), base_env={}, data_dir=tmp_path)
    prep = BackgroundPreparation(service=app.background)
    session = Session(
        meta=SessionMeta(session_id="s1", cwd=CWD, model=MODEL),
        transcript_path=str(tmp_path / "t.jsonl"),
    )
    (tmp_path / "sessions" / "s1").mkdir(parents=True)
    return prep, session


def _ready(prep: BackgroundPreparation, session: Session, e: str) -> Job:
    job = Job(phase="ready", chain={e})
    prep.job = job
    prep.state = p.PreparationState(state="ready", entries_covered=4)
    return job


async def test_an_append_that_continues_the_chain_keeps_it(
    state: tuple[BackgroundPreparation, Session],
) -> None:
    prep, session = state
    job = _ready(prep, session, "e")
    job.plan = object()  # type: ignore[assignment]  # only its presence is looked at
    prep.on_append(session, [_rec(user("next", uuid="n1", parentUuid="e"))])
    prep.on_append(session, [_rec(assistant([text_block("ok")], uuid="n2", parentUuid="n1"))])
    # A sub-agent's entries have a chain of their own.
    side = user("side", uuid="x1", parentUuid="elsewhere", isSidechain=True)
    prep.on_append(session, [_rec(side)])
    assert prep.job is job and prep.state is not None


async def test_a_rewind_drops_it(state: tuple[BackgroundPreparation, Session]) -> None:
    prep, session = state
    job = _ready(prep, session, "e")
    job.plan = object()  # type: ignore[assignment]
    prep.on_append(session, [_rec(user("again", uuid="r1", parentUuid="before-e"))])
    assert prep.job is None and prep.state is None
    assert job.scope.cancel_called


async def test_a_compaction_or_an_undo_drops_it_and_counts_what_it_cost(
    state: tuple[BackgroundPreparation, Session],
) -> None:
    prep, session = state
    job = _ready(prep, session, "e")
    job.outcome = SummaryOutcome(
        text="s",
        mode="cacheShared",
        model=MODEL,
        usage={"input_tokens": 10, "cache_read_input_tokens": 1_000, "output_tokens": 90},
        stop_reason="end_turn",
        attempts=1,
        ptl_retries=0,
        api_seconds=1.0,
    )
    prep.on_compacted(session, [])
    assert prep.job is None and prep.state is None
    assert prep.unused_tokens == 1_100


async def test_a_taken_preparation_is_not_dropped_by_its_own_compaction(
    state: tuple[BackgroundPreparation, Session],
) -> None:
    prep, session = state
    job = _ready(prep, session, "e")
    prep.take(session, job)
    prep.on_compacted(session, [])
    assert prep.unused_tokens == 0 and not job.scope.cancel_called


async def test_the_growth_after_a_compaction_is_timed_from_the_compaction(
    state: tuple[BackgroundPreparation, Session],
) -> None:
    # The first append after a compaction is no burst over nothing: the rate counts the time
    # since the compaction (docs/background.md#preparation).
    prep, session = state
    prep.on_append(session, [_rec(user("before", uuid="b1"))])
    before = time.monotonic()
    prep.on_compacted(session, [])
    after = time.monotonic()
    assert not prep.samples
    prep.on_append(session, [_rec(user("next", uuid="n1", parentUuid="b1"))])
    assert len(prep.samples) == 2
    (t0, n0), (t1, n1) = prep.samples
    assert before <= t0 <= after <= t1 and n0 == n1
    prep.on_append(session, [_rec(user("more", uuid="n2", parentUuid="n1"))])
    assert len(prep.samples) == 3  # the compaction's time is taken once


def test_options_turn_it_off_and_set_the_levels(tmp_path: Path) -> None:
    off = p.InitializationOptions(
        background_compaction=p.BackgroundCompactionOptions(enabled=False)
    )
    app = App(off, base_env={}, data_dir=tmp_path / "a")
    assert not app.background.enabled
    opts = p.BackgroundCompactionOptions(start_at=0.6, idle_minutes=2, apply_when_idle=True)
    app = App(
        p.InitializationOptions(background_compaction=opts), base_env={}, data_dir=tmp_path / "b"
    )
    assert app.background.enabled and app.background.start_at == 0.6
    assert app.background.idle_s == 120 and app.background.apply_when_idle


def test_the_cli_says_when_a_summary_is_ready() -> None:
    from compactd.cli.report import preparation_line

    base = dict(
        tokens=1, exact_tokens=0, estimated_tokens=1, context_window=10, max_output_tokens=1,
        effective_window=9, auto_compact_threshold=5, warning_threshold=4, error_threshold=4,
        blocking_limit=8, percent_left=90, is_above_warning_threshold=False,
        is_above_error_threshold=False, is_above_auto_compact_threshold=False,
        is_at_blocking_limit=False, auto_compact_enabled=True, compaction_enabled=True,
        circuit_open=False,
    )  # fmt: skip
    assert preparation_line(p.TokenStatus(**base)) is None  # type: ignore[arg-type]
    ready = p.PreparationState(state="ready", entries_covered=1_234)
    line = preparation_line(p.TokenStatus(**base, preparation=ready))  # type: ignore[arg-type]
    assert line is not None and "ready" in line and "1,234 entries" in line
    fresher = p.PreparationState(state="ready", entries_covered=1_234, refreshing=True)
    line = preparation_line(p.TokenStatus(**base, preparation=fresher))  # type: ignore[arg-type]
    assert line is not None and "fresher one is being written" in line
    running = p.PreparationState(state="preparing", entries_covered=0)
    line = preparation_line(p.TokenStatus(**base, preparation=running))  # type: ignore[arg-type]
    assert line is not None and "being prepared" in line


def test_a_failed_preparation_is_tried_again_after_growth() -> None:
    assert not bg.retry_due(10_400, 10_000, 10_000, 1)
    assert bg.retry_due(10_500, 10_000, 10_000, 1)  # 5% of the threshold
    assert not bg.retry_due(10_900, 10_000, 10_000, 2)  # doubled after a second failure
    assert bg.retry_due(11_000, 10_000, 10_000, 2)
