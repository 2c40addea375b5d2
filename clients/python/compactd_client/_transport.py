"""The transport under the client: JSON-RPC 2.0 with LSP framing over a pair of streams.

It spawns ``compactd serve`` or attaches to streams, writes requests and notifications, reads
frames in one task, matches answers to requests (an error answer becomes ``RpcError``, a
cancelled ``await`` sends ``$/cancelRequest``), accepts the daemon's own requests (work-done
progress), hands notifications to the subscribers' queues, and runs the LSP lifecycle
(``initialize`` / ``initialized``, ``shutdown`` / ``exit``). The typed methods sit on top of it
(``_methods.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

import msgspec

__all__ = ["RpcError", "Transport", "default_command"]

T = TypeVar("T", bound=msgspec.Struct)


def default_command() -> list[str]:
    """``compactd serve`` from this interpreter's environment when the daemon is installed
    there, else the ``compactd`` on PATH."""
    beside = Path(sys.executable).with_name("compactd")
    return [str(beside) if beside.exists() else "compactd", "serve"]

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


class Transport:
    """One connection to a daemon (see the module docstring)."""

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
    ) -> Self:
        argv = list(args) if args else default_command()
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
        initialization_options: msgspec.Struct | dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        stderr: Any = None,
        capabilities: dict[str, Any] | None = None,
    ) -> AsyncIterator[Self]:
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
        initialization_options: msgspec.Struct | dict[str, Any] | None = None,
        capabilities: dict[str, Any] | None = None,
        shutdown_on_exit: bool = True,
    ) -> AsyncIterator[Self]:
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
        options: msgspec.Struct | dict[str, Any],
        capabilities: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        if isinstance(options, msgspec.Struct):
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


def _drop_none(value: Any) -> Any:
    """Leave unset (None) fields out of the params, at every depth, as a hand-written
    request would; the daemon treats a missing field and its default the same."""
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value
