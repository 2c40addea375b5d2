"""A typed asyncio client for the compactd daemon.

It spawns ``compactd serve`` (``Client.spawn``) or attaches to a daemon that is already running
over a pair of streams (``Client.connect``), speaks JSON-RPC 2.0 with LSP framing, has one typed
method per request of protocol v1 (results decoded into the Structs of ``compactd.protocol``),
and yields server notifications, decoded too, as async iterators that start listening as soon
as they are created::

    async with Client.spawn() as client:
        opened = await client.open_session(cwd=".", model="claude-sonnet-4-5")
        status = await client.tokens_status(opened.session_id)
        async with client.status_updates(opened.session_id) as updates:
            await client.compact_full(opened.session_id)
            async for note in updates:
                if note.phase == "completed":
                    break
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any, Generic, Literal, TypeVar

import msgspec

from compactd import protocol as p

__all__ = ["TYPED_METHODS", "TYPED_NOTIFICATIONS", "Client", "RpcError", "Subscription"]

T = TypeVar("T", bound=msgspec.Struct)
N = TypeVar("N", bound=msgspec.Struct)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


class RpcError(Exception):
    """A JSON-RPC error answer; ``code`` is ``data.code`` (stable), ``number`` the JSON-RPC one."""

    def __init__(self, number: int, message: str, data: Any) -> None:
        super().__init__(message)
        self.number = number
        self.message = message
        self.data = data
        self.code: str | None = data.get("code") if isinstance(data, dict) else None

    def __str__(self) -> str:
        return f"{self.message} ({self.code or self.number})"


class Client:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        process: asyncio.subprocess.Process | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.process = process
        self._ids = itertools.count(1)
        self._pending: dict[int | str, asyncio.Future[Any]] = {}
        self._subscribers: list[tuple[str | None, asyncio.Queue[tuple[str, Any]]]] = []
        self._reader_task: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()
        self.server_info: dict[str, Any] = {}
        self.capabilities: dict[str, Any] = {}

    # -- construction -------------------------------------------------------------------------

    @classmethod
    async def spawn_process(
        cls,
        args: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        stderr: Any = None,
    ) -> Client:
        argv = list(args) if args else [sys.executable, "-m", "compactd", "serve"]
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr if stderr is not None else asyncio.subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            limit=1 << 24,
        )
        assert process.stdout is not None and process.stdin is not None
        client = cls(process.stdout, process.stdin, process)
        client.start()
        return client

    @classmethod
    @contextlib.asynccontextmanager
    async def spawn(
        cls,
        args: Sequence[str] | None = None,
        initialization_options: p.InitializationOptions | dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        stderr: Any = None,
        capabilities: dict[str, Any] | None = None,
    ) -> AsyncIterator[Client]:
        """Spawn a daemon (``compactd serve`` by default), initialize it, shut it down at exit."""
        client = await cls.spawn_process(args, env=env, stderr=stderr)
        try:
            await client.initialize(initialization_options or {}, capabilities=capabilities)
            yield client
        finally:
            await client.shutdown()

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        initialization_options: p.InitializationOptions | dict[str, Any] | None = None,
        capabilities: dict[str, Any] | None = None,
        shutdown_on_exit: bool = True,
    ) -> AsyncIterator[Client]:
        """Attach to a daemon that is already running, over its (reader, writer) streams.

        The streams can be a process's stdout / stdin started by someone else, a socket, or a
        pipe. The client initializes the daemon; at exit it sends shutdown + exit (the daemon
        then ends) unless ``shutdown_on_exit`` is false, in which case it only stops reading
        and leaves the streams open.
        """
        client = cls(reader, writer)
        client.start()
        try:
            await client.initialize(initialization_options or {}, capabilities=capabilities)
            yield client
        finally:
            if shutdown_on_exit:
                await client.shutdown()
            else:
                await client.detach()

    def start(self) -> None:
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())

    async def detach(self) -> None:
        """Stop reading without closing the streams or stopping the daemon."""
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task

    # -- transport ----------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        try:
            while True:
                length = None
                while True:
                    line = await self._reader.readline()
                    if not line:
                        return
                    line = line.strip()
                    if not line:
                        break
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                if length is None:
                    continue
                body = await self._reader.readexactly(length)
                self._dispatch(_decoder.decode(body))
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self._closed.set()
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("the daemon closed the connection"))
            for _, queue in self._subscribers:
                queue.put_nowait(("", None))

    def _dispatch(self, msg: dict[str, Any]) -> None:
        if "method" in msg and "id" in msg:
            # Server -> client request (e.g. window/workDoneProgress/create): accept it.
            self._write({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            return
        if "method" in msg:
            for method, queue in self._subscribers:
                if method is None or method == msg["method"]:
                    queue.put_nowait((msg["method"], msg.get("params")))
            return
        fut = self._pending.pop(msg.get("id"), None)  # type: ignore[arg-type]
        if fut is None or fut.done():
            return
        if "error" in msg and msg["error"] is not None:
            err = msg["error"]
            fut.set_exception(RpcError(err.get("code", 0), err.get("message", ""), err.get("data")))
        else:
            fut.set_result(msg.get("result"))

    def _write(self, msg: dict[str, Any]) -> None:
        body = _encoder.encode(msg)
        self._writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request and wait for its raw JSON result."""
        msg_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            msg["params"] = params
        self._write(msg)
        await self._writer.drain()
        try:
            return await fut
        except asyncio.CancelledError:
            # Tell the daemon to stop working on it, then let the cancellation continue.
            self._pending.pop(msg_id, None)
            with contextlib.suppress(Exception):
                await self.notify("$/cancelRequest", {"id": msg_id})
            raise

    async def request_with_id(self, method: str, params: Any) -> tuple[int, asyncio.Future[Any]]:
        """Send a request and return its id and future (to cancel it by id later)."""
        msg_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        self._write({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        await self._writer.drain()
        return msg_id, fut

    async def cancel(self, msg_id: int) -> None:
        await self.notify("$/cancelRequest", {"id": msg_id})

    async def notify(self, method: str, params: Any = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self._write(msg)
        await self._writer.drain()

    async def call(
        self, method: str, params: msgspec.Struct | dict[str, Any], result: type[T]
    ) -> T:
        """Send a request with Struct params and decode the result into ``result``."""
        raw = params if isinstance(params, dict) else _drop_none(msgspec.to_builtins(params))
        return msgspec.convert(await self.request(method, raw), result)

    @contextlib.asynccontextmanager
    async def subscribe(
        self, method: str | None = None
    ) -> AsyncIterator[asyncio.Queue[tuple[str, Any]]]:
        """A queue of (method, params) notifications; subscribe before triggering them."""
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        entry = (method, queue)
        self._subscribers.append(entry)
        try:
            yield queue
        finally:
            self._subscribers.remove(entry)

    async def notifications(self, method: str | None = None) -> AsyncIterator[tuple[str, Any]]:
        """Yield notifications until the connection closes."""
        async with self.subscribe(method) as queue:
            while True:
                name, params = await queue.get()
                if not name:
                    return
                yield name, params

    # -- lifecycle ----------------------------------------------------------------------------

    async def initialize(
        self,
        options: p.InitializationOptions | dict[str, Any],
        capabilities: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        if isinstance(options, p.InitializationOptions):
            options = _drop_none(msgspec.to_builtins(options))
        result = await self.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": None,
                "capabilities": capabilities or {},
                "initializationOptions": options,
                "clientInfo": {"name": "compactd-python-client"},
            },
        )
        self.server_info = result.get("serverInfo") or {}
        self.capabilities = result.get("capabilities") or {}
        await self.notify("initialized", {})
        return dict(result)

    async def shutdown(self, grace: float = 10.0) -> int | None:
        """Polite shutdown (shutdown + exit), then wait for the process."""
        if not self._closed.is_set():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.request("shutdown"), grace)
                await self.notify("exit")
        with contextlib.suppress(Exception):
            self._writer.close()
        code = None
        if self.process is not None:
            try:
                code = await asyncio.wait_for(self.process.wait(), grace)
            except TimeoutError:
                self.process.kill()
                code = await self.process.wait()
        if self._reader_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reader_task, grace)
        return code

    # -- typed notifications ------------------------------------------------------------------

    def status_updates(self, session_id: str | None = None) -> Subscription[p.StatusNotification]:
        """``compact/status``: phase changes and keep-alives of running compactions."""
        return Subscription(self, p.NOTIFY_COMPACT_STATUS, p.StatusNotification, session_id)

    def threshold_crossings(
        self, session_id: str | None = None
    ) -> Subscription[p.ThresholdNotification]:
        """``tokens/threshold``: a session crossed warning / error / auto-compact / blocking."""
        return Subscription(self, p.NOTIFY_TOKENS_THRESHOLD, p.ThresholdNotification, session_id)

    def memory_changes(
        self, session_id: str | None = None
    ) -> Subscription[p.MemoryChangedNotification]:
        """``memory/changed``: a watched memory file (or read file) changed on disk."""
        return Subscription(self, p.NOTIFY_MEMORY_CHANGED, p.MemoryChangedNotification, session_id)

    def cache_breaks(self, session_id: str | None = None) -> Subscription[p.CacheBreak]:
        """``cache/break``: a prompt-cache break was detected, with its explanation."""
        return Subscription(self, p.NOTIFY_CACHE_BREAK, p.CacheBreak, session_id)

    def follow_updates(self, session_id: str | None = None) -> Subscription[p.FollowedNotification]:
        """``session/followed``: lines appended to a followed transcript were taken in."""
        return Subscription(self, p.NOTIFY_SESSION_FOLLOWED, p.FollowedNotification, session_id)

    # -- typed protocol methods (one per entry of ``protocol.REQUESTS``) ----------------------

    async def open_session(
        self,
        *,
        cwd: str,
        model: str | None = None,
        session_id: str | None = None,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        agent_kind: p.AgentKind | None = None,
        transcript_path: str | None = None,
        cache_safe_params: p.CacheSafeParams | None = None,
        api_context_management: bool | None = None,
        read_only: bool = False,
        follow: bool | None = None,
        auto_compact_tokens: int | None = None,
    ) -> p.OpenResult:
        params = p.OpenParams(
            cwd=cwd,
            model=model,
            session_id=session_id,
            context_window=context_window,
            max_output_tokens=max_output_tokens,
            agent_kind=agent_kind,
            transcript_path=transcript_path,
            cache_safe_params=cache_safe_params,
            api_context_management=api_context_management,
            read_only=read_only,
            follow=follow,
            auto_compact_tokens=auto_compact_tokens,
        )
        return await self.call(p.SESSION_OPEN, params, p.OpenResult)

    async def append(self, session_id: str, entries: list[dict[str, Any]]) -> p.AppendResult:
        return await self.call(
            p.SESSION_APPEND, p.AppendParams(session_id=session_id, entries=entries), p.AppendResult
        )

    async def messages(self, session_id: str) -> p.MessagesResult:
        return await self.call(p.SESSION_MESSAGES, _session(session_id), p.MessagesResult)

    async def list_sessions(self) -> p.ListResult:
        return await self.call(p.SESSION_LIST, p.NoParams(), p.ListResult)

    async def close_session(self, session_id: str) -> p.CloseResult:
        return await self.call(p.SESSION_CLOSE, _session(session_id), p.CloseResult)

    async def stats(self, session_id: str) -> p.StatsResult:
        return await self.call(p.SESSION_STATS, _session(session_id), p.StatsResult)

    async def tokens_status(self, session_id: str) -> p.TokenStatus:
        return await self.call(p.TOKENS_STATUS, _session(session_id), p.TokenStatus)

    async def tokens_breakdown(self, session_id: str) -> p.BreakdownResult:
        return await self.call(p.TOKENS_BREAKDOWN, _session(session_id), p.BreakdownResult)

    async def tokens_history(self, session_id: str) -> p.HistoryResult:
        return await self.call(p.TOKENS_HISTORY, _session(session_id), p.HistoryResult)

    async def compact_micro(
        self, session_id: str, strategy: Literal["count", "time", "cached"] | None = None
    ) -> p.MicroResult:
        return await self.call(
            p.COMPACT_MICRO, p.MicroParams(session_id=session_id, strategy=strategy), p.MicroResult
        )

    async def compact_full(
        self, session_id: str, custom_instructions: str | None = None
    ) -> p.CompactResult:
        params = p.FullParams(session_id=session_id, custom_instructions=custom_instructions)
        return await self.call(p.COMPACT_FULL, params, p.CompactResult)

    async def compact_partial(
        self,
        session_id: str,
        pivot_uuid: str,
        direction: Literal["from", "upTo"],
        custom_instructions: str | None = None,
    ) -> p.CompactResult:
        params = p.PartialParams(
            session_id=session_id,
            pivot_uuid=pivot_uuid,
            direction=direction,
            custom_instructions=custom_instructions,
        )
        return await self.call(p.COMPACT_PARTIAL, params, p.CompactResult)

    async def compact_auto(
        self, session_id: str, force: bool = False, pending_tokens: int | None = None
    ) -> p.AutoResult:
        params = p.AutoParams(
            session_id=session_id, force=True if force else None, pending_tokens=pending_tokens
        )
        return await self.call(p.COMPACT_AUTO, params, p.AutoResult)

    async def compact_preview(
        self,
        session_id: str,
        mechanism: Literal["micro", "full", "partial", "auto"] | None = None,
        pivot_uuid: str | None = None,
        direction: Literal["from", "upTo"] | None = None,
        force: bool = False,
        pending_tokens: int | None = None,
    ) -> p.PreviewResult:
        params = p.PreviewParams(
            session_id=session_id,
            mechanism=mechanism,
            pivot_uuid=pivot_uuid,
            direction=direction,
            force=True if force else None,
            pending_tokens=pending_tokens,
        )
        return await self.call(p.COMPACT_PREVIEW, params, p.PreviewResult)

    async def compact_undo(self, session_id: str) -> p.UndoResult:
        return await self.call(p.COMPACT_UNDO, _session(session_id), p.UndoResult)

    async def recall(
        self,
        session_id: str,
        query: str | None = None,
        uuids: list[str] | None = None,
        limit: int | None = None,
    ) -> p.RecallResult:
        params = p.RecallParams(session_id=session_id, query=query, uuids=uuids, limit=limit)
        return await self.call(p.RECALL_SEARCH, params, p.RecallResult)

    async def rehydrate(
        self, session_id: str, extras: p.RehydrationExtras | None = None
    ) -> p.AttachmentsResult:
        params = p.RehydrateParams(session_id=session_id, extras=extras)
        return await self.call(p.ATTACHMENTS_REHYDRATE, params, p.AttachmentsResult)

    async def pending_attachments(self, session_id: str) -> p.AttachmentsResult:
        return await self.call(p.ATTACHMENTS_PENDING, _session(session_id), p.AttachmentsResult)

    async def record_file(
        self,
        session_id: str,
        path: str,
        offset: int | None = None,
        limit: int | None = None,
        timestamp: float | None = None,
        content: str | None = None,
    ) -> p.FileStateResult:
        params = p.FileRecordParams(
            session_id=session_id,
            path=path,
            offset=offset,
            limit=limit,
            timestamp=timestamp,
            content=content,
        )
        return await self.call(p.FILESTATE_RECORD, params, p.FileStateResult)

    async def file_state(self, session_id: str) -> p.FileStateResult:
        return await self.call(p.FILESTATE_LIST, _session(session_id), p.FileStateResult)

    async def cache_before(
        self,
        session_id: str,
        query_source: str | None = None,
        system: str | list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
        model: str | None = None,
        betas: list[str] | None = None,
        thinking: dict[str, Any] | None = None,
        effort: str | None = None,
        cache_control: list[dict[str, Any]] | None = None,
        cache_edits: list[dict[str, Any]] | None = None,
        timestamp: float | None = None,
    ) -> p.CacheAck:
        params = p.CacheBeforeParams(
            session_id=session_id,
            query_source=query_source,
            system=system,
            tools=tools,
            model=model,
            betas=betas,
            thinking=thinking,
            effort=effort,
            cache_control=cache_control,
            cache_edits=cache_edits,
            timestamp=timestamp,
        )
        return await self.call(p.CACHE_BEFORE_REQUEST, params, p.CacheAck)

    async def cache_after(
        self,
        session_id: str,
        usage: dict[str, Any],
        query_source: str | None = None,
        timestamp: float | None = None,
    ) -> p.CacheAck:
        params = p.CacheAfterParams(
            session_id=session_id, usage=usage, query_source=query_source, timestamp=timestamp
        )
        return await self.call(p.CACHE_AFTER_RESPONSE, params, p.CacheAck)

    async def session_memory(self, session_id: str) -> p.SessionMemoryResult:
        return await self.call(p.SESSION_MEMORY_GET, _session(session_id), p.SessionMemoryResult)

    async def extract_session_memory(self, session_id: str) -> p.SessionMemoryResult:
        return await self.call(
            p.SESSION_MEMORY_EXTRACT, _session(session_id), p.SessionMemoryResult
        )

    async def claude_code_compact(
        self,
        transcript_path: str,
        custom_instructions: str | None = None,
        online: bool | None = None,
    ) -> p.ClaudeCodeCompactResult:
        params = p.ClaudeCodeCompactParams(
            transcript_path=transcript_path, custom_instructions=custom_instructions, online=online
        )
        return await self.call(p.CLAUDE_CODE_COMPACT, params, p.ClaudeCodeCompactResult)


def _session(session_id: str) -> p.SessionParams:
    return p.SessionParams(session_id=session_id)


def _drop_none(value: Any) -> Any:
    """Leave unset (None) fields out of the params, at every depth, as a hand-written
    request would; the daemon treats a missing field and its default the same."""
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


# The wire method of each typed method; every request of protocol v1 has one.
TYPED_METHODS: dict[str, str] = {
    p.SESSION_OPEN: "open_session",
    p.SESSION_APPEND: "append",
    p.SESSION_MESSAGES: "messages",
    p.SESSION_LIST: "list_sessions",
    p.SESSION_CLOSE: "close_session",
    p.SESSION_STATS: "stats",
    p.TOKENS_STATUS: "tokens_status",
    p.TOKENS_BREAKDOWN: "tokens_breakdown",
    p.TOKENS_HISTORY: "tokens_history",
    p.COMPACT_MICRO: "compact_micro",
    p.COMPACT_FULL: "compact_full",
    p.COMPACT_PARTIAL: "compact_partial",
    p.COMPACT_AUTO: "compact_auto",
    p.COMPACT_PREVIEW: "compact_preview",
    p.COMPACT_UNDO: "compact_undo",
    p.RECALL_SEARCH: "recall",
    p.ATTACHMENTS_REHYDRATE: "rehydrate",
    p.ATTACHMENTS_PENDING: "pending_attachments",
    p.FILESTATE_RECORD: "record_file",
    p.FILESTATE_LIST: "file_state",
    p.CACHE_BEFORE_REQUEST: "cache_before",
    p.CACHE_AFTER_RESPONSE: "cache_after",
    p.SESSION_MEMORY_GET: "session_memory",
    p.SESSION_MEMORY_EXTRACT: "extract_session_memory",
    p.CLAUDE_CODE_COMPACT: "claude_code_compact",
}

# The typed iterator of each server notification.
TYPED_NOTIFICATIONS: dict[str, str] = {
    p.NOTIFY_COMPACT_STATUS: "status_updates",
    p.NOTIFY_TOKENS_THRESHOLD: "threshold_crossings",
    p.NOTIFY_MEMORY_CHANGED: "memory_changes",
    p.NOTIFY_CACHE_BREAK: "cache_breaks",
    p.NOTIFY_SESSION_FOLLOWED: "follow_updates",
}


class Subscription(Generic[N]):
    """The notifications of one method, decoded into a Struct, as an async iterator.

    Listening starts when the subscription is created (so nothing sent between creating it and
    iterating is lost) and stops at ``close()`` or at the end of ``async with``. Iteration ends
    when the connection closes. With a ``session_id``, other sessions' notifications are
    skipped.
    """

    def __init__(
        self, client: Client, method: str, kind: type[N], session_id: str | None = None
    ) -> None:
        self.method = method
        self._client = client
        self._kind = kind
        self._session_id = session_id
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._entry: tuple[str | None, asyncio.Queue[tuple[str, Any]]] = (method, self._queue)
        self._active = True
        client._subscribers.append(self._entry)
        if client._closed.is_set():
            self._queue.put_nowait(("", None))

    def close(self) -> None:
        if self._active:
            self._active = False
            self._client._subscribers.remove(self._entry)

    async def __aenter__(self) -> Subscription[N]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __aiter__(self) -> Subscription[N]:
        return self

    def _decode(self, params: Any) -> N | None:
        note = msgspec.convert(params, self._kind)
        if self._session_id is not None and getattr(note, "session_id", None) != self._session_id:
            return None
        return note

    async def __anext__(self) -> N:
        while True:
            name, params = await self._queue.get()
            if not name:
                # Leave the end marker for any later call, then stop.
                self._queue.put_nowait(("", None))
                raise StopAsyncIteration
            note = self._decode(params)
            if note is not None:
                return note

    async def next(self, within: float | None = None) -> N:
        """The next notification; ``TimeoutError`` after ``within`` seconds without one."""
        return await asyncio.wait_for(self.__anext__(), within)

    def drain(self) -> list[N]:
        """Every notification received so far and not yet consumed, without waiting."""
        out: list[N] = []
        while not self._queue.empty():
            name, params = self._queue.get_nowait()
            if not name:
                self._queue.put_nowait(("", None))
                break
            note = self._decode(params)
            if note is not None:
                out.append(note)
        return out
