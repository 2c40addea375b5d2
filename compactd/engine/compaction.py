"""The compaction engine: summarize part of a session and commit boundary + summary atomically.

``run_compaction`` is the whole pipeline behind ``compact/full`` and ``compact/auto`` (and the
base of partial compaction): it snapshots the context under the session lock and lets a
``Selector`` pick the records to summarize and those to keep; runs the PreCompact hooks;
asks the summarizer (or builds the offline summary) while a keep-alive ``compact/status``
goes out every ``keepAliveIntervalMs``; gathers rehydration attachments and SessionStart hook
output; then takes the lock again and appends, in ONE durable write, the boundary, the
continuation summary, the attachments and the hook context (docs/compaction.md#result-order). PostCompact
hooks run last. ``predict`` works out what a compaction would leave without doing it (the
same selection, summary when no model writes it, continuation and attachments), for
``compact/auto``'s decision and ``compact/preview``.

The lock is NOT held while the model writes: the agent may keep appending. Entries appended
meanwhile end up before the new boundary in the file, so the boundary's ``preservedSegment``
names them (with any records a partial compaction keeps) and ``core.view`` relinks them right
after the summary; nothing is copied and their uuids stay valid. Nothing touches the
transcript before the commit, so a failure or a cancellation leaves the session exactly as it
was; a cancel that arrives during the commit itself is too late and the compaction completes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio

from compactd import protocol as p
from compactd.core import auto_policy, tokens
from compactd.core import constants as c
from compactd.core.ledger import (
    CARRY_FIELD,
    SurvivalLedger,
    ViewBudget,
    build_ledger,
    carry_of,
    complete_summary,
    view_budget,
)
from compactd.core.microcompact import MicroPlan
from compactd.core.normalize import system_reminder, to_api_messages
from compactd.core.offline_summary import OFFLINE_INSTRUCTIONS_WARNING, offline_summary
from compactd.core.prompts import (
    PromptKind,
    compact_prompt,
    continuation_message,
    format_summary,
    join_instructions,
)
from compactd.engine.rehydration import rehydration_attachments
from compactd.services import hooks
from compactd.services.summarizer import SummarizerError, SummaryRequest
from compactd.transcript import entries
from compactd.transcript.model import (
    GROUP_SIZE_FIELD,
    Record,
    ToolUseBlock,
    record_from_dict,
)

if TYPE_CHECKING:
    from compactd.engine.progress import WorkDone
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session

__all__ = [
    "CompactionSpec",
    "Selection",
    "Selector",
    "predict",
    "run_compaction",
    "select_whole_context",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Selection:
    """What a compaction replaces and what it keeps, chosen from a snapshot of the context.

    ``summarize``: the records the summary replaces. ``kept``: records kept verbatim after the
    summary (partial ``upTo``); they must be the most recent records of the context, linked by
    ``parentUuid`` or contiguous in the file, since the boundary's preserved segment names
    them by head and tail. ``request``: the records the model is shown, when that is more than
    ``summarize`` (partial ``from`` shows the earlier part for context). ``kept_before``: the
    leading records of the context kept verbatim BEFORE the summary (partial ``from``); the
    boundary's ``preservedPrefix`` names them and ``core.view`` puts them back after it.
    """

    summarize: Sequence[Record]
    kept: Sequence[Record] = ()
    request: Sequence[Record] | None = None
    kept_before: Sequence[Record] = ()


Selector = Callable[[list[Record]], Selection]


def select_whole_context(context: list[Record]) -> Selection:
    """Full compaction: everything after the last boundary (the previous summary included)."""
    return Selection(summarize=context)


@dataclass(frozen=True, slots=True)
class CompactionSpec:
    trigger: p.Trigger
    kind: PromptKind = "full"
    custom_instructions: str | None = None
    mechanism: p.Mechanism = "full"
    select: Selector = select_whole_context
    # A ready summary that replaces the summarizer (session memory's notes,
    # docs/session-memory.md#compaction-from-the-notes).
    summary_override: str | None = None
    # The offline summary even when the daemon has a key (``claudeCode/compact`` without
    # ``online``: offline by default, docs/claude-code.md#compact-and-resume).
    offline: bool = False


@dataclass(slots=True)
class _Prepared:
    """Everything computed before the commit, from the snapshot."""

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


async def run_compaction(
    runtime: Runtime, session: Session, spec: CompactionSpec, *, progress: WorkDone | None = None
) -> p.CompactResult:
    """Compact ``session`` as ``spec`` says. Raises ``CompactdError`` when it cannot.

    Codes: ``compactionDisabled``, ``sessionBusy`` (another compaction runs),
    ``notEnoughMessages``, ``summaryFailed``, ``contextTooLargeToCompact``,
    ``compactionIneffective`` (the result would not be smaller), ``cancelled``. A success resets
    the auto-compaction circuit breaker; counting failures is the caller's business (only
    automatic ones count).
    """
    if not runtime.flags.compaction_enabled:
        raise p.CompactdError(
            p.ErrorCode.COMPACTION_DISABLED,
            f"compaction is disabled ({c.ENV_DISABLE_COMPACT} is set)",
        )
    if session.compacting:
        raise p.CompactdError(
            p.ErrorCode.SESSION_BUSY,
            f"session {session.session_id!r} is already being compacted; try again when it ends",
            sessionId=session.session_id,
        )
    refusal = auto_policy.prefix_refusal(runtime.status(session), lambda: prefix_parts(session))
    if refusal is not None:
        # No model call can help: the prefix alone fills the window up to the threshold.
        raise p.CompactdError(p.ErrorCode.FIXED_PREFIX_TOO_LARGE, refusal)
    session.compacting = True
    run = _Run(runtime, session, spec, progress)
    try:
        run.status("started")
        prepared: _Prepared | None = None
        with anyio.CancelScope() as scope:
            if progress is not None:
                progress.on_cancel(scope.cancel)
            prepared = await _prepare(run)
        if prepared is None:
            raise p.CompactdError(
                p.ErrorCode.CANCELLED, "the compaction was cancelled; the session is unchanged"
            )
        ready = prepared
        return await _finish_even_if_cancelled(lambda: _commit(run, ready))
    except asyncio.CancelledError:
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
    finally:
        session.compacting = False


# -- before the commit ---------------------------------------------------------------------------


def _has_exchange(messages: Sequence[dict[str, Any]]) -> bool:
    roles = {m.get("role") for m in messages}
    return "user" in roles and "assistant" in roles


async def _prepare(run: _Run) -> _Prepared:
    runtime, session, spec = run.runtime, run.session, run.spec
    async with session.lock:
        context = session.context()
        selection = spec.select(context)
        status = runtime.status(session)
        pre_tokens = status.tokens
        snapshot_len = len(session.records)
        logical_parent = session.last_uuid()
        cleared = frozenset(session.cleared_tool_ids)
    summarized = list(selection.summarize)
    kept = list(selection.kept)
    kept_before = _kept_before(selection)
    shown = list(selection.request) if selection.request is not None else summarized
    # Exactly what the main loop sends (session/messages), so the cache-sharing request
    # reads the main loop's cached prefix. Built in a worker thread, like the offline summary
    # below: on a long context it takes a while, and other sessions' requests go on meanwhile.
    messages = await anyio.to_thread.run_sync(
        lambda: to_api_messages(shown, cleared_tool_ids=cleared)
    )
    if not _has_exchange(messages):
        raise p.CompactdError(
            p.ErrorCode.NOT_ENOUGH_MESSAGES,
            "not enough messages to compact: the context needs at least one user message and "
            "one assistant response since the last compaction",
        )
    base = {
        "session_id": session.session_id,
        "transcript_path": session.transcript_path,
        "cwd": session.meta.cwd,
    }

    run.status("preCompactHooks")
    hook_results = await hooks.run_hooks(
        runtime.options.hooks_settings_path,
        "PreCompact",
        spec.trigger,
        {**base, "trigger": spec.trigger, "custom_instructions": spec.custom_instructions or ""},
        cwd=session.meta.cwd,
        env=runtime.env,
    )
    from_hooks = join_instructions(
        *(hooks.additional_context(r.stdout) for r in hook_results if r.ok)
    )
    instructions = [x for x in (spec.custom_instructions, from_hooks) if x and x.strip()]

    run.status("summarizing")
    view = _View.of(session, spec, kept, status.effective_window)
    cwd = session.meta.cwd
    # What does not depend on the summary is worked out in a worker thread while the model
    # writes it: the ledger the summary is checked against and the estimate of the context.
    facts = _InThread(
        lambda: (
            build_ledger(summarized, cleared_tool_ids=cleared, cwd=cwd),
            tokens.estimate_records_raw(context),
        )
    )
    warnings: list[str] = []
    summarizer = runtime.summarizer
    usage: dict[str, Any] | None = None
    if spec.summary_override is not None or summarizer.offline or spec.offline:
        ledger, pre_raw = await facts.result()
        raw, mode = await anyio.to_thread.run_sync(
            lambda: _summary_without_model(spec, ledger, view, instructions)
        )
        if mode == "offline" and instructions:
            warnings.append(OFFLINE_INSTRUCTIONS_WARNING)
    else:
        request = SummaryRequest(
            messages=messages,
            instruction=compact_prompt(spec.kind, instructions, target_words=view.target_words),
            model=session.meta.model,
            cache_safe=session.meta.cache_safe_params,
            plain=lambda: to_api_messages(
                shown, cleared_tool_ids=cleared, strip_media=True, drop_skill_listing=True
            ),
        )
        interval = (runtime.options.keep_alive_interval_ms or c.KEEP_ALIVE_INTERVAL_MS) / 1000
        try:
            outcome = await _with_keepalive(
                lambda: summarizer.summarize(request, lambda m: run.status("summarizing", m)),
                interval,
                lambda: run.status("keepAlive", f"still summarizing ({run.elapsed_ms()} ms)"),
            )
        except SummarizerError as err:
            if not (err.api_failure and summarizer.offline_fallback):
                raise
            log.warning("summarizer failed (%s); building the summary offline", err.message)
            warnings.append(
                f"the summarizer API failed ({err.message}); the summary was built offline "
                "from the transcript instead"
            )
            run.status("summarizing", "the API failed; building the summary offline")
            ledger, pre_raw = await facts.result()
            raw = await anyio.to_thread.run_sync(
                lambda: offline_summary(ledger, limit=view.summary_chars, instructions=instructions)
            )
            mode = "offlineFallback"
            if instructions:
                warnings.append(OFFLINE_INSTRUCTIONS_WARNING)
        else:
            raw = outcome.text
            mode = outcome.mode
            usage = outcome.usage
            if outcome.stop_reason == "max_tokens":
                warnings.append("the summary reached the output limit and may be cut short")
            ledger, pre_raw = await facts.result()
    written = await anyio.to_thread.run_sync(lambda: _written(raw, mode, ledger, view))
    if not written.summary:
        raise p.CompactdError(p.ErrorCode.SUMMARY_FAILED, "the summary is empty")
    continuation = _continuation(session, spec, written.summary, kept)

    run.status("rehydrating")
    attachments = await rehydration_attachments(
        runtime, session, [*kept_before, *kept], limit_tokens=view.attachment_tokens(continuation)
    )

    run.status("sessionStartHooks")
    start_results = await hooks.run_hooks(
        runtime.options.hooks_settings_path,
        "SessionStart",
        "compact",
        {**base, "source": "compact"},
        cwd=session.meta.cwd,
        env=runtime.env,
    )
    hook_results.extend(start_results)
    session_context = [
        text for r in start_results if r.ok and (text := hooks.additional_context(r.stdout))
    ]
    return _Prepared(
        snapshot_len=snapshot_len,
        logical_parent=logical_parent,
        pre_tokens=pre_tokens,
        pre_raw=pre_raw,
        context_head=context[0] if context else None,
        summarized=summarized,
        kept=kept,
        kept_before=kept_before,
        continuation=continuation,
        attachments=attachments,
        session_context=session_context,
        hook_results=hook_results,
        summarizer=mode,
        usage=usage,
        warnings=warnings,
        restored=written.restored,
        carry=written.carry,
    )


def _kept_before(selection: Selection) -> list[Record]:
    # A boundary heading the context is not carried over: the new one replaces it.
    return [r for r in selection.kept_before if not r.entry.is_compact_boundary]


# Summaries built here, without a model: they come out final, "Summary:" heading included.
_OFFLINE_MODES = frozenset({"offline", "offlineFallback"})


@dataclass(frozen=True, slots=True)
class _View:
    """The budget of what a compaction leaves (docs/compaction.md#survival-ledger): the
    continuation message (summary and what the ledger adds) and the attachments after it."""

    budget: ViewBudget
    # Characters of the continuation message around the summary.
    overhead: int

    @classmethod
    def of(
        cls, session: Session, spec: CompactionSpec, kept: Sequence[Record], effective: int
    ) -> _View:
        wrapper = _continuation(session, spec, "", kept)
        return cls(view_budget(effective), len(wrapper))

    @property
    def summary_chars(self) -> int:
        """What the summary (with what the ledger adds) may take."""
        return max(0, self.budget.summary_chars - self.overhead)

    @property
    def target_words(self) -> int:
        """The length asked of a model: its summary's share, in words of about 6 characters."""
        return max(200, (self.budget.model_chars - self.overhead) // 6)

    def attachment_tokens(self, continuation: str) -> int:
        """Raw tokens left for the attachments once ``continuation`` is written."""
        return max(0, self.budget.raw_tokens - tokens.estimate_text_tokens(continuation))


@dataclass(frozen=True, slots=True)
class _Written:
    summary: str
    restored: list[str]
    carry: dict[str, Any]


def _written(raw: str, mode: str, ledger: SurvivalLedger, view: _View) -> _Written:
    """The stored summary: formatted, checked against the ledger and completed within the
    budget (docs/compaction.md#survival-ledger), with the carry for the next compaction. An
    offline summary is the ledger rendered, so it is taken as it is."""
    if mode in _OFFLINE_MODES:
        return _Written(raw, [], carry_of(ledger))
    summary = format_summary(raw)
    if not summary:
        return _Written("", [], {})
    summary, restored = complete_summary(summary, ledger, max(0, view.summary_chars - len(summary)))
    return _Written(summary, restored, carry_of(ledger))


def _summary_without_model(
    spec: CompactionSpec,
    ledger: SurvivalLedger,
    view: _View,
    instructions: Sequence[str] = (),
) -> tuple[str, str]:
    """The summary and the summarizer's mode when no model writes it: session memory's notes
    already are the summary, else the offline summarizer builds one from the ledger."""
    if spec.summary_override is not None:
        return spec.summary_override, spec.mechanism
    return offline_summary(ledger, limit=view.summary_chars, instructions=instructions), "offline"


def _continuation(
    session: Session, spec: CompactionSpec, summary: str, kept: Sequence[Record]
) -> str:
    return continuation_message(
        summary,
        transcript_path=session.transcript_path,
        trigger=spec.trigger,
        recent_messages_kept=bool(kept),
    )


# -- predicting ----------------------------------------------------------------------------------


async def predict(
    runtime: Runtime, session: Session, spec: CompactionSpec, *, micro: MicroPlan | None = None
) -> auto_policy.SummaryOutlook:
    """What ``run_compaction(runtime, session, spec)`` would leave now; nothing is written, no model
    is called and no hook runs.

    The selection, the summary (when no model writes it), its ledger check, the continuation
    message and the attachments are those the compaction would produce, estimated by
    ``core.auto_policy.summary_post``. ``micro``: a microcompact that commits first (in
    ``compact/auto``), so its results count as cleared and its saving as applied.
    """
    selection = spec.select(session.context())
    summarized = list(selection.summarize)
    kept = [*_kept_before(selection), *selection.kept]
    cleared = frozenset(session.cleared_tool_ids)
    if micro is not None:
        cleared |= frozenset(micro.compacted_ids)
    known = spec.summary_override is not None or runtime.summarizer.offline
    view = _View.of(session, spec, selection.kept, runtime.status(session).effective_window)
    cwd = session.meta.cwd

    def written() -> str:
        ledger = build_ledger(summarized, cleared_tool_ids=cleared, cwd=cwd)
        if known:
            raw, mode = _summary_without_model(spec, ledger, view)
        else:
            # A model's summary cannot be known before it is written: the offline summary of
            # the same entries stands in for its length (both are completed by the ledger).
            raw, mode = offline_summary(ledger, limit=view.summary_chars), "offline"
        return _written(raw, mode, ledger, view).summary

    summary = await anyio.to_thread.run_sync(written)
    continuation = _continuation(session, spec, summary, selection.kept)
    attachments = await rehydration_attachments(
        runtime, session, kept, limit_tokens=view.attachment_tokens(continuation)
    )
    # The microcompact boundary is appended last, so it lands among the kept entries.
    saving = micro.tokens_saved if micro is not None and kept else 0
    prefix = session.counter.fixed_prefix
    post = auto_policy.summary_post(
        continuation, attachments=attachments, kept=kept, saving=saving, prefix=prefix
    )
    if not known:
        # Never more than the summary's budget plus what the ledger may add to it allows, and
        # no more than what it replaces (a larger one fails the thrash guard).
        restore = tokens.chars_to_tokens(view.summary_chars)
        replaced = tokens.estimate_records_raw(summarized)
        bound = min(auto_policy.summary_budget(summarized) + restore, replaced)
        ceiling = auto_policy.summary_post(
            _continuation(session, spec, "", selection.kept),
            attachments=attachments,
            kept=kept,
            summary_budget=bound,
            saving=saving,
            prefix=prefix,
        )
        post = min(post, ceiling)
    return auto_policy.SummaryOutlook(
        post_tokens=post,
        summarized=len(summarized),
        kept=len(selection.kept_before) + len(selection.kept),
        bound=not known,
    )


class _InThread(Generic[T]):
    """A pure computation started in a worker thread now, its result collected later.

    When the result is never collected (the compaction failed or was cancelled meanwhile),
    the thread still finishes and its outcome is dropped quietly.
    """

    def __init__(self, fn: Callable[[], T]) -> None:
        self._future = asyncio.get_running_loop().run_in_executor(None, fn)
        self._future.add_done_callback(_retrieve)

    async def result(self) -> T:
        return await self._future


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


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


async def _finish_even_if_cancelled(fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn`` to completion even if the calling task is cancelled meanwhile.

    Used for the commit: once the transcript write has started, stopping half-way would leave
    the file and the in-memory session disagreeing. A cancel that arrives now is absorbed and
    the finished compaction is returned.
    """
    task = asyncio.ensure_future(fn())
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
    if cancelled:
        current = asyncio.current_task()
        if current is not None:
            current.uncancel()
        log.info("a cancel arrived while the compaction was being committed; it completed")
    return result


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
        metadata: dict[str, Any] = {
            "trigger": spec.trigger,
            "preTokens": prep.pre_tokens,
            "postTokens": prefix + after,
            "durationMs": duration_ms,
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
        duration_ms=run.elapsed_ms(),
        usage=prep.usage,
        summarizer=prep.summarizer,
        restored_from_ledger=prep.restored or None,
        warnings=warnings or None,
    )
