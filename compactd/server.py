"""pygls glue: lifecycle, framing, param decoding, error mapping. No behaviour lives here.

Each protocol method is routed to a handler in ``compactd.handlers``; this module decodes its
params with msgspec (a bad value is a -32602 error a person can act on), calls it, and encodes
the result with ``msgspec.to_builtins``. ``CompactdError`` becomes a JSON-RPC error whose
``data.code`` is stable. See docs/pygls.md for the pygls 2 behaviour worked around here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import uuid
from collections.abc import Callable, Generator
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

import anyio
import msgspec
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    LanguageServerProtocol,
    default_converter,
    lsp_method,
)

from compactd import __version__
from compactd import protocol as p
from compactd.app import App
from compactd.engine import cancellation
from compactd.engine.cancellation import Guard
from compactd.framing import DEFAULT_MAX_FRAME_BYTES, FrameError, FrameReader
from compactd.handlers import HANDLERS, Handler, invoke

log = logging.getLogger(__name__)

_json_encoder = msgspec.json.Encoder()

# How often the daemon checks that the editor that spawned it is still alive (seconds).
PARENT_POLL_INTERVAL = 1.0

# How long to wait for the client to accept a progress token before going on without one.
PROGRESS_CREATE_TIMEOUT = 5.0


def _converter() -> Any:
    """pygls' converter, except that params of our methods stay plain JSON."""
    conv = default_converter()  # type: ignore[no-untyped-call]

    def keep_params(obj: dict[str, Any], cls: type) -> Any:
        return cls(**obj)

    conv.register_structure_hook(JsonRPCRequestMessage, keep_params)
    conv.register_structure_hook(JsonRPCNotification, keep_params)
    return conv


def to_jsonrpc_error(err: p.CompactdError) -> JsonRpcException:
    return JsonRpcException(
        message=err.message, code=p.jsonrpc_number(err.code), data={"code": err.code, **err.data}
    )


def _error(code: str, message: str) -> JsonRpcException:
    return to_jsonrpc_error(p.CompactdError(code, message))


class CompactdProtocol(LanguageServerProtocol):
    _server: CompactdServer

    @lsp_method(lsp.INITIALIZE)
    def lsp_initialize(
        self, params: lsp.InitializeParams
    ) -> Generator[Any, Any, lsp.InitializeResult]:
        result: lsp.InitializeResult = yield from super().lsp_initialize(params)
        # Only what compactd serves: pygls' defaults (textDocumentSync, executeCommand,
        # workspaceFolders) would make editors send it every buffer they open.
        result.capabilities = lsp.ServerCapabilities(
            experimental={
                "compactd": {
                    "protocolVersion": p.PROTOCOL_VERSION,
                    "methods": sorted(HANDLERS),
                    "notifications": sorted(p.NOTIFICATIONS),
                }
            }
        )
        return result

    def _send_response(
        self,
        msg_id: Any,
        result: Any | None = None,
        error: lsp.ResponseError | None = None,
    ) -> None:
        # pygls answers initialize and shutdown; its errors get a data.code like every other.
        if error is not None and not (isinstance(error.data, dict) and "code" in error.data):
            error = lsp.ResponseError(
                code=error.code,
                message=error.message,
                data={"code": p.code_of_number(error.code)},
            )
        super()._send_response(msg_id, result, error)

    @lsp_method(lsp.EXIT)
    def lsp_exit(self, *args: Any) -> Generator[Any, Any, None]:
        # pygls calls sys.exit() here; we stop the read loop instead so cleanup runs.
        self._server.request_exit(0 if self._shutdown else 1)
        yield from ()


# Messages pygls handles itself: the lifecycle and the replies to compactd's own requests.
_PYGLS_REQUESTS = frozenset({lsp.INITIALIZE, lsp.SHUTDOWN})
_PYGLS_NOTIFICATIONS = frozenset(
    {lsp.INITIALIZED, lsp.EXIT, lsp.SET_TRACE, lsp.WINDOW_WORK_DONE_PROGRESS_CANCEL}
)
# Every method LSP defines as a notification: sent with an id, it is an invalid request.
_LSP_NOTIFICATIONS = frozenset(
    method for method, types in lsp.METHOD_TO_TYPES.items() if types[1] is None
) | frozenset(p.NOTIFICATIONS)


def _key(msg_id: Any) -> tuple[str, Any]:
    # 1 and "1" are different ids.
    return (type(msg_id).__name__, msg_id)


class CompactdServer(LanguageServer):
    """The daemon: pygls for the LSP lifecycle and progress, compactd's own request dispatch.

    Every request is answered exactly once with its own id. compactd's methods run as tasks of
    the server's task group under a cancellation ``Guard``; the lifecycle rules are LSP's:
    ``-32002`` before ``initialize`` (``shutdown`` included), ``-32600`` for a second
    ``initialize`` and for any request after ``shutdown``.
    """

    def __init__(self, data_dir: Path | None = None) -> None:
        super().__init__(
            "compactd",
            __version__,
            protocol_cls=CompactdProtocol,
            converter_factory=_converter,
        )
        self.default_data_dir = data_dir
        self.app: App | None = None
        self.exit_code: int | None = None
        self.task_group: anyio.abc.TaskGroup | None = None
        self._running: dict[tuple[str, Any], Guard] = {}
        self._idle = anyio.Event()
        self._idle.set()
        self._register_lifecycle()

    # -- lifecycle ----------------------------------------------------------------------------

    def request_exit(self, code: int) -> None:
        self.exit_code = code
        if self.task_group is not None:
            self.task_group.cancel_scope.cancel()

    def _register_lifecycle(self) -> None:
        @self.feature(lsp.INITIALIZE)
        def on_initialize(ls: CompactdServer, params: lsp.InitializeParams) -> None:
            raw = params.initialization_options or {}
            try:
                options = msgspec.convert(raw, p.InitializationOptions)
            except (msgspec.ValidationError, RecursionError) as exc:
                raise _error(
                    p.ErrorCode.INVALID_PARAMS, f"invalid initializationOptions: {exc}"
                ) from exc
            app = App(options, data_dir=ls.default_data_dir)
            app.notifier = ls._send_notification
            app.task_group = ls.task_group
            ls.app = app
            log.info("initialized; data dir %s", app.store.data_dir)

    def _send_notification(self, method: str, params: msgspec.Struct) -> None:
        self.protocol.notify(method, msgspec.to_builtins(params))

    @property
    def _shut_down(self) -> bool:
        return bool(self.protocol._shutdown)

    # -- incoming messages --------------------------------------------------------------------

    def _deliver(self, msg: dict[str, Any]) -> None:
        """Route one well-formed message; nothing in it can take the daemon down."""
        try:
            method = msg.get("method")
            if method is None:
                self._to_pygls(msg)  # a reply to one of compactd's requests (progress)
            elif "id" in msg:
                self._request(msg["id"], method, msg.get("params"))
            else:
                self._notification(method, msg.get("params"))
        except Exception:
            log.exception("failed to handle a message")
            if "id" in msg and "method" in msg:
                self._send_error(msg["id"], p.ErrorCode.INTERNAL, "internal error handling message")

    def _request(self, msg_id: Any, method: str, params: Any) -> None:
        if method == lsp.INITIALIZE:
            if self.app is not None:
                self._send_error(
                    msg_id, p.ErrorCode.INVALID_REQUEST, "the server is already initialized"
                )
            else:
                self._to_pygls({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
            return
        if self.app is None:
            self._send_error(
                msg_id,
                p.ErrorCode.SERVER_NOT_INITIALIZED,
                "the server is not initialized: send 'initialize' first",
            )
            return
        if self._shut_down:
            self._send_error(
                msg_id,
                p.ErrorCode.SHUTTING_DOWN,
                f"{method}: the server is shutting down; only 'exit' is accepted now",
            )
            return
        if method == lsp.SHUTDOWN:
            self._to_pygls({"jsonrpc": "2.0", "id": msg_id, "method": method})
            return
        handler = HANDLERS.get(method)
        if handler is None:
            if method in _LSP_NOTIFICATIONS:
                self._send_error(
                    msg_id,
                    p.ErrorCode.INVALID_REQUEST,
                    f"{method} is a notification: send it without an 'id'",
                )
            else:
                self._send_error(msg_id, p.ErrorCode.METHOD_NOT_FOUND, f"unknown method {method!r}")
            return
        key = _key(msg_id)
        if key in self._running:
            self._send_error(
                msg_id,
                p.ErrorCode.INVALID_REQUEST,
                f"a request with id {msg_id!r} is still running; ids must be unique",
            )
            return
        if self.task_group is None:
            self._send_error(msg_id, p.ErrorCode.INTERNAL, "the server is not serving")
            return
        guard = Guard()
        self._running[key] = guard
        self._idle = anyio.Event()
        self.task_group.start_soon(self._run, msg_id, method, handler, params, guard)

    def _notification(self, method: str, params: Any) -> None:
        if method == lsp.CANCEL_REQUEST:
            msg_id = params.get("id") if isinstance(params, dict) else None
            guard = self._running.get(_key(msg_id))
            if guard is None:
                log.debug("cancel of a request that is not running: %r", msg_id)
            elif not guard.cancel():
                log.info("request %r has written already; it completes", msg_id)
            return
        if method == lsp.EXIT:
            self.request_exit(0 if self._shut_down else 1)
            return
        if self.app is None and method != lsp.INITIALIZED:
            log.info("ignored %s before initialize", method)
            return
        if method in _PYGLS_NOTIFICATIONS:
            self._to_pygls({"jsonrpc": "2.0", "method": method, "params": params})
        elif method in HANDLERS:
            log.warning(
                "%s was sent as a notification (no id); ignored: nothing would answer", method
            )
        else:
            log.debug("ignored notification %s", method)

    def _to_pygls(self, msg: dict[str, Any]) -> None:
        try:
            structured = self.protocol.structure_message(msg)
        except JsonRpcException as exc:
            if "id" in msg and "method" in msg:
                self._send_error(
                    msg["id"],
                    p.ErrorCode.INVALID_PARAMS,
                    f"invalid params for {msg['method']}: {exc.message}",
                )
            else:
                log.warning("dropped a malformed %s", msg.get("method") or "reply")
            return
        self.protocol.handle_message(structured)

    # -- compactd's requests ------------------------------------------------------------------

    async def _run(
        self, msg_id: Any, method: str, handler: Handler, params: Any, guard: Guard
    ) -> None:
        token = cancellation.activate(guard)
        try:
            with guard.scope:
                result = await self._call(method, handler, params)
                self._send_result(msg_id, result)
                return
            self._send_error(
                msg_id, p.ErrorCode.CANCELLED, f"{method} was cancelled before it changed anything"
            )
        except p.CompactdError as err:
            self._send_error(msg_id, err.code, err.message, err.data)
        except Exception as exc:
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise  # the daemon is stopping
            # A bug must cost one request, not the daemon; the log keeps the traceback.
            log.exception("%s failed", method)
            self._send_error(
                msg_id, p.ErrorCode.INTERNAL, f"{method} failed: {type(exc).__name__}: {exc}"
            )
        finally:
            cancellation.deactivate(token)
            self._running.pop(_key(msg_id), None)
            if not self._running:
                self._idle.set()

    async def _call(self, method: str, handler: Handler, params: Any) -> Any:
        assert self.app is not None
        return await invoke(self.app, method, params, self.request_context(), handler)

    def request_context(self) -> RequestContext:
        return RequestContext(self)

    # -- outgoing messages --------------------------------------------------------------------

    def _write(self, message: dict[str, Any]) -> None:
        writer = self.protocol.writer
        if writer is None:
            return
        body = _json_encoder.encode(message)
        try:
            writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        except (BrokenPipeError, ConnectionResetError, ValueError):
            log.warning("the client closed its end of the connection")

    def _send_result(self, msg_id: Any, result: Any) -> None:
        self._write({"jsonrpc": "2.0", "id": msg_id, "result": result})

    def _send_error(
        self, msg_id: Any, code: str, message: str, data: dict[str, Any] | None = None
    ) -> None:
        # Written as a plain dict: JSON-RPC wants ``"id": null`` when the id could not be
        # read, and pygls' converter would drop a None id altogether.
        error = {
            "code": p.jsonrpc_number(code),
            "message": message,
            "data": {**(data or {}), "code": code},
        }
        try:
            self._write({"jsonrpc": "2.0", "id": msg_id, "error": error})
        except (TypeError, msgspec.EncodeError):
            error["data"] = {"code": code}
            self._write({"jsonrpc": "2.0", "id": msg_id, "error": error})

    def _reject(self, err: FrameError) -> None:
        log.warning("rejected a frame: %s", err.message)
        self._send_error(err.msg_id, err.code, err.message)

    # -- main loop ----------------------------------------------------------------------------

    def _max_frame(self) -> int:
        if self.app is not None and self.app.options.max_frame_bytes:
            return self.app.options.max_frame_bytes
        return DEFAULT_MAX_FRAME_BYTES

    async def serve(self, stdin: IO[bytes], stdout: IO[bytes]) -> int:
        """Serve until stdin closes, ``exit`` arrives, or the parent process dies."""
        self.protocol.set_writer(StdoutWriter(cast(BinaryIO, stdout)))
        source = await _stdin_source(stdin)
        reader = FrameReader(source, self._deliver, self._reject, self._max_frame)
        parent = os.getppid()
        async with anyio.create_task_group() as tg:
            self.task_group = tg
            tg.start_soon(self._watch_parent, parent)
            await reader.run(stopped=lambda: self.exit_code is not None)
            # End of input: answer what is still running, then stop.
            await self._idle.wait()
            tg.cancel_scope.cancel()
        log.info("frames: %d delivered, %d rejected", reader.delivered, reader.rejected)
        with anyio.CancelScope(shield=True):
            await self._close_all()
        return self.exit_code if self.exit_code is not None else 0

    async def _watch_parent(self, parent: int) -> None:
        while True:
            await anyio.sleep(PARENT_POLL_INTERVAL)
            pid = self.process_id
            if os.getppid() != parent or (pid is not None and not _alive(pid)):
                log.warning("the editor process went away; exiting")
                self.request_exit(0)
                return

    async def _close_all(self) -> None:
        if self.app is None:
            return
        for sid in list(self.app.sessions):
            try:
                await self.app.close_session(sid)
            except Exception:
                log.exception("error closing session %s", sid)
        self.app.release_all()  # whatever a failed close left held
        try:
            await self.app.summarizer.aclose()  # the SDK's HTTP connections
        except Exception:
            log.exception("error closing the summarizer's HTTP client")


class RequestContext:
    """What a handler may need besides params: progress tokens, client capabilities."""

    def __init__(self, server: CompactdServer) -> None:
        self.server = server

    @property
    def supports_work_done_progress(self) -> bool:
        try:
            window = self.server.client_capabilities.window
        except Exception:  # capabilities absent before initialize
            return False
        return bool(window and window.work_done_progress)

    async def begin_progress(self, title: str, message: str | None = None) -> WorkDone | None:
        """Server-initiated work-done progress (``window/workDoneProgress/create``, begin)."""
        if not self.supports_work_done_progress:
            return None
        progress = self.server.work_done_progress
        token = f"compactd-{uuid.uuid4()}"
        try:
            await asyncio.wait_for(progress.create_async(token), PROGRESS_CREATE_TIMEOUT)
        except Exception as exc:  # refused or unanswered: carry on without a progress bar
            log.info("the client did not create a progress token: %r", exc)
            progress.tokens.pop(token, None)
            return None
        progress.begin(
            token, lsp.WorkDoneProgressBegin(title=title, message=message, cancellable=True)
        )
        return WorkDone(progress, token)


class WorkDone:
    """One begun work-done progress; ``end`` sends the end and forgets the token (pygls keeps
    tokens forever otherwise, docs/pygls.md#progress-tokens)."""

    def __init__(self, progress: Any, token: str) -> None:
        self._progress = progress
        self._token = token
        self._ended = False

    def report(self, message: str, percentage: int | None = None) -> None:
        if not self._ended:
            self._progress.report(
                self._token, lsp.WorkDoneProgressReport(message=message, percentage=percentage)
            )

    def end(self, message: str) -> None:
        if self._ended:
            return
        self._ended = True
        self._progress.end(self._token, lsp.WorkDoneProgressEnd(message=message))
        self._progress.tokens.pop(self._token, None)

    def on_cancel(self, callback: Callable[[], None]) -> None:
        future = self._progress.tokens.get(self._token)
        if future is None:
            return

        def done(fut: Any) -> None:
            if fut.cancelled() and not self._ended:
                callback()

        future.add_done_callback(done)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _PipeSource:
    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._r = reader

    async def read(self, n: int) -> bytes:
        return await self._r.read(n)


class _ThreadSource:
    """Fallback for stdin that is not a pipe (a regular file): blocking reads in a thread."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._s = stream

    async def read(self, n: int) -> bytes:
        return await anyio.to_thread.run_sync(self._s.read, n, abandon_on_cancel=True)


async def _stdin_source(stdin: IO[bytes]) -> _PipeSource | _ThreadSource:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 16)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    except (ValueError, OSError):
        return _ThreadSource(stdin)
    return _PipeSource(reader)


def run_stdio(data_dir: Path | None = None) -> int:
    """Entry point of ``compactd serve``: stdout becomes the protocol channel only."""
    stdin = sys.stdin.buffer
    stdout = sys.stdout.buffer
    # Anything printed by accident goes to stderr, never into the protocol stream.
    sys.stdout = sys.stderr
    server = CompactdServer(data_dir=data_dir)
    try:
        code = asyncio.run(server.serve(stdin, stdout))
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        log.warning("the client closed the connection")
        code = 0
    # Sessions are closed and their files flushed by now. A worker thread may still sit in a
    # blocking read of a pipe the editor left open: do not wait for it.
    logging.shutdown()
    for stream in (stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
