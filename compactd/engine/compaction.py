"""The compaction engine: carry out a compaction plan and commit boundary + summary atomically.

``run_compaction`` is the whole pipeline behind ``compact/full``, ``compact/auto`` and
``compact/partial``. It carries out a ``CompactionPlan`` (``engine/plan.py``): the one
``compact/auto`` decided on, rebased on the session as it is now, or one made here on a fresh
snapshot; what the plan holds (selection, ledger, summary without a model, rehydration read from
disk) is not computed again (docs/engine.md#plan). Then it runs the PreCompact hooks; asks the
summarizer (or takes the plan's summary) while a keep-alive ``compact/status`` goes out every
``keepAliveIntervalMs``; fits the rehydration attachments and gathers SessionStart hook output;
then takes the lock again and appends, in ONE durable write, the boundary, the continuation
summary, the attachments and the hook context (docs/compaction.md#result-order). PostCompact
hooks run last.

The lock is NOT held while the model writes: the agent may keep appending. Entries appended
after the plan's snapshot end up before the new boundary in the file, so the boundary's
``preservedSegment`` names them (with any records a partial compaction keeps) and ``core.view``
relinks them right after the summary; nothing is copied and their uuids stay valid. Nothing
touches the transcript before the commit, so a failure or a cancellation leaves the session
exactly as it was; a cancel that arrives during the commit itself is too late and the
compaction completes (a shielded cancel scope).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from compactd import protocol as p
from compactd.core import auto_policy, tokens
from compactd.core import constants as c
from compactd.core.ledger import CARRY_FIELD, SurvivalLedger, build_ledger, carry_of, check_summary
from compactd.core.normalize import system_reminder, to_api_messages
from compactd.core.offline_summary import OFFLINE_INSTRUCTIONS_WARNING, offline_summary
from compactd.core.prompts import compact_prompt, join_instructions
from compactd.engine.plan import (
    OFFLINE_MODES,
    CompactionPlan,
    CompactionSpec,
    Selection,
    Selector,
    View,
    Written,
    continuation,
    plan_compaction,
    prompt_kind,
    select_whole_context,
    summary_without_model,
    written,
)
from compactd.engine.rehydration import Rehydration, gather
from compactd.services import hooks
from compactd.services.summarizer import SummarizerError, SummaryOutcome, SummaryRequest
from compactd.transcript import entries
from compactd.transcript.model import (
    GROUP_SIZE_FIELD,
    Record,
    ToolUseBlock,
    record_from_dict,
)

if TYPE_CHECKING:
    from compactd.engine.progress import BeginProgress, WorkDone
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session

__all__ = [
    "CompactionPlan",
    "CompactionSpec",
    "PreparedSummary",
    "Selection",
    "Selector",
    "plan_compaction",
    "plan_facts",
    "run_compaction",
    "run_full",
    "run_with_progress",
    "select_whole_context",
    "summary_request",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PreparedSummary:
    """A summary the model wrote in the background (``engine/background.py``) for the plan it
    is carried out with: the compaction makes no model call (docs/background.md#applying)."""

    outcome: SummaryOutcome
    # The model's time when it was written (the boundary's ``durationMs``).
    duration_ms: int
    # When the agent started waiting (monotonic): the boundary's ``waitMs`` counts from there.
    asked_at: float


@dataclass(slots=True)
class _Prepared:
    """Everything computed before the commit, from the plan's snapshot."""

    snapshot_len: int
    logical_parent: str | None
    pre_tokens: int
    pre_raw: int
    context_head: Record | None
    summarized: list[Record]
    kept: list[Record]
    kept_before: list[Record]
    continuation: str
    attachments: list[dict[str, Any]]
    session_context: list[str]
    hook_results: list[p.HookResult]
    summarizer: str
    usage: dict[str, Any] | None
    warnings: list[str] = field(default_factory=list)
    # Which summarizer wrote the summary and which were passed over (docs/providers.md).
    report: p.SummarizerReport | None = None
    restored: list[str] = field(default_factory=list)
    # The ledger folded for the next compaction, stored with the summary entry.
    carry: dict[str, Any] = field(default_factory=dict)


class _Run:
    """One compaction: its id, clock, status notifications and progress bar."""

    def __init__(
        self, runtime: Runtime, session: Session, spec: CompactionSpec, progress: WorkDone | None
    ) -> None:
        self.runtime = runtime
        self.session = session
        self.spec = spec
        self.progress = progress
        self.compaction_id = str(uuid.uuid4())
        self.started = time.monotonic()
        # A summary prepared in the background, while it may still be used.
        self.prepared: PreparedSummary | None = None

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def status(self, phase: p.Phase, message: str | None = None) -> None:
        self.runtime.notify(
            p.NOTIFY_COMPACT_STATUS,
            p.StatusNotification(
                session_id=self.session.session_id,
                compaction_id=self.compaction_id,
                phase=phase,
                trigger=self.spec.trigger,
                elapsed_ms=self.elapsed_ms(),
                message=message,
            ),
        )
        if self.progress is None:
            return
        text = message or phase
        if phase in ("completed", "failed", "cancelled"):
            self.progress.end(text)
        else:
            self.progress.report(text)


def refuse(runtime: Runtime, session: Session) -> None:
    """Raise what stops any compaction of ``session`` before it starts: compaction switched
    off, one already running, or a fixed prefix that no compaction can bring under the
    threshold."""
    if not runtime.flags.compaction_enabled:
        raise p.CompactdError(
            p.ErrorCode.COMPACTION_DISABLED,
            f"compaction is disabled ({c.ENV_DISABLE_COMPACT} is set)",
        )
    if session.busy:
        raise session.busy_error()
    refusal = auto_policy.prefix_refusal(runtime.status(session), lambda: prefix_parts(session))
    if refusal is not None:
        # No model call can help: the prefix alone fills the window up to the threshold.
        raise p.CompactdError(p.ErrorCode.FIXED_PREFIX_TOO_LARGE, refusal)


async def run_compaction(
    runtime: Runtime,
    session: Session,
    spec: CompactionSpec,
    *,
    progress: WorkDone | None = None,
    plan: CompactionPlan | None = None,
    prepared: PreparedSummary | None = None,
) -> p.CompactResult:
    """Compact ``session`` as ``spec`` says, carrying out ``plan`` when one was made (it is
    then ``plan.spec``). Raises ``CompactdError`` when it cannot.

    ``prepared``: the summary of ``plan`` written in the background; it is used when the plan
    still matches the session (rebased) and no PreCompact hook adds instructions, else the
    model is asked as without it (``CompactResult.prepared`` says which).

    Codes: ``compactionDisabled``, ``sessionBusy`` (another compaction runs),
    ``notEnoughMessages``, ``summaryFailed``, ``contextTooLargeToCompact``,
    ``compactionIneffective`` (the result would not be smaller), ``cancelled``. A success resets
    the auto-compaction circuit breaker; counting failures is the caller's business (only
    automatic ones count).
    """
    if plan is not None:
        spec = plan.spec
    refuse(runtime, session)
    with session.compaction():
        run = _Run(runtime, session, spec, progress)
        run.prepared = prepared
        try:
            run.status("started")
            before: _Prepared | None = None
            with anyio.CancelScope() as scope:
                if progress is not None:
                    progress.on_cancel(scope.cancel)
                before = await _prepare(run, plan)
            if before is None:
                raise p.CompactdError(
                    p.ErrorCode.CANCELLED, "the compaction was cancelled; the session is unchanged"
                )
            # Once the transcript write has started, stopping half-way would leave the file
            # and the in-memory session disagreeing: a cancel that arrives now is too late.
            ready = before
            result: p.CompactResult | None = None
            with anyio.CancelScope(shield=True):
                result = await _commit(run, ready)
            assert result is not None
            return result
        except anyio.get_cancelled_exc_class():
            run.status("cancelled", "cancelled by the client; the session is unchanged")
            raise
        except p.CompactdError as err:
            session.health.last_error = err.message
            run.status("cancelled" if err.code == p.ErrorCode.CANCELLED else "failed", err.message)
            raise
        except Exception as exc:
            log.exception("compaction of session %s failed", session.session_id)
            session.health.last_error = str(exc)
            run.status("failed", f"internal error: {exc}")
            raise p.CompactdError(p.ErrorCode.INTERNAL, f"compaction failed: {exc}") from exc


async def run_full(
    runtime: Runtime,
    session: Session,
    custom_instructions: str | None,
    begin_progress: BeginProgress,
    *,
    plan: CompactionPlan | None = None,
    prepared: PreparedSummary | None = None,
) -> p.CompactResult:
    """``compact/full``: the user's explicit full compaction, planned and carried out now (or
    ``plan`` with its summary ``prepared`` in the background, docs/background.md#applying)."""
    if session.busy:  # before a progress bar is shown for nothing
        raise session.busy_error()
    spec = CompactionSpec(
        trigger="manual", kind=prompt_kind(session.meta), custom_instructions=custom_instructions
    )
    if plan is not None:
        plan = dataclasses.replace(plan, spec=spec)
    return await run_with_progress(
        runtime,
        session,
        spec,
        begin_progress,
        "Compacting conversation",
        plan=plan,
        prepared=prepared,
    )


async def run_with_progress(
    runtime: Runtime,
    session: Session,
    spec: CompactionSpec,
    begin_progress: BeginProgress,
    title: str,
    *,
    plan: CompactionPlan | None = None,
    prepared: PreparedSummary | None = None,
) -> p.CompactResult:
    """``run_compaction`` under a work-done progress titled ``title``, ended however it ends."""
    progress = await begin_progress(title)
    try:
        return await run_compaction(
            runtime, session, spec, progress=progress, plan=plan, prepared=prepared
        )
    finally:
        if progress is not None:
            progress.end("done")


# -- before the commit ---------------------------------------------------------------------------


def has_exchange(messages: Sequence[dict[str, Any]]) -> bool:
    roles = {m.get("role") for m in messages}
    return "user" in roles and "assistant" in roles


def summary_request(
    plan: CompactionPlan,
    instructions: Sequence[str],
    messages: list[dict[str, Any]] | None = None,
) -> SummaryRequest:
    """The cache-sharing summary request of ``plan``: the conversation exactly as the main loop
    sends it (session/messages), so it reads the main loop's cached prefix, then the summary
    instruction. A preparation in the background sends the same (docs/background.md).
    ``messages``: the conversation when already built (it takes a while on a long context)."""
    shown, cleared, snap = plan.shown, plan.cleared, plan.snapshot
    return SummaryRequest(
        messages=messages
        if messages is not None
        else to_api_messages(shown, cleared_tool_ids=cleared),
        instruction=compact_prompt(
            plan.spec.kind, list(instructions), target_words=plan.view.target_words
        ),
        model=snap.meta.model,
        cache_safe=snap.meta.cache_safe_params,
        session_id=snap.session_id,
        plain=lambda: to_api_messages(
            shown, cleared_tool_ids=cleared, strip_media=True, drop_skill_listing=True
        ),
    )


def not_enough_messages() -> p.CompactdError:
    return p.CompactdError(
        p.ErrorCode.NOT_ENOUGH_MESSAGES,
        "not enough messages to compact: the context needs at least one user message and "
        "one assistant response since the last compaction",
    )


async def _current_plan(run: _Run, plan: CompactionPlan | None) -> tuple[CompactionPlan, int]:
    """``plan`` rebased on the session as it is now, or a new plan on a fresh snapshot; with
    the session's token count now (the compaction's "before"). A prepared summary is kept
    only with its own plan rebased."""
    runtime, session = run.runtime, run.session
    async with session.lock:
        status = runtime.status(session)
        keep_micro = run.prepared is not None
        rebased = plan.rebased(session, status, keep_micro=keep_micro) if plan is not None else None
        snap = session.snapshot(status) if rebased is None else None
    if rebased is not None:
        return rebased, status.tokens
    run.prepared = None  # it summarized what the session no longer is
    assert snap is not None
    if plan is not None:
        log.info("session %s: changed since the decision; planning again", snap.session_id)
    return await plan_compaction(runtime, snap, run.spec, outlook=False), status.tokens


async def _prepare(run: _Run, given: CompactionPlan | None) -> _Prepared:
    runtime, session, spec = run.runtime, run.session, run.spec
    plan, pre_tokens = await _current_plan(run, given)
    snap = plan.snapshot
    cleared = plan.cleared
    summarized, kept, kept_before, shown = plan.summarized, plan.kept, plan.kept_before, plan.shown
    # Exactly what the main loop sends (session/messages), so the cache-sharing request
    # reads the main loop's cached prefix. Built in a worker thread: on a long context it
    # takes a while, and other sessions' requests go on meanwhile.
    messages = await anyio.to_thread.run_sync(
        lambda: to_api_messages(shown, cleared_tool_ids=cleared)
    )
    if not has_exchange(messages):
        raise not_enough_messages()
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
        run.prepared = None  # written without them

    run.status("summarizing")
    view = plan.view
    warnings: list[str] = []
    usage: dict[str, Any] | None = None
    report: p.SummarizerReport | None = None
    facts = _Facts(plan)
    from_prepared = None
    if not plan.known and run.prepared is not None:
        from_prepared = await _prepared_written(run, facts, view)
    if plan.known:
        ledger, pre_raw = await facts.result()
        summary = plan.summary
        mode = plan.summary_mode
        if summary is None or (from_hooks and mode in OFFLINE_MODES):
            # A hook asked for more than the plan knew: the offline summary quotes it.
            summary = await _render(spec, ledger, view, instructions)
        if mode in OFFLINE_MODES and instructions:
            warnings.append(OFFLINE_INSTRUCTIONS_WARNING)
    elif from_prepared is not None:
        summary, mode, usage = from_prepared
        ledger, pre_raw = await facts.result()
    else:
        summarizer = runtime.summarizer
        request = summary_request(plan, instructions, messages)
        interval = (runtime.options.keep_alive_interval_ms or c.KEEP_ALIVE_INTERVAL_MS) / 1000
        failure: SummarizerError | None = None
        outcome = None
        async with anyio.create_task_group() as tg:
            # What does not depend on the summary is worked out in a worker thread while the
            # model writes it: the ledger the summary is checked against and the estimate of
            # the context (unless the plan holds them already).
            tg.start_soon(facts.compute)
            try:
                outcome = await _with_keepalive(
                    lambda: summarizer.summarize(request, lambda m: run.status("summarizing", m)),
                    interval,
                    lambda: run.status("keepAlive", f"still summarizing ({run.elapsed_ms()} ms)"),
                )
            except SummarizerError as err:  # re-raised below, unwrapped by the task group
                failure = err
        if failure is not None:
            report = failure.report
            if not (failure.api_failure and summarizer.offline_fallback):
                raise failure
            log.warning("summarizer failed (%s); building the summary offline", failure.message)
            warnings.append(
                f"the summarizer API failed ({failure.message}); the summary was built offline "
                "from the transcript instead"
            )
            run.status("summarizing", "the API failed; building the summary offline")
        ledger, pre_raw = await facts.result()
        if outcome is None:
            mode = "offlineFallback"
            if plan.summary is not None and not instructions:
                summary = plan.summary  # the plan's stand-in is this very summary
            else:
                raw = await anyio.to_thread.run_sync(
                    lambda: offline_summary(
                        ledger, limit=view.summary_chars, instructions=instructions
                    )
                )
                summary = Written(raw, [], carry_of(ledger))
            if instructions:
                warnings.append(OFFLINE_INSTRUCTIONS_WARNING)
        else:
            assert outcome is not None
            mode = outcome.mode
            usage = outcome.usage
            report = outcome.report
            if outcome.stop_reason == "max_tokens":
                warnings.append("the summary reached the output limit and may be cut short")
            text = outcome.text
            summary = await anyio.to_thread.run_sync(lambda: written(text, mode, ledger, view))
    if not summary.summary:
        raise p.CompactdError(p.ErrorCode.SUMMARY_FAILED, "the summary is empty")
    text = continuation(snap.transcript_path, spec, summary.summary, kept)

    run.status("rehydrating")
    if plan.rehydration is None:
        plan = _with_rehydration(plan, await gather(runtime, snap, [*kept_before, *kept]))
    attachments = plan.attachments(text)

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
    session_context = [
        text for r in start_results if r.ok and (text := hooks.additional_context(r.stdout))
    ]
    return _Prepared(
        snapshot_len=snap.length,
        logical_parent=snap.last_uuid,
        pre_tokens=pre_tokens,
        pre_raw=pre_raw,
        context_head=snap.context[0] if snap.context else None,
        summarized=summarized,
        kept=kept,
        kept_before=kept_before,
        continuation=text,
        attachments=attachments,
        session_context=session_context,
        hook_results=hook_results,
        summarizer=mode,
        usage=usage,
        warnings=warnings,
        report=report,
        restored=summary.restored,
        carry=summary.carry,
    )


def _with_rehydration(plan: CompactionPlan, rehydration: Rehydration) -> CompactionPlan:
    return dataclasses.replace(plan, rehydration=rehydration)


async def _render(
    spec: CompactionSpec, ledger: SurvivalLedger, view: View, instructions: list[str]
) -> Written:
    def build() -> Written:
        raw, mode = summary_without_model(spec, ledger, view, instructions)
        return written(raw, mode, ledger, view)

    return await anyio.to_thread.run_sync(build)


async def _prepared_written(
    run: _Run, facts: _Facts, view: View
) -> tuple[Written, str, dict[str, Any] | None] | None:
    """The summary prepared in the background, completed against the ledger within a summary's
    room; None, and the model asked again about the same entries, when the prepared summary
    quotes so few of the messages the person wrote that the completion would leave one of them
    only as a recall pointer: what survives must be what a compaction now would keep
    (docs/background.md#applying)."""
    prepared = run.prepared
    assert prepared is not None
    run.status("summarizing", "the summary was prepared in the background")
    outcome = prepared.outcome
    ledger, _ = await facts.result()
    summary = await anyio.to_thread.run_sync(
        lambda: written(outcome.text, outcome.mode, ledger, view)
    )
    lost = await anyio.to_thread.run_sync(lambda: check_summary(ledger, summary.summary).messages)
    if lost:
        log.info(
            "session %s: the prepared summary leaves %d user message(s) to recall pointers; "
            "asking the model now",
            run.session.session_id,
            len(lost),
        )
        run.prepared = None
        return None
    return summary, outcome.mode, outcome.usage


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


# -- the commit ----------------------------------------------------------------------------------


def prefix_parts(session: Session) -> str | None:
    """What the fixed prefix is made of, from the client's cacheSafeParams, when it gave them."""
    sizes = tokens.prefix_sizes(session.meta.cache_safe_params)
    if not sizes:
        return None
    return ", ".join(f"{name} about {size:,} tokens" for name, size in sizes.items())


def _discovered_tools(records: Sequence[Record], cache_safe: dict[str, Any] | None) -> list[str]:
    """Tools the summarized part used that the main loop's tool list does not announce."""
    declared: set[str] = set()
    for tool in (cache_safe or {}).get("tools") or []:
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            declared.add(tool["name"])
    used: set[str] = set()
    for r in records:
        if r.entry.type == "assistant":
            used.update(b.name for b in r.entry.blocks if isinstance(b, ToolUseBlock) and b.name)
    return sorted(used - declared) if declared else sorted(used)


def _previous_dropped(head: Record | None) -> int:
    if head is None or not head.entry.is_compact_boundary:
        return 0
    meta = head.entry.compact_metadata
    if meta is None:
        return 0
    return meta.cumulative_dropped_tokens or 0


async def _commit(run: _Run, prep: _Prepared) -> p.CompactResult:
    runtime, session, spec = run.runtime, run.session, run.spec
    cache_safe = session.meta.cache_safe_params
    async with session.lock:
        appended = session.records[prep.snapshot_len :]
        if any(r.entry.is_compact_boundary for r in appended):
            raise p.CompactdError(
                p.ErrorCode.SESSION_BUSY,
                "the session was compacted by someone else meanwhile; nothing was written",
            )
        preserved = [r for r in (*prep.kept, *appended) if r.entry.uuid]
        boundary_uuid = str(uuid.uuid4())
        summary_uuid = str(uuid.uuid4())
        where = {"session_id": session.session_id, "cwd": session.meta.cwd}
        summary = entries.compact_summary(
            prep.continuation,
            **where,
            boundary_uuid=boundary_uuid,
            uuid=summary_uuid,
            carry=prep.carry,
        )
        extra = entries.context_attachments(
            list(prep.attachments),
            list(prep.session_context),
            **where,
            parent=summary_uuid,
            render=system_reminder,
        )
        tail_records = [record_from_dict(e) for e in (summary, *extra)]

        # Thrash guard: both sides are estimates of the messages alone (usage figures include
        # the system prompt and tools, which compaction cannot shrink).
        appended_raw = tokens.estimate_records_raw(appended)
        before = tokens.pad(prep.pre_raw + appended_raw)
        post_raw = (
            tokens.estimate_records_raw(prep.kept_before)
            + tokens.estimate_records_raw(tail_records)
            + tokens.estimate_records_raw(prep.kept)
            + appended_raw
        )
        after = tokens.pad(post_raw)
        # What the next request carries besides the messages stays; the status counts it.
        prefix = session.counter.fixed_prefix
        if after >= before:
            raise p.CompactdError(
                p.ErrorCode.COMPACTION_INEFFECTIVE,
                f"the compacted context would not be smaller ({before:,} -> {after:,} estimated "
                "tokens); nothing was written",
                preTokens=before,
                postTokens=after,
            )
        warnings = list(prep.warnings)
        threshold = runtime.status(session).auto_compact_threshold
        if prefix + after >= threshold:
            warnings.append(
                f"the fixed prefix (system prompt and tools, about {prefix:,} tokens) plus the "
                f"compacted conversation ({after:,} tokens) is still above the auto-compact "
                f"threshold ({threshold:,}): the window refills at once; shorten the system "
                "prompt, the tool list or the attachments"
            )
            log.warning("session %s: %s", session.session_id, warnings[-1])

        duration_ms = run.elapsed_ms()
        made = run.prepared
        metadata: dict[str, Any] = {
            "trigger": spec.trigger,
            "preTokens": prep.pre_tokens,
            "postTokens": prefix + after,
            # A prepared summary: the model's time then, the agent's wait now
            # (docs/background.md#visible).
            "durationMs": made.duration_ms if made is not None else duration_ms,
            "messagesSummarized": sum(
                1 for r in prep.summarized if r.entry.type in ("user", "assistant")
            ),
            "preCompactDiscoveredTools": _discovered_tools(prep.summarized, cache_safe),
            "cumulativeDroppedTokens": _previous_dropped(prep.context_head)
            + max(0, prep.pre_tokens - prefix - after),
            "mechanism": spec.mechanism,
            "compactionId": run.compaction_id,
            # Carried to the compacted context until a response reports usage again
            # (docs/thresholds.md#accounting).
            "fixedPrefixTokens": prefix,
        }
        if made is not None:
            metadata["waitMs"] = int((time.monotonic() - made.asked_at) * 1000)
            metadata["prepared"] = True
        if preserved:
            metadata["preservedSegment"] = {
                "headUuid": preserved[0].entry.uuid,
                "anchorUuid": summary_uuid,
                "tailUuid": preserved[-1].entry.uuid,
            }
        prefix_ids = [r.entry.uuid for r in prep.kept_before if r.entry.uuid]
        if prefix_ids:
            metadata["preservedPrefix"] = {"headUuid": prefix_ids[0], "tailUuid": prefix_ids[-1]}
        boundary = entries.compact_boundary(
            metadata,
            **where,
            logical_parent=prep.logical_parent,
            # The store drops a group cut short by a crash: boundary + summary + extras.
            group_size=1 + len(tail_records),
            uuid=boundary_uuid,
        )
        await runtime.commit(session, [record_from_dict(boundary), *tail_records])
        session.health.consecutive_failures = 0
        session.health.last_error = None
        status = runtime.status(session)
    runtime.check_thresholds(session, status)

    post_results = await hooks.run_hooks(
        runtime.options.hooks_settings_path,
        "PostCompact",
        spec.trigger,
        {
            "session_id": session.session_id,
            "transcript_path": session.transcript_path,
            "cwd": session.meta.cwd,
            "trigger": spec.trigger,
        },
        cwd=session.meta.cwd,
        env=runtime.env,
    )
    run.status("completed", f"{prep.pre_tokens:,} -> {status.tokens:,} tokens")
    return p.CompactResult(
        compaction_id=run.compaction_id,
        # The group size is the store's business, not the client's.
        boundary={k: v for k, v in boundary.items() if k != GROUP_SIZE_FIELD},
        # The carry is for the next compaction, not for the client.
        summary={k: v for k, v in summary.items() if k != CARRY_FIELD},
        kept_entries=[r.to_builtins() for r in (*prep.kept_before, *preserved) if r.entry.uuid],
        attachments=extra,
        hook_results=[*prep.hook_results, *post_results],
        pre_compact_tokens=prep.pre_tokens,
        post_compact_tokens=status.tokens,
        # The model's time, as the boundary says (a prepared summary's when it was written).
        duration_ms=made.duration_ms if made is not None else run.elapsed_ms(),
        usage=prep.usage,
        summarizer=prep.summarizer,
        restored_from_ledger=prep.restored or None,
        warnings=warnings or None,
        prepared=made is not None,
        summarized_by=prep.report,
    )
