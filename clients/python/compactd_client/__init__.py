"""A typed asyncio client for the compactd daemon.

It spawns ``compactd serve`` (or talks over any pair of streams), speaks JSON-RPC 2.0 with LSP
framing, decodes results into the Structs of ``compactd.protocol``, and yields server
notifications as async iterators::

    async with Client.spawn() as client:
        opened = await client.open_session(cwd=".", model="claude-sonnet-4-5")
        status = await client.tokens_status(opened.session_id)
        async for note in client.notifications(protocol.NOTIFY_COMPACT_STATUS):
            ...
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import msgspec

from compactd import protocol as p

__all__ = ["Client", "RpcError"]

T = TypeVar("T", bound=msgspec.Struct)

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
        initialization_options: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        stderr: Any = None,
        capabilities: dict[str, Any] | None = None,
    ) -> AsyncIterator[Client]:
        client = await cls.spawn_process(args, env=env, stderr=stderr)
        try:
            await client.initialize(initialization_options or {}, capabilities=capabilities)
            yield client
        finally:
            await client.shutdown()

    def start(self) -> None:
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())

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
        raw = params if isinstance(params, dict) else msgspec.to_builtins(params)
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
        self, options: dict[str, Any], capabilities: dict[str, Any] | None = None
    ) -> dict[str, Any]:
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

    # -- typed protocol methods ---------------------------------------------------------------

    async def open_session(self, **fields: Any) -> p.OpenResult:
        return await self.call(p.SESSION_OPEN, p.OpenParams(**fields), p.OpenResult)

    async def append(self, session_id: str, entries: list[dict[str, Any]]) -> p.AppendResult:
        return await self.call(
            p.SESSION_APPEND, {"sessionId": session_id, "entries": entries}, p.AppendResult
        )

    async def messages(self, session_id: str) -> p.MessagesResult:
        return await self.call(p.SESSION_MESSAGES, {"sessionId": session_id}, p.MessagesResult)

    async def list_sessions(self) -> p.ListResult:
        return await self.call(p.SESSION_LIST, {}, p.ListResult)

    async def close_session(self, session_id: str) -> p.CloseResult:
        return await self.call(p.SESSION_CLOSE, {"sessionId": session_id}, p.CloseResult)

    async def stats(self, session_id: str) -> p.StatsResult:
        return await self.call(p.SESSION_STATS, {"sessionId": session_id}, p.StatsResult)

    async def tokens_status(self, session_id: str) -> p.TokenStatus:
        return await self.call(p.TOKENS_STATUS, {"sessionId": session_id}, p.TokenStatus)

    async def tokens_breakdown(self, session_id: str) -> p.BreakdownResult:
        return await self.call(p.TOKENS_BREAKDOWN, {"sessionId": session_id}, p.BreakdownResult)

    async def compact_micro(self, session_id: str, strategy: str | None = None) -> p.MicroResult:
        params: dict[str, Any] = {"sessionId": session_id}
        if strategy:
            params["strategy"] = strategy
        return await self.call(p.COMPACT_MICRO, params, p.MicroResult)

    async def compact_full(
        self, session_id: str, custom_instructions: str | None = None
    ) -> p.CompactResult:
        params: dict[str, Any] = {"sessionId": session_id}
        if custom_instructions:
            params["customInstructions"] = custom_instructions
        return await self.call(p.COMPACT_FULL, params, p.CompactResult)

    async def compact_partial(
        self,
        session_id: str,
        pivot_uuid: str,
        direction: str,
        custom_instructions: str | None = None,
    ) -> p.CompactResult:
        params: dict[str, Any] = {
            "sessionId": session_id,
            "pivotUuid": pivot_uuid,
            "direction": direction,
        }
        if custom_instructions:
            params["customInstructions"] = custom_instructions
        return await self.call(p.COMPACT_PARTIAL, params, p.CompactResult)

    async def compact_auto(self, session_id: str, force: bool = False) -> p.AutoResult:
        params: dict[str, Any] = {"sessionId": session_id}
        if force:
            params["force"] = True
        return await self.call(p.COMPACT_AUTO, params, p.AutoResult)

    async def compact_preview(self, session_id: str, **fields: Any) -> p.PreviewResult:
        return await self.call(
            p.COMPACT_PREVIEW, p.PreviewParams(session_id=session_id, **fields), p.PreviewResult
        )

    async def compact_undo(self, session_id: str) -> p.UndoResult:
        return await self.call(p.COMPACT_UNDO, {"sessionId": session_id}, p.UndoResult)

    async def recall(self, session_id: str, **fields: Any) -> p.RecallResult:
        return await self.call(
            p.RECALL_SEARCH, p.RecallParams(session_id=session_id, **fields), p.RecallResult
        )

    async def rehydrate(self, session_id: str) -> p.AttachmentsResult:
        return await self.call(
            p.ATTACHMENTS_REHYDRATE, {"sessionId": session_id}, p.AttachmentsResult
        )

    async def pending_attachments(self, session_id: str) -> p.AttachmentsResult:
        return await self.call(
            p.ATTACHMENTS_PENDING, {"sessionId": session_id}, p.AttachmentsResult
        )

    async def record_file(self, session_id: str, path: str, **fields: Any) -> p.FileStateResult:
        return await self.call(
            p.FILESTATE_RECORD,
            p.FileRecordParams(session_id=session_id, path=path, **fields),
            p.FileStateResult,
        )

    async def file_state(self, session_id: str) -> p.FileStateResult:
        return await self.call(p.FILESTATE_LIST, {"sessionId": session_id}, p.FileStateResult)

    async def cache_before(self, session_id: str, **fields: Any) -> p.CacheAck:
        return await self.call(
            p.CACHE_BEFORE_REQUEST,
            p.CacheBeforeParams(session_id=session_id, **fields),
            p.CacheAck,
        )

    async def cache_after(
        self, session_id: str, usage: dict[str, Any], **fields: Any
    ) -> p.CacheAck:
        return await self.call(
            p.CACHE_AFTER_RESPONSE,
            p.CacheAfterParams(session_id=session_id, usage=usage, **fields),
            p.CacheAck,
        )

    async def session_memory(self, session_id: str) -> p.SessionMemoryResult:
        return await self.call(
            p.SESSION_MEMORY_GET, {"sessionId": session_id}, p.SessionMemoryResult
        )

    async def extract_session_memory(self, session_id: str) -> p.SessionMemoryResult:
        return await self.call(
            p.SESSION_MEMORY_EXTRACT, {"sessionId": session_id}, p.SessionMemoryResult
        )
