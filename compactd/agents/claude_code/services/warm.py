"""A warm answer to ``session.compact``: ``compactd mcp`` answers the plugin's command itself.

The plugin's module runs ``compactd claude-code session-compact`` at every compaction, and
Claude Code waits for it. A new Python process spends most of its time importing compactd (about
a tenth of a second), while the answer itself takes a few milliseconds. ``compactd mcp`` is
already running beside the session, with everything imported, and it is the process that
prepares the summary. So it listens on a local socket, and the command first hands it the
request it was given. When that answer comes, the command prints it and is done. When the
socket is missing, refuses or is slow, the command answers by itself, as it always did
(docs/claude-code.md#the-seam).

One socket per ``compactd mcp`` process, in the user's runtime dir (``$XDG_RUNTIME_DIR/compactd``,
mode 0700, short enough for a socket's path wherever the data dir is):
``<data dir key>-<folder key>-<pid>.sock``, the keys being CRC-32s of the data dir's and the
project folder's real paths, the pid telling apart two sessions in one folder. Each socket is
the user's own (0600). A server answers its own folder's and data dir's requests, with the
same code as the command; the request names both, and the server checks them.

The exchange: the command writes the folder and the data dir (one line), then the request, and
closes its writing side. The server writes ``0`` and the answer, or ``1`` and a reason when it
will not answer, then closes. The command's side imports only the standard library and
platformdirs: it runs before the rest of compactd loads.
"""

from __future__ import annotations

import errno
import os
import socket
import time
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Final

__all__ = [
    "MAX_INPUT_BYTES",
    "answer_bytes",
    "ask",
    "folder_key",
    "plugin_call",
    "serve",
    "socket_dir",
]

# The most the command reads on stdin, and so the most it sends; a reply is bounded the same.
MAX_INPUT_BYTES: Final = 256 * 1024 * 1024
# How long the command waits for a warm answer before answering by itself: well under the
# module's 10 s, and far above the milliseconds a warm answer takes.
ASK_TIMEOUT_S: Final = 3.0
# How long the server waits for a request to arrive whole.
READ_TIMEOUT_S: Final = 5.0
# A Unix socket's path is at most 107 bytes on Linux (104 on macOS).
_MAX_SOCKET_PATH: Final = 100


def socket_dir() -> Path:
    """The user's runtime dir for compactd (``$XDG_RUNTIME_DIR/compactd``, else a private
    ``runtime-<uid>`` in the temporary folder, each checked to be the user's own by
    platformdirs): short enough for a socket's path wherever the data dir is."""
    import warnings

    import platformdirs

    with warnings.catch_warnings():  # the fallback's notice is no news to the agent
        warnings.simplefilter("ignore")
        return Path(platformdirs.user_runtime_dir("compactd", appauthor=False, ensure_exists=True))


def _crc(path: str) -> str:
    return f"{zlib.crc32(os.path.realpath(path).encode('utf-8', 'surrogatepass')):08x}"


def folder_key(data_dir: Path, cwd: str) -> str:
    """What the sockets of a data dir's servers for a project folder are named by."""
    return f"{_crc(str(data_dir))}-{_crc(cwd)}"


def _header(data_dir: Path, cwd: str) -> bytes:
    """The request's first line: the project folder and the data dir it is asked for."""
    text = f"{os.path.realpath(cwd)}\0{os.path.realpath(data_dir)}\n"
    return text.encode("utf-8", "surrogatepass")


def _sockets(data_dir: Path, cwd: str) -> list[Path]:
    """The sockets of this folder's servers, the newest first."""
    try:
        found = list(socket_dir().glob(f"{folder_key(data_dir, cwd)}-*.sock"))
    except OSError:
        return []

    def started(path: Path) -> float:
        try:
            return path.lstat().st_mtime
        except OSError:
            return 0.0

    return sorted(found, key=started, reverse=True)


def ask(data_dir: Path, cwd: str, request: bytes, timeout_s: float = ASK_TIMEOUT_S) -> bytes | None:
    """The answer a warm ``compactd mcp`` of ``cwd`` gives to ``request``; None when none does
    (no server, a refusal, an error or no answer within ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    for path in _sockets(data_dir, cwd):
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        reply = _exchange(path, _header(data_dir, cwd), request, left)
        if reply is not None:
            return reply
    return None


def plugin_call(cwd: str) -> tuple[bytes, bytes | None]:
    """The plugin's call, read from stdin, and the answer a warm ``compactd mcp`` of ``cwd``
    gives it (None: the command answers by itself, with the request read here)."""
    import sys

    from compactd.services.data_dir import default_data_dir

    request = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    if len(request) > MAX_INPUT_BYTES or not request.strip():
        return request, None
    return request, ask(default_data_dir(), cwd, request)


def _exchange(path: Path, header: bytes, request: bytes, timeout_s: float) -> bytes | None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        try:
            conn.connect(str(path))
        except OSError as exc:
            if exc.errno == errno.ECONNREFUSED:  # its server is gone: the socket is left over
                path.unlink(missing_ok=True)
            return None
        try:
            conn.sendall(header + request)
            conn.shutdown(socket.SHUT_WR)
            chunks = []
            size = 0
            while chunk := conn.recv(1 << 16):
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_INPUT_BYTES:
                    return None
        except OSError:  # a timeout among them
            return None
    reply = b"".join(chunks)
    return reply[1:] if reply[:1] == b"0" and len(reply) > 1 else None


async def serve(data_dir: Path, cwd: str, env: Mapping[str, str]) -> None:
    """Answer the plugin's command for ``cwd`` until cancelled (see the module docstring)."""
    import logging

    import anyio
    from anyio.abc import SocketStream

    log = logging.getLogger(__name__)
    try:
        path = socket_dir() / f"{folder_key(data_dir, cwd)}-{os.getpid()}.sock"
        if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
            log.info("compactd: no warm answers: the socket's path is too long (%s)", path)
            return
        path.unlink(missing_ok=True)  # a socket of an earlier process with this pid
        listener = await anyio.create_unix_listener(path)
        path.chmod(0o600)
    except OSError as exc:  # the command answers by itself, as before (PermissionError too)
        log.warning("compactd: no warm answers to session.compact: %s", exc)
        return
    expected = _header(data_dir, cwd)

    async def handle(stream: SocketStream) -> None:
        async with stream:
            try:
                reply = await _answer(stream, data_dir, expected, env)
            except TimeoutError:  # a request that never ended: the command answers by itself
                reply = b"1the request did not arrive in time"
            except Exception:  # the command answers by itself
                log.exception("compactd: a warm answer to session.compact failed")
                reply = b"1an error in compactd mcp"
            try:
                await stream.send(reply)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass  # the command gave up waiting; it answers by itself

    try:
        async with listener:
            await listener.serve(handle)
    finally:
        path.unlink(missing_ok=True)


async def _answer(stream: object, data_dir: Path, expected: bytes, env: Mapping[str, str]) -> bytes:
    """The reply to one connection: ``0`` and the answer, or ``1`` and why not."""
    import logging

    import anyio
    from anyio.abc import SocketStream

    assert isinstance(stream, SocketStream)
    chunks: list[bytes] = []
    size = 0
    with anyio.fail_after(READ_TIMEOUT_S):
        while True:
            try:
                chunk = await stream.receive()
            except anyio.EndOfStream:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_INPUT_BYTES + 4096:
                return b"1the request is too large"
    data = b"".join(chunks)
    if not data.startswith(expected):
        return b"1a request for another folder or data dir"
    request = data[len(expected) :]
    started = time.monotonic()
    from compactd.agents.claude_code.services.compact import CompactInputError

    try:
        body = await anyio.to_thread.run_sync(
            lambda: answer_bytes(request, data_dir, env, answered_by="compactd mcp")
        )
    except CompactInputError as exc:  # the command says so itself, in its own words
        return b"1" + str(exc).encode()
    logging.getLogger(__name__).info(
        "compactd: answered session.compact from compactd mcp in %d ms",
        (time.monotonic() - started) * 1000,
    )
    return b"0" + body


def answer_bytes(
    request: bytes,
    data_dir: Path,
    env: Mapping[str, str],
    *,
    transcript: Path | None = None,
    offline: bool = False,
    answered_by: str = "",
) -> bytes:
    """What the command prints for ``request``: its answer as one line, with the keys of the
    environment redacted as in every hook's output (the answer is the conversation again).
    Raises ``CompactInputError`` for a request the command refuses."""
    import msgspec

    from compactd.agents.claude_code.services.compact import answer
    from compactd.core.outbound import redact

    result = answer(
        request, data_dir, env, transcript=transcript, offline=offline, answered_by=answered_by
    )
    return (redact(msgspec.json.encode(result.body).decode()) + "\n").encode()
