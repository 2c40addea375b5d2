"""The daemon's state: options, the store, the loaded sessions and the notification sink.

One ``App`` lives for the life of the process. Handlers receive it, look a session up, and call
the core or a service. Sessions are loaded lazily from the store, so a restarted daemon serves
every session it had without reading them all at start-up.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import platformdirs

from compactd import protocol as p
from compactd.core import constants as c
from compactd.core import tokens
from compactd.engine.background import BackgroundService
from compactd.engine.cachebreaks import CacheBreaks
from compactd.engine.cancellation import point_of_no_return
from compactd.engine.files import FilesService
from compactd.engine.follow import FollowService
from compactd.engine.runtime import Runtime
from compactd.engine.session import Session
from compactd.engine.session_memory import SessionMemoryService
from compactd.services.store import (
    MAX_IMPORT_BYTES,
    LoadedTranscript,
    SessionMeta,
    valid_session_id,
)
from compactd.transcript.model import (
    Record,
    newest_first,
    record_from_dict,
    without_bookkeeping,
)

log = logging.getLogger(__name__)


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("compactd", appauthor=False))


class App(Runtime):
    """The wiring: a ``Runtime`` with the loaded sessions and the services that follow them."""

    def __init__(
        self,
        options: p.InitializationOptions,
        base_env: Mapping[str, str] | None = None,
        data_dir: Path | None = None,
    ) -> None:
        root = Path(options.data_dir) if options.data_dir else (data_dir or default_data_dir())
        super().__init__(options, root.expanduser(), base_env)
        self.sessions: dict[str, Session] = {}
        self._loading = anyio.Lock()
        # One lock (and its number of holders and waiters) per session id being opened.
        self._id_locks: dict[str, list[Any]] = {}
        # The per-session features (docs/engine.md#features), in the order their hooks run.
        self.files = FilesService(self)  # read-file state, nested memory, watching
        self.session_memory = SessionMemoryService(self)  # background note extraction
        self.features.register(CacheBreaks, lambda session: CacheBreaks())
        self.follow = FollowService(self)  # followed transcripts (docs/follow.md)
        # Zero-wait compaction: summaries prepared in the background (docs/background.md).
        self.background = BackgroundService(self)

    async def get_session(self, session_id: str) -> Session:
        if not valid_session_id(session_id):
            raise p.CompactdError(
                p.ErrorCode.INVALID_PARAMS,
                f"invalid sessionId {session_id!r}: use letters, digits, '.', '_' and '-' only",
            )
        session = self.sessions.get(session_id)
        if session is not None:
            return session
        async with self._loading:
            session = self.sessions.get(session_id)
            if session is not None:
                return session
            if not self.store.exists(session_id):
                raise p.CompactdError(
                    p.ErrorCode.SESSION_NOT_FOUND,
                    f"no session {session_id!r}; open it with session/open first",
                    sessionId=session_id,
                )
            session = await anyio.to_thread.run_sync(self._load, session_id)
            self.features.attach(session)  # on the event loop, where the features live
            self.sessions[session_id] = session
            return session

    def _load(self, session_id: str) -> Session:
        meta = self.store.read_meta(session_id)
        loaded = self.store.load(session_id)
        session = self._session(session_id, meta, loaded)
        if loaded.report.skipped or loaded.truncated_bytes:
            log.warning(
                "session %s: skipped %d corrupt lines, dropped %d unacknowledged bytes",
                session_id,
                loaded.report.skipped,
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
            if self.store.exists(sid):
                return await self._reopen(sid, params, source)
            return await self._create(sid, params, source)

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

    async def _reopen(self, sid: str, params: p.OpenParams, source: Path | None) -> p.OpenResult:
        session = await self.get_session(sid)
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
            await self.follow.catch_up(sid)
        else:
            self.follow.stop(sid)
        return self._open_result(session)

    async def _create(self, sid: str, params: p.OpenParams, source: Path | None) -> p.OpenResult:
        if params.follow and source is None:
            raise p.CompactdError(
                p.ErrorCode.INVALID_PARAMS, "follow needs the transcriptPath to follow"
            )
        data = b""
        imported_from: str | None = None
        model = params.model
        if source is not None:
            data = await anyio.to_thread.run_sync(_read_transcript, source)
            imported_from = str(source.resolve())
            if params.follow:
                # A last line without its newline is still being written: followed, it is read
                # once whole (docs/follow.md#reading-new-lines).
                data = data[: data.rfind(b"\n") + 1]
            if model is None:
                model = await anyio.to_thread.run_sync(_transcript_model, data)
        model = model or c.DEFAULT_MODEL
        if params.model is None:  # a model given was checked before anything was read
            self._check_limits(model, params.context_window, params.max_output_tokens)
        meta = SessionMeta(
            session_id=sid,
            cwd=params.cwd,
            model=model,
            context_window=params.context_window,
            max_output_tokens=params.max_output_tokens,
            agent_kind=params.agent_kind or "main",
            cache_safe_params=_builtins(params.cache_safe_params),
            api_context_management=params.api_context_management,
            imported_from=imported_from,
            created_at=time.time(),
            follow=bool(params.follow),
            follow_model=params.model is None,
        )

        def create() -> Session:
            loaded = self.store.create_transcript(sid, data)
            # An empty file may be followed: the agent has not written its first line yet.
            empty = params.follow and loaded.report.lines == 0
            if source is not None and loaded.report.entries == 0 and not empty:
                self.store.discard(sid)
                raise p.CompactdError(
                    p.ErrorCode.TRANSCRIPT_UNREADABLE,
                    f"{source} is not a Claude Code transcript: {loaded.report.describe()}",
                )
            # The meta file comes last: until it exists the session does not either.
            self.store.write_meta(meta)
            # Built here too: the view of a large import takes a while to work out.
            return self._session(sid, meta, loaded)

        await point_of_no_return()
        session = await anyio.to_thread.run_sync(create)
        self.features.attach(session)
        self.sessions[sid] = session
        if meta.follow and imported_from is not None:
            self.follow.start(session, Path(imported_from), consumed=data)
        return self._open_result(session)

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
        """A session over a transcript just loaded or created, its derived state built."""
        session = Session(
            meta=meta,
            transcript_path=str(self.store.transcript_path(session_id)),
            records=loaded.records,
            skipped_lines=loaded.report.skipped,
        )
        session.rebuild()
        return session

    def _open_result(self, session: Session) -> p.OpenResult:
        status = self.status(session)
        self.check_thresholds(session, status)
        return p.OpenResult(
            session_id=session.session_id,
            transcript_path=session.transcript_path,
            entry_count=len(session.records),
            status=status,
            skipped_lines=session.skipped_lines,
            imported_from=session.meta.imported_from,
            model=session.meta.model,
            following=self.follow.following(session.session_id),
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
        session = self.sessions.pop(session_id, None)
        if session is None:
            if not self.store.exists(session_id):
                raise p.CompactdError(p.ErrorCode.SESSION_NOT_FOUND, f"no session {session_id!r}")
            return False
        await self.features.close(session)
        return True

    def list_sessions(self) -> list[p.SessionInfo]:
        infos = []
        for sid in self.store.list_ids():
            loaded = self.sessions.get(sid)
            if loaded is not None:
                info = loaded.info(loaded=True)
                infos.append(msgspec.structs.replace(info, following=self.follow.following(sid)))
                continue
            try:
                meta = self.store.read_meta(sid)
            except (OSError, msgspec.DecodeError):
                log.warning("session %s has an unreadable meta file", sid)
                continue
            infos.append(
                p.SessionInfo(
                    session_id=sid,
                    transcript_path=str(self.store.transcript_path(sid)),
                    cwd=meta.cwd,
                    model=meta.model,
                    agent_kind="subagent" if meta.agent_kind == "subagent" else "main",
                    open=False,
                )
            )
        return infos


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


def _transcript_model(data: bytes) -> str | None:
    """The model an imported transcript's latest response names (docs/thresholds.md#model-limits)."""
    return tokens.recorded_model(newest_first(data, containing=b'"assistant"'))


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
