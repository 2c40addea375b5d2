"""The last stage of a compaction: write boundary, summary and attachments in one durable write.

``commit`` takes what the earlier stages worked out off the lock (``Staged``), takes the lock
again and appends, in ONE write, the boundary, the continuation summary, the attachments and
the hook context (docs/compaction.md#result-order). Entries appended while the model wrote are
named by the boundary's ``preservedSegment`` and relinked after the summary by ``core.view``.
The thrash guard refuses a result that is not smaller. The boundary's metadata is built as the
typed ``CompactMetadata`` that ``transcript/model.py`` reads back. PostCompact hooks run last.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from compactd import protocol as p
from compactd.core import tokens
from compactd.core.ledger import CARRY_FIELD
from compactd.core.normalize import system_reminder
from compactd.services import hooks
from compactd.transcript import entries
from compactd.transcript.model import (
    GROUP_SIZE_FIELD,
    CompactMetadata,
    PreservedSegment,
    Record,
    ToolUseBlock,
    record_from_dict,
)

if TYPE_CHECKING:
    from compactd.engine.progress import CompactionRun

__all__ = ["Staged", "commit"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Staged:
    """Everything worked out before the commit, from the plan's snapshot."""

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
    # The model's time writing the summary (a prepared one's when it was written, plus any
    # catch-up); None: the compaction's own elapsed time.
    model_ms: int | None = None
    # When the agent started waiting (monotonic), for a summary prepared in the background:
    # the boundary's ``waitMs`` counts from there (docs/background.md#visible).
    prepared_asked_at: float | None = None
    warnings: list[str] = field(default_factory=list)
    # Which summarizer wrote the summary and which were passed over (docs/providers.md).
    report: p.SummarizerReport | None = None
    restored: list[str] = field(default_factory=list)
    # The ledger folded for the next compaction, stored with the summary entry.
    carry: dict[str, Any] = field(default_factory=dict)


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


def _thrash_guard(staged: Staged, appended: Sequence[Record], tail: Sequence[Record]) -> int:
    """The raw estimate of the compacted messages; raises when it is not below the estimate of
    the messages it replaces. Both sides are estimates of the messages alone (usage figures
    include the system prompt and tools, which compaction cannot shrink)."""
    appended_raw = tokens.estimate_records_raw(appended)
    raw = (
        tokens.estimate_records_raw(staged.kept_before)
        + tokens.estimate_records_raw(tail)
        + tokens.estimate_records_raw(staged.kept)
        + appended_raw
    )
    before = tokens.pad(staged.pre_raw + appended_raw)
    after = tokens.pad(raw)
    if after >= before:
        raise p.CompactdError(
            p.ErrorCode.COMPACTION_INEFFECTIVE,
            f"the compacted context would not be smaller ({before:,} -> {after:,} estimated "
            "tokens); nothing was written",
            preTokens=before,
            postTokens=after,
        )
    return raw


def _metadata(
    run: CompactionRun,
    staged: Staged,
    *,
    prefix: int,
    after: int,
    preserved: Sequence[Record],
    summary_uuid: str,
) -> CompactMetadata:
    spec = run.spec
    model_ms = staged.model_ms if staged.model_ms is not None else run.elapsed_ms()
    prepared = staged.prepared_asked_at
    prefix_ids = [r.entry.uuid for r in staged.kept_before if r.entry.uuid]
    return CompactMetadata(
        trigger=spec.trigger,
        pre_tokens=staged.pre_tokens,
        post_tokens=prefix + after,
        # A prepared summary: the model's time then, the agent's wait now.
        duration_ms=model_ms,
        messages_summarized=sum(
            1 for r in staged.summarized if r.entry.type in ("user", "assistant")
        ),
        pre_compact_discovered_tools=_discovered_tools(
            staged.summarized, run.session.meta.cache_safe_params
        ),
        preserved_segment=PreservedSegment(
            head_uuid=preserved[0].entry.uuid,
            anchor_uuid=summary_uuid,
            tail_uuid=preserved[-1].entry.uuid,
        )
        if preserved
        else None,
        cumulative_dropped_tokens=_previous_dropped(staged.context_head)
        + max(0, staged.pre_tokens - prefix - after),
        preserved_prefix=PreservedSegment(head_uuid=prefix_ids[0], tail_uuid=prefix_ids[-1])
        if prefix_ids
        else None,
        mechanism=spec.mechanism,
        compaction_id=run.compaction_id,
        # Carried to the compacted context until a response reports usage again
        # (docs/thresholds.md#accounting).
        fixed_prefix_tokens=prefix,
        wait_ms=int((time.monotonic() - prepared) * 1000) if prepared is not None else None,
        prepared=True if prepared is not None else None,
    )


async def commit(run: CompactionRun, staged: Staged) -> p.CompactResult:
    """Write the compaction ``staged`` describes (under the session's lock) and report it."""
    runtime, session, spec = run.runtime, run.session, run.spec
    stages = run.stages
    async with session.lock:
        stages.mark("lock")
        appended = session.records[staged.snapshot_len :]
        if any(r.entry.is_compact_boundary for r in appended):
            raise p.CompactdError(
                p.ErrorCode.SESSION_BUSY,
                "the session was compacted by someone else meanwhile; nothing was written",
            )
        preserved = [r for r in (*staged.kept, *appended) if r.entry.uuid]
        boundary_uuid = str(uuid.uuid4())
        summary_uuid = str(uuid.uuid4())
        where = {"session_id": session.session_id, "cwd": session.meta.cwd}
        summary = entries.compact_summary(
            staged.continuation,
            **where,
            boundary_uuid=boundary_uuid,
            uuid=summary_uuid,
            carry=staged.carry,
        )
        extra = entries.context_attachments(
            list(staged.attachments),
            list(staged.session_context),
            **where,
            parent=summary_uuid,
            render=system_reminder,
        )
        tail_records = [record_from_dict(e) for e in (summary, *extra)]
        stages.mark("entries")
        after_raw = _thrash_guard(staged, appended, tail_records)
        stages.mark("guard")
        # What the next request carries besides the messages stays; the status counts it.
        prefix = session.counter.fixed_prefix
        # The figure the status gives once this is written (docs/thresholds.md#after-a-compaction).
        after = tokens.compacted_tokens(prefix, after_raw) - prefix
        warnings = list(staged.warnings)
        threshold = runtime.status(session).auto_compact_threshold
        if prefix + after >= threshold:
            warnings.append(
                f"the fixed prefix (system prompt and tools, about {prefix:,} tokens) plus the "
                f"compacted conversation ({after:,} tokens) is still above the auto-compact "
                f"threshold ({threshold:,}): the window refills at once; shorten the system "
                "prompt, the tool list or the attachments"
            )
            log.warning("session %s: %s", session.session_id, warnings[-1])
        metadata = _metadata(
            run, staged, prefix=prefix, after=after, preserved=preserved, summary_uuid=summary_uuid
        )
        boundary = entries.compact_boundary(
            msgspec.to_builtins(metadata),
            **where,
            logical_parent=staged.logical_parent,
            # The store drops a group cut short by a crash: boundary + summary + extras.
            group_size=1 + len(tail_records),
            uuid=boundary_uuid,
        )
        records = [record_from_dict(boundary), *tail_records]
        stages.mark("boundary")
        await runtime.commit(session, records, mark=stages.mark)
        session.health.consecutive_failures = 0
        session.health.last_error = None
        status = runtime.status(session)
    runtime.check_thresholds(session, status)
    stages.mark("status")

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
    stages.mark("postCompactHooks")
    run.status("completed", f"{staged.pre_tokens:,} -> {status.tokens:,} tokens")
    result = p.CompactResult(
        compaction_id=run.compaction_id,
        # The group size is the store's business, not the client's.
        boundary={k: v for k, v in boundary.items() if k != GROUP_SIZE_FIELD},
        # The carry is for the next compaction, not for the client.
        summary={k: v for k, v in summary.items() if k != CARRY_FIELD},
        kept_entries=[r.to_builtins() for r in (*staged.kept_before, *preserved) if r.entry.uuid],
        attachments=extra,
        hook_results=[*staged.hook_results, *post_results],
        pre_compact_tokens=staged.pre_tokens,
        post_compact_tokens=status.tokens,
        # The model's time, as the boundary says (a prepared summary's when it was written).
        duration_ms=metadata.duration_ms or 0,
        usage=staged.usage,
        summarizer=staged.summarizer,
        restored_from_ledger=staged.restored or None,
        warnings=warnings or None,
        prepared=staged.prepared_asked_at is not None,
        summarized_by=staged.report,
    )
    stages.mark("result")
    return result
