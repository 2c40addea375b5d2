"""Applying a summary: the one place a compaction is carried out with the summary in hand.

``carry_out`` runs a compaction for ``compact/auto``, ``compact/full`` (``run_full``) and an
idle session (``apply_idle``): when a summary prepared in the background is ready, it takes it
from the session's preparation, carries out the plan it was written for, with the entries
appended since kept verbatim after it or, past the bound, brought into it
(docs/background.md#bound), and counts it as unused when the compaction could not use it;
else the compaction asks for its summary as without a preparation. Nothing else takes a
preparation or counts one unused.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.engine.background.feature import BackgroundPreparation, Job, preparation_of
from compactd.engine.compaction import run_with_progress
from compactd.engine.plan import CompactionPlan, CompactionSpec, prompt_kind
from compactd.engine.progress import mark

if TYPE_CHECKING:
    from compactd.engine.progress import BeginProgress, WorkDone
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session

__all__ = ["apply_idle", "carry_out", "run_full"]


async def carry_out(
    runtime: Runtime,
    session: Session,
    spec: CompactionSpec,
    begin_progress: BeginProgress,
    title: str,
    *,
    plan: CompactionPlan | None = None,
    asked_at: float | None = None,
) -> p.CompactResult:
    """Compact ``session`` as ``spec`` says, from the summary prepared in the background when
    one is ready and ``spec`` adds no instructions (it was written without them), else from
    ``plan`` (or a new plan) with the summary written now. ``asked_at``: when the agent started
    waiting (monotonic), for the boundary's ``waitMs``."""
    asked_at = time.monotonic() if asked_at is None else asked_at
    feature = preparation_of(session)
    job = feature.ready(session) if feature is not None else None
    if (
        feature is None
        or job is None
        or job.plan is None
        or (spec.custom_instructions or "").strip()
        or session.busy
    ):
        return await run_with_progress(runtime, session, spec, begin_progress, title, plan=plan)
    feature.take(session, job)
    mark("take")
    try:
        result = await run_with_progress(
            runtime,
            session,
            spec,
            begin_progress,
            title,
            plan=dataclasses.replace(job.plan, spec=spec),
            prepared=feature.prepared(job, asked_at),
        )
    except BaseException:
        feature.unused(job)
        raise
    finally:
        feature.forget_soon(session)
    if not result.prepared:
        feature.unused(job)
    return result


async def run_full(
    runtime: Runtime,
    session: Session,
    custom_instructions: str | None,
    begin_progress: BeginProgress,
) -> p.CompactResult:
    """``compact/full``: the user's explicit full compaction, now (docs/background.md#applying
    for a summary prepared in the background)."""
    if session.busy:  # before a progress bar is shown for nothing
        raise session.busy_error()
    spec = CompactionSpec(
        trigger="manual", kind=prompt_kind(session.meta), custom_instructions=custom_instructions
    )
    return await carry_out(runtime, session, spec, begin_progress, "Compacting conversation")


async def _no_progress(title: str) -> WorkDone | None:
    return None


async def apply_idle(session: Session, feature: BackgroundPreparation, job: Job) -> None:
    """``applyWhenIdle``: the session is still idle, so the summary it prepared is applied now
    (docs/background.md#idle)."""
    if feature.ready(session) is not job:
        return
    spec = CompactionSpec(trigger="auto", kind=prompt_kind(session.meta))
    await carry_out(feature.service.runtime, session, spec, _no_progress, "Compacting (idle)")
