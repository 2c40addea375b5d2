"""A compaction plan: what a compaction would do, worked out once on a snapshot of the session.

``plan_compaction`` takes a ``Snapshot`` (the session up to entry E, docs/engine.md#snapshot)
and a ``CompactionSpec`` and works out, off the lock and off the event loop, what a compaction
needs before any model call or write: the selection (what is summarized, what is kept), the
survival ledger of what is summarized, the summary when no model writes it (the session notes, or the offline summary; as a stand-in for its length when a model
will), the rehydration facts read from disk and, for a decision, the outlook (what the
compaction would leave). ``compact/preview`` reports the plan; ``compact/auto`` decides on it and
``engine.compaction.run_compaction`` carries the same plan out without computing any of it
again (docs/engine.md#plan). Entries appended after E are kept verbatim after the summary when
the plan is carried out, the preserved-segment shape of a partial compaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from compactd import protocol as p
from compactd.core import auto_policy, tokens
from compactd.core.ledger import (
    SurvivalLedger,
    ViewBudget,
    build_ledger,
    carry_of,
    complete_summary,
    view_budget,
)
from compactd.core.microcompact import MicroPlan
from compactd.core.offline_summary import offline_summary
from compactd.core.prompts import PromptKind, continuation_message, format_summary
from compactd.engine.rehydrate import Rehydration, extras_of, gather
from compactd.transcript.model import Record

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session
    from compactd.engine.snapshot import Snapshot
    from compactd.services.store import SessionMeta

__all__ = [
    "CompactionPlan",
    "CompactionSpec",
    "Selection",
    "Selector",
    "outlook_of",
    "plan_compaction",
    "prompt_kind",
    "select_whole_context",
]


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


# Summaries built here, without a model: they come out final, "Summary:" heading included.
OFFLINE_MODES = frozenset({"offline", "offlineFallback"})


@dataclass(frozen=True, slots=True)
class View:
    """The budget of what a compaction leaves (docs/compaction.md#survival-ledger): the
    continuation message (summary and what the ledger adds) and the attachments after it."""

    budget: ViewBudget
    # Characters of the continuation message around the summary.
    overhead: int

    @classmethod
    def of(cls, snap: Snapshot, spec: CompactionSpec, kept: Sequence[Record]) -> View:
        wrapper = continuation(snap.transcript_path, spec, "", kept)
        return cls(view_budget(snap.status.effective_window), len(wrapper))

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
class Written:
    summary: str
    restored: list[str]
    carry: dict[str, Any]


def written(raw: str, mode: str, ledger: SurvivalLedger, view: View) -> Written:
    """The stored summary: formatted, checked against the ledger and completed within the
    budget (docs/compaction.md#survival-ledger), with the carry for the next compaction. An
    offline summary is the ledger rendered, so it is taken as it is."""
    if mode in OFFLINE_MODES:
        return Written(raw, [], carry_of(ledger))
    summary = format_summary(raw)
    if not summary:
        return Written("", [], {})
    summary, restored = complete_summary(summary, ledger, max(0, view.summary_chars - len(summary)))
    return Written(summary, restored, carry_of(ledger))


def summary_without_model(
    spec: CompactionSpec,
    ledger: SurvivalLedger,
    view: View,
    instructions: Sequence[str] = (),
) -> tuple[str, str]:
    """The summary and the summarizer's mode when no model writes it: session memory's notes
    already are the summary, else the offline summarizer builds one from the ledger."""
    if spec.summary_override is not None:
        return spec.summary_override, spec.mechanism
    return offline_summary(ledger, limit=view.summary_chars, instructions=instructions), "offline"


def continuation(
    transcript_path: str, spec: CompactionSpec, summary: str, kept: Sequence[Record]
) -> str:
    return continuation_message(
        summary,
        transcript_path=transcript_path,
        trigger=spec.trigger,
        recent_messages_kept=bool(kept),
    )


def prompt_kind(meta: SessionMeta) -> PromptKind:
    """The summary prompt of a whole-context compaction: a sub-agent resumes its delegated
    task from a continuation summary (docs/partial.md#sub-agent-summaries)."""
    return "subagent" if meta.agent_kind == "subagent" else "full"


async def outlook_of(
    runtime: Runtime, session: Session, spec: CompactionSpec
) -> auto_policy.SummaryOutlook:
    """What a compaction of ``session`` as ``spec`` says would leave now (``compact/preview``
    of an explicit mechanism): the plan on a snapshot, without carrying it out."""
    snap = await runtime.snapshot(session)
    plan = await plan_compaction(runtime, snap, spec)
    assert plan.outlook is not None
    return plan.outlook


def kept_before_of(selection: Selection) -> list[Record]:
    # A boundary heading the context is not carried over: the new one replaces it.
    return [r for r in selection.kept_before if not r.entry.is_compact_boundary]


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """What a compaction of ``snapshot`` as ``spec`` says needs before the model and the write.

    ``ledger``, ``summary`` and ``rehydration`` are None when the plan was made to be carried
    out at once with a model writing the summary: they are then worked out while the model
    writes (``engine.compaction``).
    """

    snapshot: Snapshot
    spec: CompactionSpec
    selection: Selection
    summarized: list[Record]
    kept: list[Record]
    kept_before: list[Record]
    # Tool results cleared in the context the summary replaces (with the planned microcompact).
    cleared: frozenset[str]
    # The microcompact this plan assumes commits first (compact/auto), by its cleared ids.
    micro_ids: frozenset[str]
    view: View
    # No model writes the summary (session notes, or the offline summarizer).
    known: bool
    ledger: SurvivalLedger | None = None
    # The estimate of the snapshot's context (the thrash guard's "before"): worked out when
    # the plan is carried out (a preview does not need it).
    pre_raw: int | None = None
    # The summary without a model and its mode: final when ``known``, else the offline summary
    # of the same entries, standing in for the model's length (and its fallback).
    summary: Written | None = None
    summary_mode: str = "offline"
    rehydration: Rehydration | None = None
    # What the compaction would leave (``core.auto_policy``), when planned for a decision.
    outlook: auto_policy.SummaryOutlook | None = None

    @property
    def shown(self) -> list[Record]:
        """The records the model is shown."""
        request = self.selection.request
        return list(request) if request is not None else self.summarized

    def attachments(self, continuation_text: str) -> list[dict[str, Any]]:
        """The rehydration attachments in the room ``continuation_text`` leaves."""
        assert self.rehydration is not None
        return self.rehydration.fit(self.view.attachment_tokens(continuation_text))

    def rebased(
        self, session: Session, status: p.TokenStatus, *, keep_micro: bool = False
    ) -> CompactionPlan | None:
        """This plan on the session as it is now (the caller holds its lock), or None when the
        session no longer matches the snapshot and the compaction must be planned again.

        Entries appended after the snapshot are fine: carrying out keeps them verbatim after
        the summary. The microcompact the plan assumed (compact/auto commits it between the
        decision and the compaction) is taken into the snapshot: its boundaries come right
        after E and clear what the plan counted as cleared. ``keep_micro``: the summary is
        written already (docs/background.md#validity), so a microcompact after E changes
        nothing it summarized; its boundary is kept after the summary like any entry.
        """
        snap = self.snapshot
        if session.records is not snap.records or len(session.records) < snap.length:
            return None
        if session.meta != snap.meta or extras_of(session) is not snap.extras:
            return None
        after = session.records[snap.length :]
        lead = 0
        while self.micro_ids and lead < len(after) and after[lead].entry.is_microcompact_boundary:
            lead += 1
        absorbed = list(after[:lead])
        cleared = set(snap.cleared)
        for r in absorbed:
            meta = r.entry.microcompact_metadata
            cleared.update(meta.compacted_tool_ids or [] if meta is not None else [])
        if self.micro_ids and (not absorbed or frozenset(cleared) != self.cleared):
            return None  # the microcompact it assumed did not commit as planned
        rewrites = _compacts if keep_micro else _rewrites
        if any(rewrites(r) for r in after[lead:]):
            return None
        if not absorbed:
            return self
        moved = dataclasses.replace(
            snap,
            length=snap.length + lead,
            last_uuid=next((r.uuid for r in reversed(absorbed) if r.uuid), snap.last_uuid),
            context=(*snap.context, *absorbed),
            cleared=frozenset(cleared),
            status=status,
        )
        selection = self.spec.select(list(moved.context))
        if not (
            _same(selection.summarize, self.summarized)
            and _same(selection.kept, self.kept)
            and _same(kept_before_of(selection), self.kept_before)
        ):
            return None
        extra = tokens.estimate_records_raw(absorbed)
        return dataclasses.replace(
            self,
            snapshot=moved,
            selection=selection,
            summarized=list(selection.summarize),
            kept=list(selection.kept),
            pre_raw=None if self.pre_raw is None else self.pre_raw + extra,
        )


def _compacts(r: Record) -> bool:
    """A compaction or an undo."""
    return r.entry.is_compact_boundary


def _rewrites(r: Record) -> bool:
    """A compaction, an undo (of either kind) or a microcompact: not a plain entry."""
    return r.entry.is_compact_boundary or r.entry.is_microcompact_boundary


def _same(a: Sequence[Record], b: Sequence[Record]) -> bool:
    """The same records, microcompact boundaries aside (no ledger or summary reads them)."""
    left = [r for r in a if not r.entry.is_microcompact_boundary]
    right = [r for r in b if not r.entry.is_microcompact_boundary]
    return len(left) == len(right) and all(x is y for x, y in zip(left, right, strict=True))


async def plan_compaction(
    runtime: Runtime,
    snap: Snapshot,
    spec: CompactionSpec,
    *,
    micro: MicroPlan | None = None,
    outlook: bool = True,
) -> CompactionPlan:
    """Plan a compaction of ``snap``; nothing is written, no model is called, no hook runs.

    ``micro``: a microcompact that commits first (in ``compact/auto``), so its results count as
    cleared and its saving as applied. ``outlook``: work out what the compaction would leave
    (for a decision or a preview); without it, and with a model writing the summary, only the
    selection is made (the rest is worked out while the model writes).
    """
    selection = spec.select(list(snap.context))
    summarized = list(selection.summarize)
    kept = list(selection.kept)
    kept_before = kept_before_of(selection)
    micro_ids = frozenset(micro.compacted_ids) if micro is not None else frozenset()
    cleared = snap.cleared | micro_ids
    known = spec.summary_override is not None or runtime.summarizer.offline or spec.offline
    view = View.of(snap, spec, kept)
    plan = CompactionPlan(
        snapshot=snap,
        spec=spec,
        selection=selection,
        summarized=summarized,
        kept=kept,
        kept_before=kept_before,
        cleared=cleared,
        micro_ids=micro_ids,
        view=view,
        known=known,
    )
    if not outlook and not known:
        return plan
    cwd = snap.meta.cwd
    instructions = [spec.custom_instructions] if spec.custom_instructions else []

    def work() -> tuple[SurvivalLedger, Written, str]:
        ledger = build_ledger(summarized, cleared_tool_ids=cleared, cwd=cwd)
        if known:
            raw, mode = summary_without_model(spec, ledger, view, instructions)
        else:
            # A model's summary cannot be known before it is written: the offline summary of
            # the same entries stands in for its length (both are completed by the ledger).
            raw, mode = offline_summary(ledger, limit=view.summary_chars), "offline"
        return ledger, written(raw, mode, ledger, view), mode

    ledger, summary, mode = await anyio.to_thread.run_sync(work)
    rehydration = await gather(runtime, snap, [*kept_before, *kept])
    plan = dataclasses.replace(
        plan,
        ledger=ledger,
        summary=summary,
        summary_mode=mode,
        rehydration=rehydration,
    )
    if not outlook:
        return plan
    return dataclasses.replace(plan, outlook=_outlook(plan, micro))


def _outlook(plan: CompactionPlan, micro: MicroPlan | None) -> auto_policy.SummaryOutlook:
    """What carrying ``plan`` out would leave, as ``core.auto_policy.summary_post`` estimates it."""
    assert plan.summary is not None
    snap, spec, selection = plan.snapshot, plan.spec, plan.selection
    kept = [*plan.kept_before, *plan.kept]
    text = continuation(snap.transcript_path, spec, plan.summary.summary, plan.kept)
    attachments = plan.attachments(text)
    # The microcompact boundary is appended last, so it lands among the kept entries.
    saving = micro.tokens_saved if micro is not None and kept else 0
    prefix = snap.fixed_prefix
    post = auto_policy.summary_post(
        text, attachments=attachments, kept=kept, saving=saving, prefix=prefix
    )
    if not plan.known:
        # Never more than the summary's budget plus what the ledger may add to it allows, and
        # no more than what it replaces (a larger one fails the thrash guard).
        restore = tokens.chars_to_tokens(plan.view.summary_chars)
        replaced = tokens.estimate_records_raw(plan.summarized)
        bound = min(auto_policy.summary_budget(plan.summarized) + restore, replaced)
        ceiling = auto_policy.summary_post(
            continuation(snap.transcript_path, spec, "", plan.kept),
            attachments=attachments,
            kept=kept,
            summary_budget=bound,
            saving=saving,
            prefix=prefix,
        )
        post = min(post, ceiling)
    return auto_policy.SummaryOutlook(
        post_tokens=post,
        summarized=len(plan.summarized),
        kept=len(selection.kept_before) + len(selection.kept),
        bound=not plan.known,
    )
