"""Zero-wait compaction: a summary prepared in the background before the agent needs it.

``BackgroundPreparation`` is a per-session feature (docs/engine.md#features) holding one
session's preparation: when the count reaches the start level (``core.background``), or the
session has been idle long enough, it takes a snapshot of the session up to entry E, plans a
full compaction of it and sends the same cache-sharing summary request a full compaction sends,
in the daemon's task group, one per session, cancelled when the session closes. The agent goes
on appending meanwhile. ``compact/auto`` (``engine/auto.py``) then applies the ready summary at
once: the plan carried out with entries after E kept verbatim after the summary, no model call
(``PreparedSummary``). When what arrived after the snapshot nears the bound, it is brought into
a summary in the background first, by a catch-up or a refresh (docs/background.md#bound). The
preparation is dropped when what it summarized changes (an undo, a compaction by other means, a
rewind, a change of model or window); a ready summary is kept in the session directory with E's
uuid and the request's fingerprint, so a restarted daemon reuses it when it still matches
(docs/background.md).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import anyio
import msgspec

import compactd.engine.background.store as store
from compactd import protocol as p
from compactd.core import auto_policy
from compactd.core import background as bg
from compactd.core.tokens.estimate import estimate_records_raw, estimate_text_tokens, pad
from compactd.engine.background.idle import IdleWatch
from compactd.engine.background.job import Job, micro_will_do, plan_preparation
from compactd.engine.features import Feature, feature_of
from compactd.engine.follow import follower_of
from compactd.engine.plan import continuation
from compactd.engine.summary_request import catch_up_request, sum_usage
from compactd.engine.summary_source import PreparedSummary, check_prepared

if TYPE_CHECKING:
    from compactd.engine.background.service import BackgroundCompaction
    from compactd.engine.session import Session
    from compactd.transcript.model import Record

__all__ = ["BackgroundPreparation", "Job", "preparation_of"]

log = logging.getLogger(__name__)

# Samples of (time, count) the growth rate is measured over: enough appends to span several
# turns, so that a burst (a tool call and its result a moment apart) is not taken for the
# trend; a compaction restarts them (docs/background.md#preparation).
GROWTH_SAMPLES = 64


def preparation_of(session: Session) -> BackgroundPreparation | None:
    """``session``'s background preparation; None when background compaction is off."""
    return feature_of(session, BackgroundPreparation)


@dataclass(eq=False)
class BackgroundPreparation(Feature["Session"]):
    """One session's background preparation (docs/background.md)."""

    service: BackgroundCompaction
    job: Job | None = None
    # The ready preparation ``job`` refreshes: applied instead when the refresh is not ready in
    # time (docs/background.md#refreshing).
    fallback: Job | None = None
    samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=GROWTH_SAMPLES))
    # When the last compaction committed, until the first append after it is sampled.
    since_compaction: float | None = None
    # Appends since the last compaction: the main-loop requests a refresh would serve.
    appends: int = 0
    idle: IdleWatch | None = None
    # Microcompact alone will bring the count under the headroom at the threshold: nothing is
    # prepared until a microcompact or a compaction (docs/background.md#preparation).
    micro_first: bool = False
    # Tokens spent on preparations never applied; preparations that failed, and in a row.
    unused_tokens: int = 0
    failures: int = 0
    failures_in_a_row: int = 0
    closed: bool = False
    # What ``tokens/status.preparation`` says (``publish``).
    state: p.PreparationState | None = None
    # Taken by each write and removal of the kept summary, in the order they were asked for.
    file_turn: anyio.Lock = field(default_factory=anyio.Lock)

    # -- hooks -----------------------------------------------------------------------------------

    def on_open(self, session: Session) -> None:
        self._sample(session)
        self.service.warm()
        kept = store.read(self.service.runtime, session)
        if kept is not None:
            self._start(session, kept=kept)
        else:
            self.maybe_start(session)
        self._start_idle_watch(session)

    def on_append(self, session: Session, records: Sequence[Record]) -> None:
        self.appends += 1
        self._touch(session)
        if any(r.entry.is_microcompact_boundary for r in records):
            self.micro_first = False
        for job in (self.fallback, self.job):
            if job is not None and job.plan is not None and not _continues(job, records):
                self._discard(session, job, "an append does not continue what it summarized")
        self.maybe_start(session)

    def on_compacted(self, session: Session, records: Sequence[Record]) -> None:
        self.samples.clear()
        # The growth after the compaction is timed from the compaction, not from the first
        # append after it: the time between is part of the trend (the count is the first
        # append's, since the count right after a rewrite is an estimate, docs/thresholds.md).
        self.since_compaction = time.monotonic()
        self.appends = 0
        self.micro_first = False
        self.drop(session, "the context was rewritten")

    async def on_close(self, session: Session) -> None:
        self.closed = True
        if self.idle is not None:
            self.idle.close()
        job = self.job
        if self.fallback is not None:
            self.fallback.scope.cancel()
        if job is not None:
            job.scope.cancel()
            if job.phase == "preparing":
                with anyio.move_on_after(5):
                    await job.done.wait()

    def on_status(self, status: p.TokenStatus) -> p.TokenStatus:
        """``tokens/status.preparation`` (docs/background.md#visible)."""
        if self.state is None:
            return status
        return msgspec.structs.replace(status, preparation=self.state)

    # -- the state -------------------------------------------------------------------------------

    def ready(self, session: Session) -> Job | None:
        """The ready preparation, when it still matches the session's settings: the session's
        own, or the one a running refresh would replace."""
        job = self.job if self.job is not None and self.job.phase == "ready" else self.fallback
        if job is None or job.phase != "ready" or job.plan is None:
            return None
        if job.plan.snapshot.meta != session.meta:
            self.drop(session, "the session's model or window changed")
            return None
        return job

    def running(self) -> Job | None:
        job = self.job
        return job if job is not None and job.phase == "preparing" else None

    def take(self, session: Session, job: Job) -> None:
        """``job`` is being applied: it is the session's preparation no more. A refresh still
        running beside it (``job`` is its fallback) is cancelled."""
        if job is not self.job and job is not self.fallback:
            return
        other = self.job if job is self.fallback else None
        self.job = self.fallback = None
        self._publish(session)
        if other is not None:
            log.info("session %s: the refresh was not ready in time", session.session_id)
            other.scope.cancel()

    def forget_soon(self, session: Session) -> None:
        """Remove the kept summary of a preparation taken (``take``), in the background, once
        the compaction that took it is written or failed: the agent waiting for that compaction
        need not wait for the file system too (on a busy machine an unlink took milliseconds),
        nor its fsync share a journal commit with the unlink. Kept meanwhile, it is harmless: a
        daemon that loads it finds its entry compacted away and removes it
        (docs/background.md#durable). The file's writes and its removal take turns
        (``file_turn``), so this never removes a newer summary."""
        runtime = self.service.runtime
        if runtime.task_group is None:
            store.forget(runtime, session)
            return

        async def forget() -> None:
            async with self.file_turn:
                await anyio.to_thread.run_sync(store.forget, runtime, session)

        runtime.task_group.start_soon(forget)

    def unused(self, job: Job) -> None:
        """``job``'s summary was taken but not used (the compaction planned again)."""
        self.unused_tokens += job.tokens()

    def drop(self, session: Session, why: str) -> None:
        """Drop every preparation of the session: what they summarized changed."""
        for job in (self.fallback, self.job):
            if job is not None:
                self._discard(session, job, why)

    def _discard(self, session: Session, job: Job, why: str) -> None:
        """Drop ``job`` (the session's preparation or its fallback), counting what it cost."""
        log.info("session %s: preparation dropped: %s", session.session_id, why)
        if job is self.fallback:
            self.fallback = None
        elif job is self.job:
            # A refresh that no longer holds leaves the summary it refreshed.
            self.job, self.fallback = self.fallback, None
        else:
            return
        job.scope.cancel()
        if job.phase == "ready":
            self.unused_tokens += job.tokens()
        self._publish(session)
        if self.ready(session) is None:
            store.forget(self.service.runtime, session)

    def outlook(self, session: Session, job: Job) -> auto_policy.SummaryOutlook:
        """What applying ``job`` now would leave: its summary, then every entry appended after
        its snapshot kept verbatim; or, when those pass the bound, the summary they are brought
        into, its length estimated by the prepared one's (docs/background.md#bound)."""
        plan, outcome = job.plan, job.outcome
        assert plan is not None and outcome is not None
        after = list(session.records[plan.snapshot.length :])
        caught_up = not self.within_bound(session, job)
        kept = [] if caught_up else after
        text = continuation(plan.snapshot.transcript_path, plan.spec, outcome.text, kept)
        post = auto_policy.summary_post(
            text,
            attachments=plan.attachments(text),
            kept=kept,
            prefix=session.counter.fixed_prefix,
        )
        return auto_policy.SummaryOutlook(
            post,
            summarized=len(plan.summarized) + (len(after) if caught_up else 0),
            kept=len(kept),
            bound=caught_up,
        )

    def within_bound(self, session: Session, job: Job) -> bool:
        """Whether what was appended after ``job``'s snapshot may stay verbatim after its
        summary (docs/background.md#bound)."""
        assert job.plan is not None
        after = session.records[job.plan.snapshot.length :]
        threshold = self.service.runtime.status(session).auto_compact_threshold
        return pad(estimate_records_raw(after)) <= bg.tail_limit(threshold)

    def prepared(self, job: Job, asked_at: float) -> PreparedSummary:
        assert job.outcome is not None
        return PreparedSummary(job.outcome, job.duration_ms, asked_at, job.checked)

    # -- starting --------------------------------------------------------------------------------

    def maybe_start(self, session: Session, *, idle: bool = False) -> None:
        """Start a preparation when the trigger says so and a compaction could run, or refresh
        a ready one at the threshold (docs/background.md#refreshing)."""
        job = self.job
        status = self.service.runtime.status(session)
        threshold = status.auto_compact_threshold
        if job is None and status.tokens < bg.lowest_start(threshold, self.service.start_at):
            return  # below any start level: the append's hot path ends here
        if job is not None and job.phase == "failed":
            if not bg.retry_due(
                status.tokens, job.failed_tokens, threshold, self.failures_in_a_row
            ):
                return
            self.job = job = None  # tried again (docs/background.md#failures)
        if self.closed or (job is not None and job.phase != "ready") or self.fallback is not None:
            return
        if self.micro_first or not self._may_prepare(session, status):
            return
        trigger = bg.Trigger(
            tokens=status.tokens,
            threshold=threshold,
            start_at=self.service.start_at,
            rate=bg.growth_rate(
                list(self.samples),
                min_span=self.service.last_duration_s or 0.0,
                bulk=bg.bulk_step(threshold),
            ),
            last_duration_s=self.service.last_duration_s,
        )
        if job is not None and not job.idle and not job.refreshed:
            tail = status.tokens - job.covered_tokens
            if bg.tail_due(tail, trigger):
                self._bring_in(session, job, tail)
                return
        if job is not None:
            refresh = bg.Refresh(
                trigger=trigger,
                blocking_limit=status.blocking_limit,
                covered_tokens=job.covered_tokens,
                request_cost=job.billed_input(),
                requests_ahead=self.appends,
            )
            if (
                self.service.refresh
                and not job.idle
                and not job.refreshed
                and bg.should_refresh(refresh)
            ):
                job.refreshed = True
                self.fallback = job
                self._start(session, refresh=True)
            return
        due = bg.idle_due(status.tokens, threshold) if idle else bg.should_start(trigger)
        if due:
            self._start(session, idle=idle)

    def _bring_in(self, session: Session, job: Job, tail: int) -> None:
        """Bring the tail of ready ``job`` into a summary in the background, before it passes
        the bound: by a catch-up (its summary followed by the tail) or a refresh, whichever
        costs less (docs/background.md#bound)."""
        assert job.outcome is not None
        covered = max(1, job.covered_tokens)
        refresh_cost = (job.billed_input() or covered) * (covered + tail) / covered
        summary = estimate_text_tokens(job.outcome.text)
        catch_up = not self.service.refresh or bg.catch_up_cheaper(summary, tail, refresh_cost)
        log.info(
            "session %s: the tail after the ready summary nears the bound; %s in the background",
            session.session_id,
            "bringing it into the summary" if catch_up else "summarizing again",
        )
        job.refreshed = True
        self.fallback = job
        self._start(session, refresh=True, catch_up=catch_up)

    def _may_prepare(self, session: Session, status: p.TokenStatus) -> bool:
        """Nothing is prepared when a compaction would be refused anyway or the summarizer is
        the offline one (it is instant), docs/background.md#preparation."""
        runtime = self.service.runtime
        if runtime.summarizer.offline or runtime.task_group is None or session.busy:
            return False
        if follower_of(session) is not None and not self.service.followed:
            return False  # Claude Code compacts a followed transcript itself (docs/follow.md)
        return (
            status.compaction_enabled
            and status.auto_compact_enabled
            and not status.circuit_open
            and auto_policy.prefix_refusal(status) is None
            and session.context_size >= 2
        )

    def _start(
        self,
        session: Session,
        *,
        idle: bool = False,
        refresh: bool = False,
        catch_up: bool = False,
        kept: store.Kept | None = None,
    ) -> None:
        runtime = self.service.runtime
        if runtime.task_group is None:
            return
        job = Job(idle=idle, refresh=refresh, catch_up=catch_up)
        self.job = job
        self._publish(session)
        runtime.task_group.start_soon(self._run, session, job, kept)

    def _publish(self, session: Session) -> None:
        """``tokens/status.preparation``: the ready summary (even while a refresh of it runs),
        else the running preparation."""
        job = self.job
        shown = self.fallback if job is not None and job.phase != "ready" and self.fallback else job
        if shown is None or shown.phase == "failed":
            self.state = None
        else:
            covered = len(shown.plan.summarized) if shown.plan is not None else 0
            self.state = p.PreparationState(
                state=shown.phase, entries_covered=covered, refreshing=shown is self.fallback
            )

    # -- the preparation -------------------------------------------------------------------------

    async def _run(self, session: Session, job: Job, kept: store.Kept | None) -> None:
        try:
            with job.scope:
                if kept is not None and await self._reuse(session, job, kept):
                    return
                if kept is not None:
                    # The kept summary no longer matches: prepare again if the trigger says so.
                    store.forget(self.service.runtime, session)
                    self.job = None
                    self._publish(session)
                    job.done.set()
                    self.maybe_start(session)
                    return
                if await micro_will_do(self.service.runtime, session):
                    log.info(
                        "session %s: nothing prepared: microcompact alone will do at the threshold",
                        session.session_id,
                    )
                    self.micro_first = True
                    self.job, self.fallback = self.fallback, None
                    self._publish(session)
                    return
                what = "refreshing the prepared summary" if job.refresh else "preparing a summary"
                self._notify(session, job, "preparing", f"{what} in the background")
                await self._prepare(session, job)
                if self.job is not job:
                    return
                self.failures_in_a_row = 0
                old, self.fallback = self.fallback, None
                if old is not None and not job.catch_up:
                    # The refresh replaces the summary it refreshed, which was never applied.
                    self.unused_tokens += old.tokens()
                self._publish(session)
                self._notify(session, job, "prepared", f"ready in {job.duration_ms} ms")
                apply_idle = self.service.apply_idle
                if job.idle and self.service.apply_when_idle and apply_idle is not None:
                    await apply_idle(session, self, job)
        except (
            Exception
        ) as exc:  # a preparation never stops the agent (docs/background.md#failures)
            if self.job is job:
                job.phase = "failed"
                job.failed_tokens = self.service.runtime.status(session).tokens
                self.failures += 1
                self.failures_in_a_row += 1
                if self.fallback is not None:
                    # A failed refresh leaves the summary it was to replace.
                    self.job, self.fallback = self.fallback, None
                self._publish(session)
                message = exc.message if isinstance(exc, p.CompactdError) else str(exc)
                log.warning("session %s: preparation failed: %s", session.session_id, message)
                self._notify(session, job, "failed", message)
            else:
                log.debug("session %s: dropped preparation ended: %s", session.session_id, exc)
        finally:
            job.done.set()
            if self.job is job and job.phase == "preparing":
                # Cancelled without a drop (the daemon is stopping).
                self.job, self.fallback = self.fallback, None
                self._publish(session)

    async def _prepare(self, session: Session, job: Job) -> None:
        runtime = self.service.runtime
        snap = await runtime.snapshot(session)
        plan, request = await plan_preparation(runtime, snap)
        if self.job is not job:
            return
        asked, base = request, self.fallback if job.catch_up else None
        if base is not None and base.plan is not None and base.outcome is not None:
            old, text = base.plan, base.outcome.text
            caught = await anyio.to_thread.run_sync(lambda: catch_up_request(old, plan, text))
            asked = caught or request  # a context that does not continue: a refresh
            if self.job is not job:
                return
        job.plan = plan
        job.covered_tokens = snap.status.tokens
        job.chain = {snap.last_uuid} if snap.last_uuid else set()
        job.chain.update(r.uuid for r in session.records[snap.length :] if r.uuid)
        self._publish(session)
        started = time.monotonic()
        outcome = await runtime.summarizer.summarize(asked)
        job.duration_ms = int((time.monotonic() - started) * 1000)
        # The API's own time: loading the SDK the first time is no measure of the next summary.
        self.service.last_duration_s = outcome.api_seconds or job.duration_ms / 1000
        if self.job is not job:
            return
        if asked is not request and base is not None and base.outcome is not None:
            # The summary brought up to date stands for both requests (docs/background.md#bound).
            job.duration_ms += base.duration_ms
            outcome = replace(outcome, usage=sum_usage(base.outcome.usage, outcome.usage))
        else:
            job.catch_up = False
        # Checked now, so that applying it does not wait for the check.
        checked = await anyio.to_thread.run_sync(lambda: check_prepared(plan, outcome))
        if self.job is not job:
            return
        job.outcome, job.checked = outcome, checked
        job.phase = "ready"
        fingerprint = await anyio.to_thread.run_sync(lambda: store.fingerprint(request))
        kept = store.Kept(
            snapshot_uuid=snap.last_uuid or "",
            fingerprint=fingerprint,
            text=outcome.text,
            mode=outcome.mode,
            model=outcome.model,
            usage=outcome.usage,
            duration_ms=job.duration_ms,
        )
        async with self.file_turn:
            if self.job is job:  # not taken meanwhile (a taken one's file is being removed)
                await store.write(runtime, session, kept)

    async def _reuse(self, session: Session, job: Job, kept: store.Kept) -> bool:
        """Take the summary kept by an earlier daemon when its snapshot is still in the
        context and the request it answered is the one this daemon would send."""
        runtime = self.service.runtime
        snap = await runtime.snapshot(session)
        where = next((i for i, r in enumerate(snap.context) if r.uuid == kept.snapshot_uuid), None)
        length = snap.records.index_of(kept.snapshot_uuid)
        if where is None or length is None:
            return False
        if any(r.entry.is_microcompact_boundary for r in snap.records[length + 1 : snap.length]):
            return False
        cut = replace(
            snap,
            length=length + 1,
            last_uuid=kept.snapshot_uuid,
            context=snap.context[: where + 1],
        )
        plan, request = await plan_preparation(runtime, cut)
        fingerprint = await anyio.to_thread.run_sync(lambda: store.fingerprint(request))
        if fingerprint != kept.fingerprint or self.job is not job:
            return False
        outcome = kept.outcome()
        checked = await anyio.to_thread.run_sync(lambda: check_prepared(plan, outcome))
        if self.job is not job:
            return False
        job.plan = plan
        job.duration_ms = kept.duration_ms
        job.outcome, job.checked = outcome, checked
        job.phase = "ready"
        after = session.records[length + 1 :]
        job.covered_tokens = snap.status.tokens - pad(estimate_records_raw(after))
        job.chain = {kept.snapshot_uuid}
        job.chain.update(r.uuid for r in session.records[length + 1 :] if r.uuid)
        self._publish(session)
        self._notify(session, job, "prepared", "a summary kept from before the restart")
        return True

    # -- idleness ------------------------------------------------------------------------------

    def _touch(self, session: Session) -> None:
        now = self._sample(session)
        if self.idle is not None:
            self.idle.touch(now)

    def _sample(self, session: Session) -> float:
        now = time.monotonic()
        count = session.counter.current.tokens
        if self.since_compaction is not None:
            self.samples.append((self.since_compaction, count))
            self.since_compaction = None
        self.samples.append((now, count))
        return now

    def _start_idle_watch(self, session: Session) -> None:
        """Prepare once the session has been idle for ``idleMinutes`` (docs/background.md#idle)."""
        runtime = self.service.runtime
        if runtime.task_group is None or runtime.summarizer.offline:
            return
        self.idle = IdleWatch(self.service.idle_s)
        self.idle.start(runtime.task_group, lambda: self.maybe_start(session, idle=True))

    # -- helpers ---------------------------------------------------------------------------------

    def _notify(self, session: Session, job: Job, phase: p.Phase, message: str) -> None:
        self.service.runtime.notify(
            p.NOTIFY_COMPACT_STATUS,
            p.StatusNotification(
                session_id=session.session_id,
                compaction_id=job.id,
                phase=phase,
                trigger="auto",
                elapsed_ms=job.elapsed_ms(),
                message=message,
                background=True,
            ),
        )


def _continues(job: Job, records: Sequence[Record]) -> bool:
    """Whether appended ``records`` continue the chain ``job`` summarized (not a rewind to an
    entry before its snapshot). Sidechain entries have their own chain."""
    for r in records:
        entry = r.entry
        parent = entry.parent_uuid
        if parent is not None and not entry.is_sidechain and parent not in job.chain:
            return False
        if r.uuid:
            job.chain.add(r.uuid)
    return True
