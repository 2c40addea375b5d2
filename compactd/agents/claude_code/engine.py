"""Compact a Claude Code transcript and write the result as a new Claude Code session.

``claudeCode/compact`` and ``compactd compact`` (docs/claude-code.md#compact-and-resume): the
transcript is imported as a compactd session (by the caller, as ``session/open`` does), the
engine compacts it as a partial ``upTo`` compaction whose pivot is the start of the last
assistant turn (so the summary replaces everything before that turn, with the ledger's
guarantees, and the turn stays verbatim as Claude Code keeps it), and the boundary, summary,
attachments and kept turn are written as ``<newSessionId>.jsonl`` beside the original, in
Claude Code's own lines (``format``). The original is only read.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

import compactd.agents.claude_code.format as cc
from compactd import protocol as p
from compactd.core.ledger import build_ledger, check_summary, complete_summary
from compactd.core.partial import PartialPlan
from compactd.core.prompts import resume_message
from compactd.engine.compaction import run_with_progress
from compactd.engine.partial import plan_cut, selection_of
from compactd.engine.plan import CompactionSpec, Selection
from compactd.engine.progress import BeginProgress
from compactd.services import fs
from compactd.transcript.model import Record

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session

__all__ = [
    "check_online",
    "compact_to_claude_code",
    "import_cwd",
    "last_turn_start",
    "read_resumable",
    "read_source",
]

log = logging.getLogger(__name__)

# Room given to what the whole-file ledger adds back to a resumed session's summary: the user's
# messages from before Claude Code's own compactions. compactd's own figure, about 4K tokens.
RESTORE_BUDGET_CHARS = 16_000

_decoder = msgspec.json.Decoder()


def _lines(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with open(path, "rb") as fh:
        for raw in fh:
            try:
                obj = _decoder.decode(raw)
            except msgspec.DecodeError:
                continue  # a corrupt or partial line: the import skips it too
            if isinstance(obj, dict):
                out.append(obj)
    return out


async def read_source(path: Path) -> cc.SourceFacts:
    """The session fields of a Claude Code transcript (read in a worker thread)."""
    try:
        lines = await anyio.to_thread.run_sync(_lines, path)
    except OSError as exc:
        raise p.CompactdError(
            p.ErrorCode.TRANSCRIPT_UNREADABLE, f"cannot read transcript {path}: {exc.strerror}"
        ) from exc
    return cc.source_facts(str(path), lines)


async def read_resumable(path: Path, shown: str) -> cc.SourceFacts:
    """``read_source``, refusing a file that is not a Claude Code transcript or that has no
    assistant response yet (nothing to compact or resume from); ``shown`` names it in errors."""
    source = await read_source(path)
    if source.session_id is None:
        raise p.CompactdError(
            p.ErrorCode.TRANSCRIPT_UNREADABLE,
            f"{shown} is not a Claude Code transcript (no line names a sessionId)",
        )
    if not source.has_assistant:
        raise p.CompactdError(
            p.ErrorCode.NOT_ENOUGH_MESSAGES,
            f"{shown} has no assistant response yet: there is nothing to compact or resume from",
        )
    return source


def import_cwd(source: cc.SourceFacts, path: Path) -> str:
    """The directory to import ``source`` in: the agent's cwd when it still exists (file paths
    in the transcript are relative to it), else the transcript's folder (the import needs an
    existing directory)."""
    return source.cwd if source.cwd and Path(source.cwd).is_dir() else str(path.parent)


def last_turn_start(context: list[Record]) -> str | None:
    """The uuid of the first line of the last assistant response (the lines of one response
    share its ``message.id``): where the kept turn starts."""
    last: int | None = None
    for i in range(len(context) - 1, -1, -1):
        entry = context[i].entry
        if entry.type == "assistant" and entry.uuid:
            last = i
            break
    if last is None:
        return None
    message_id = context[last].entry.message_id
    start = last
    while message_id is not None and start > 0:
        prev = context[start - 1].entry
        if prev.type != "assistant" or prev.message_id != message_id or not prev.uuid:
            break
        start -= 1
    return context[start].entry.uuid


def check_online(runtime: Runtime, online: bool) -> None:
    """Refuse ``online`` when the daemon has no key (before anything is imported)."""
    if online and runtime.summarizer.offline:
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS,
            "online needs the daemon's API key (initializationOptions.summarizer.apiKey or "
            "ANTHROPIC_API_KEY in its environment); without it, leave online out for the "
            "offline summary",
        )


async def compact_to_claude_code(
    runtime: Runtime,
    session: Session,
    source: cc.SourceFacts,
    *,
    custom_instructions: str | None,
    online: bool,
    begin_progress: BeginProgress,
) -> p.ClaudeCodeCompactResult:
    """Compact ``session`` (imported from ``source``) and write it as a new Claude Code session."""
    check_online(runtime, online)
    pivot = last_turn_start(session.context())
    if pivot is None:
        raise p.CompactdError(
            p.ErrorCode.NOT_ENOUGH_MESSAGES,
            f"{source.path} has no assistant response to resume from",
        )
    # Every line of the transcript, earlier compactions included: the user's messages counted
    # in the report are all of theirs, not only those since Claude Code last compacted.
    original = list(session.records)
    chosen: list[PartialPlan] = []

    def select(context: list[Record]) -> Selection:
        plan = plan_cut(context, pivot, "upTo")
        chosen.append(plan)
        return selection_of(plan)

    spec = CompactionSpec(
        trigger="manual",
        kind="partialUpTo",
        custom_instructions=custom_instructions,
        mechanism="partial",
        select=select,
        offline=not online,
    )
    title = "Compacting Claude Code session"
    result = await run_with_progress(runtime, session, spec, begin_progress, title)
    plan = chosen[-1]

    content = result.summary.get("message", {}).get("content")
    summary_text = content if isinstance(content, str) else ""
    ledger = await anyio.to_thread.run_sync(lambda: build_ledger(original, cwd=session.meta.cwd))
    # compactd's compaction covers the context after Claude Code's last boundary; what the
    # user said before it lives only in Claude Code's own (lossy) summary. The ledger over the
    # whole file brings those messages back into the new session's summary, each in full or,
    # past the budget, as a pointer into the original file (docs/claude-code.md#the-summary).
    summary_text, _ = complete_summary(
        summary_text, ledger, max(RESTORE_BUDGET_CHARS, len(summary_text) // 2)
    )
    continuation = resume_message(summary_text, transcript_path=source.path)
    current = ledger.current
    # The kept turn is verbatim in the new session; what the summary omits is missing.
    verbatim = continuation + "\n" + msgspec.json.encode(result.kept_entries).decode()
    missing = {id(m) for m in check_summary(ledger, verbatim).messages}
    kept_users = sum(1 for m in current if id(m) not in missing)

    new_id = str(uuid.uuid4())
    metadata = {
        "trigger": "manual",
        "preTokens": result.pre_compact_tokens,
        "postTokens": result.post_compact_tokens,
        "durationMs": result.duration_ms,
        "messagesSummarized": sum(
            1 for r in plan.summarize if r.entry.type in ("user", "assistant")
        ),
    }
    lines = cc.resume_lines(
        source,
        session_id=new_id,
        continuation=continuation,
        metadata=metadata,
        attachments=result.attachments,
        kept=result.kept_entries,
    )
    target = Path(source.path).parent / f"{new_id}.jsonl"
    data = b"".join(msgspec.json.encode(line) + b"\n" for line in lines)
    try:
        await anyio.to_thread.run_sync(fs.write_new_file, target, data)
    except OSError as exc:
        raise p.CompactdError(
            p.ErrorCode.TRANSCRIPT_UNREADABLE,
            f"cannot write the new session {target}: {exc.strerror}",
        ) from exc
    log.info("session %s: wrote Claude Code session %s", session.session_id, target)
    return p.ClaudeCodeCompactResult(
        new_session_id=new_id,
        new_transcript_path=str(target),
        resume_command=cc.resume_command(new_id, source.cwd),
        cwd=source.cwd,
        original_session_id=source.session_id,
        original_transcript_path=source.path,
        session_id=session.session_id,
        pre_tokens=result.pre_compact_tokens,
        post_tokens=result.post_compact_tokens,
        user_messages=len(current),
        user_messages_kept=kept_users,
        summarized_entries=len(plan.summarize),
        kept_entries=len(result.kept_entries),
        attachments=len(result.attachments),
        summarizer=result.summarizer,
        warnings=result.warnings,
    )
