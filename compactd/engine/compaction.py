"""The compaction engine: run a compaction, or refuse it before it starts.

``run_compaction`` is the pipeline behind ``compact/full``, ``compact/auto`` and
``compact/partial``, in three stages, each in a module of its own (docs/engine.md#plan): it
carries out a ``CompactionPlan`` (``engine/plan.py``), the one a decision made, rebased on the
session as it is now, or one made on a fresh snapshot; ``engine/summary_source.py`` works out
everything before the write, the summary first (known, prepared in the background, brought up to
date, or asked of the model now); ``engine/commit.py`` appends boundary, summary and attachments
in one durable write.

The lock is NOT held while the model writes: the agent may keep appending. Entries appended
after the plan's snapshot end up before the new boundary in the file, so the boundary's
``preservedSegment`` names them and ``core.view`` relinks them right after the summary; nothing
is copied and their uuids stay valid. Nothing touches the transcript before the commit, so a
failure or a cancellation leaves the session exactly as it was; a cancel that arrives during
the commit itself is too late and the compaction completes (a shielded cancel scope).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

from compactd import protocol as p
from compactd.core import auto_policy
from compactd.core import constants as c
from compactd.engine.commit import Staged, commit
from compactd.engine.plan import (
    CompactionPlan,
    CompactionSpec,
    Selection,
    Selector,
    plan_compaction,
    select_whole_context,
)
from compactd.engine.progress import CompactionRun
from compactd.engine.summary_request import summary_request
from compactd.engine.summary_source import PreparedSummary, stage

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
    "refuse",
    "run_compaction",
    "run_with_progress",
    "select_whole_context",
    "summary_request",
]

log = logging.getLogger(__name__)


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
    refusal = auto_policy.prefix_refusal(
        runtime.status(session),
        lambda: auto_policy.describe_prefix(session.meta.cache_safe_params),
    )
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

    ``prepared``: the summary of ``plan`` written in the background, given only by the apply
    step (``engine/background/apply.py``); ``CompactResult.prepared`` says whether it was used
    (docs/background.md#applying).

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
        run = CompactionRun(runtime, session, spec, progress)
        run.stages.mark("begin")
        try:
            run.status("started")
            staged: Staged | None = None
            with anyio.CancelScope() as scope:
                if progress is not None:
                    progress.on_cancel(scope.cancel)
                staged = await stage(run, plan, prepared)
            if staged is None:
                raise p.CompactdError(
                    p.ErrorCode.CANCELLED, "the compaction was cancelled; the session is unchanged"
                )
            # Once the transcript write has started, stopping half-way would leave the file
            # and the in-memory session disagreeing: a cancel that arrives now is too late.
            ready = staged
            result: p.CompactResult | None = None
            with anyio.CancelScope(shield=True):
                result = await commit(run, ready)
            assert result is not None
            log.info(
                "session %s: compaction %s%s, %s",
                session.session_id,
                run.compaction_id,
                " (prepared)" if result.prepared else "",
                run.stages.describe(),
            )
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
