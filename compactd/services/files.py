"""The agent's read-file state, confinement of file access, reading, and nested memory.

Read-file state (``FileState``, a typed field of every ``Session``) says which files the agent
has seen: path, when, which lines and a hash of what it saw. It is derived from the transcript:
Read / Edit / Write tool calls, ``file`` and ``nested_memory`` attachments and the
``compactd-file-read`` entries ``fileState/record`` appends, so it survives a restart and is
cleared by a compaction (the state is rebuilt from the new context) and by microcompact
(cleared Read results leave it). Deriving it is pure; everything that touches the disk
(resolving symlinks, confinement, reading, hashing) runs in worker threads.

``FilesService`` (one per daemon, ``App.files``) keeps per-session runtime state:
nested-memory attachments queued for ``attachments/pending``, the set of watched files, and
the extras a client supplied for rehydration. When the agent reads a file, the memory files
(``CLAUDE.md`` and the like) in the directories from the session's working directory down to
that file are queued once as ``nested_memory`` attachments and registered in the state. Those
memory files and the files in the state are watched (``services/watch.py``); a change queues
an attachment with the new content (a ``nested_memory`` one for memory files, an
``edited_text_file`` notice for read files) and sends ``memory/changed``.

Reads are confined to the session's cwd and ``workspaceRoots``: paths are resolved (symlinks
included) before the check, files above a size cap are not read, binary files are skipped.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import anyio

from compactd import protocol as p
from compactd.core import constants as c
from compactd.core import rehydrate as rh
from compactd.core.microcompact import parse_timestamp
from compactd.model import (
    Record,
    ToolResultBlock,
    ToolUseBlock,
    record_from_dict,
    transcript_timestamp,
)
from compactd.services.watch import DirWatcher

if TYPE_CHECKING:
    from compactd.app import App
    from compactd.session import Session

log = logging.getLogger(__name__)

# The transcript entry ``fileState/record`` appends. Like Claude Code's own bookkeeping lines
# (``file-history-snapshot``, ``queue-operation``) it is not part of the model's view.
FILE_READ_ENTRY: Final = "compactd-file-read"

# Files larger than this are never read whole (rehydration needs at most a few tens of KB of
# text; a larger file is announced by reference instead). compactd's choice.
MAX_READ_BYTES: Final = 8 << 20
# A NUL byte in the first 8 KiB marks a file as binary (the heuristic git and grep use).
BINARY_SNIFF_BYTES: Final = 8192
# Memory files above this are cut (compactd's choice; Claude Code warns about memory files
# above 40,000 characters because they crowd the context).
MAX_MEMORY_CHARS: Final = 40_000
# The notice for a read file changed on disk shows this much of its new content.
CHANGED_FILE_SNIPPET_TOKENS: Final = 2_000
# How many files of the read-file state are watched (most recent first).
MAX_WATCHED_FILES: Final = 256
# Longest path accepted from a client.
MAX_PATH_CHARS: Final = 4096


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- read-file state (pure) ---------------------------------------------------------------------


@dataclass(slots=True)
class FileRead:
    """The latest thing the agent did with one file."""

    path: str
    timestamp: float
    seq: int
    offset: int | None = None
    limit: int | None = None
    content_hash: str | None = None
    source: str = "Read"
    tool_use_id: str | None = None
    stub: bool = False
    memory: bool = False

    def candidate(self) -> rh.FileCandidate:
        return rh.FileCandidate(
            path=self.path,
            timestamp=self.timestamp,
            seq=self.seq,
            offset=self.offset,
            limit=self.limit,
            stub=self.stub,
            memory=self.memory,
        )


@dataclass(slots=True)
class StateChanges:
    """What ``FileState.apply`` saw: files read (for nested memory) and files written."""

    read: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    changed: bool = False


class FileState:
    """Read-file state of one session, keyed by normalized absolute path."""

    def __init__(self) -> None:
        self.files: dict[str, FileRead] = {}
        self._seq = 0
        # Tool calls whose result has not been seen yet: tool_use id -> path.
        self._awaiting: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.files)

    def touch(self, path: str, timestamp: float, **fields: Any) -> FileRead:
        self._seq += 1
        read = FileRead(path=path, timestamp=timestamp, seq=self._seq, **fields)
        self.files[path] = read
        return read

    def remove(self, path: str) -> None:
        self.files.pop(path, None)

    def drop_tool_ids(self, ids: Iterable[str]) -> list[str]:
        """Forget files whose latest read is one of the cleared tool results (microcompact)."""
        wanted = set(ids)
        gone = [p for p, r in self.files.items() if r.tool_use_id in wanted]
        for path in gone:
            del self.files[path]
        return gone

    def recent(self) -> list[FileRead]:
        return sorted(self.files.values(), key=lambda r: (r.timestamp, r.seq), reverse=True)

    def candidates(self) -> list[rh.FileCandidate]:
        return [r.candidate() for r in self.files.values()]

    def apply(self, records: Sequence[Record], cwd: str) -> StateChanges:
        """Fold appended records into the state (see the module docstring for the sources)."""
        out = StateChanges()
        now = time.time()
        for record in records:
            entry = record.entry
            stamp = parse_timestamp(entry.timestamp)
            ts = now if stamp is None else stamp
            if entry.type == "assistant":
                for block in entry.blocks:
                    if isinstance(block, ToolUseBlock):
                        self._tool_use(block, ts, cwd, out)
            elif entry.type == "user":
                for block in entry.blocks:
                    if isinstance(block, ToolResultBlock):
                        self._tool_result(block, entry.tool_use_result, out)
            elif entry.type == "attachment" and entry.attachment:
                self._attachment(entry.attachment, ts, cwd, out)
            elif entry.type == FILE_READ_ENTRY:
                self._recorded(record.to_builtins(), ts, cwd, out)
            elif entry.is_microcompact_boundary and entry.microcompact_metadata:
                ids = entry.microcompact_metadata.get("compactedToolIds")
                if isinstance(ids, list) and self.drop_tool_ids(
                    i for i in ids if isinstance(i, str)
                ):
                    out.changed = True
        return out

    def _tool_use(self, block: ToolUseBlock, ts: float, cwd: str, out: StateChanges) -> None:
        name = block.name
        if name not in c.FILE_READ_TOOLS and name not in c.FILE_WRITE_TOOLS:
            return
        args = block.input if isinstance(block.input, dict) else {}
        target = args.get("file_path") or args.get("notebook_path")
        if not isinstance(target, str) or not target or "\x00" in target:
            return
        path = rh.normalize_path(target, cwd)
        fields: dict[str, Any] = {"source": name, "tool_use_id": block.id or None}
        if name in c.FILE_READ_TOOLS:
            fields["offset"] = _int_or_none(args.get("offset"))
            fields["limit"] = _int_or_none(args.get("limit"))
            out.read.append(path)
        else:
            content = args.get("content")
            if name == "Write" and isinstance(content, str):
                fields["content_hash"] = _sha256(content.encode())
            out.written.append(path)
        self.touch(path, ts, **fields)
        if block.id:
            self._awaiting[block.id] = path
        out.changed = True

    def _tool_result(self, block: ToolResultBlock, result: Any, out: StateChanges) -> None:
        path = self._awaiting.pop(block.tool_use_id, None)
        read = self.files.get(path) if path else None
        if read is None or read.tool_use_id != block.tool_use_id:
            return
        if block.is_error:
            # The call failed: the agent saw nothing of the file.
            del self.files[read.path]
            out.changed = True
            return
        text = _result_text(block)
        if read.source in c.FILE_READ_TOOLS and text.lstrip().startswith(
            c.FILE_UNCHANGED_STUB_PREFIX
        ):
            read.stub = True
        file_info = result.get("file") if isinstance(result, dict) else None
        if isinstance(file_info, dict) and isinstance(file_info.get("content"), str):
            read.content_hash = _sha256(file_info["content"].encode())

    def _attachment(self, payload: dict[str, Any], ts: float, cwd: str, out: StateChanges) -> None:
        kind = payload.get("type")
        if kind == "file" and isinstance(payload.get("filename"), str):
            inner = payload.get("content")
            text = inner.get("file", {}).get("content") if isinstance(inner, dict) else None
            self.touch(
                rh.normalize_path(payload["filename"], cwd),
                ts,
                source="attachment",
                content_hash=_sha256(text.encode()) if isinstance(text, str) else None,
            )
            out.changed = True
        elif kind == "nested_memory" and isinstance(payload.get("path"), str):
            inner = payload.get("content")
            text = inner.get("content") if isinstance(inner, dict) else None
            self.touch(
                rh.normalize_path(payload["path"], cwd),
                ts,
                source="nested_memory",
                memory=True,
                content_hash=_sha256(text.encode()) if isinstance(text, str) else None,
            )
            out.changed = True

    def _recorded(self, raw: dict[str, Any], ts: float, cwd: str, out: StateChanges) -> None:
        target = raw.get("path")
        if not isinstance(target, str) or not target:
            return
        path = rh.normalize_path(target, cwd)
        at = raw.get("readAt")
        self.touch(
            path,
            float(at) if isinstance(at, int | float) and not isinstance(at, bool) else ts,
            offset=_int_or_none(raw.get("offset")),
            limit=_int_or_none(raw.get("limit")),
            content_hash=raw.get("contentHash")
            if isinstance(raw.get("contentHash"), str)
            else None,
            source="record",
        )
        out.read.append(path)
        out.changed = True


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _result_text(block: ToolResultBlock) -> str:
    content = block.content
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(getattr(b, "text", "") for b in content)
    return ""


def build_file_state(
    records: Sequence[Record], cwd: str, cleared_tool_ids: Iterable[str] = ()
) -> FileState:
    """The read-file state of a context (``Session.rebuild`` calls this)."""
    state = FileState()
    state.apply(records, cwd)
    state.drop_tool_ids(cleared_tool_ids)
    return state


# -- confinement and reading (blocking: call from worker threads) -------------------------------


def resolve_roots(cwd: str, workspace_roots: Sequence[str]) -> list[Path]:
    """The directories reads are confined to, symlinks resolved."""
    roots: list[Path] = []
    for raw in [cwd, *workspace_roots]:
        if not raw:
            continue
        try:
            root = Path(raw).expanduser().resolve()
        except (OSError, RuntimeError):
            continue
        if root not in roots:
            roots.append(root)
    return roots


def _inside(path: Path, roots: Sequence[Path]) -> Path | None:
    for root in roots:
        if path == root or path.is_relative_to(root):
            return root
    return None


def confine(path: str, cwd: str, roots: Sequence[Path]) -> Path:
    """Resolve ``path`` (relative to ``cwd``) and check it lies inside one of ``roots``.

    Raises ``CompactdError``: ``invalidParams`` for an unusable path, ``pathOutsideRoots`` when
    the path, or the target of a symlink on the way, leaves the roots.
    """
    if not path or "\x00" in path or len(path) > MAX_PATH_CHARS:
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS,
            "path must be a non-empty string without NUL characters, "
            f"at most {MAX_PATH_CHARS} characters long",
        )
    candidate = Path(rh.normalize_path(path, cwd))
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as exc:  # symlink loops, unreadable components
        raise p.CompactdError(
            p.ErrorCode.PATH_OUTSIDE_ROOTS, f"cannot resolve {path!r}: {exc}", path=path
        ) from exc
    if _inside(resolved, roots) is None:
        via = f" (it resolves to {resolved})" if resolved != candidate else ""
        raise p.CompactdError(
            p.ErrorCode.PATH_OUTSIDE_ROOTS,
            f"{path!r} is outside the session's working directory and workspace roots{via}; "
            f"allowed: {', '.join(str(r) for r in roots) or 'none'}",
            path=path,
            resolved=str(resolved),
            roots=[str(r) for r in roots],
        )
    return resolved


@dataclass(frozen=True, slots=True)
class FileText:
    """A file read from disk: its text or, for a file not shown, why (``binary``,
    ``tooLarge``); ``digest`` hashes the bytes on disk."""

    text: str | None
    digest: str
    reason: str | None = None


def read_file(path: Path, max_bytes: int = MAX_READ_BYTES) -> FileText | None:
    """Read a regular file; None when it is missing or not a regular file."""
    try:
        st = path.stat()
    except OSError:
        return None
    if not path.is_file():
        return None
    if st.st_size > max_bytes:
        return FileText(text=None, digest=f"size:{st.st_size}:{st.st_mtime_ns}", reason="tooLarge")
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return FileText(text=None, digest=_sha256(data), reason="binary")
    return FileText(text=data.decode("utf-8", errors="replace"), digest=_sha256(data))


def slice_lines(text: str, offset: int | None, limit: int | None) -> tuple[str, int, int]:
    """The lines a Read call with ``offset`` (1-based first line) and ``limit`` returned.

    Returns the text, its first line number and the file's line count.
    """
    lines = text.splitlines(keepends=True)
    start = max(1, offset or 1)
    end = start - 1 + limit if limit and limit > 0 else len(lines)
    return "".join(lines[start - 1 : end]), start, len(lines)


def memory_chain_dirs(file: Path, cwd: Path, roots: Sequence[Path]) -> list[Path]:
    """Directories from the session's cwd (or the root holding ``file``) down to its folder."""
    base = cwd if file.is_relative_to(cwd) else _inside(file, roots)
    if base is None:
        return []
    dirs = [base]
    for part in file.parent.relative_to(base).parts:
        dirs.append(dirs[-1] / part)
    return dirs


def valid_memory_names(names: Sequence[str] | None) -> tuple[str, ...]:
    """Configured memory file names; names that could leave their directory are dropped."""
    if names is None:
        return tuple(c.DEFAULT_MEMORY_FILE_NAMES)
    out = []
    for name in names:
        parts = Path(name).parts
        if not name or os.path.isabs(name) or ".." in parts or "\x00" in name:
            log.warning("ignoring memory file name %r: it must be a relative path", name)
            continue
        out.append(os.path.normpath(name))
    return tuple(dict.fromkeys(out))


# -- per-session runtime ------------------------------------------------------------------------


@dataclass(slots=True)
class SessionFiles:
    """Runtime file state of one open session (not persisted)."""

    session: Session
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
    # The state object last processed: ``Session.rebuild`` replaces it (load, compaction).
    processed_state: FileState | None = None
    extras: p.RehydrationExtras | None = None


@dataclass(frozen=True, slots=True)
class _WatchPlan:
    memory_paths: set[str]
    read_paths: set[str]
    dirs: list[str]
    resolved: dict[str, str]
    new_seen: dict[str, str | None]


class FilesService:
    """Per-daemon owner of the sessions' file runtime, the watcher and the append observer."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.memory_names = valid_memory_names(app.options.memory_file_names)
        self.runtimes: dict[str, SessionFiles] = {}
        self.watcher = DirWatcher(self._on_change, self._interesting)
        self._send, self._receive = anyio.create_memory_object_stream[SessionFiles](math.inf)
        self._started = False

    # -- plumbing ------------------------------------------------------------------------------

    def runtime(self, session: Session) -> SessionFiles:
        rt = self.runtimes.get(session.session_id)
        if rt is not None and rt.session is session:
            return rt
        rt = SessionFiles(session=session)
        self.runtimes[session.session_id] = rt
        sid = session.session_id

        async def close() -> None:
            if self.runtimes.get(sid) is rt:
                del self.runtimes[sid]
                self.watcher.drop(sid)

        session.extras.setdefault("closers", []).append(close)
        return rt

    def _ensure_running(self) -> None:
        if self._started or self.app.task_group is None:
            return
        self._started = True
        self.app.task_group.start_soon(self._run)

    async def _run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.watcher.run)
            async with self._receive:
                async for rt in self._receive:
                    if self.runtimes.get(rt.session.session_id) is not rt:
                        continue
                    try:
                        await self.process(rt)
                    except Exception:
                        log.exception("file processing failed for %s", rt.session.session_id)

    def roots(self, session: Session) -> list[str]:
        return [session.meta.cwd, *(self.app.options.workspace_roots or [])]

    def observe(self, session: Session, records: list[Record]) -> None:
        """Append observer: update the state and schedule nested-memory discovery."""
        rt = self.runtime(session)
        if any(r.entry.is_compact_boundary for r in records):
            # ``Session.rebuild`` already rebuilt the state from the new context; memory
            # attached before the boundary is gone from the model's view.
            rt.queued_memory.clear()
            rt.dirty = True
        else:
            changes = session.file_state.apply(records, session.meta.cwd)
            if not changes.changed:
                return
            rt.discover.extend(changes.read)
            rt.written.update(changes.written)
            rt.dirty = True
        self._ensure_running()
        if self._started:
            self._send.send_nowait(rt)

    # -- processing ----------------------------------------------------------------------------

    async def process(self, rt: SessionFiles) -> None:
        """Queue nested memory for new reads and refresh the watched set (idempotent)."""
        async with rt.lock:
            session = rt.session
            if not rt.dirty and not rt.discover and rt.processed_state is session.file_state:
                return
            rt.processed_state = session.file_state
            discover, rt.discover = rt.discover, []
            written, rt.written = rt.written, set()
            rt.dirty = False
            attached = {r.path for r in session.file_state.files.values() if r.memory}
            attached |= rt.queued_memory
            found = await anyio.to_thread.run_sync(
                self._discover_blocking, session.meta.cwd, self.roots(session), discover, attached
            )
            for path, shown, text, digest in found:
                rt.queued_memory.add(path)
                session.file_state.touch(
                    path, time.time(), source="nested_memory", memory=True, content_hash=digest
                )
                rt.queue.append(self._memory_entry(session, path, shown, text))
            recent = [r for r in session.file_state.recent()][:MAX_WATCHED_FILES]
            plan = await anyio.to_thread.run_sync(
                self._watch_plan_blocking,
                session.meta.cwd,
                self.roots(session),
                [(r.path, r.memory) for r in recent],
                set(rt.last_seen),
                written,
            )
            rt.memory_paths = plan.memory_paths
            rt.read_paths = plan.read_paths
            rt.resolved = plan.resolved
            rt.last_seen = {
                k: v for k, v in rt.last_seen.items() if k in plan.memory_paths | plan.read_paths
            }
            rt.last_seen.update(plan.new_seen)
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
        return any(
            path in rt.memory_paths or path in rt.read_paths for rt in self.runtimes.values()
        )

    async def _on_change(self, path: str) -> None:
        for rt in list(self.runtimes.values()):
            if path in rt.memory_paths or path in rt.read_paths:
                try:
                    await self._session_change(rt, path)
                except Exception:  # one session's failure must not hide the change from others
                    log.exception("change of %s in session %s", path, rt.session.session_id)

    async def _session_change(self, rt: SessionFiles, path: str) -> None:
        await self.process(rt)  # writes the agent made itself are snapshotted first
        got = await anyio.to_thread.run_sync(read_file, Path(path))
        digest = got.digest if got is not None else None
        if path not in rt.memory_paths and path not in rt.read_paths:
            return
        previous = rt.last_seen.get(path)
        if path in rt.last_seen and previous == digest:
            return  # touched or rewritten with the same bytes
        rt.last_seen[path] = digest
        change: Literal["modified", "added", "deleted"] = (
            "deleted" if got is None else ("added" if previous is None else "modified")
        )
        session = rt.session
        cwd = session.meta.cwd
        state_path = next((k for k, v in rt.resolved.items() if v == path), path)
        if path in rt.memory_paths:
            if got is not None and got.text is not None:
                rt.queued_memory.add(state_path)
                session.file_state.touch(
                    state_path,
                    time.time(),
                    source="nested_memory",
                    memory=True,
                    content_hash=got.digest,
                )
                rt.queue.append(
                    self._memory_entry(
                        session, state_path, rh.display_path(state_path, cwd), got.text
                    )
                )
            elif got is None:
                session.file_state.remove(state_path)
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
            rt.queue.append(self._entry(session, payload))
        log.info("session %s: %s %s", session.session_id, change, path)
        self.app.notify(
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

    def state_result(self, session: Session) -> p.FileStateResult:
        rt = self.runtimes.get(session.session_id)
        files = []
        for read in session.file_state.recent():
            real = rt.resolved.get(read.path) if rt is not None else None
            files.append(
                p.FileStateEntry(
                    path=read.path,
                    timestamp=read.timestamp,
                    offset=read.offset,
                    limit=read.limit,
                    content_hash=read.content_hash,
                    source=read.source,
                    watched=real is not None and self.watcher.covers(real),
                )
            )
        return p.FileStateResult(files=files)

    async def listing(self, session: Session) -> p.FileStateResult:
        await self.process(self.runtime(session))
        return self.state_result(session)

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
        roots = self.roots(session)

        def check() -> tuple[str, str | None]:
            real = confine(params.path, cwd, resolve_roots(cwd, roots))
            if params.content is not None:
                return str(real), _sha256(params.content.encode())
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
        line: dict[str, Any] = {
            "type": FILE_READ_ENTRY,
            "timestamp": transcript_timestamp(at),
            "readAt": at,
            "sessionId": session.session_id,
            "path": rh.normalize_path(params.path, cwd),
        }
        if params.offset is not None:
            line["offset"] = params.offset
        if params.limit is not None:
            line["limit"] = params.limit
        if digest is not None:
            line["contentHash"] = digest
        async with session.lock:
            await self.app.commit(session, [record_from_dict(line)])
        return await self.listing(session)

    async def pending(self, session: Session) -> list[dict[str, Any]]:
        rt = self.runtime(session)
        await self.process(rt)
        out, rt.queue = rt.queue, []
        return out
