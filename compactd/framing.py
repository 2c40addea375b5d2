"""LSP base-protocol framing for stdin: ``Content-Length`` headers, then a JSON body.

pygls' own reader logs and drops a frame it cannot parse, so the client waits forever, and a
single undecodable body ends its loop. This reader owns the byte stream instead. Every bad
frame is answered (a JSON-RPC error with a stable ``data.code``, carrying the request's id
when it can still be read) and the reader finds the next header, so no byte sequence stops it:

- a body that is not JSON or not UTF-8 is a ``parseError``;
- a ``Content-Length`` above the frame limit is answered ``frameTooLarge`` at once, without
  waiting for the body, and the bytes are skipped up to the next header;
- a length that was too long swallows the next frame's header: the body is searched for it,
  the message before it is still delivered when it parses, and reading resumes there. A body
  that ends with the start of a header (``...}Conte``) is judged only once the rest has been
  read, so where the pipe happens to split the bytes changes nothing;
- garbage that runs on into a header (``ab: cdContent-Length: 9``) costs only the garbage;
- an id that JSON-RPC allows but LSP does not (``1.5``, ``1e3``) is refused with that id.

A header can be found inside any stream because ``Content-Length: N`` followed by a raw line
break can never occur inside a valid JSON body (JSON strings cannot hold raw line breaks, and
outside strings JSON has no letters).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from compactd import protocol as p

# A header block (name: value lines) ends with an empty line.
_HEADER_END = re.compile(rb"\r?\n\r?\n")
_HEADER_LINE = re.compile(rb"^([A-Za-z][A-Za-z0-9-]*)[ \t]*:[ \t]*(.*?)[ \t]*$")
# Where a frame starts when the stream has to be searched (see the module docstring).
_FRAME_START = re.compile(rb"content-length[ \t]*:[ \t]*[0-9]+[ \t]*\r?\n", re.IGNORECASE)
# The start of a frame header cut off at the end of what was read so far.
_PARTIAL_START = re.compile(
    rb"c(?:o(?:n(?:t(?:e(?:n(?:t(?:-(?:l(?:e(?:n(?:g(?:t(?:h(?:[ \t]*(?::[^\r\n]*\r?)?)?)?)?)?)?)?)?)?)?)?)?)?)?)?",
    re.IGNORECASE,
)
# The id of a message whose body did not decode, when its text still shows it.
_ID_GUESS = re.compile(
    rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*'
    # A number counts only when it visibly ends: a body cut inside it has no id.
    rb'(-?[0-9]{1,15}(?:\.[0-9]{1,15})?(?:[eE][+-]?[0-9]{1,3})?(?=\s*[,}])|"[^"\\]{0,200}")'
)

# Longest header block accepted; a client sending more is not speaking LSP framing.
MAX_HEADER_BYTES = 16 * 1024
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
# How much is read from the pipe at once.
_CHUNK = 1 << 16

_decoder = msgspec.json.Decoder()
# Internal markers: a header block that never ended (reported as a parse error), and bytes
# that cannot start a frame (reported by the resync that drops them).
_TOO_LONG = "headerTooLong"
_GARBAGE = "garbage"
# How far past a bad body a header that started inside it is looked for.
_HEADER_LOOKAHEAD = 256
# How much of a dropped run is kept to find a request id in it.
_DROPPED_KEPT = 1 << 16


class ByteSource(Protocol):
    async def read(self, n: int) -> bytes:
        """Up to ``n`` bytes; ``b""`` at end of input."""


@dataclass(slots=True)
class FrameError:
    """A frame that could not be turned into a message, and what to tell the client."""

    code: str
    message: str
    msg_id: Any = None


Deliver = Callable[[dict[str, Any]], None]
Reject = Callable[[FrameError], None]


class FrameReader:
    """Splits a byte stream into messages; never raises on bad input."""

    def __init__(
        self,
        source: ByteSource,
        deliver: Deliver,
        reject: Reject,
        max_frame_bytes: Callable[[], int] = lambda: DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self._source = source
        self._deliver = deliver
        self._reject = reject
        self._max_frame = max_frame_bytes
        self._buf = bytearray()
        self._eof = False
        # Frames received and rejected, for the log at exit.
        self.delivered = 0
        self.rejected = 0

    async def _fill(self) -> bool:
        if self._eof:
            return False
        chunk = await self._source.read(_CHUNK)
        if not chunk:
            self._eof = True
            return False
        self._buf += chunk
        return True

    async def run(self, stopped: Callable[[], bool] = lambda: False) -> None:
        """Read frames until end of input or ``stopped()``."""
        after_bad_body = False  # what follows a body that did not parse may be its rest
        while not stopped():
            header = await self._header_block()
            if header is None:
                return
            if isinstance(header, FrameError):
                if header.code == _GARBAGE:
                    # The buffer cannot start a frame here: the search starts past its first
                    # byte, so a header right behind the garbage is found.
                    ok = await self._resync(skip=True, report=not after_bad_body)
                else:
                    self._fail(header)
                    ok = await self._resync(skip=header.code == _TOO_LONG)
                after_bad_body = False
                if not ok:
                    return
                continue
            after_bad_body = False
            length = header
            limit = self._max_frame()
            if length > limit:
                # Answered now, not after the body: the length may be a lie, and waiting for
                # it would swallow every later frame.
                self._fail(
                    FrameError(
                        p.ErrorCode.FRAME_TOO_LARGE,
                        f"message of {length} bytes exceeds the {limit}-byte limit "
                        "(initializationOptions.maxFrameBytes)",
                    )
                )
                if not await self._resync(report=False):
                    return
                continue
            # A header inside the body means the length was too long: the body ends there.
            # Looked for while waiting, so a wrong length does not stall the frames behind it.
            end = length
            scanned = 0
            while len(self._buf) < length:
                m = _FRAME_START.search(self._buf, max(0, scanned - 64))
                if m is not None:
                    end = m.start()
                    break
                scanned = len(self._buf)
                if not await self._fill():
                    return  # end of input inside a body: the client is gone
            body = bytes(self._buf[:end])
            del self._buf[:end]
            after_bad_body = not await self._dispatch(body)

    # -- headers ---------------------------------------------------------------------------------

    async def _header_block(self) -> int | FrameError | None:
        """The next frame's ``Content-Length``, an error, or None at end of input."""
        while True:
            # Line breaks and spaces between frames are tolerated.
            start = 0
            while start < len(self._buf) and self._buf[start] in b" \t\r\n":
                start += 1
            if start:
                del self._buf[:start]
            if self._buf and not _could_be_header(self._buf):
                return FrameError(_GARBAGE, "not a frame")
            m = _HEADER_END.search(self._buf, 0, MAX_HEADER_BYTES + 4)
            if m is not None:
                block = bytes(self._buf[: m.start()])
                parsed = _parse_header(block)
                if isinstance(parsed, FrameError) and _FRAME_START.search(self._buf, 1, m.end()):
                    # Garbage ran on into a real header (``ab: cdContent-Length: 9``): only
                    # what comes before that header is dropped.
                    return FrameError(_GARBAGE, "not a frame")
                del self._buf[: m.end()]
                return parsed
            if len(self._buf) > MAX_HEADER_BYTES:
                return FrameError(_TOO_LONG, "header block too long or missing")
            if not await self._fill():
                return None

    async def _resync(self, *, skip: bool = False, report: bool = True) -> bool:
        """Drop bytes up to the next frame header; False at end of input.

        ``skip``: the buffer starts with a header that was refused; look past it. Dropped bytes
        that are not white space are answered once per read (``report``), with the id of the
        message when they are a whole message that came without its header.
        """
        pos = 1 if skip else 0
        dropped = bytearray()
        while True:
            m = _FRAME_START.search(self._buf, pos)
            cut = m.start() if m is not None else _partial_start(self._buf, pos)
            if len(dropped) < _DROPPED_KEPT:
                dropped += self._buf[: min(cut, _DROPPED_KEPT)]
            del self._buf[:cut]
            pos = 0
            if report and dropped.strip():
                self._fail(
                    FrameError(
                        p.ErrorCode.PARSE_ERROR,
                        "expected a 'Content-Length: N' header before the message body",
                        _guess_id(bytes(dropped)),
                    )
                )
            dropped.clear()
            if m is not None:
                return True
            report = True  # what arrives from now on is new
            if not await self._fill():
                return False

    # -- bodies ----------------------------------------------------------------------------------

    async def _dispatch(self, body: bytes) -> bool:
        """Deliver or reject one body; False when the rest of it may follow as garbage."""
        try:
            msg = _decode(body)
        except _BadBody as bad:
            # A length that was too long swallowed the next header: resume reading there, and
            # deliver what came before it if that is a message of its own.
            m = await self._header_in(body)
            if m is not None:
                self._buf[:0] = body[m.start() :]
                head = body[: m.start()]
                try:
                    msg = _decode(head)
                except _BadBody as bad_head:
                    self._fail(bad_head.error(head))
                    return True
                self._check_and_deliver(msg)
                return True
            self._fail(bad.error(body))
            return False
        self._check_and_deliver(msg)
        return True

    async def _header_in(self, body: bytes) -> re.Match[bytes] | None:
        """The next frame's header when it starts inside ``body`` (past its first byte).

        The header may run on into bytes read after the body, or into bytes not read yet: a
        body that ends with the start of a header (``...}Conte``) waits for the rest of it
        before it is judged, whatever the read boundaries were.
        """
        while True:
            joined = body + bytes(self._buf[:_HEADER_LOOKAHEAD])
            m = _FRAME_START.search(joined, 1)
            if m is not None:
                return m if m.start() < len(body) else None
            partial = _partial_start(bytearray(joined), 1)
            if partial >= len(body) or len(self._buf) >= _HEADER_LOOKAHEAD:
                return None
            if not await self._fill():
                return None

    def _check_and_deliver(self, msg: Any) -> None:
        err = _check_message(msg)
        if err is not None:
            self._fail(err)
            return
        if isinstance(msg, list):
            # A JSON-RPC batch: compactd speaks LSP, which has none. Answer each request in it.
            for item in msg:
                item_id = item.get("id") if isinstance(item, dict) else None
                if not _echoable_id(item_id) or (isinstance(item, dict) and "method" not in item):
                    item_id = None
                self._fail(
                    FrameError(
                        p.ErrorCode.INVALID_REQUEST,
                        "batch requests are not supported: send each message in its own frame",
                        item_id,
                    )
                )
            if not msg:
                self._fail(FrameError(p.ErrorCode.INVALID_REQUEST, "an empty batch"))
            return
        self.delivered += 1
        self._deliver(msg)

    def _fail(self, err: FrameError) -> None:
        self.rejected += 1
        if err.code == _TOO_LONG:
            err = FrameError(p.ErrorCode.PARSE_ERROR, err.message, err.msg_id)
        self._reject(err)


class _BadBody(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def error(self, body: bytes) -> FrameError:
        return FrameError(p.ErrorCode.PARSE_ERROR, self.reason, _guess_id(body))


def _decode(body: bytes) -> Any:
    try:
        msg = _decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise _BadBody(f"invalid JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise _BadBody(f"the message is not valid UTF-8 (byte {exc.start})") from exc
    except (RecursionError, ValueError) as exc:
        raise _BadBody(f"invalid JSON: {exc}") from exc
    return msg


def _guess_id(body: bytes) -> Any:
    """The request id of an undecodable body when it can still be read, else None."""
    try:
        # Invalid UTF-8 inside a string leaves the JSON structure whole: read it leniently.
        loose = json.loads(body.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        loose = None
    if isinstance(loose, dict):
        value = loose.get("id")
        return value if _echoable_id(value) and "method" in loose else None
    m = _ID_GUESS.match(body)
    if m is None:
        return None
    try:
        value = json.loads(m.group(1).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return value if _echoable_id(value) else None


def _valid_id(value: Any) -> bool:
    """An id LSP accepts: an integer or a string."""
    return not isinstance(value, bool) and isinstance(value, (int, str))


def _echoable_id(value: Any) -> bool:
    """An id an error can still carry: JSON-RPC allows any number (``1.5``, ``1e3``), LSP only
    integers, so a fractional id is refused but answered with its own id, not ``null``."""
    if isinstance(value, float):
        return math.isfinite(value)
    return _valid_id(value)


def _partial_start(buf: bytearray, pos: int) -> int:
    """Where a header cut off by the end of ``buf`` may start (``len(buf)`` if nowhere)."""
    for i in range(max(pos, len(buf) - _HEADER_LOOKAHEAD), len(buf)):
        if buf[i] in b"cC" and _PARTIAL_START.fullmatch(buf, i):
            return i
    return len(buf)


def _could_be_header(buf: bytearray) -> bool:
    """Whether buffered bytes can still be the start of a header block."""
    first = bytes(buf[:200]).split(b"\n", 1)[0].rstrip(b"\r")
    if b"\n" not in buf[:200] and len(first) < 200:
        # An incomplete first line: a header name so far, or the start of one.
        return re.match(rb"^[A-Za-z][A-Za-z0-9-]*(?:[ \t]*:.*)?$", first) is not None or not first
    return _HEADER_LINE.match(first) is not None


def _parse_header(block: bytes) -> int | FrameError:
    length: int | None = None
    bad: bytes | None = None
    for line in block.split(b"\n"):
        m = _HEADER_LINE.match(line.rstrip(b"\r"))
        if m is None:
            return FrameError(
                p.ErrorCode.PARSE_ERROR,
                "expected a 'Content-Length: N' header before the message body",
            )
        if m.group(1).lower() == b"content-length":
            value = m.group(2)
            if value.isdigit() and len(value) < 19:
                length, bad = int(value), None
            else:
                length, bad = None, value
    if length is not None:
        return length
    if bad is not None:
        text = bad.decode("utf-8", "replace")[:40]
        return FrameError(p.ErrorCode.PARSE_ERROR, f"invalid Content-Length {text!r}")
    return FrameError(p.ErrorCode.PARSE_ERROR, "missing Content-Length header")


def _check_message(msg: Any) -> FrameError | None:
    """The JSON-RPC 2.0 shape of one decoded message; None when it is fine."""
    if isinstance(msg, list):
        return None  # batches are answered item by item
    if not isinstance(msg, dict):
        return FrameError(p.ErrorCode.INVALID_REQUEST, "a message must be a JSON object")
    has_id = "id" in msg
    msg_id = msg.get("id")
    if has_id and msg_id is not None and not _valid_id(msg_id):
        return FrameError(
            p.ErrorCode.INVALID_REQUEST,
            "'id' must be an integer or a string",
            msg_id if _echoable_id(msg_id) else None,
        )
    if msg.get("jsonrpc") != "2.0":
        return FrameError(p.ErrorCode.INVALID_REQUEST, "'jsonrpc' must be \"2.0\"", msg_id)
    method = msg.get("method")
    if "method" in msg and not isinstance(method, str):
        return FrameError(p.ErrorCode.INVALID_REQUEST, "'method' must be a string", msg_id)
    if method is None and "result" not in msg and "error" not in msg:
        return FrameError(
            p.ErrorCode.INVALID_REQUEST,
            "a message needs 'method' (request/notification) or 'result'/'error' (response)",
            msg_id,
        )
    if method is None and not has_id:
        return FrameError(p.ErrorCode.INVALID_REQUEST, "a response needs an 'id'")
    params = msg.get("params")
    if params is not None and not isinstance(params, (dict, list)):
        return FrameError(p.ErrorCode.INVALID_PARAMS, "'params' must be an object or array", msg_id)
    return None
