"""The daemon's state: options, the store, the loaded sessions and the notification sink.

One ``App`` lives for the life of the process. Handlers receive it, look a session up, and call
the core or a service. Sessions are loaded lazily from the store, so a restarted daemon serves
every session it had without reading them all at start-up.
"""

from __future__ import annotations

import functools
import logging
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import msgspec

from compactd import port
from compactd import protocol as p
from compactd.core import constants as c
from compactd.core import tokens
from compactd.engine import background
from compactd.engine.cachebreak import CacheBreaks
from compactd.engine.cancellation import point_of_no_return
from compactd.engine.files import FileTracker
from compactd.engine.follow import Followers
from compactd.engine.microcompact import CachedEdits
from compactd.engine.rehydrate import ClientExtras
from compactd.engine.runtime import Runtime
from compactd.engine.session import Session
from compactd.engine.session_memory import SessionMemory
from compactd.services import ownership
from compactd.services.data_dir import default_data_dir
from compactd.services.store import (
    MAX_IMPORT_BYTES,
    LoadedTranscript,
    SessionMeta,
    valid_session_id,
)
from compactd.transcript.bulk import collector_paused
from compactd.transcript.model import (
    ParseReport,
    Record,
    record_from_dict,
    without_bookkeeping,
)

log = logging.getLogger(__name__)


class App(Runtime):
    """The wiring: a ``Runtime`` with the loaded sessions and the services that follow them."""

    def __init__(
        self,
        options: p.InitializationOptions,
        base_env: Mapping[str, str] | None = None,
        data_dir: Path | None = None,
    ) -> None:
        root = Path(options.data_dir) if options.data_dir else (data_dir or default_data_dir())
        # Absolute: the summary names the session's transcript by its path for the model to
        # read back, and a path relative to the daemon's folder means nothing to the model.
        super().__init__(options, root.expanduser().absolute(), base_env)
        if options.auto_compact_tokens is not None:
            # The daemon's absolute auto-compact level reaches every session's limits the way
            # its environment variable does (docs/thresholds.md#absolute-level).
            self.env[c.ENV_AUTO_COMPACT_TOKENS] = str(options.auto_compact_tokens)
        self.sessions: dict[str, Session] = {}
        # The OS locks of the sessions this daemon owns (every loaded one not read-only).
        self._owned: dict[str, ownership.OwnerLock] = {}
        # One lock (and its number of holders and waiters) per session id being opened.
        self._id_locks: dict[str, list[Any]] = {}
        # The per-session features (docs/engine.md#features), in the order their hooks run.
        # The cached microcompact strategy's state (docs/microcompact.md): every session's.
        self.features.register(CachedEdits, lambda session: CachedEdits())
        self.files = FileTracker(self)  # read-file state, nested memory, watching
        # The extras a client supplied to attachments/rehydrate (docs/rehydration.md).
        self.features.register(ClientExtras, lambda session: ClientExtras())
        self.session_memory = SessionMemory(self)  # background note extraction
        self.features.register(CacheBreaks, lambda session: CacheBreaks())
        self.follow = Followers(self)  # followed transcripts (docs/follow.md)
        # Zero-wait compaction: summaries prepared in the background (docs/background.md).
        self.background = background.setup(self)

    async def get_session(self, session_id: str) -> Session:
        """The session, loaded (and owned) on first use; ``sessionLocked`` if another has it."""
        _check_id(session_id)
        session = self.sessions.get(session_id)
        if session is not None:
            return session
        async with self._id_lock(session_id):
            session = self.sessions.get(session_id)
            if session is not None:
                return session
            if not self.store.exists(session_id):
                raise p.CompactdError(
                    p.ErrorCode.SESSION_NOT_FOUND,
                    f"no session {session_id!r}; open it with session/open first",
                    sessionId=session_id,
                )
            loaded, _ = await anyio.to_thread.run_sync(self._own, session_id, None)
            # Registered before any checkpoint: the lock is the session's from here on.
            self.sessions[session_id] = loaded
            self.features.attach(loaded)  # on the event loop, where the features live
            return loaded

    def _own(self, sid: str, create: Callable[[], Session] | None) -> tuple[Session, bool]:
        """Take the session's lock, then load it, or create it with ``create`` if absent.

        The lock comes before the existence check, so two daemons creating one id at the same
        instant never both write it: one creates, the other is told who holds it (or, if the
        first already closed it, opens what the first created).
        """
        lock = self._take(sid)
        try:
            # Whole transcripts are read here: without the collector walking every new record.
            session: Session | None
            with collector_paused():
                if self.store.exists(sid):
                    session, created = self._load(sid, repair=True), False
                elif create is not None:
                    session, created = create(), True
                else:
                    session, created = None, False
            if session is None:  # its files went away between the look and the lock
                raise p.CompactdError(
                    p.ErrorCode.SESSION_NOT_FOUND, f"no session {sid!r}", sessionId=sid
                )
        except BaseException:
            # A creation that failed leaves nothing, not even the directory it locked in.
            self.store.discard(sid)
            lock.release()
            raise
        self._owned[sid] = lock
        return session, created

    def _take(self, sid: str) -> ownership.OwnerLock:
        try:
            return self.store.lock(sid)
        except ownership.SessionHeld as held:
            raise session_locked(sid, held.holder) from None

    def _load(
        self, session_id: str, *, repair: bool, params: p.OpenParams | None = None
    ) -> Session:
        meta = self.store.read_meta(session_id)
        if params is not None:
            meta = _updated_meta(meta, params)
        loaded = self.store.load(session_id, repair=repair)
        session = self._session(session_id, meta, loaded)
        if loaded.report.skipped or loaded.truncated_bytes:
            log.warning(
                "session %s: skipped %d corrupt lines, %s %d unacknowledged bytes",
                session_id,
                loaded.report.skipped,
                "dropped" if repair else "left out (read-only)",
                loaded.truncated_bytes,
            )
        return session

    async def open_session(self, params: p.OpenParams) -> p.OpenResult:
        if params.session_id is not None and not valid_session_id(params.session_id):
            raise p.CompactdError(
                p.ErrorCode.INVALID_PARAMS,
                f"invalid sessionId {params.session_id!r}: use letters, digits, '.', '_' and "
                "'-' only (omit it to get a new session)",
            )
        sid = params.session_id or str(uuid.uuid4())
        if not params.cwd.strip() or "\x00" in params.cwd:
            raise p.CompactdError(p.ErrorCode.INVALID_PARAMS, "cwd must be a non-empty path")
        cwd = Path(params.cwd).expanduser()
        if not cwd.is_absolute() or not cwd.is_dir():
            raise p.CompactdError(
                p.ErrorCode.INVALID_PARAMS,
                f"cwd {params.cwd!r} is not an existing directory (give the absolute path of "
                "the project the agent works in)",
            )
        if params.model is not None and not params.model.strip():
            raise p.CompactdError(
                p.ErrorCode.INVALID_PARAMS,
                "model must be a non-empty string (omit it to use the transcript's)",
            )
        if params.transcript_path is not None and (
            not params.transcript_path.strip() or "\x00" in params.transcript_path
        ):
            raise p.CompactdError(
                p.ErrorCode.INVALID_PARAMS, "transcriptPath must be a non-empty path"
            )
        if params.context_window is not None and params.context_window <= 0:
            raise p.CompactdError(p.ErrorCode.INVALID_PARAMS, "contextWindow must be positive")
        if params.max_output_tokens is not None and params.max_output_tokens <= 0:
            raise p.CompactdError(p.ErrorCode.INVALID_PARAMS, "maxOutputTokens must be positive")
        if params.model is not None:  # before reading anything
            self._check_limits(params.model, params.context_window, params.max_output_tokens)
        # A relative transcript path means what it means to the agent: relative to its cwd.
        source = (
            (cwd / Path(params.transcript_path).expanduser()).absolute()
            if params.transcript_path
            else None
        )
        # Opens and imports of one id run one at a time: an import must never replace a
        # transcript that a concurrent open created and appends were acknowledged on.
        async with self._id_lock(sid):
            session = self.sessions.get(sid)
            if params.read_only:
                if session is not None and not session.read_only:
                    return self._open_result(session)  # owned here: it reads as well
                return await self._open_read_only(sid, params, source)
            if session is not None and session.read_only:
                # Owning it now: drop the read-only view and load it again as its owner.
                await self.close_session(sid)
                session = None
            if session is None:
                # Reading an import happens under the lock too, before the session exists.
                await point_of_no_return()
                consumed: list[bytes] = []
                create = functools.partial(self._create, sid, params, source, consumed)
                owned, created = await anyio.to_thread.run_sync(self._own, sid, create)
                self.sessions[sid] = owned  # before any checkpoint, as in get_session
                self.features.attach(owned)
                if created:
                    imported = owned.meta.imported_from
                    if owned.meta.follow and imported is not None:
                        self.follow.start(owned, Path(imported), consumed=consumed[0])
                    return self._open_result(owned)
                session = owned
            return await self._reopen(session, params, source)

    async def _open_read_only(
        self, sid: str, params: p.OpenParams, source: Path | None
    ) -> p.OpenResult:
        """Open without owning: no lock, no byte written; the view is the file as it is now."""
        if not self.store.exists(sid):
            raise p.CompactdError(
                p.ErrorCode.SESSION_NOT_FOUND,
                f"no session {sid!r}; a read-only open creates nothing (open it without "
                "readOnly to create it)",
                sessionId=sid,
            )
        session = await anyio.to_thread.run_sync(
            functools.partial(self._load, sid, repair=False, params=params)
        )
        stored = session.meta
        self._check_limits(stored.model, stored.context_window, stored.max_output_tokens)
        if source is not None and stored.imported_from != str(source.resolve()):
            raise p.CompactdError(
                p.ErrorCode.SESSION_EXISTS,
                f"session {sid!r} already exists; open it without transcriptPath "
                "or choose another sessionId",
            )
        session.read_only = True
        holder = await anyio.to_thread.run_sync(self.store.holder, sid)
        previous = self.sessions.pop(sid, None)
        if previous is not None:  # an earlier read-only view: this one is newer
            await self.features.close(previous)
        self.sessions[sid] = session
        self.features.attach(session)
        return self._open_result(session, held_by=holder)

    def _check_limits(self, model: str, window: int | None, max_output: int | None) -> None:
        """Refuse a window that leaves nothing for the conversation."""
        limits = tokens.resolve_limits(model, window, max_output, self.env)
        if tokens.thresholds(limits, self.env).auto_compact_threshold <= 0:
            raise p.CompactdError(
                p.ErrorCode.INVALID_PARAMS,
                f"a {limits.context_window:,}-token window leaves no room for the conversation "
                f"once {limits.max_output_tokens:,} output tokens and the compaction buffer are "
                "reserved; pass a smaller maxOutputTokens or a larger contextWindow",
            )

    async def _reopen(
        self, session: Session, params: p.OpenParams, source: Path | None
    ) -> p.OpenResult:
        sid = session.session_id
        stored = session.meta
        self._check_limits(
            params.model or stored.model,
            params.context_window or stored.context_window,
            params.max_output_tokens or stored.max_output_tokens,
        )
        if source is not None and session.meta.imported_from != str(source.resolve()):
            raise p.CompactdError(
                p.ErrorCode.SESSION_EXISTS,
                f"session {sid!r} already exists; open it without transcriptPath "
                "or choose another sessionId",
            )
        follow = params.follow if params.follow is not None else stored.follow
        if follow and stored.imported_from is None:
            raise p.CompactdError(
                p.ErrorCode.INVALID_PARAMS,
                f"session {sid!r} was not imported from a transcript: there is nothing to follow",
            )
        await self.update_meta(session, _updated_meta(session.meta, params))
        if session.meta.follow and session.meta.imported_from is not None:
            # Reads the file whole first: what was appended while no daemon followed it.
            self.follow.start(session, Path(session.meta.imported_from))
            await self.follow.catch_up(session)
        else:
            self.follow.stop(session)
        return self._open_result(session)

    def _create(
        self, sid: str, params: p.OpenParams, source: Path | None, consumed: list[bytes]
    ) -> Session:
        """Create the session (import ``source`` if given). Blocking; the caller owns ``sid``.

        The bytes read from ``source`` are left in ``consumed`` (a followed transcript goes on
        from there).
        """
        if params.follow and source is None:
            raise p.CompactdError(
                p.ErrorCode.INVALID_PARAMS, "follow needs the transcriptPath to follow"
            )
        data = lines = b""
        unread = ParseReport()  # the agent's lines its reader could not take
        window, auto_tokens = params.context_window, params.auto_compact_tokens
        imported_from: str | None = None
        model = params.model
        if source is not None:
            data = _read_transcript(source)
            imported_from = str(source.resolve())
            if params.follow:
                # A last line without its newline is still being written: followed, it is read
                # once whole (docs/follow.md#reading-new-lines).
                data = port.complete(data)
            # The agent's lines as compactd's own (docs/agents.md#reading); ``data`` stays the
            # file's bytes: a follower goes on from where they end.
            fmt = port.detect(data)  # told once: it reads the file's first lines
            # compactd's own lines as they are (the store marks a hook's summary as it reads).
            lines = data if fmt.native else fmt.transcript(data, unread)
            if model is None:
                model = port.latest_model(lines)
            # An agent whose model names say no window records it (a Codex rollout).
            recorded = port.recorded_limits(data, fmt)
            if recorded is not None:
                if params.model is None and recorded.model and model is None:
                    model = recorded.model
                window = window or recorded.context_window
                auto_tokens = auto_tokens or recorded.auto_compact_tokens
        model = model or c.DEFAULT_MODEL
        if params.model is None:  # a model given was checked before anything was read
            self._check_limits(model, window, params.max_output_tokens)
        meta = SessionMeta(
            session_id=sid,
            cwd=params.cwd,
            model=model,
            context_window=window,
            max_output_tokens=params.max_output_tokens,
            auto_compact_tokens=auto_tokens,
            agent_kind=params.agent_kind or "main",
            cache_safe_params=_builtins(params.cache_safe_params),
            api_context_management=params.api_context_management,
            imported_from=imported_from,
            created_at=time.time(),
            follow=bool(params.follow),
            follow_model=params.model is None,
        )
        loaded = self.store.create_transcript(sid, lines)
        loaded.report.skipped += unread.skipped
        # An empty file may be followed: the agent has not written its first line yet.
        empty = params.follow and loaded.report.lines == 0
        if source is not None and loaded.report.entries == 0 and not empty:
            # ``_own`` removes what was written.
            raise p.CompactdError(
                p.ErrorCode.TRANSCRIPT_UNREADABLE,
                f"{source} is not a session file compactd reads (a Claude Code transcript or a "
                f"Codex rollout): {loaded.report.describe()}",
            )
        # The meta file comes last: until it exists the session does not either.
        self.store.write_meta(meta)
        consumed.append(data)
        # Built here too: the view of a large import takes a while to work out.
        return self._session(sid, meta, loaded)

    @asynccontextmanager
    async def _id_lock(self, session_id: str) -> AsyncIterator[None]:
        entry = self._id_locks.get(session_id)
        if entry is None:
            entry = self._id_locks[session_id] = [anyio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._id_locks[session_id]

    def _session(self, session_id: str, meta: SessionMeta, loaded: LoadedTranscript) -> Session:
        """A session over a transcript just loaded or created, its derived state built, its
        features' states made (and their part of it derived) but not opened: blocking, so
        that the caller runs it in a worker thread and attaches the session on the event loop.
        """
        session = Session(
            meta=meta,
            transcript_path=str(self.store.transcript_path(session_id)),
            records=loaded.records,
            skipped_lines=loaded.report.skipped,
        )
        session.rebuild()
        self.features.make(session)
        return session

    def _open_result(
        self, session: Session, held_by: ownership.Holder | None = None
    ) -> p.OpenResult:
        status = self.status(session)
        self.check_thresholds(session, status)
        return p.OpenResult(
            read_only=session.read_only,
            held_by=holder_info(held_by) if held_by is not None else None,
            session_id=session.session_id,
            transcript_path=session.transcript_path,
            entry_count=len(session.records),
            status=status,
            skipped_lines=session.skipped_lines,
            imported_from=session.meta.imported_from,
            model=session.meta.model,
            following=self.follow.following(session),
        )

    async def append(self, session: Session, entries: list[dict[str, Any]]) -> p.AppendResult:
        records = parse_entries(entries)
        fresh = await self.append_records(session, records)
        status = self.status(session)
        self.check_thresholds(session, status)
        return p.AppendResult(
            appended=len(fresh), status=status, skipped_duplicates=len(records) - len(fresh)
        )

    async def close_session(self, session_id: str) -> bool:
        """Close a session this daemon has open and let its lock go; False if it had not."""
        _check_id(session_id)
        session = self.sessions.pop(session_id, None)
        if session is None:
            if not self.store.exists(session_id):
                raise p.CompactdError(p.ErrorCode.SESSION_NOT_FOUND, f"no session {session_id!r}")
            return False
        try:
            await self.features.close(session)
        finally:
            lock = self._owned.pop(session_id, None)
            if lock is not None:
                lock.release()  # a few system calls: done here, not in a worker thread
        return True

    def release_all(self) -> None:
        """Let every session's lock go (the process is ending; its exit would do it too)."""
        for lock in self._owned.values():
            lock.release()
        self._owned.clear()

    def list_sessions(self) -> list[p.SessionInfo]:
        infos = []
        for sid in self.store.list_ids():
            loaded = self.sessions.get(sid)
            if loaded is not None:
                info = loaded.info(loaded=True)
                info = msgspec.structs.replace(info, following=self.follow.following(loaded))
                if loaded.read_only:  # whoever owns it now, if anyone
                    holder = self.store.holder(sid)
                    if holder is not None:
                        info = msgspec.structs.replace(info, held_by=holder_info(holder))
                infos.append(info)
                continue
            try:
                meta = self.store.read_meta(sid)
            except (OSError, msgspec.DecodeError):
                log.warning("session %s has an unreadable meta file", sid)
                continue
            holder = self.store.holder(sid)
            infos.append(
                p.SessionInfo(
                    session_id=sid,
                    transcript_path=str(self.store.transcript_path(sid)),
                    cwd=meta.cwd,
                    model=meta.model,
                    agent_kind="subagent" if meta.agent_kind == "subagent" else "main",
                    open=False,
                    held_by=holder_info(holder) if holder is not None else None,
                )
            )
        return infos


def _check_id(session_id: str) -> None:
    if not valid_session_id(session_id):
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS,
            f"invalid sessionId {session_id!r}: use letters, digits, '.', '_' and '-' only",
        )


def holder_info(holder: ownership.Holder) -> p.HolderInfo:
    since = (
        datetime.fromtimestamp(holder.since, tz=UTC).isoformat(timespec="seconds")
        if holder.since is not None
        else None
    )
    return p.HolderInfo(pid=holder.pid, host=holder.host, since=since)


def session_locked(session_id: str, holder: ownership.Holder) -> p.CompactdError:
    """``sessionLocked``, naming the holder and what to do (docs/durability.md#ownership)."""
    info = holder_info(holder)
    who = f"process {info.pid}" if info.pid is not None else "another process"
    if info.host and info.host != socket.gethostname():
        who += f" on {info.host}"
    since = f" since {info.since}" if info.since else ""
    return p.CompactdError(
        p.ErrorCode.SESSION_LOCKED,
        f"session {session_id!r} is open in {who}{since}; close it there, or open it here "
        "with readOnly: true to read it",
        sessionId=session_id,
        holderPid=info.pid,
        holderHost=info.host,
        since=info.since,
    )


def parse_entries(entries: list[dict[str, Any]]) -> list[Record]:
    """Validate appended entries; a bad one rejects the whole request before anything changes."""
    records = []
    for i, obj in enumerate(entries):
        if not isinstance(obj, dict):
            raise p.CompactdError(p.ErrorCode.INVALID_PARAMS, f"entries[{i}] must be a JSON object")
        kind = obj.get("type")
        if not isinstance(kind, str) or not kind:
            raise p.CompactdError(
                p.ErrorCode.INVALID_PARAMS, f"entries[{i}] needs a string 'type' field"
            )
        uid = obj.get("uuid")
        if uid is not None and not isinstance(uid, str):
            raise p.CompactdError(p.ErrorCode.INVALID_PARAMS, f"entries[{i}].uuid must be a string")
        # compactd's own bookkeeping is never taken from a client (a client that appends the
        # boundary a compaction returned must not make the store drop acknowledged lines).
        clean, dropped = without_bookkeeping(obj)
        if dropped:
            log.info("entries[%d]: ignored compactd's own fields %s", i, ", ".join(dropped))
        records.append(record_from_dict(clean))
    return records


def _read_transcript(path: Path) -> bytes:
    try:
        st = path.stat()
    except OSError as exc:
        raise p.CompactdError(
            p.ErrorCode.TRANSCRIPT_UNREADABLE, f"cannot read transcript {path}: {exc.strerror}"
        ) from exc
    if not path.is_file():
        raise p.CompactdError(
            p.ErrorCode.TRANSCRIPT_UNREADABLE, f"transcript {path} is not a regular file"
        )
    if st.st_size > MAX_IMPORT_BYTES:
        raise p.CompactdError(
            p.ErrorCode.TRANSCRIPT_UNREADABLE,
            f"transcript {path} is {st.st_size} bytes, above the {MAX_IMPORT_BYTES} limit",
        )
    try:
        return path.read_bytes()
    except OSError as exc:
        raise p.CompactdError(
            p.ErrorCode.TRANSCRIPT_UNREADABLE, f"cannot read transcript {path}: {exc.strerror}"
        ) from exc


def _builtins(value: msgspec.Struct | None) -> dict[str, Any] | None:
    if value is None:
        return None
    out = msgspec.to_builtins(value)
    assert isinstance(out, dict)
    return out


def _updated_meta(meta: SessionMeta, params: p.OpenParams) -> SessionMeta:
    return msgspec.structs.replace(
        meta,
        cwd=params.cwd or meta.cwd,
        model=params.model or meta.model,
        context_window=params.context_window or meta.context_window,
        max_output_tokens=params.max_output_tokens or meta.max_output_tokens,
        auto_compact_tokens=params.auto_compact_tokens or meta.auto_compact_tokens,
        agent_kind=params.agent_kind or meta.agent_kind,
        cache_safe_params=_builtins(params.cache_safe_params) or meta.cache_safe_params,
        api_context_management=(
            params.api_context_management
            if params.api_context_management is not None
            else meta.api_context_management
        ),
        follow=params.follow if params.follow is not None else meta.follow,
        follow_model=meta.follow_model and params.model is None,
    )
