"""Session memory: background note extraction and compaction from the notes.

Each session may keep a markdown notes file, ``sessions/<id>/notes.md`` beside its transcript
(docs/session-memory.md#notes-file). ``SessionMemory`` (one per daemon, ``App.session_memory``)
keeps its per-session state in a feature (``SessionNotes``, docs/engine.md#features): its
``on_append`` watches the session grow; when the trigger rule of ``core.session_memory`` says
so, an extraction runs as a task in the daemon's task group: it snapshots the context, asks the
summarizer for the whole updated notes file (or, offline, builds the notes from the
transcript's ledger) and replaces the file atomically. Extractions never block a request and never run two at a time for one session (a
per-session lock).

``plan`` and ``compact`` are the session-memory stage of ``compact/auto``: ``plan`` waits for a
running extraction and plans a compaction (``engine/plan.py``) that keeps the recent entries the
notes do not cover (``core.session_memory.kept_start``), with the truncated notes as the
summary: no model call. ``core.auto_policy`` decides on its outlook (it falls through to a full
compaction when that stays above the auto-compact threshold); ``compact`` carries the plan out
through the compaction engine, or returns None when the notes cannot serve after all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import msgspec

from compactd import protocol as p
from compactd.core import session_memory as sm
from compactd.core import split, tokens
from compactd.core.ledger import build_ledger
from compactd.core.microcompact import MicroPlan
from compactd.core.normalize import to_api_messages
from compactd.core.prompts import PromptKind
from compactd.engine.compaction import run_compaction
from compactd.engine.features import Feature
from compactd.engine.plan import CompactionPlan, CompactionSpec, Selection, plan_compaction
from compactd.services.store import atomic_write
from compactd.services.summarizer import SummarizerError, SummaryRequest
from compactd.transcript.model import Record, transcript_timestamp

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session
    from compactd.engine.snapshot import Snapshot

__all__ = ["SessionMemory", "SessionNotes"]

log = logging.getLogger(__name__)


class _Persisted(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """What survives a restart besides the notes: when and up to where they were written."""

    last_extracted_at: str | None = None
    last_summarized_uuid: str | None = None
    tokens_at_last: int | None = None


@dataclass(eq=False)
class SessionNotes(Feature["Session"]):
    """Session memory's state for one session (a feature, attached to the session)."""

    memory: SessionMemory
    persisted: _Persisted
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    tool_calls_since: int = 0
    last_turn_tool_calls: bool = False
    last_error: str | None = None

    def on_append(self, session: Session, records: Sequence[Record]) -> None:
        self.memory.observe(session, self, records)

    def on_compacted(self, session: Session, records: Sequence[Record]) -> None:
        # A compaction just committed: growth is measured from the compacted context.
        self.persisted.tokens_at_last = session.counter.current.tokens


class SessionMemory:
    """Per-daemon owner of note extraction and of the ``SessionNotes`` feature."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        opts = runtime.options.session_memory or p.SessionMemoryOptions()
        self.enabled = bool(opts.enabled)
        defaults = sm.TriggerRule()
        self.rule = sm.TriggerRule(
            min_init_tokens=_or(opts.min_init_tokens, defaults.min_init_tokens),
            min_token_growth=_or(opts.min_token_growth, defaults.min_token_growth),
            min_tool_calls=_or(opts.min_tool_calls, defaults.min_tool_calls),
        )
        runtime.features.register(SessionNotes, self._notes_of)

    # -- files -----------------------------------------------------------------------------------

    def notes_path(self, session: Session) -> Path:
        return self._runtime.store.notes_path(session.session_id)

    def _state_path(self, session: Session) -> Path:
        return self._runtime.store.notes_state_path(session.session_id)

    def state(self, session: Session) -> SessionNotes:
        return self._runtime.features.state(session, SessionNotes)

    def _notes_of(self, session: Session) -> SessionNotes:
        """A session's state: what survived a restart read back from its state file."""
        persisted = _Persisted()
        try:
            persisted = msgspec.json.decode(self._state_path(session).read_bytes(), type=_Persisted)
        except FileNotFoundError:
            pass
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            log.warning("session %s: unreadable session-memory state", session.session_id)
        return SessionNotes(memory=self, persisted=persisted)

    def _read_notes(self, session: Session) -> str | None:
        try:
            return self.notes_path(session).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def _write(self, session: Session, notes: str, persisted: _Persisted) -> None:
        session.check_writable()
        atomic_write(self.notes_path(session), notes.encode("utf-8"))
        atomic_write(self._state_path(session), msgspec.json.encode(persisted))

    # -- the trigger --------------------------------------------------------------------------------

    def observe(self, session: Session, state: SessionNotes, records: Sequence[Record]) -> None:
        """Count tool calls appended and start an extraction when the rule says so."""
        if not self.enabled or session.meta.agent_kind == "subagent" or session.read_only:
            return
        entries = [r.entry for r in records]
        state.tool_calls_since += sm.tool_call_count(entries)
        last = sm.last_turn_has_tool_calls(entries)
        if last is not None:
            state.last_turn_tool_calls = last
        if state.lock.locked() or self._runtime.task_group is None:
            return
        if sm.should_extract(
            self.rule,
            tokens_now=session.counter.current.tokens,
            tokens_at_last=state.persisted.tokens_at_last,
            tool_calls_since=state.tool_calls_since,
            last_turn_tool_calls=state.last_turn_tool_calls,
        ):
            self._runtime.task_group.start_soon(self._background, session)

    async def _background(self, session: Session) -> None:
        try:
            await self.extract(session)
        except Exception as exc:  # a failed extraction must not take the daemon down
            log.warning("session %s: session-memory extraction failed: %s", session.session_id, exc)

    # -- extraction -------------------------------------------------------------------------------

    async def extract(self, session: Session) -> None:
        """Update the notes from the current context; waits for a running extraction first."""
        session.check_writable()
        state = self.state(session)
        async with state.lock:
            try:
                await self._extract(session, state)
                state.last_error = None
            except Exception as exc:
                state.last_error = str(exc)
                raise

    async def _extract(self, session: Session, state: SessionNotes) -> None:
        calls_seen = state.tool_calls_since
        snap = await self._runtime.snapshot(session)
        context = list(snap.context)
        cleared = snap.cleared
        tokens_now = snap.status.tokens
        last_uuid = next((r.entry.uuid for r in reversed(context) if r.entry.uuid), None)
        if last_uuid is None:
            raise p.CompactdError(
                p.ErrorCode.NOT_ENOUGH_MESSAGES, "the session has no entries to take notes on"
            )
        path = self.notes_path(session)
        current = await anyio.to_thread.run_sync(self._read_notes, session) or sm.template()
        summarizer = self._runtime.summarizer
        if summarizer.offline:
            ledger = build_ledger(context, cleared_tool_ids=cleared, cwd=session.meta.cwd)
            notes = sm.offline_notes(ledger, current)
        else:
            messages = to_api_messages(context, cleared_tool_ids=cleared)
            if not messages:
                raise p.CompactdError(
                    p.ErrorCode.NOT_ENOUGH_MESSAGES, "the session has no messages to take notes on"
                )
            request = SummaryRequest(
                messages=messages,
                instruction=sm.extraction_instruction(current, str(path)),
                model=session.meta.model,
                cache_safe=session.meta.cache_safe_params,
                plain=lambda: to_api_messages(
                    context, cleared_tool_ids=cleared, strip_media=True, drop_skill_listing=True
                ),
            )
            started = time.monotonic()
            outcome = await summarizer.summarize(request)
            parsed = sm.parse_notes_reply(outcome.text)
            if parsed is None:
                raise SummarizerError(
                    p.ErrorCode.SUMMARY_FAILED,
                    "the extraction reply did not contain the notes file",
                )
            notes = parsed
            log.info(
                "session %s: notes extracted in %.1f s",
                session.session_id,
                time.monotonic() - started,
            )
        persisted = _Persisted(
            last_extracted_at=transcript_timestamp(),
            last_summarized_uuid=last_uuid,
            tokens_at_last=tokens_now,
        )
        await anyio.to_thread.run_sync(self._write, session, notes, persisted)
        state.persisted = persisted
        # Tool calls appended while the model wrote count toward the next extraction.
        state.tool_calls_since = max(0, state.tool_calls_since - calls_seen)

    # -- sessionMemory/get -----------------------------------------------------------------------

    async def result(self, session: Session) -> p.SessionMemoryResult:
        state = self.state(session)
        content = await anyio.to_thread.run_sync(self._read_notes, session) or ""
        return p.SessionMemoryResult(
            path=str(self.notes_path(session)),
            content=content,
            tokens=tokens.estimate_text_tokens(content),
            last_extracted_at=state.persisted.last_extracted_at,
            extracting=state.lock.locked(),
        )

    # -- compaction from the notes ----------------------------------------------------------------

    async def _spec(
        self, snap: Snapshot, kind: PromptKind, state: SessionNotes
    ) -> CompactionSpec | None:
        """The compaction the notes allow on ``snap``, or None when they cannot serve (switched
        off, no notes yet, or nothing they would replace). Waits for a running extraction first."""
        if not self.enabled:
            return None
        async with state.lock:  # wait for a running extraction to finish
            pass
        path = self._runtime.store.notes_path(snap.session_id)
        notes = await anyio.to_thread.run_sync(_read, path)
        covered = state.persisted.last_summarized_uuid
        if not notes or not sm.has_content(notes) or covered is None:
            return None
        summary = (
            f"Session notes kept up to date during the session (full file: {path}):\n\n"
            + sm.notes_for_summary(notes, str(path))
        )
        select = _selector(snap, covered)
        if select(list(snap.context)) is None:
            return None

        def chosen(context: list[Record]) -> Selection:
            # Made again when the plan is carried out on a newer snapshot.
            selection = select(context)
            if selection is None:
                raise p.CompactdError(
                    p.ErrorCode.NOT_ENOUGH_MESSAGES, "the session notes no longer fit the context"
                )
            return selection

        return CompactionSpec(
            trigger="auto",
            kind=kind,
            mechanism="sessionMemory",
            select=chosen,
            summary_override=summary,
        )

    async def plan(
        self, session: Session, snap: Snapshot, kind: PromptKind, micro: MicroPlan | None
    ) -> CompactionPlan | None:
        """The plan of a compaction from the notes on ``snap`` (of ``session``) after ``micro``
        commits, with its outlook; None when the notes cannot serve. ``compact/auto`` decides
        on it (``core.auto_policy``)."""
        if not self.enabled:
            return None
        spec = await self._spec(snap, kind, self.state(session))
        if spec is None:
            return None
        return await plan_compaction(self._runtime, snap, spec, micro=micro)

    async def compact(
        self, session: Session, plan: CompactionPlan | None
    ) -> p.CompactResult | None:
        """Carry out the session-memory compaction ``compact/auto`` decided on; None when it
        cannot run after all, and the fallback chain goes on to a full compaction."""
        if plan is None:
            return None
        try:
            return await run_compaction(self._runtime, session, plan.spec, plan=plan)
        except p.CompactdError as err:
            log.warning(
                "session %s: session-memory compaction failed (%s); trying a full one",
                session.session_id,
                err.message,
            )
            return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _selector(snap: Snapshot, covered: str) -> Callable[[list[Record]], Selection | None]:
    """The selection of a session-memory compaction, or None when the notes cannot serve."""

    def select(context: list[Record]) -> Selection | None:
        entries = [r.entry for r in context]
        floor = _floor(snap, context)
        at = next((i for i, e in enumerate(entries) if e.uuid == covered), None)
        if at is not None:
            first_unsummarized = at + 1
        elif snap.records.index_of(covered) is not None:
            # The covered entry was compacted away: the whole current context is newer.
            first_unsummarized = floor
        else:
            return None
        start = sm.kept_start(entries, first_unsummarized, floor)
        if start <= floor:
            return None  # nothing would be replaced by the notes
        return Selection(summarize=context[:start], kept=context[start:])

    return select


def _floor(snap: Snapshot, context: list[Record]) -> int:
    """The first context index a compaction from the notes may keep (``split.after_compacted``):
    the entries the previous compaction relinked sit before its boundary in the file."""
    boundary_at = snap.context_start if context and context[0].entry.is_compact_boundary else 0
    relinked = []
    for r in context:
        at = snap.records.index_of(r.entry.uuid) if r.entry.uuid else None
        relinked.append(at is not None and at < boundary_at)
    return split.after_compacted([r.entry for r in context], relinked)


def _or(value: int | None, default: int) -> int:
    return default if value is None else value
