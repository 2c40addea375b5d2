"""The daemon's application in the test's own process: the same requests, no wire.

Most end-to-end tests check what a request does, not how it travels; spawning a daemon for each
costs a second of CPU (its imports) while the test itself takes milliseconds. ``InProcClient``
is the e2e ``Client`` (same typed methods, ``request``, ``subscribe`` and typed subscriptions)
over an ``App`` on a data dir: every request goes through ``compactd.handlers.invoke`` with
its params as JSON, exactly as the server hands them over, its result comes back as JSON, and an
error comes back as the ``RpcError`` the wire would carry. Notifications the app sends reach the
subscribers as JSON too. The summarizer is the real SDK over real HTTP (point it at the
emulator with ``tests.helpers.emulator_options``); files and watching are real.

What only the wire shows (framing, the LSP lifecycle, work-done progress, a kill of the
process, stdout holding nothing but frames) stays with the real daemon (``tests/conftest.py``
``spawn``). The harness's context has no work-done progress, as a client without the
capability; ``$/cancelRequest`` is honoured the way the server honours it (a ``Guard`` per
request), so a test that cancels sees the same answer.

Only ``App`` and ``handlers.invoke`` are used here, nothing inside the engine, so the harness
holds while the engine's internals change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import msgspec
from compactd_client import Client, RpcError

from compactd import protocol as p
from compactd.app import App
from compactd.engine import cancellation
from compactd.engine.cancellation import Guard
from compactd.engine.progress import WorkDone
from compactd.handlers import invoke

log = logging.getLogger(__name__)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def _json(value: Any) -> Any:
    """``value`` as it comes out of the other side of the wire (tuples become lists...)."""
    return _decoder.decode(_encoder.encode(value))


class NoProgress:
    """The handler context of a client without work-done progress."""

    @property
    def supports_work_done_progress(self) -> bool:
        return False

    async def begin_progress(self, title: str, message: str | None = None) -> WorkDone | None:
        return None


class InProcClient(Client):
    """A ``Client`` whose daemon is an ``App`` in this process (see the module docstring)."""

    def __init__(self, app: App) -> None:
        super().__init__(None, None)  # type: ignore[arg-type]  # no streams: no wire
        self.app = app
        self.loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._guards: dict[int | str, Guard] = {}
        self._stop = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self.server_info = {"name": "compactd (in process)"}
        app.notifier = self._on_notification

    # -- the app's side -------------------------------------------------------------------------

    def _on_notification(self, method: str, params: msgspec.Struct) -> None:
        msg = {"jsonrpc": "2.0", "method": method, "params": _json(msgspec.to_builtins(params))}
        if threading.get_ident() == self._loop_thread:
            self._dispatch(msg)
        else:  # sent from a worker thread: hand it to the loop, in order
            self.loop.call_soon_threadsafe(self._dispatch, msg)

    async def start_app(self) -> None:
        """Run the app's task group (background work) in a task of its own, so that the
        harness can be started and stopped from different tasks (pytest fixtures are)."""
        started = asyncio.Event()

        async def run() -> None:
            async with anyio.create_task_group() as tg:
                self.app.task_group = tg
                started.set()
                await self._stop.wait()
                tg.cancel_scope.cancel()

        self._runner = self.loop.create_task(run())
        await started.wait()

    # -- requests -------------------------------------------------------------------------------

    async def _run(self, msg_id: int | str, method: str, params: Any) -> Any:
        """One request as the server runs it: under a guard, answered once, errors as the
        wire carries them."""
        if self._closed.is_set():
            raise ConnectionError("the daemon closed the connection")
        guard = Guard()
        self._guards[msg_id] = guard
        token = cancellation.activate(guard)
        try:
            with guard.scope:
                return _json(await invoke(self.app, method, _json(params), NoProgress()))
            message = f"{method} was cancelled before it changed anything"
            raise _rpc_error(p.ErrorCode.CANCELLED, message, None)
        except p.CompactdError as err:
            raise _rpc_error(err.code, err.message, err.data) from None
        except RpcError:
            raise
        except Exception as exc:
            # The daemon answers a bug with internalError and lives on; so does the harness,
            # with the traceback in the log.
            log.exception("%s failed", method)
            message = f"{method} failed: {type(exc).__name__}: {exc}"
            raise _rpc_error(p.ErrorCode.INTERNAL, message, None) from exc
        finally:
            cancellation.deactivate(token)
            self._guards.pop(msg_id, None)

    async def request(self, method: str, params: Any = None) -> Any:
        return await self._run(next(self._ids), method, params)

    async def request_with_id(self, method: str, params: Any) -> tuple[int, asyncio.Future[Any]]:
        msg_id = next(self._ids)
        task = self.loop.create_task(self._run(msg_id, method, params))
        await asyncio.sleep(0)  # the request starts, as one written to a pipe would be read
        return msg_id, task

    async def notify(self, method: str, params: Any = None) -> None:
        if method == "$/cancelRequest" and isinstance(params, dict):
            guard = self._guards.get(params.get("id"))  # type: ignore[arg-type]
            if guard is not None:
                guard.cancel()

    # -- lifecycle ------------------------------------------------------------------------------

    async def initialize(
        self,
        options: p.InitializationOptions | dict[str, Any],
        capabilities: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        raise NotImplementedError("an in-process client is initialized by inproc()")

    async def shutdown(self, grace: float = 10.0) -> int | None:
        """What the server does at the end of its input: close every session, then the
        summarizer's HTTP client, then stop the background work."""
        if self._closed.is_set():
            return 0
        for sid in list(self.app.sessions):
            try:
                await self.app.close_session(sid)
            except Exception:
                log.exception("error closing session %s", sid)
        try:
            await self.app.summarizer.aclose()
        finally:
            self._stop.set()
            if self._runner is not None:
                await self._runner
            self._closed.set()
            for _, queue in self._subscribers:
                queue.put_nowait(("", None))
        return 0


def _rpc_error(code: str, message: str, data: dict[str, Any] | None) -> RpcError:
    """The error the client reads off the wire for a ``CompactdError``."""
    return RpcError(p.jsonrpc_number(code), message, _json({**(data or {}), "code": code}))


@contextlib.asynccontextmanager
async def inproc(
    data_dir: Path,
    options: dict[str, Any] | None = None,
    *,
    env: dict[str, str] | None = None,
) -> AsyncIterator[InProcClient]:
    """An in-process daemon on ``data_dir`` with ``options`` (initializationOptions as JSON);
    ``env`` adds to the environment, as a spawned daemon's would."""
    try:
        decoded = msgspec.convert(_json(options or {}), p.InitializationOptions)
    except msgspec.ValidationError as exc:  # the wire answers this to initialize
        raise _rpc_error(
            p.ErrorCode.INVALID_PARAMS, f"invalid initializationOptions: {exc}", None
        ) from exc
    try:
        app = App(decoded, base_env={**os.environ, **(env or {})}, data_dir=data_dir)
    except p.CompactdError as err:  # options the app refuses: the answer to initialize
        raise _rpc_error(err.code, err.message, err.data) from None
    client = InProcClient(app)
    await client.start_app()
    try:
        yield client
    finally:
        await client.shutdown()


InProc = Callable[..., AbstractAsyncContextManager[InProcClient]]
