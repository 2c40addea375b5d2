"""One conversation: its records, its token counter, its lock and counters, and snapshots of it.

A ``Session`` holds its transcript as a ``History``: the current context decoded in memory,
older lines read back from the file when asked for. It keeps derived state incrementally so
that ``tokens/status`` never rescans: the token counter of the current context and the tool ids
cleared by microcompact. Anything that rewrites the context (a compaction, an undo) calls
``rebuild``, or ``refresh`` from the event loop: the work then runs in a worker thread. The
views themselves are memoized per boundary (``core.view.ViewIndex``), so a rebuild costs time in
proportion to the context, however long the history.

The session's lock serializes its mutations, and the engine's operations are the only code that
takes it, each in one place (docs/engine.md#locking). ``compaction()`` marks a compaction as
running: a second one (or an undo) meanwhile is refused with the one ``busy`` error.
``snapshot`` gives an immutable view of the session up to its last entry, for decisions worked
out off the lock and off the event loop (docs/engine.md#snapshot). Each feature keeps its state
for the session in ``features`` (``engine/features.py``): what a feature derives from the
context (the files feature's read-file state) is worked out with the session's own derived
state and replaced in the same step, and what it adds to a snapshot it adds itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import msgspec

from compactd import protocol as p
from compactd.core import tokens
from compactd.core.view import ViewIndex, undone_target
from compactd.engine.features import Feature, derive_states
from compactd.engine.snapshot import Snapshot
from compactd.services.store import SessionMeta
from compactd.transcript.history import History
from compactd.transcript.model import Entry, Record

T = TypeVar("T")


@dataclass(slots=True)
class CompactionHealth:
    """Consecutive auto-compaction failures; the breaker opens at the reference's limit."""

    consecutive_failures: int = 0
    last_error: str | None = None


@dataclass(eq=False)
class Session:
    meta: SessionMeta
    transcript_path: str
    # Any sequence of records is accepted and turned into a ``History``.
    records: History = field(default_factory=History)
    skipped_lines: int = 0
    # Serializes mutations (appends, compactions) of this session; taken by the engine's
    # operations only (docs/engine.md#locking).
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    health: CompactionHealth = field(default_factory=CompactionHealth)
    threshold_tracker: tokens.ThresholdTracker = field(default_factory=tokens.ThresholdTracker)
    # Derived state, rebuilt by ``rebuild`` and extended by ``extend``.
    counter: tokens.TokenCounter = field(default_factory=tokens.TokenCounter)
    cleared_tool_ids: set[str] = field(default_factory=set)
    # False while every conversation entry is a sidechain (a sub-agent's own transcript).
    has_main_thread: bool = False
    # Uuids of microcompact boundaries an undo entry cancelled: they clear and save nothing.
    undone_micro: set[str] = field(default_factory=set)
    context_start: int = 0
    _context: list[Record] = field(default_factory=list)
    # Each feature's state for this session (``engine/features.py``), by feature type.
    features: dict[type[Feature[Any]], Feature[Any]] = field(default_factory=dict)
    # Opened with ``readOnly: true``: another process may own it, so nothing here writes
    # (docs/durability.md#ownership). ``check_writable`` is the guard every writer calls.
    read_only: bool = False
    _views: ViewIndex | None = field(default=None, repr=False)
    # ``described_prefix`` for the cacheSafeParams object it was worked out from.
    _described: tuple[object, int] | None = field(default=None, repr=False)
    # A compaction of this session is running (``compaction()``).
    _compacting: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.records, History):
            self.records = History(self.records)

    @property
    def session_id(self) -> str:
        return self.meta.session_id

    def check_writable(self) -> None:
        """Refuse a write to a session opened read-only (``sessionReadOnly``)."""
        if self.read_only:
            raise p.CompactdError(
                p.ErrorCode.SESSION_READ_ONLY,
                f"session {self.session_id!r} is open read-only here; close it and open it "
                "without readOnly (once the process that owns it has closed it) to change it",
                sessionId=self.session_id,
            )

    # -- a compaction at a time --------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """A compaction of this session is running."""
        return self._compacting

    def busy_error(self) -> p.CompactdError:
        """The one answer to what cannot happen while a compaction of this session runs."""
        return p.CompactdError(
            p.ErrorCode.SESSION_BUSY,
            f"a compaction of session {self.session_id!r} is running; try again when it ends",
            sessionId=self.session_id,
        )

    @contextmanager
    def compaction(self) -> Iterator[None]:
        """Mark a compaction as running for the block; raise ``busy_error`` if one already is."""
        if self._compacting:
            raise self.busy_error()
        self._compacting = True
        try:
            yield
        finally:
            self._compacting = False

    async def read_history(self, read: Callable[[], T]) -> T:
        """Run ``read`` (a scan over the records, released history included) in a worker
        thread, under the lock so that no compaction changes the records meanwhile."""
        async with self.lock:
            return await anyio.to_thread.run_sync(read)

    def snapshot(self, status: p.TokenStatus) -> Snapshot:
        """An immutable view of the session as it is now, with what its features add (the
        read-file candidates, the rehydration extras). The caller holds the lock."""
        snap = Snapshot(
            session_id=self.session_id,
            transcript_path=self.transcript_path,
            meta=self.meta,
            length=len(self.records),
            last_uuid=self.last_uuid(),
            context=tuple(self._context),
            context_start=self.context_start,
            cleared=frozenset(self.cleared_tool_ids),
            status=status,
            fixed_prefix=self.counter.fixed_prefix,
            records=self.records,
        )
        for state in self.features.values():
            snap = state.on_snapshot(snap)
        return snap

    # -- derived state ---------------------------------------------------------------------------

    @property
    def views(self) -> ViewIndex:
        """The memo of this session's views: each boundary is resolved once for its life."""
        views = self._views
        if views is None or views.records is not self.records:
            views = self._views = ViewIndex(self.records)
        return views

    def rebuild(self) -> None:
        """Recompute every derived field from the records (load, compaction, undo)."""
        self._apply(self.derive(list(self.features.values())))

    async def refresh(self) -> None:
        """``rebuild`` with the work done in a worker thread, so other sessions' requests go on.

        The caller holds the lock. The result is applied in one step on the event loop, and a
        cancellation cannot leave the records and the derived state apart.
        """
        states = list(self.features.values())  # taken here: the event loop owns the dict
        with anyio.CancelScope(shield=True):
            derived = await anyio.to_thread.run_sync(self.derive, states)
        self._apply(derived)

    def derive(self, states: Sequence[Feature[Any]]) -> Derived:
        """Every derived field, worked out from the records without changing the session,
        with the part of it each of ``states`` derives (``Feature.derive``).

        Only the records' memory changes: the new context is what stays decoded.
        """
        records = self.records
        views = self.views
        ctx = views.context()
        # Only the current context stays decoded in memory; history is read back on demand.
        records.retain(ctx)
        # The boundary heading the view (after an undo it is not the last one in the file).
        head = ctx[0] if ctx else None
        start = None
        if head is not None and head.entry.is_compact_boundary and head.uuid:
            start = records.index_of(head.uuid)
        derived = Derived(context=ctx, context_start=start or 0, undone_micro=views.undone_ids())
        derived.counter = tokens.TokenCounter(
            carried_prefix=self._carried_prefix(head),
            known_prefix=self.described_prefix,
        )
        counted = _without_stale_usage(ctx, records, derived.context_start)
        derived.has_main_thread = any(_is_main_conversation(r.entry) for r in counted)
        _feed(derived, counted)
        if start is not None:
            # A compacted context: what the compaction left counts as ``compacted_tokens``
            # until a response measures it (docs/thresholds.md#after-a-compaction).
            derived.counter.settle()
        derived.adopt = derive_states(states, self, ctx, derived.cleared_tool_ids)
        return derived

    def adopt(self, state: Feature[Any]) -> None:
        """Work out ``state``'s part of the derived state from the context as it is now: a
        state made after the session derived it (``Features.make``)."""
        derive_states([state], self, self._context, self.cleared_tool_ids)()

    def _apply(self, derived: Derived) -> None:
        self._context = derived.context
        self.context_start = derived.context_start
        self.undone_micro = derived.undone_micro
        self.has_main_thread = derived.has_main_thread
        self.counter = derived.counter
        self.cleared_tool_ids = derived.cleared_tool_ids
        derived.adopt()

    def _rebuilds(self, new: Sequence[Record]) -> bool:
        """Whether appending ``new`` changes the view other than by adding to its end."""
        if any(r.entry.is_compact_boundary or undone_target(r) is not None for r in new):
            return True
        if self._anchors_kept_entries(new):
            return True
        # Sidechain entries were counted while they were all there was (a sub-agent's own
        # transcript); once the main thread shows up, they stop counting.
        return not self.has_main_thread and any(_is_main_conversation(r.entry) for r in new)

    def _anchors_kept_entries(self, new: Sequence[Record]) -> bool:
        """Whether ``new`` holds the entry the heading boundary's kept entries go after.

        Claude Code writes a compaction's boundary, then its summary, a line at a time; read as
        they come (a followed transcript, docs/follow.md), the kept entries first sit right
        after the boundary and must move after the summary once it arrives, as on load.
        """
        head = self._context[0].entry if self._context else None
        if head is None or not head.is_compact_boundary or head.compact_metadata is None:
            return False
        segment = head.compact_metadata.preserved_segment
        if segment is None:
            return False
        anchor = segment.anchor_uuid
        return any(
            (anchor is not None and r.uuid == anchor) or r.entry.is_compact_summary is True
            for r in new
        )

    @property
    def described_prefix(self) -> int:
        """The estimate of the system prompt and tools the client described in cacheSafeParams.

        Worked out once per cacheSafeParams: it encodes the whole tool list, and every
        rebuild (a compaction, an undo) asks for it.
        """
        params = self.meta.cache_safe_params
        if self._described is None or self._described[0] is not params:
            self._described = (params, tokens.estimate_prefix(params))
        return self._described[1]

    def _carried_prefix(self, head: Record | None) -> int:
        """The fixed prefix a context following a compaction keeps (docs/thresholds.md#accounting).

        0 for the session's first context: it learns the figure from its own first response.
        After a compaction: the figure known before this rebuild (carried, else learned from
        usage), else the one the heading boundary recorded (a restart), else the one the
        session's first response implies, as a daemon that had followed the session from its
        start would carry it (an agent's own boundary records none). Without any, the estimate
        of the client's cacheSafeParams stands in as the floor (``known_prefix``).
        """
        if head is None or not head.entry.is_compact_boundary:
            return 0  # the session's first context: its first response is the session's
        before = self.counter.carried_prefix or self.counter.learned_prefix
        if before:
            return before
        meta = head.entry.compact_metadata
        if meta is not None and meta.fixed_prefix_tokens:
            return meta.fixed_prefix_tokens
        return self._first_prefix()

    def _first_prefix(self) -> int:
        """The prefix the session's first response implies: the main thread from the file's
        start up to that response, read before any boundary (0 without one)."""
        covered: list[Record] = []
        response: str | None = None  # the first response's message id, once it is reached
        for record in self.records:
            entry = record.entry
            if entry.is_compact_boundary:
                break
            if entry.is_sidechain or not tokens.counts_toward_context(entry):
                continue
            if response is not None and (entry.type != "assistant" or entry.message_id != response):
                break  # past the first response's lines (one per content block)
            covered.append(record)
            message = entry.message if entry.type == "assistant" else None
            if response is None and message is not None and message.usage is not None:
                response = entry.message_id or ""
                if not response:
                    break
        if response is None:
            return 0
        counter = tokens.TokenCounter(known_prefix=self.described_prefix)
        counter.add_records(covered)
        return counter.learned_prefix or 0

    def extend(self, new: Sequence[Record]) -> None:
        """Add appended records to the derived state in time proportional to ``new``."""
        self.records.extend(new)
        if self._rebuilds(new):
            self.rebuild()
        else:
            self._add_to_view(new)

    async def add(
        self,
        new: Sequence[Record],
        write: Callable[[], None] | None = None,
        *,
        mark: Callable[[str], None] | None = None,
    ) -> None:
        """``extend`` once ``write`` (the durable write of ``new``, blocking) has returned.

        Both run in one worker thread: the write, then, when ``new`` rewrites the context (a
        compaction or an undo), the rebuild (``derive``) right after it, applied on the event
        loop in one step. One hand-off to a worker thread instead of two: on a busy machine
        each is a wait of its own, and the agent waits for both at a prepared compaction
        (docs/background.md#where-the-wait-goes). Not cancelled half-way:
        the records and the derived state never part. ``mark`` is told when the write and the
        rebuild are done (a compaction's ``Stages``).
        """
        rebuilds = self._rebuilds(new)
        states = list(self.features.values())  # taken here: the event loop owns the dict

        def work() -> Derived | None:
            if write is not None:
                write()
                if mark is not None:
                    mark("write")
            if not rebuilds:
                return None
            self.records.extend(new)
            return self.derive(states)

        with anyio.CancelScope(shield=True):
            derived = await anyio.to_thread.run_sync(work) if write or rebuilds else None
        if derived is None:
            self.records.extend(new)
            self._add_to_view(new)
        else:
            self._apply(derived)
        if mark is not None:
            mark("rebuild")

    def _add_to_view(self, new: Sequence[Record]) -> None:
        # Appended records that are neither boundaries nor undo entries join the view's end.
        self._context.extend(new)
        state = Derived(
            context=self._context,
            context_start=self.context_start,
            undone_micro=self.undone_micro,
            has_main_thread=self.has_main_thread,
            counter=self.counter,
            cleared_tool_ids=self.cleared_tool_ids,
        )
        _feed(state, new)

    def last_uuid(self) -> str | None:
        """Uuid of the newest record that has one (the parent of what gets appended next)."""
        return next((r.uuid for r in reversed(self.records) if r.uuid), None)

    def context(self) -> list[Record]:
        """The records the model currently sees (after the last boundary, relinked).

        Kept up to date by ``rebuild`` and ``extend``, so a request does not recompute the view
        (which may read released history back from the transcript file).
        """
        return list(self._context)

    @property
    def context_size(self) -> int:
        """How many records the model currently sees, without copying them."""
        return len(self._context)

    # -- token status ----------------------------------------------------------------------------

    def limits(self, env: Mapping[str, str]) -> tokens.Limits:
        return tokens.resolve_limits(
            self.meta.model,
            context_window=self.meta.context_window,
            max_output_tokens=self.meta.max_output_tokens,
            env=env,
            auto_compact_tokens=self.meta.auto_compact_tokens,
        )

    def status(
        self, env: Mapping[str, str], flags: tokens.CompactFlags, breaker_limit: int
    ) -> p.TokenStatus:
        limits = self.limits(env)
        th = tokens.thresholds(limits, env, flags.auto_compact_enabled)
        status = tokens.token_status(
            self.counter.current,
            limits,
            th,
            flags,
            circuit_open=self.health.consecutive_failures >= breaker_limit,
            consecutive_failures=self.health.consecutive_failures,
        )
        return status

    def info(self, loaded: bool) -> p.SessionInfo:
        return p.SessionInfo(
            session_id=self.session_id,
            transcript_path=self.transcript_path,
            cwd=self.meta.cwd,
            model=self.meta.model,
            agent_kind="subagent" if self.meta.agent_kind == "subagent" else "main",
            entry_count=len(self.records),
            open=loaded,
            tokens=self.counter.current.tokens,
            read_only=self.read_only,
        )


@dataclass(slots=True)
class Derived:
    """What a session derives from its records (``Session.derive``), applied in one step."""

    context: list[Record]
    context_start: int
    undone_micro: set[str]
    has_main_thread: bool = False
    counter: tokens.TokenCounter = field(default_factory=tokens.TokenCounter)
    cleared_tool_ids: set[str] = field(default_factory=set)
    # Adopts what the session's features derived from the same context (``Feature.derive``).
    adopt: Callable[[], None] = lambda: None


def _feed(state: Derived, records: Sequence[Record]) -> None:
    """Count records in order; a microcompact boundary subtracts what it cleared.

    Order matters: a saving only holds until the next response reports usage (that usage
    already reflects the clearing), so the counter must see the boundary between the
    responses before and after it.
    """
    main_thread = state.has_main_thread
    # The records to count, and where a microcompact cleared results, what it saved.
    counted: list[Record | int] = []
    for r in records:
        entry = r.entry
        if main_thread and entry.is_sidechain:
            # An inline sub-agent's turns live in its own context, not the main one.
            continue
        if tokens.counts_toward_context(entry):
            counted.append(r)
        elif entry.is_microcompact_boundary:
            saved = _note_microcompact(state, entry)
            if saved:
                counted.append(saved)
    state.counter.add_records(counted)


def _note_microcompact(state: Derived, entry: Entry) -> int:
    """Note what a microcompact boundary cleared; the tokens it saved (0 when none or undone)."""
    if not entry.is_microcompact_boundary or not entry.microcompact_metadata:
        return 0
    if entry.uuid in state.undone_micro:
        return 0
    meta = entry.microcompact_metadata
    if meta.restored_tool_ids:
        # An undo entry (compact/undo of a microcompact): those results are shown again.
        state.cleared_tool_ids.difference_update(meta.restored_tool_ids)
    if meta.compacted_tool_ids:
        state.cleared_tool_ids.update(meta.compacted_tool_ids)
    return meta.tokens_saved or 0


def _is_main_conversation(entry: Entry) -> bool:
    return entry.type in ("user", "assistant") and not entry.is_sidechain


def _without_stale_usage(ctx: list[Record], records: History, boundary_at: int) -> list[Record]:
    """The context with the API usage of relinked entries hidden from the token counter.

    Entries a compaction keeps verbatim (a partial compaction's kept messages, or entries
    appended while the model was summarizing) sit before the boundary in the file. Their
    usage was measured on the conversation before the compaction, so it must not anchor the
    count of the compacted one: until the next response reports usage, they are estimated.
    """
    if not ctx or not ctx[0].entry.is_compact_boundary:
        return ctx
    out: list[Record] = []
    for r in ctx:
        entry = r.entry
        at = records.index_of(entry.uuid) if entry.uuid else None
        message = entry.message
        if at is not None and at < boundary_at and message is not None and message.usage:
            stripped = msgspec.structs.replace(message, usage=None)
            r = Record(msgspec.structs.replace(entry, message=stripped), r.raw)
        out.append(r)
    return out
