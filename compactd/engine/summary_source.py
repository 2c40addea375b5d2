"""Where a compaction's summary comes from, and everything worked out before the commit.

``stage`` carries a plan as far as the commit (``engine/commit.py``): the plan rebased on the
session as it is now (or made again), the PreCompact hooks, the summary, the rehydration
attachments and the SessionStart hooks. The summary comes from one of four places, and the
``Summary`` it returns says which (``origin``): known without a model (the session notes, the
offline summarizer), prepared in the background (docs/background.md#applying), a prepared one
brought up to date over what arrived after its snapshot (``caughtUp``, docs/background.md#bound),
or the model asked now, while a keep-alive ``compact/status`` goes out every
``keepAliveIntervalMs`` (falling back to the offline summary when the API fails and the
summarizer allows it). What does not depend on the summary (the ledger, the context's estimate)
is worked out in a worker thread beside the model call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio

from compactd import protocol as p
from compactd.core import background as bg
from compactd.core import constants as c
from compactd.core import tokens
from compactd.core.ledger import SurvivalLedger, build_ledger, carry_of, check_summary
from compactd.core.normalize import to_api_messages
from compactd.core.offline_summary import OFFLINE_INSTRUCTIONS_WARNING, offline_summary
from compactd.core.prompts import join_instructions
from compactd.engine.commit import Staged
from compactd.engine.plan import (
    OFFLINE_MODES,
    CompactionPlan,
    View,
    Written,
    continuation,
    plan_compaction,
    summary_without_model,
    written,
)
from compactd.engine.rehydrate import gather
from compactd.engine.summary_request import (
    catch_up_request,
    has_exchange,
    not_enough_messages,
    sum_usage,
    summary_request,
)
from compactd.services import hooks
from compactd.services.summarizer import SummarizerError, SummaryOutcome, SummaryRequest

if TYPE_CHECKING:
    from compactd.engine.progress import CompactionRun

__all__ = [
    "Checked",
    "PreparedSummary",
    "Summary",
    "check_prepared",
    "plan_facts",
    "stage",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

Origin = Literal["known", "prepared", "caughtUp", "model"]


@dataclass(frozen=True, slots=True)
class Checked:
    """A model's summary completed against a plan's ledger within the summary's room, and
    whether that leaves a message the person wrote only as a recall pointer (``lost``)."""

    written: Written
    lost: bool
    # What it was checked against: it holds for a plan with the same ledger and view.
    ledger: SurvivalLedger
    view: View

    def holds_for(self, plan: CompactionPlan) -> bool:
        return plan.ledger is self.ledger and plan.view == self.view


def check_prepared(plan: CompactionPlan, outcome: SummaryOutcome) -> Checked:
    """``outcome`` completed against ``plan``'s ledger and checked (CPU: run it in a worker
    thread). A prepared summary is checked when it arrives, so that applying it does not wait
    for this (docs/background.md#applying)."""
    ledger, _ = plan_facts(plan)
    done = written(outcome.text, outcome.mode, ledger, plan.view)
    lost = bool(check_summary(ledger, done.summary).messages)
    return Checked(done, lost, ledger, plan.view)


@dataclass(frozen=True, slots=True)
class PreparedSummary:
    """A summary the model wrote in the background (``engine/background``) for the plan it is
    carried out with (docs/background.md#applying)."""

    outcome: SummaryOutcome
    # The model's time when it was written (the boundary's ``durationMs``).
    duration_ms: int
    # When the agent started waiting (monotonic): the boundary's ``waitMs`` counts from there.
    asked_at: float
    # ``outcome`` already completed against the plan's ledger (``check_prepared``, worked out
    # in the background when the summary arrived); None: worked out when it is applied.
    checked: Checked | None = None


@dataclass(frozen=True, slots=True)
class Summary:
    """The summary a compaction commits, and where it came from."""

    written: Written
    mode: str
    usage: dict[str, Any] | None
    origin: Origin
    # The model's time writing it; None: the compaction's own time.
    model_ms: int | None = None
    warnings: tuple[str, ...] = ()
    # Which summarizer wrote it and which were passed over (docs/providers.md).
    report: p.SummarizerReport | None = None

    @property
    def prepared(self) -> bool:
        """A summary written in the background was used (as it was, or brought up to date)."""
        return self.origin in ("prepared", "caughtUp")


def plan_facts(plan: CompactionPlan) -> tuple[SurvivalLedger, int]:
    """The plan's survival ledger and the raw estimate of its snapshot's context, from the
    plan when it holds them, else worked out (CPU: run it in a worker thread)."""
    ledger = plan.ledger or build_ledger(
        plan.summarized, cleared_tool_ids=plan.cleared, cwd=plan.snapshot.meta.cwd
    )
    pre_raw = plan.pre_raw
    return ledger, tokens.estimate_records_raw(
        plan.snapshot.context
    ) if pre_raw is None else pre_raw


class _Facts:
    """The plan's ledger and the estimate of its context, or their computation in a worker
    thread: ``compute`` runs beside the model call, ``result`` waits for it (or computes them
    now when nothing started it)."""

    def __init__(self, plan: CompactionPlan) -> None:
        self._plan = plan
        self._done = anyio.Event()
        self._value: tuple[SurvivalLedger, int] | None = None
        self._started = False
        if plan.ledger is not None and plan.pre_raw is not None:
            # Worked out already (a plan prepared in the background): no worker thread to
            # wait for, which on a busy machine is a wait of its own.
            self._value = (plan.ledger, plan.pre_raw)
            self._started = True
            self._done.set()

    async def compute(self) -> None:
        if self._started:
            return
        self._started = True
        plan = self._plan
        try:
            self._value = await anyio.to_thread.run_sync(lambda: plan_facts(plan))
        finally:
            self._done.set()

    async def result(self) -> tuple[SurvivalLedger, int]:
        if not self._started:
            await self.compute()
        await self._done.wait()
        if self._value is None:
            raise p.CompactdError(p.ErrorCode.INTERNAL, "the ledger could not be built")
        return self._value


async def _current_plan(
    run: CompactionRun, plan: CompactionPlan | None, prepared: PreparedSummary | None
) -> tuple[CompactionPlan, int, PreparedSummary | None]:
    """``plan`` rebased on the session as it is now, or a new plan on a fresh snapshot; the
    session's token count now (the compaction's "before"); and the prepared summary, kept only
    with its own plan rebased."""
    runtime, session = run.runtime, run.session
    async with session.lock:
        status = runtime.status(session)
        keep_micro = prepared is not None
        rebased = plan.rebased(session, status, keep_micro=keep_micro) if plan is not None else None
        snap = session.snapshot(status) if rebased is None else None
    if rebased is not None:
        return rebased, status.tokens, prepared
    assert snap is not None
    if plan is not None:
        log.info("session %s: changed since the decision; planning again", snap.session_id)
    fresh = await plan_compaction(runtime, snap, run.spec, outlook=False)
    return fresh, status.tokens, None


async def _fresh_plan(run: CompactionRun) -> CompactionPlan:
    snap = await run.runtime.snapshot(run.session)
    return await plan_compaction(run.runtime, snap, run.spec, outlook=False)


async def stage(
    run: CompactionRun, given: CompactionPlan | None, prepared: PreparedSummary | None
) -> Staged:
    """Everything the commit needs, worked out off the lock from ``given`` (or a new plan)."""
    runtime, session, spec = run.runtime, run.session, run.spec
    plan, pre_tokens, prepared = await _current_plan(run, given, prepared)
    run.stages.mark("rebase")
    # What the main loop sends, for the model: not needed to apply a prepared summary.
    messages = await _messages(plan) if prepared is None else None
    snap = plan.snapshot
    cwd = snap.meta.cwd
    base = {
        "session_id": session.session_id,
        "transcript_path": session.transcript_path,
        "cwd": cwd,
    }

    run.status("preCompactHooks")
    hook_results = await hooks.run_hooks(
        runtime.options.hooks_settings_path,
        "PreCompact",
        spec.trigger,
        {**base, "trigger": spec.trigger, "custom_instructions": spec.custom_instructions or ""},
        cwd=cwd,
        env=runtime.env,
    )
    from_hooks = join_instructions(
        *(hooks.additional_context(r.stdout) for r in hook_results if r.ok)
    )
    instructions = [x for x in (spec.custom_instructions, from_hooks) if x and x.strip()]
    if instructions:
        prepared = None  # written without them
    run.stages.mark("preCompactHooks")

    run.status("summarizing")
    plan, summary, pre_raw = await _summary(
        run, plan, messages, instructions, bool(from_hooks), prepared
    )
    run.stages.mark("summary")
    snap = plan.snapshot
    if not summary.written.summary:
        raise p.CompactdError(p.ErrorCode.SUMMARY_FAILED, "the summary is empty")
    kept, kept_before = plan.kept, plan.kept_before
    text = continuation(snap.transcript_path, spec, summary.written.summary, kept)

    run.status("rehydrating")
    if plan.rehydration is None:
        plan = replace(plan, rehydration=await gather(runtime, snap, [*kept_before, *kept]))
    attachments = plan.attachments(text)
    run.stages.mark("attachments")

    run.status("sessionStartHooks")
    start_results = await hooks.run_hooks(
        runtime.options.hooks_settings_path,
        "SessionStart",
        "compact",
        {**base, "source": "compact"},
        cwd=cwd,
        env=runtime.env,
    )
    hook_results.extend(start_results)
    run.stages.mark("sessionStartHooks")
    return Staged(
        snapshot_len=snap.length,
        logical_parent=snap.last_uuid,
        pre_tokens=pre_tokens,
        pre_raw=pre_raw,
        context_head=snap.context[0] if snap.context else None,
        summarized=plan.summarized,
        kept=kept,
        kept_before=kept_before,
        continuation=text,
        attachments=attachments,
        session_context=[
            ctx for r in start_results if r.ok and (ctx := hooks.additional_context(r.stdout))
        ],
        hook_results=hook_results,
        summarizer=summary.mode,
        usage=summary.usage,
        model_ms=summary.model_ms,
        prepared_asked_at=prepared.asked_at if prepared is not None and summary.prepared else None,
        warnings=list(summary.warnings),
        report=summary.report,
        restored=summary.written.restored,
        carry=summary.written.carry,
    )


async def _messages(plan: CompactionPlan) -> list[dict[str, Any]]:
    """Exactly what the main loop sends (session/messages), so that the cache-sharing request
    reads the main loop's cached prefix; built in a worker thread (on a long context it takes
    a while, and other sessions' requests go on meanwhile)."""
    messages = await anyio.to_thread.run_sync(
        lambda: to_api_messages(plan.shown, cleared_tool_ids=plan.cleared)
    )
    if not has_exchange(messages):
        raise not_enough_messages()
    return messages


async def _summary(
    run: CompactionRun,
    plan: CompactionPlan,
    messages: list[dict[str, Any]] | None,
    instructions: list[str],
    from_hooks: bool,
    prepared: PreparedSummary | None,
) -> tuple[CompactionPlan, Summary, int]:
    """The summary of ``plan`` (or of a plan made again, returned with it) and the raw estimate
    of the context it replaces."""
    facts = _Facts(plan)
    if plan.known:
        known = await _known(run, plan, facts, instructions, from_hooks)
        return plan, known, (await facts.result())[1]
    if prepared is not None:
        after = run.session.records[plan.snapshot.length :]
        limit = bg.tail_limit(run.runtime.status(run.session).auto_compact_threshold)
        if tokens.pad(tokens.estimate_records_raw(after)) <= limit:
            got = await _from_prepared(run, plan, facts, prepared)
            if got is not None:
                return plan, got, (await facts.result())[1]
        else:
            fresh = await _fresh_plan(run)
            fresh_facts = _Facts(fresh)
            caught = await _caught_up(run, plan, fresh, fresh_facts, prepared)
            plan, facts = fresh, fresh_facts
            if caught is not None:
                return plan, caught, (await facts.result())[1]
            messages = None
    if messages is None:
        messages = await _messages(plan)
    request = summary_request(plan, instructions, messages)
    summary = await _ask_model(run, plan, facts, request, instructions)
    return plan, summary, (await facts.result())[1]


async def _known(
    run: CompactionRun,
    plan: CompactionPlan,
    facts: _Facts,
    instructions: list[str],
    from_hooks: bool,
) -> Summary:
    """The summary no model writes: the plan's, or rendered again when a hook asked for more."""
    ledger, _ = await facts.result()
    summary, mode = plan.summary, plan.summary_mode
    if summary is None or (from_hooks and mode in OFFLINE_MODES):
        # A hook asked for more than the plan knew: the offline summary quotes it.
        spec, view = run.spec, plan.view

        def build() -> Written:
            raw, how = summary_without_model(spec, ledger, view, instructions)
            return written(raw, how, ledger, view)

        summary = await anyio.to_thread.run_sync(build)
    warn = (OFFLINE_INSTRUCTIONS_WARNING,) if mode in OFFLINE_MODES and instructions else ()
    return Summary(summary, mode, None, "known", warnings=warn)


async def _checked(facts: _Facts, view: View, outcome: SummaryOutcome) -> tuple[Written, bool]:
    """``outcome`` completed against the ledger within the summary's room, and whether that
    leaves a message the person wrote only as a recall pointer."""
    ledger, _ = await facts.result()

    def check() -> tuple[Written, bool]:
        done = written(outcome.text, outcome.mode, ledger, view)
        return done, bool(check_summary(ledger, done.summary).messages)

    return await anyio.to_thread.run_sync(check)


async def _from_prepared(
    run: CompactionRun, plan: CompactionPlan, facts: _Facts, prepared: PreparedSummary
) -> Summary | None:
    """The summary prepared in the background, completed against the ledger; None, and the
    model asked again about the same entries, when it quotes so few of the messages the person
    wrote that the completion would leave one of them only as a recall pointer
    (docs/background.md#applying)."""
    run.status("summarizing", "the summary was prepared in the background")
    outcome = prepared.outcome
    checked = prepared.checked
    if checked is not None and checked.holds_for(plan):
        done, lost = checked.written, checked.lost
    else:
        done, lost = await _checked(facts, plan.view, outcome)
    if lost:
        log.info(
            "session %s: the prepared summary leaves a user message to a recall pointer; "
            "asking the model now",
            run.session.session_id,
        )
        return None
    return Summary(
        done, outcome.mode, outcome.usage, "prepared", prepared.duration_ms, report=outcome.report
    )


async def _caught_up(
    run: CompactionRun,
    old: CompactionPlan,
    fresh: CompactionPlan,
    facts: _Facts,
    prepared: PreparedSummary,
) -> Summary | None:
    """More arrived after the prepared summary's snapshot than a compaction keeps verbatim: the
    model summarizes the prepared summary and what came after it (far less than the whole
    context), for the whole context as it is now (docs/background.md#bound). None, and the
    whole context asked of the model, when the fresh context does not continue the old one or
    the result leaves a message the person wrote only as a recall pointer."""
    request = await anyio.to_thread.run_sync(
        lambda: catch_up_request(old, fresh, prepared.outcome.text)
    )
    if request is None:
        return None
    log.info(
        "session %s: %d entries arrived after the prepared summary's snapshot; bringing them "
        "into it",
        run.session.session_id,
        len(fresh.snapshot.context) - len(old.snapshot.context),
    )
    run.status("summarizing", "bringing what arrived since the prepared summary into it")
    started = time.monotonic()
    outcome = await _model_outcome(run, request)
    if outcome is None:
        return None
    done, lost = await _checked(facts, fresh.view, outcome)
    if lost:
        return None
    model_ms = prepared.duration_ms + int((time.monotonic() - started) * 1000)
    usage = sum_usage(prepared.outcome.usage, outcome.usage)
    return Summary(done, outcome.mode, usage, "caughtUp", model_ms, report=outcome.report)


async def _model_outcome(run: CompactionRun, request: SummaryRequest) -> SummaryOutcome | None:
    """The model's answer to ``request`` under the keep-alive; None when the API failed."""
    try:
        return await _with_keepalive(
            lambda: run.runtime.summarizer.summarize(
                request, lambda m: run.status("summarizing", m)
            ),
            _keepalive_s(run),
            lambda: run.status("keepAlive", f"still summarizing ({run.elapsed_ms()} ms)"),
        )
    except SummarizerError as err:
        log.warning("session %s: the catch-up summary failed: %s", run.session.session_id, err)
        return None


def _keepalive_s(run: CompactionRun) -> float:
    return (run.runtime.options.keep_alive_interval_ms or c.KEEP_ALIVE_INTERVAL_MS) / 1000


async def _ask_model(
    run: CompactionRun,
    plan: CompactionPlan,
    facts: _Facts,
    request: SummaryRequest,
    instructions: list[str],
) -> Summary:
    """The model's summary of ``plan`` now, or the offline one when the API fails and the
    summarizer falls back."""
    summarizer = run.runtime.summarizer
    failure: SummarizerError | None = None
    outcome: SummaryOutcome | None = None
    async with anyio.create_task_group() as tg:
        # What does not depend on the summary is worked out in a worker thread while the
        # model writes it: the ledger the summary is checked against and the estimate of
        # the context (unless the plan holds them already).
        tg.start_soon(facts.compute)
        try:
            outcome = await _with_keepalive(
                lambda: summarizer.summarize(request, lambda m: run.status("summarizing", m)),
                _keepalive_s(run),
                lambda: run.status("keepAlive", f"still summarizing ({run.elapsed_ms()} ms)"),
            )
        except SummarizerError as err:  # re-raised below, unwrapped by the task group
            failure = err
    ledger, _ = await facts.result()
    view = plan.view
    if outcome is not None:
        warnings = (
            ("the summary reached the output limit and may be cut short",)
            if outcome.stop_reason == "max_tokens"
            else ()
        )
        text, mode = outcome.text, outcome.mode
        done = await anyio.to_thread.run_sync(lambda: written(text, mode, ledger, view))
        return Summary(done, mode, outcome.usage, "model", warnings=warnings, report=outcome.report)
    assert failure is not None
    if not (failure.api_failure and summarizer.offline_fallback):
        raise failure
    log.warning("summarizer failed (%s); building the summary offline", failure.message)
    notes = [
        f"the summarizer API failed ({failure.message}); the summary was built offline "
        "from the transcript instead"
    ]
    run.status("summarizing", "the API failed; building the summary offline")
    if plan.summary is not None and not instructions:
        summary = plan.summary  # the plan's stand-in is this very summary
    else:
        raw = await anyio.to_thread.run_sync(
            lambda: offline_summary(ledger, limit=view.summary_chars, instructions=instructions)
        )
        summary = Written(raw, [], carry_of(ledger))
    if instructions:
        notes.append(OFFLINE_INSTRUCTIONS_WARNING)
    return Summary(
        summary, "offlineFallback", None, "model", warnings=tuple(notes), report=failure.report
    )


async def _with_keepalive(
    call: Callable[[], Awaitable[T]], interval: float, tick: Callable[[], None]
) -> T:
    """Await ``call()`` while ``tick()`` runs every ``interval`` seconds."""
    box: list[T] = []
    error: Exception | None = None

    async def beat() -> None:
        while True:
            await anyio.sleep(interval)
            tick()

    async with anyio.create_task_group() as tg:
        tg.start_soon(beat)
        try:
            box.append(await call())
        except Exception as exc:  # re-raised below, unwrapped by the task group
            error = exc
        finally:
            tg.cancel_scope.cancel()
    if error is not None:
        raise error
    return box[0]
