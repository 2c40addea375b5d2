"""LSP base-protocol framing for stdin: ``Content-Length`` headers, then a JSON body.

pygls' own reader logs and drops a frame it cannot parse, so the client waits forever. This
reader answers every bad frame instead (a JSON-RPC error with ``id: null`` and a stable
``data.code``), resynchronises on the next header, and hands good messages to the protocol.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from compactd import protocol as p

_CONTENT_LENGTH = re.compile(rb"^content-length:\s*(\S*)\s*$", re.IGNORECASE)
_HEADER_LINE = re.compile(rb"^[A-Za-z][A-Za-z0-9-]*:")
# Longest header line accepted; a client sending more is not speaking LSP framing.
MAX_HEADER_LINE = 8192
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024

_decoder = msgspec.json.Decoder()


class AsyncByteReader(Protocol):
    async def readline(self) -> bytes: ...

    async def readexactly(self, n: int) -> bytes: ...


@dataclass(slots=True)
class FrameError:
    """A frame that could not be turned into a message, and what to tell the client."""

    code: str
    message: str
    msg_id: Any = None


Deliver = Callable[[dict[str, Any]], None]
Reject = Callable[[FrameError], None]


async def read_frames(
    reader: AsyncByteReader,
    deliver: Deliver,
    reject: Reject,
    max_frame_bytes: Callable[[], int],
    stopped: Callable[[], bool] = lambda: False,
) -> None:
    """Read frames until EOF (or ``stopped()``); never raises on bad input."""
    while not stopped():
        length: int | None = None
        bad_length: bytes | None = None
        saw_header = False
        # -- headers ------------------------------------------------------------------------
        while True:
            line = await reader.readline()
            if not line:
                return
            if len(line) > MAX_HEADER_LINE:
                reject(FrameError(p.ErrorCode.PARSE_ERROR, "header line too long"))
                saw_header = False
                continue
            stripped = line.strip()
            if not stripped:
                if saw_header:
                    break
                continue  # stray blank lines between frames
            m = _CONTENT_LENGTH.match(stripped)
            if m:
                saw_header = True
                value = m.group(1)
                if value.isdigit() and len(value) < 19:
                    length, bad_length = int(value), None
                else:
                    length, bad_length = None, value
                continue
            if _HEADER_LINE.match(stripped):
                saw_header = True
                continue
            # Not a header: a body without headers, or garbage. Say so and resync.
            reject(
                FrameError(
                    p.ErrorCode.PARSE_ERROR,
                    "expected a 'Content-Length: N' header before the message body",
                )
            )
            saw_header = False
        if length is None:
            text = bad_length.decode("utf-8", "replace")[:40] if bad_length is not None else ""
            reject(
                FrameError(
                    p.ErrorCode.PARSE_ERROR,
                    f"invalid Content-Length {text!r}"
                    if bad_length is not None
                    else "missing Content-Length header",
                )
            )
            continue
        # -- body ---------------------------------------------------------------------------
        limit = max_frame_bytes()
        if length > limit:
            await _discard(reader, length)
            reject(
                FrameError(
                    p.ErrorCode.FRAME_TOO_LARGE,
                    f"message of {length} bytes exceeds the {limit}-byte limit (maxFrameBytes)",
                )
            )
            continue
        body = await reader.readexactly(length)
        if len(body) < length:
            return  # EOF inside a body: the client is gone
        _dispatch(body, deliver, reject)


async def _discard(reader: AsyncByteReader, n: int) -> None:
    chunk = 1 << 20
    while n > 0:
        got = await reader.readexactly(min(chunk, n))
        if not got:
            return
        n -= len(got)


def _dispatch(body: bytes, deliver: Deliver, reject: Reject) -> None:
    try:
        msg = _decoder.decode(body)
    except msgspec.DecodeError as exc:
        reject(FrameError(p.ErrorCode.PARSE_ERROR, f"invalid JSON: {exc}"))
        return
    except RecursionError:
        reject(FrameError(p.ErrorCode.PARSE_ERROR, "JSON nested too deeply"))
        return
    if isinstance(msg, list):
        reject(FrameError(p.ErrorCode.INVALID_REQUEST, "batch requests are not supported"))
        return
    if not isinstance(msg, dict):
        reject(FrameError(p.ErrorCode.INVALID_REQUEST, "a message must be a JSON object"))
        return
    msg_id = msg.get("id")
    if msg_id is not None and (isinstance(msg_id, bool) or not isinstance(msg_id, (int, str))):
        reject(FrameError(p.ErrorCode.INVALID_REQUEST, "'id' must be a string or number"))
        return
    if msg.get("jsonrpc") != "2.0":
        reject(FrameError(p.ErrorCode.INVALID_REQUEST, "'jsonrpc' must be \"2.0\"", msg_id))
        return
    method = msg.get("method")
    if "method" in msg and not isinstance(method, str):
        reject(FrameError(p.ErrorCode.INVALID_REQUEST, "'method' must be a string", msg_id))
        return
    if method is None and "result" not in msg and "error" not in msg:
        reject(
            FrameError(
                p.ErrorCode.INVALID_REQUEST,
                "a message needs 'method' (request/notification) or 'result'/'error' (response)",
                msg_id,
            )
        )
        return
    params = msg.get("params")
    if params is not None and not isinstance(params, (dict, list)):
        reject(
            FrameError(p.ErrorCode.INVALID_PARAMS, "'params' must be an object or array", msg_id)
        )
        return
    deliver(msg)
