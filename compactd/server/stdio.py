"""The daemon's two ends of stdio: ``Connection``, the one writer of stdout (every frame goes
through it, and the replies to compactd's own requests are matched there), ``WorkDone``, a
work-done progress sent through it, and ``StdinSource``, stdin read without blocking the
event loop for the frame reader (``compactd/framing.py``).
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from typing import IO, Any

import anyio
import cattrs
import msgspec
from lsprotocol import types as lsp
from pygls.protocol import default_converter

from compactd import protocol as p
from compactd.core.outbound import bounded, redact_bytes

__all__ = ["ClientRefused", "Connection", "StdinSource", "WorkDone", "request_key"]

log = logging.getLogger(__name__)

_json_encoder = msgspec.json.Encoder()
# pygls' LSP converter: LSP's camelCase names, optional fields left out when unset.
_lsp: cattrs.Converter = default_converter()  # type: ignore[no-untyped-call]


def request_key(msg_id: Any) -> tuple[str, Any]:
    """A request id as a dict key."""
    # 1 and "1" are different ids.
    return (type(msg_id).__name__, msg_id)


class ClientRefused(Exception):
    """The client answered one of compactd's requests with an error."""


class _Pending:
    """A request compactd sent to the client, waiting for its reply."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: Any = None
        self.error: Any = None


class Connection:
    """The one writer of stdout: every frame the daemon sends goes through ``send``.

    Writes are synchronous and whole, so frames never interleave; the replies to the requests
    compactd sends the client (``window/workDoneProgress/create``) are matched here by id.
    """

    def __init__(self, out: IO[bytes] | None = None) -> None:
        self._out = out
        self._pending: dict[tuple[str, Any], _Pending] = {}
        self._sent = 0

    def attach(self, out: IO[bytes]) -> None:
        self._out = out

    def send(self, message: dict[str, Any]) -> None:
        if self._out is None:
            return
        # The keys compactd was given never leave it, whatever a frame quotes (core/outbound).
        body = redact_bytes(_json_encoder.encode(message))
        try:
            self._out.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            self._out.flush()
        except (BrokenPipeError, ConnectionResetError, ValueError):
            log.warning("the client closed its end of the connection")

    def result(self, msg_id: Any, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    def error(
        self, msg_id: Any, code: str, message: str, data: dict[str, Any] | None = None
    ) -> None:
        # JSON-RPC wants ``"id": null`` when the id could not be read: the key is always set.
        error = {
            "code": p.jsonrpc_number(code),
            # An error quotes the request or an upstream: anything shaped like a key goes too,
            # and it is bounded whatever it quotes (docs/secrets.md#bounded-echoes).
            "message": bounded(message),
            "data": {**(data or {}), "code": code},
        }
        try:
            self.send({"jsonrpc": "2.0", "id": msg_id, "error": error})
        except (TypeError, msgspec.EncodeError):
            error["data"] = {"code": code}
            self.send({"jsonrpc": "2.0", "id": msg_id, "error": error})

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params: Any) -> Any:
        """Send a request to the client and wait for its result (``ClientRefused`` on an error
        reply); the caller bounds the wait."""
        self._sent += 1
        msg_id = f"compactd-{self._sent}"
        pending = _Pending()
        self._pending[request_key(msg_id)] = pending
        try:
            self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
            await pending.done.wait()
        finally:
            self._pending.pop(request_key(msg_id), None)
        if pending.error is not None:
            raise ClientRefused(pending.error)
        return pending.result

    def reply(self, msg: dict[str, Any]) -> None:
        """A response from the client: the answer to one of ``request``'s."""
        pending = self._pending.get(request_key(msg.get("id")))
        if pending is None:
            log.info("a reply to no request of compactd's (id %r)", msg.get("id"))
            return
        pending.result = msg.get("result")
        pending.error = msg.get("error")
        pending.done.set()


class WorkDone:
    """One begun work-done progress (``$/progress`` with its token).

    ``end`` sends the end and forgets the token; a ``window/workDoneProgress/cancel`` from the
    client calls the ``on_cancel`` callbacks until then.
    """

    def __init__(self, connection: Connection, token: str, forget: Callable[[], object]) -> None:
        self._connection = connection
        self._token = token
        self._forget = forget
        self._ended = False
        self._on_cancel: list[Callable[[], None]] = []

    def send(self, value: Any) -> None:
        self._connection.notify(
            lsp.PROGRESS, {"token": self._token, "value": _lsp.unstructure(value)}
        )

    def report(self, message: str, percentage: int | None = None) -> None:
        if not self._ended:
            self.send(lsp.WorkDoneProgressReport(message=message, percentage=percentage))

    def end(self, message: str) -> None:
        if self._ended:
            return
        self._ended = True
        self._forget()
        self.send(lsp.WorkDoneProgressEnd(message=message))

    def on_cancel(self, callback: Callable[[], None]) -> None:
        self._on_cancel.append(callback)

    def cancelled(self) -> None:
        """The client cancelled this progress (from its progress bar)."""
        if self._ended:
            return
        for callback in self._on_cancel:
            try:
                callback()
            except Exception:
                log.exception("a progress cancel callback failed")


class StdinSource:
    """stdin for the frame reader, read without blocking the event loop.

    A pipe, socket or terminal is made non-blocking and read when the event loop says it is
    readable (``anyio.wait_readable``): no thread. A regular file (``compactd serve < file``),
    or a platform where that is not possible, is read in anyio's worker threads, under its
    limiter like every other thread the daemon uses.
    """

    def __init__(self, stream: IO[bytes]) -> None:
        self._fd = stream.fileno()
        self._polled = False
        if os.name == "posix":
            mode = os.fstat(self._fd).st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode):
                self._was_blocking = os.get_blocking(self._fd)
                os.set_blocking(self._fd, False)
                self._polled = True

    async def read(self, n: int) -> bytes:
        while self._polled:
            try:
                return os.read(self._fd, n)
            except BlockingIOError:
                pass
            try:
                await anyio.wait_readable(self._fd)
            except OSError:  # a device the event loop cannot watch: read it in a thread
                self.close()
        return await anyio.to_thread.run_sync(os.read, self._fd, n, abandon_on_cancel=True)

    def close(self) -> None:
        """Give stdin back as it was (a terminal left non-blocking breaks the shell)."""
        if self._polled:
            self._polled = False
            try:
                os.set_blocking(self._fd, self._was_blocking)
            except OSError:
                pass
