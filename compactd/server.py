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
from collections.abc import Awaitable, Callable, Generator
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
from compactd.framing import DEFAULT_MAX_FRAME_BYTES, FrameError, read_frames
from compactd.handlers import HANDLERS, Handler

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
        result.capabilities.experimental = {
            "compactd": {
                "protocolVersion": p.PROTOCOL_VERSION,
                "methods": sorted(HANDLERS),
                "notifications": sorted(p.NOTIFICATIONS),
            }
        }
        return result

    def _send_response(
        self,
        msg_id: Any,
        result: Any | None = None,
        error: lsp.ResponseError | None = None,
    ) -> None:
        # Results of compactd's methods are plain JSON already (msgspec.to_builtins): encode
        # them with msgspec instead of pygls' cattrs + json path, which costs hundreds of ms on
        # a large session/messages answer. LSP's own results (attrs objects) go the usual way.
        if (
            error is None
            and self.writer is not None
            and isinstance(result, (dict, list, type(None)))
        ):
            self._result_types.pop(msg_id, None)
            body = _json_encoder.encode({"jsonrpc": "2.0", "id": msg_id, "result": result})
            self.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            return
        super()._send_response(msg_id, result, error)

    @lsp_method(lsp.EXIT)
    def lsp_exit(self, *args: Any) -> Generator[Any, Any, None]:
        # pygls calls sys.exit() here; we stop the read loop instead so cleanup runs.
        self._server.request_exit(0 if self._shutdown else 1)
        yield from ()


class CompactdServer(LanguageServer):
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
        self._register_handlers()
        self._register_lifecycle()

    # -- lifecycle ----------------------------------------------------------------------------

    def request_exit(self, code: int) -> None:
        self.exit_code = code

    def _register_lifecycle(self) -> None:
        @self.feature(lsp.INITIALIZE)
        def on_initialize(ls: CompactdServer, params: lsp.InitializeParams) -> None:
            raw = params.initialization_options or {}
            try:
                options = msgspec.convert(raw, p.InitializationOptions)
            except msgspec.ValidationError as exc:
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

    # -- requests -----------------------------------------------------------------------------

    def _register_handlers(self) -> None:
        for method, handler in HANDLERS.items():
            params_type = p.REQUESTS[method][0]
            self.feature(method)(self._wrap(method, params_type, handler))

    def _wrap(
        self, method: str, params_type: type[msgspec.Struct], handler: Handler
    ) -> Callable[[CompactdServer, Any], Awaitable[Any]]:
        async def run(ls: CompactdServer, params: Any) -> Any:
            app = ls.app
            if app is None:
                raise _error(
                    p.ErrorCode.SERVER_NOT_INITIALIZED,
                    "the server is not initialized: send 'initialize' first",
                )
            if params is None:
                params = {}
            if not isinstance(params, dict):
                raise _error(p.ErrorCode.INVALID_PARAMS, f"{method} takes its params as an object")
            try:
                decoded = msgspec.convert(params, params_type)
            except RecursionError as exc:
                raise _error(
                    p.ErrorCode.INVALID_PARAMS, f"invalid params for {method}: nested too deeply"
                ) from exc
            except msgspec.ValidationError as exc:
                raise _error(
                    p.ErrorCode.INVALID_PARAMS, f"invalid params for {method}: {exc}"
                ) from exc
            try:
                result = await handler(app, decoded, ls.request_context())
            except p.CompactdError as err:
                raise to_jsonrpc_error(err) from err
            except (JsonRpcException, asyncio.CancelledError):
                raise
            except Exception as exc:
                # A bug must cost one request, not the daemon; the log keeps the traceback.
                log.exception("%s failed", method)
                raise _error(
                    p.ErrorCode.INTERNAL, f"{method} failed: {type(exc).__name__}: {exc}"
                ) from exc
            return msgspec.to_builtins(result)

        run.__name__ = f"handle_{method.replace('/', '_')}"
        return run

    def request_context(self) -> RequestContext:
        return RequestContext(self)

    # -- main loop ----------------------------------------------------------------------------

    def _reject(self, err: FrameError) -> None:
        log.warning("rejected a frame: %s", err.message)
        # Written as a plain dict: JSON-RPC wants ``"id": null`` when the id could not be
        # read, and pygls' converter would drop a None id altogether.
        self.protocol._send_data(
            {
                "jsonrpc": "2.0",
                "id": err.msg_id,
                "error": {
                    "code": p.jsonrpc_number(err.code),
                    "message": err.message,
                    "data": {"code": err.code},
                },
            }
        )

    def _deliver(self, msg: dict[str, Any]) -> None:
        # One message must never take the daemon down, whatever it contains.
        try:
            self._deliver_one(msg)
        except RecursionError:
            self._answer_error(msg, p.ErrorCode.INVALID_REQUEST, "message nested too deeply")
        except Exception:
            log.exception("failed to handle a message")
            self._answer_error(msg, p.ErrorCode.INTERNAL, "internal error handling message")

    def _answer_error(self, msg: dict[str, Any], code: str, text: str) -> None:
        if "id" not in msg or "method" not in msg:
            return
        try:
            self.protocol._send_response(msg["id"], error=_error(code, text).to_response_error())
        except Exception:
            log.exception("failed to send an error response")

    def _deliver_one(self, msg: dict[str, Any]) -> None:
        try:
            structured = self.protocol.structure_message(msg)
        except JsonRpcException as exc:
            if "id" in msg and "method" in msg:
                self.protocol._send_response(
                    msg["id"],
                    error=lsp.ResponseError(
                        code=exc.code,
                        message=f"invalid params for {msg.get('method')}: {exc.message}",
                        data={"code": p.ErrorCode.INVALID_PARAMS},
                    ),
                )
            return
        self.protocol.handle_message(structured)

    def _max_frame(self) -> int:
        if self.app is not None and self.app.options.max_frame_bytes:
            return self.app.options.max_frame_bytes
        return DEFAULT_MAX_FRAME_BYTES

    async def serve(self, stdin: IO[bytes], stdout: IO[bytes]) -> int:
        """Serve until stdin closes, ``exit`` arrives, or the parent process dies."""
        self.protocol.set_writer(StdoutWriter(cast(BinaryIO, stdout)))
        reader = await _stdin_reader(stdin)
        parent = os.getppid()
        async with anyio.create_task_group() as tg:
            self.task_group = tg
            tg.start_soon(self._watch_parent, parent)
            await read_frames(
                reader,
                self._deliver,
                self._reject,
                self._max_frame,
                stopped=lambda: self.exit_code is not None,
            )
            tg.cancel_scope.cancel()
        await self._close_all()
        return self.exit_code if self.exit_code is not None else 0

    async def _watch_parent(self, parent: int) -> None:
        while True:
            await anyio.sleep(PARENT_POLL_INTERVAL)
            pid = self.process_id
            if os.getppid() != parent or (pid is not None and not _alive(pid)):
                log.warning("the editor process went away; exiting")
                self.exit_code = 0
                _close_stdin()
                return

    async def _close_all(self) -> None:
        if self.app is None:
            return
        for sid in list(self.app.sessions):
            try:
                await self.app.close_session(sid)
            except Exception:
                log.exception("error closing session %s", sid)
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


def _close_stdin() -> None:
    try:
        os.close(0)
    except OSError:
        pass


class _PipeReader:
    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._r = reader

    async def readline(self) -> bytes:
        try:
            return await self._r.readline()
        except ValueError:
            # Line longer than the buffer limit: report it as over-long to the framer.
            return b"x" * (1 << 14) + b"\n"

    async def readexactly(self, n: int) -> bytes:
        try:
            return await self._r.readexactly(n)
        except asyncio.IncompleteReadError as exc:
            return exc.partial


class _ThreadReader:
    """Fallback for stdin that is not a pipe (a regular file): blocking reads in a thread."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._s = stream

    async def readline(self) -> bytes:
        return await anyio.to_thread.run_sync(self._s.readline, abandon_on_cancel=True)

    async def readexactly(self, n: int) -> bytes:
        return await anyio.to_thread.run_sync(self._s.read, n, abandon_on_cancel=True)


async def _stdin_reader(stdin: IO[bytes]) -> _PipeReader | _ThreadReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 16)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    except (ValueError, OSError):
        return _ThreadReader(stdin)
    return _PipeReader(reader)


def run_stdio(data_dir: Path | None = None) -> int:
    """Entry point of ``compactd serve``: stdout becomes the protocol channel only."""
    stdin = sys.stdin.buffer
    stdout = sys.stdout.buffer
    # Anything printed by accident goes to stderr, never into the protocol stream.
    sys.stdout = sys.stderr
    server = CompactdServer(data_dir=data_dir)
    try:
        return asyncio.run(server.serve(stdin, stdout))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        log.warning("the client closed the connection")
        return 0
