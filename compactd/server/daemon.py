"""The daemon: LSP's lifecycle, the dispatch of compactd's requests and notifications, work-done
progress, the parent-process watch, and ``run_stdio``, the entry point of ``compactd serve``.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from pathlib import Path
from typing import IO, Any

import anyio
import cattrs
import msgspec
from lsprotocol import types as lsp
from pygls.protocol import default_converter

from compactd import __version__
from compactd import protocol as p
from compactd.app import App
from compactd.engine import cancellation
from compactd.engine.cancellation import Guard
from compactd.framing import DEFAULT_MAX_FRAME_BYTES, FrameError, FrameReader
from compactd.handlers import HANDLERS, Handler, invoke
from compactd.server.stdio import ClientRefused, Connection, StdinSource, WorkDone, request_key

log = logging.getLogger(__name__)

# pygls' LSP converter: LSP's camelCase names, optional fields left out when unset.
_lsp: cattrs.Converter = default_converter()  # type: ignore[no-untyped-call]

# How often the daemon checks that the editor that spawned it is still alive (seconds).
PARENT_POLL_INTERVAL = 1.0

# How long to wait for the client to accept a progress token before going on without one.
PROGRESS_CREATE_TIMEOUT = 5.0

# Every method LSP defines as a notification: sent with an id, it is an invalid request.
_LSP_NOTIFICATIONS = frozenset(
    method for method, types in lsp.METHOD_TO_TYPES.items() if types[1] is None
) | frozenset(p.NOTIFICATIONS)


class CompactdServer:
    """The daemon: LSP's lifecycle, compactd's request dispatch, work-done progress.

    Every request is answered exactly once with its own id. compactd's methods run as tasks of
    the server's task group under a cancellation ``Guard``; the lifecycle rules are LSP's:
    ``-32002`` before ``initialize`` (``shutdown`` included), ``-32600`` for a second
    ``initialize`` and for any request after ``shutdown``.
    """

    def __init__(self, data_dir: Path | None = None) -> None:
        self.default_data_dir = data_dir
        self.connection = Connection()
        self.app: App | None = None
        self.exit_code: int | None = None
        self.task_group: anyio.abc.TaskGroup | None = None
        # What ``initialize`` said: the client's capabilities, and the editor's process id (the
        # daemon exits when that process dies).
        self.client_capabilities: lsp.ClientCapabilities | None = None
        self.process_id: int | None = None
        self._shut_down = False
        self._running: dict[tuple[str, Any], Guard] = {}
        self._progress: dict[str, WorkDone] = {}
        self._idle = anyio.Event()
        self._idle.set()

    # -- lifecycle ----------------------------------------------------------------------------

    def request_exit(self, code: int) -> None:
        self.exit_code = code
        if self.task_group is not None:
            self.task_group.cancel_scope.cancel()

    def _initialize(self, msg_id: Any, params: Any) -> None:
        try:
            if not isinstance(params, dict):
                raise TypeError("initialize takes its params as an object")
            init = _lsp.structure(params, lsp.InitializeParams)
        except Exception as exc:
            detail = (
                "; ".join(cattrs.transform_error(exc))
                if isinstance(exc, cattrs.ClassValidationError)
                else str(exc)
            )
            self.connection.error(
                msg_id, p.ErrorCode.INVALID_PARAMS, f"invalid params for initialize: {detail}"
            )
            return
        raw = init.initialization_options or {}
        try:
            options = msgspec.convert(raw, p.InitializationOptions)
        except (msgspec.ValidationError, RecursionError) as exc:
            self.connection.error(
                msg_id, p.ErrorCode.INVALID_PARAMS, f"invalid initializationOptions: {exc}"
            )
            return
        try:
            app = App(options, data_dir=self.default_data_dir)
        except p.CompactdError as err:
            self.connection.error(msg_id, err.code, err.message, err.data)
            return
        app.notifier = self._notify
        app.task_group = self.task_group
        self.app = app
        self.client_capabilities = init.capabilities
        self.process_id = init.process_id
        log.info("initialized; data dir %s", app.store.data_dir)
        # Only what compactd serves: an editor told of text document sync or commands would
        # send every buffer it opens.
        result = lsp.InitializeResult(
            capabilities=lsp.ServerCapabilities(
                experimental={
                    "compactd": {
                        "protocolVersion": p.PROTOCOL_VERSION,
                        "methods": sorted(HANDLERS),
                        "notifications": sorted(p.NOTIFICATIONS),
                    }
                }
            ),
            server_info=lsp.ServerInfo(name="compactd", version=__version__),
        )
        self.connection.result(msg_id, _lsp.unstructure(result))

    def _notify(self, method: str, params: msgspec.Struct) -> None:
        self.connection.notify(method, msgspec.to_builtins(params))

    # -- incoming messages --------------------------------------------------------------------

    def _deliver(self, msg: dict[str, Any]) -> None:
        """Route one well-formed message; nothing in it can take the daemon down."""
        try:
            method = msg.get("method")
            if method is None:
                self.connection.reply(msg)  # a reply to one of compactd's requests (progress)
            elif "id" in msg:
                self._request(msg["id"], method, msg.get("params"))
            else:
                self._notification(method, msg.get("params"))
        except Exception:
            log.exception("failed to handle a message")
            if "id" in msg and "method" in msg:
                self.connection.error(
                    msg["id"], p.ErrorCode.INTERNAL, "internal error handling message"
                )

    def _request(self, msg_id: Any, method: str, params: Any) -> None:
        send_error = self.connection.error
        if method == lsp.INITIALIZE:
            if self.app is not None:
                send_error(msg_id, p.ErrorCode.INVALID_REQUEST, "the server is already initialized")
            else:
                self._initialize(msg_id, params)
            return
        if self.app is None:
            send_error(
                msg_id,
                p.ErrorCode.SERVER_NOT_INITIALIZED,
                "the server is not initialized: send 'initialize' first",
            )
            return
        if self._shut_down:
            send_error(
                msg_id,
                p.ErrorCode.SHUTTING_DOWN,
                f"{method}: the server is shutting down; only 'exit' is accepted now",
            )
            return
        if method == lsp.SHUTDOWN:
            self._shut_down = True
            if self.task_group is None:
                self.connection.result(msg_id, None)
            else:
                self.task_group.start_soon(self._shutdown, msg_id)
            return
        handler = HANDLERS.get(method)
        if handler is None:
            if method in _LSP_NOTIFICATIONS:
                send_error(
                    msg_id,
                    p.ErrorCode.INVALID_REQUEST,
                    f"{method} is a notification: send it without an 'id'",
                )
            else:
                send_error(msg_id, p.ErrorCode.METHOD_NOT_FOUND, f"unknown method {method!r}")
            return
        key = request_key(msg_id)
        if key in self._running:
            send_error(
                msg_id,
                p.ErrorCode.INVALID_REQUEST,
                f"a request with id {msg_id!r} is still running; ids must be unique",
            )
            return
        if self.task_group is None:
            send_error(msg_id, p.ErrorCode.INTERNAL, "the server is not serving")
            return
        guard = Guard()
        self._running[key] = guard
        self._idle = anyio.Event()
        self.task_group.start_soon(self._run, msg_id, method, handler, params, guard)

    def _notification(self, method: str, params: Any) -> None:
        if method == lsp.CANCEL_REQUEST:
            msg_id = params.get("id") if isinstance(params, dict) else None
            guard = self._running.get(request_key(msg_id))
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
        if method == lsp.WINDOW_WORK_DONE_PROGRESS_CANCEL:
            token = params.get("token") if isinstance(params, dict) else None
            progress = self._progress.get(token) if isinstance(token, str) else None
            if progress is None:
                log.info("cancel of a progress that is not running: %r", token)
            else:
                progress.cancelled()
        elif method in (lsp.INITIALIZED, lsp.SET_TRACE):
            log.debug("%s", method)  # nothing to do: compactd sends no trace
        elif method in HANDLERS:
            log.warning(
                "%s was sent as a notification (no id); ignored: nothing would answer", method
            )
        else:
            log.debug("ignored notification %s", method)

    # -- compactd's requests ------------------------------------------------------------------

    async def _run(
        self, msg_id: Any, method: str, handler: Handler, params: Any, guard: Guard
    ) -> None:
        token = cancellation.activate(guard)
        try:
            with guard.scope:
                result = await self._call(method, handler, params)
                self.connection.result(msg_id, result)
                return
            self.connection.error(
                msg_id, p.ErrorCode.CANCELLED, f"{method} was cancelled before it changed anything"
            )
        except p.CompactdError as err:
            self.connection.error(msg_id, err.code, err.message, err.data)
        except Exception as exc:
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise  # the daemon is stopping
            # A bug must cost one request, not the daemon; the log keeps the traceback.
            log.exception("%s failed", method)
            self.connection.error(
                msg_id, p.ErrorCode.INTERNAL, f"{method} failed: {type(exc).__name__}: {exc}"
            )
        finally:
            cancellation.deactivate(token)
            self._running.pop(request_key(msg_id), None)
            if not self._running:
                self._idle.set()

    async def _call(self, method: str, handler: Handler, params: Any) -> Any:
        assert self.app is not None
        return await invoke(self.app, method, params, self.request_context(), handler)

    def request_context(self) -> RequestContext:
        return RequestContext(self)

    # -- work-done progress -------------------------------------------------------------------

    @property
    def supports_work_done_progress(self) -> bool:
        window = self.client_capabilities.window if self.client_capabilities else None
        return bool(window and window.work_done_progress)

    async def begin_progress(self, title: str, message: str | None = None) -> WorkDone | None:
        """Server-initiated work-done progress (``window/workDoneProgress/create``, begin)."""
        if not self.supports_work_done_progress:
            return None
        token = f"compactd-{uuid.uuid4()}"
        try:
            with anyio.fail_after(PROGRESS_CREATE_TIMEOUT):
                await self.connection.request(
                    lsp.WINDOW_WORK_DONE_PROGRESS_CREATE, {"token": token}
                )
        except (ClientRefused, TimeoutError) as exc:  # carry on without a progress bar
            log.info("the client did not create a progress token: %r", exc)
            return None
        progress = WorkDone(self.connection, token, lambda: self._progress.pop(token, None))
        self._progress[token] = progress
        progress.send(lsp.WorkDoneProgressBegin(title=title, message=message, cancellable=True))
        return progress

    def _reject(self, err: FrameError) -> None:
        log.warning("rejected a frame: %s", err.message)
        self.connection.error(err.msg_id, err.code, err.message)

    # -- main loop ----------------------------------------------------------------------------

    def _max_frame(self) -> int:
        if self.app is not None and self.app.options.max_frame_bytes:
            return self.app.options.max_frame_bytes
        return DEFAULT_MAX_FRAME_BYTES

    async def serve(self, stdin: IO[bytes], stdout: IO[bytes]) -> int:
        """Serve until stdin closes, ``exit`` arrives, or the parent process dies."""
        self.connection.attach(stdout)
        source = StdinSource(stdin)
        reader = FrameReader(source, self._deliver, self._reject, self._max_frame)
        parent = os.getppid()
        try:
            async with anyio.create_task_group() as tg:
                self.task_group = tg
                tg.start_soon(self._watch_parent, parent)
                await reader.run(stopped=lambda: self.exit_code is not None)
                # End of input: answer what is still running, then stop.
                await self._idle.wait()
                tg.cancel_scope.cancel()
        finally:
            source.close()
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

    async def _shutdown(self, msg_id: Any) -> None:
        """Answer ``shutdown`` and close every session, letting its lock go, once no request
        runs: before the answer when none runs, so that the client knows another daemon can
        take them at once (docs/durability.md#ownership); else the answer goes first."""
        if not self._idle.is_set():
            self.connection.result(msg_id, None)
            await self._idle.wait()
            await self._close_sessions()
            return
        with anyio.CancelScope(shield=True):
            await self._close_sessions()
        self.connection.result(msg_id, None)

    async def _close_all(self) -> None:
        await self._close_sessions()
        if self.app is None:
            return
        try:
            await self.app.summarizer.aclose()  # the SDK's HTTP connections
        except Exception:
            log.exception("error closing the summarizer's HTTP client")

    async def _close_sessions(self) -> None:
        if self.app is None:
            return
        for sid in list(self.app.sessions):
            try:
                await self.app.close_session(sid)
            except Exception:
                log.exception("error closing session %s", sid)
        self.app.release_all()  # whatever a failed close left held


class RequestContext:
    """What a handler may need besides params: progress tokens, client capabilities."""

    def __init__(self, server: CompactdServer) -> None:
        self.server = server

    @property
    def supports_work_done_progress(self) -> bool:
        return self.server.supports_work_done_progress

    async def begin_progress(self, title: str, message: str | None = None) -> WorkDone | None:
        return await self.server.begin_progress(title, message)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_stdio(data_dir: Path | None = None) -> int:
    """Entry point of ``compactd serve``: stdout becomes the protocol channel only."""
    stdin = sys.stdin.buffer
    stdout = sys.stdout.buffer
    # Anything printed by accident goes to stderr, never into the protocol stream.
    sys.stdout = sys.stderr
    server = CompactdServer(data_dir=data_dir)
    try:
        code = anyio.run(server.serve, stdin, stdout)
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        log.warning("the client closed the connection")
        code = 0
    # Sessions are closed and their files flushed by now. A worker thread may still sit in a
    # blocking read of a stdin that is a file or a device: do not wait for it.
    logging.shutdown()
    for stream in (stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
