"""One preparation of a summary in the background: its phase, its plan, its summary, its cost.

A job runs (``preparing``), then is ``ready`` with its summary or ``failed``
(docs/background.md#preparation); the feature (``feature.py``) keeps at most a running one and
the ready one it refreshes.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import anyio

from compactd.core import auto_policy
from compactd.engine.microcompact import plan_micro
from compactd.engine.plan import CompactionPlan, CompactionSpec, plan_compaction, prompt_kind
from compactd.engine.rehydrate import gather
from compactd.engine.summary_request import has_exchange, not_enough_messages, summary_request
from compactd.engine.summary_source import Checked, plan_facts
from compactd.services.summarizer import SummaryOutcome, SummaryRequest

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session
    from compactd.engine.snapshot import Snapshot

__all__ = ["Job", "micro_will_do", "plan_preparation"]


@dataclass(eq=False)
class Job:
    """One preparation: running (``preparing``), then ``ready`` with its summary or ``failed``."""

    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    phase: Literal["preparing", "ready", "failed"] = "preparing"
    started: float = field(default_factory=time.monotonic)
    done: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    idle: bool = False
    # A later preparation started while an earlier one was ready (``BackgroundPreparation.
    # fallback``), to keep fewer entries verbatim (docs/background.md#refreshing).
    refresh: bool = False
    # A refresh of this summary was started: it is refreshed once at most, so that a refresh
    # that fails or is dropped is not asked again at every append.
    refreshed: bool = False
    # A refresh that brings the tail of the summary it refreshes into that summary (the summary
    # followed by the entries after its snapshot) instead of summarizing the whole context
    # again: the cheaper of the two (docs/background.md#bound).
    catch_up: bool = False
    # E's uuid and every uuid appended after it: an append whose parent is outside is a rewind.
    chain: set[str] = field(default_factory=set)
    # The session's count when the snapshot was taken: what it covers.
    covered_tokens: int = 0
    # The session's count when it failed (``phase`` "failed").
    failed_tokens: int = 0
    plan: CompactionPlan | None = None
    outcome: SummaryOutcome | None = None
    # ``outcome`` completed against ``plan``'s ledger, worked out when it arrived.
    checked: Checked | None = None
    duration_ms: int = 0

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def tokens(self) -> int:
        """Tokens the preparation's request was billed for (input of every kind and output)."""
        usage = (self.outcome.usage if self.outcome is not None else None) or {}
        keys = (
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        )
        return sum(int(usage.get(k) or 0) for k in keys)

    def billed_input(self) -> float | None:
        """The preparation's request in billed-equivalent input tokens (uncached input, cache
        reads at a tenth, cache writes at 1.25, docs/cache.md); None when no usage came."""
        usage = (self.outcome.usage if self.outcome is not None else None) or {}
        if not usage:
            return None
        return (
            int(usage.get("input_tokens") or 0)
            + 0.1 * int(usage.get("cache_read_input_tokens") or 0)
            + 1.25 * int(usage.get("cache_creation_input_tokens") or 0)
        )


async def plan_preparation(
    runtime: Runtime, snap: Snapshot
) -> tuple[CompactionPlan, SummaryRequest]:
    """The plan of a full compaction of ``snap`` and its cache-sharing summary request, with
    the ledger and the context's estimate worked out now, not when the summary is applied:
    the agent waits then (docs/background.md#applying)."""
    spec = CompactionSpec(trigger="auto", kind=prompt_kind(snap.meta))
    plan = await plan_compaction(runtime, snap, spec, outlook=False)
    if plan.rehydration is None:
        plan = replace(plan, rehydration=await gather(runtime, snap, plan.kept))

    def work() -> tuple[CompactionPlan, SummaryRequest]:
        ledger, pre_raw = plan_facts(plan)
        done = replace(plan, ledger=ledger, pre_raw=pre_raw)
        return done, summary_request(done, [])

    plan, request = await anyio.to_thread.run_sync(work)
    if not has_exchange(request.messages):
        raise not_enough_messages()
    return plan, request


async def micro_will_do(runtime: Runtime, session: Session) -> bool:
    """Whether clearing the tool results clearable now brings the count at the threshold
    under the headroom: ``compact/auto`` will microcompact there, and a summary would go
    unused (docs/compaction.md#fallback-chain)."""
    plan = await plan_micro(runtime, session)
    if not plan.cleared:
        return False
    status = runtime.status(session)
    after = auto_policy.micro_post(status.auto_compact_threshold, plan)
    return after <= auto_policy.headroom(status)
