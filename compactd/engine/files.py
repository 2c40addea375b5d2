"""The agent's read-file state, confinement of file access, reading, and nested memory.

Read-file state (``FileState``) says which files the agent has seen: path, when, which lines
and a hash of what it saw. It is derived from the transcript: Read / Edit / Write tool calls,
``file`` and ``nested_memory`` attachments and the ``compactd-file-read`` entries
``fileState/record`` appends, so it survives a restart and is cleared by a compaction (the
state is derived again from the new context) and by microcompact (cleared Read results leave
it). Deriving it is pure and runs with the session's own derivation, in its worker thread
(``SessionFiles.derive``); everything that touches the disk (resolving symlinks, confinement,
reading, hashing) runs in worker threads.

``FileTracker`` (one per daemon, ``App.files``) owns the watcher; its per-session state is a
feature (``SessionFiles``, docs/engine.md#features): the read-file state, which it adds to
every snapshot as the rehydration's candidates, nested-memory attachments queued for
``attachments/pending`` and the set of watched files, released when the session closes;
``file_state_of`` reaches the read-file state from outside. When the agent reads a file, the
memory files (``CLAUDE.md`` and the like) in the directories from the session's working
directory down to that file are queued once as ``nested_memory`` attachments and registered in
the state. Those memory files and the files in the state are watched (``services/watch.py``);
a change queues an attachment with the new content (a ``nested_memory`` one for memory files,
an ``edited_text_file`` notice for read files) and sends ``memory/changed``.

Reads are confined to the session's cwd and ``workspaceRoots``: paths are resolved (symlinks
included) before the check, files above a size cap are not read, binary files are skipped.
"""

from __future__ import annotations

import logging
import math
import os
import time
import uuid
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import anyio

from compactd import protocol as p
from compactd.core import rehydrate as rh
from compactd.core.file_state import FileState, build_file_state, content_hash
from compactd.engine.features import Feature, feature_of
from compactd.services.fs import (
    confine,
    memory_chain_dirs,
    read_file,
    resolve_roots,
)
from compactd.services.watch import DirWatcher
from compactd.transcript import entries
from compactd.transcript.model import (
    Record,
    record_from_dict,
    transcript_timestamp,
)

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session
    from compactd.engine.snapshot import Snapshot

log = logging.getLogger(__name__)


# Memory files above this are cut (compactd's choice; Claude Code warns about memory files
# above 40,000 characters because they crowd the context).
MAX_MEMORY_CHARS: Final = 40_000
# The notice for a read file changed on disk shows this much of its new content.
CHANGED_FILE_SNIPPET_TOKENS: Final = 2_000
# How many files of the read-file state are watched (most recent first).
MAX_WATCHED_FILES: Final = 256


# -- per-session state --------------------------------------------------------------------------


@dataclass(eq=False)
class SessionFiles(Feature["Session"]):
    """The file state of one open session (not persisted): a feature of the session."""

    tracker: FileTracker
    session: Session
    # The agent's read-file state: derived from the context with the session (``derive``),
    # then kept up to date by the hooks (appended reads, nested memory, changes on disk).
    file_state: FileState = field(default_factory=FileState)
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    # Attachment entries waiting for ``attachments/pending``.
    queue: list[dict[str, Any]] = field(default_factory=list)
    # Files read since the last processing: look for memory files near them.
    discover: list[str] = field(default_factory=list)
    # Files the agent wrote: their new hash must not be reported as an outside change.
    written: set[str] = field(default_factory=set)
    dirty: bool = True
    # Memory files queued in this context (their entries may not be appended yet).
    queued_memory: set[str] = field(default_factory=set)
    # Resolved watched paths -> hash when last seen; and which are memory files.
    last_seen: dict[str, str | None] = field(default_factory=dict)
    memory_paths: set[str] = field(default_factory=set)
    read_paths: set[str] = field(default_factory=set)
    resolved: dict[str, str] = field(default_factory=dict)  # state path -> resolved path
    # The state object last processed: ``derive`` replaces it (load, compaction, undo).
    processed_state: FileState | None = None

    def derive(
        self, session: Session, context: Sequence[Record], cleared: Set[str]
    ) -> Callable[[], None]:
        state = build_file_state(context, session.meta.cwd, cleared)

        def adopt() -> None:
            self.file_state = state

        return adopt

    def on_snapshot(self, snap: Snapshot) -> Snapshot:
        return replace(snap, file_candidates=tuple(self.file_state.candidates()))

    def on_open(self, session: Session) -> None:
        self.tracker.opened.add(self)

    def on_append(self, session: Session, records: Sequence[Record]) -> None:
        self.tracker.observe(self, records, compacted=False)

    def on_compacted(self, session: Session, records: Sequence[Record]) -> None:
        self.tracker.observe(self, records, compacted=True)

    async def on_close(self, session: Session) -> None:
        self.tracker.opened.discard(self)
        self.tracker.watcher.drop(session.session_id)


@dataclass(frozen=True, slots=True)
class _WatchPlan:
    memory_paths: set[str]
    read_paths: set[str]
    dirs: list[str]
    resolved: dict[str, str]
    new_seen: dict[str, str | None]


class FileTracker:
    """Per-daemon owner of the watcher and of the ``SessionFiles`` feature."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self.memory_names = runtime.memory_names
        # The states of the open sessions, for the watcher to find who watches a path.
        self.opened: set[SessionFiles] = set()
        runtime.features.register(SessionFiles, lambda s: SessionFiles(tracker=self, session=s))
        self.watcher = DirWatcher(self._on_change, self._interesting)
        self._send, self._receive = anyio.create_memory_object_stream[SessionFiles](math.inf)
        self._started = False

    # -- plumbing ------------------------------------------------------------------------------

    def state(self, session: Session) -> SessionFiles:
        return self._runtime.features.state(session, SessionFiles)

    def _ensure_running(self) -> None:
        if self._started or self._runtime.task_group is None:
            return
        self._started = True
        self._runtime.task_group.start_soon(self._run)

    async def _run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.watcher.run)
            async with self._receive:
                async for files in self._receive:
                    if files not in self.opened:
                        continue
                    try:
                        await self.process(files)
                    except Exception:
                        log.exception("file processing failed for %s", files.session.session_id)

    def observe(self, files: SessionFiles, records: Sequence[Record], *, compacted: bool) -> None:
        """Update the state after an append and schedule nested-memory discovery."""
        session = files.session
        if compacted:
            # ``derive`` already derived the state from the new context; memory attached
            # before the boundary is gone from the model's view.
            files.queued_memory.clear()
            files.dirty = True
        else:
            changes = files.file_state.apply(records, session.meta.cwd)
            if not changes.changed:
                return
            files.discover.extend(changes.read)
            files.written.update(changes.written)
            files.dirty = True
        self._ensure_running()
        if self._started:
            self._send.send_nowait(files)

    # -- processing ----------------------------------------------------------------------------

    async def process(self, files: SessionFiles) -> None:
        """Queue nested memory for new reads and refresh the watched set (idempotent)."""
        async with files.lock:
            session = files.session
            if not files.dirty and not files.discover and files.processed_state is files.file_state:
                return
            files.processed_state = files.file_state
            discover, files.discover = files.discover, []
            written, files.written = files.written, set()
            files.dirty = False
            attached = {r.path for r in files.file_state.files.values() if r.memory}
            attached |= files.queued_memory
            found = await anyio.to_thread.run_sync(
                self._discover_blocking,
                session.meta.cwd,
                self._runtime.roots(session),
                discover,
                attached,
            )
            for path, shown, text, digest in found:
                files.queued_memory.add(path)
                files.file_state.touch(
                    path, time.time(), source="nested_memory", memory=True, content_hash=digest
                )
                files.queue.append(self._memory_entry(session, path, shown, text))
            recent = files.file_state.recent()[:MAX_WATCHED_FILES]
            plan = await anyio.to_thread.run_sync(
                self._watch_plan_blocking,
                session.meta.cwd,
                self._runtime.roots(session),
                [(r.path, r.memory) for r in recent],
                set(files.last_seen),
                written,
            )
            files.memory_paths = plan.memory_paths
            files.read_paths = plan.read_paths
            files.resolved = plan.resolved
            files.last_seen = {
                k: v for k, v in files.last_seen.items() if k in plan.memory_paths | plan.read_paths
            }
            files.last_seen.update(plan.new_seen)
            self.watcher.set_dirs(session.session_id, plan.dirs)
            if plan.dirs:
                self._ensure_running()

    def _discover_blocking(
        self, cwd: str, roots: list[str], reads: list[str], attached: set[str]
    ) -> list[tuple[str, str, str, str]]:
        """Memory files near newly read files not attached yet: (path, shown, text, hash)."""
        if not reads:
            return []
        resolved_roots = resolve_roots(cwd, roots)
        if not resolved_roots:
            return []
        base = resolved_roots[0]
        out: list[tuple[str, str, str, str]] = []
        seen = set(attached)
        for read in reads:
            try:
                target = confine(read, cwd, resolved_roots)
            except p.CompactdError:
                continue  # nothing is attached for files outside the roots
            for directory in memory_chain_dirs(target, base, resolved_roots):
                for name in self.memory_names:
                    candidate = str(directory / name)
                    if candidate in seen:
                        continue
                    seen.add(candidate)
                    try:
                        real = confine(candidate, cwd, resolved_roots)
                    except p.CompactdError:
                        continue
                    got = read_file(real)
                    if got is None or got.text is None:
                        continue
                    text = got.text
                    if len(text) > MAX_MEMORY_CHARS:
                        text = text[:MAX_MEMORY_CHARS] + (
                            f"\n[compactd: memory file cut at {MAX_MEMORY_CHARS:,} characters]"
                        )
                    out.append((candidate, rh.display_path(candidate, cwd), text, got.digest))
        return out

    def _watch_plan_blocking(
        self,
        cwd: str,
        roots: list[str],
        files: list[tuple[str, bool]],
        known: set[str],
        written: set[str],
    ) -> _WatchPlan:
        resolved_roots = resolve_roots(cwd, roots)
        base = resolved_roots[0] if resolved_roots else None
        memory: set[str] = set()
        reads: set[str] = set()
        resolved: dict[str, str] = {}
        memory_dirs: dict[Path, None] = {}
        read_dirs: dict[str, None] = {}
        for path, is_memory in files:
            try:
                real = confine(path, cwd, resolved_roots)
            except p.CompactdError:
                continue
            resolved[path] = str(real)
            if is_memory:
                memory.add(str(real))
                memory_dirs[real.parent] = None
                continue
            reads.add(str(real))
            read_dirs[str(real.parent)] = None
            if base is not None:
                memory_dirs.update(dict.fromkeys(memory_chain_dirs(real, base, resolved_roots)))
        # Every place a memory file may appear near a read file is watched too, so a new
        # CLAUDE.md is noticed as well as an edited one.
        for directory in memory_dirs:
            for name in self.memory_names:
                memory.add(str(directory / name))
        dirs = list(read_dirs) + [str(Path(m).parent) for m in sorted(memory)]
        # Files the agent wrote itself are re-snapshotted so their new content is not
        # reported as a change made behind its back.
        rewritten = {resolved[w] for w in written if w in resolved}
        new_seen: dict[str, str | None] = {}
        for path in (memory | reads) - (known - rewritten):
            got = read_file(Path(path))
            new_seen[path] = got.digest if got is not None else None
        return _WatchPlan(
            memory_paths=memory,
            read_paths=reads - memory,
            dirs=list(dict.fromkeys(dirs)),
            resolved=resolved,
            new_seen=new_seen,
        )

    # -- watching ------------------------------------------------------------------------------

    def _interesting(self, path: str) -> bool:
        return any(path in files.memory_paths or path in files.read_paths for files in self.opened)

    async def _on_change(self, path: str) -> None:
        for files in list(self.opened):
            if path in files.memory_paths or path in files.read_paths:
                try:
                    await self._session_change(files, path)
                except Exception:  # one session's failure must not hide the change from others
                    log.exception("change of %s in session %s", path, files.session.session_id)

    async def _session_change(self, files: SessionFiles, path: str) -> None:
        await self.process(files)  # writes the agent made itself are snapshotted first
        got = await anyio.to_thread.run_sync(read_file, Path(path))
        digest = got.digest if got is not None else None
        if path not in files.memory_paths and path not in files.read_paths:
            return
        previous = files.last_seen.get(path)
        if path in files.last_seen and previous == digest:
            return  # touched or rewritten with the same bytes
        files.last_seen[path] = digest
        change: Literal["modified", "added", "deleted"] = (
            "deleted" if got is None else ("added" if previous is None else "modified")
        )
        session = files.session
        cwd = session.meta.cwd
        state_path = next((k for k, v in files.resolved.items() if v == path), path)
        if path in files.memory_paths:
            if got is not None and got.text is not None:
                files.queued_memory.add(state_path)
                files.file_state.touch(
                    state_path,
                    time.time(),
                    source="nested_memory",
                    memory=True,
                    content_hash=got.digest,
                )
                files.queue.append(
                    self._memory_entry(
                        session, state_path, rh.display_path(state_path, cwd), got.text
                    )
                )
            elif got is None:
                files.file_state.remove(state_path)
        elif got is not None and got.text is not None:
            snippet, _ = rh.truncate_to_tokens(
                got.text,
                CHANGED_FILE_SNIPPET_TOKENS,
                lambda kept: f"\n[compactd: {kept} lines shown; read the file for the rest]",
            )
            payload = {
                "type": "edited_text_file",
                "filename": state_path,
                "snippet": snippet,
            }
            files.queue.append(self._entry(session, payload))
        log.info("session %s: %s %s", session.session_id, change, path)
        self._runtime.notify(
            p.NOTIFY_MEMORY_CHANGED,
            p.MemoryChangedNotification(session_id=session.session_id, path=path, change=change),
        )

    # -- entries -------------------------------------------------------------------------------

    def _entry(self, session: Session, payload: dict[str, Any]) -> dict[str, Any]:
        return rh.attachment_entry(
            payload, str(uuid.uuid4()), transcript_timestamp(), session.session_id
        )

    def _memory_entry(self, session: Session, path: str, shown: str, text: str) -> dict[str, Any]:
        kind = "Local" if os.path.basename(path).endswith(".local.md") else "Project"
        payload = {
            "type": "nested_memory",
            "path": path,
            "content": {"path": path, "type": kind, "content": text},
            "displayPath": shown,
        }
        return self._entry(session, payload)

    # -- requests ------------------------------------------------------------------------------

    def state_result(self, files: SessionFiles) -> p.FileStateResult:
        listed = []
        for read in files.file_state.recent():
            real = files.resolved.get(read.path)
            listed.append(
                p.FileStateEntry(
                    path=read.path,
                    timestamp=read.timestamp,
                    offset=read.offset,
                    limit=read.limit,
                    content_hash=read.digest(),
                    source=read.source,
                    watched=real is not None and self.watcher.covers(real),
                )
            )
        return p.FileStateResult(files=listed)

    async def listing(self, session: Session) -> p.FileStateResult:
        files = self.state(session)
        await self.process(files)
        return self.state_result(files)

    async def record(self, session: Session, params: p.FileRecordParams) -> p.FileStateResult:
        """``fileState/record``: confine, hash, append a durable record, then process it."""
        if params.offset is not None and params.offset < 0:
            raise p.CompactdError(p.ErrorCode.INVALID_PARAMS, "offset must be >= 0")
        if params.limit is not None and params.limit <= 0:
            raise p.CompactdError(p.ErrorCode.INVALID_PARAMS, "limit must be > 0")
        if params.timestamp is not None and not (
            math.isfinite(params.timestamp) and params.timestamp > 0
        ):
            raise p.CompactdError(
                p.ErrorCode.INVALID_PARAMS, "timestamp must be positive epoch seconds"
            )
        cwd = session.meta.cwd
        roots = self._runtime.roots(session)

        def check() -> tuple[str, str | None]:
            real = confine(params.path, cwd, resolve_roots(cwd, roots))
            if params.content is not None:
                return str(real), content_hash(params.content.encode())
            got = read_file(real)
            if got is None:
                raise p.CompactdError(
                    p.ErrorCode.INVALID_PARAMS,
                    f"{params.path!r} is not a readable regular file",
                    path=params.path,
                )
            return str(real), got.digest if got.reason != "tooLarge" else None

        _real, digest = await anyio.to_thread.run_sync(check)
        at = params.timestamp if params.timestamp is not None else time.time()
        line = entries.file_read_line(
            session_id=session.session_id,
            path=rh.normalize_path(params.path, cwd),
            at=at,
            offset=params.offset,
            limit=params.limit,
            content_hash=digest,
        )
        async with session.lock:
            await self._runtime.commit(session, [record_from_dict(line)])
        return await self.listing(session)

    async def pending(self, session: Session) -> list[dict[str, Any]]:
        files = self.state(session)
        await self.process(files)
        out, files.queue = files.queue, []
        return out


def file_state_of(session: Session) -> FileState | None:
    """``session``'s read-file state; None when the files feature is not registered."""
    files = feature_of(session, SessionFiles)
    return files.file_state if files is not None else None
