"""Loopback HTTP server that imitates the Anthropic Messages API.

Pure standard library: a ``ThreadingHTTPServer`` bound to 127.0.0.1 runs in a
daemon thread, so the emulator works from sync and async tests alike.  Streams
use HTTP/1.1 chunked encoding, like the real API, so that an abrupt close is
distinguishable from a clean end of the body.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from typing import Any
from urllib.parse import urlsplit

from .cache import CacheControlError, CacheOutcome, PromptCache
from .chat import CHAT_PATH, CHAT_SERVERS, handle_chat
from .gemini import GeminiApi, parse_gemini_path
from .responses import RESPONSES_PATH, handle_responses
from .script import (
    DEFAULT,
    REQUEST_KINDS,
    ApiError,
    Reply,
    default_summary,
    reply_from_dict,
    request_kind,
)
from .tokens import estimate_tokens, output_tokens_for, prompt_blocks

__all__ = ["CostSummary", "Emulator", "RecordedRequest", "THREAD_PREFIX"]

THREAD_PREFIX = "compactd-emulator"
LOOPBACK = "127.0.0.1"


@dataclass
class RecordedRequest:
    """One request received by the emulator (control endpoints excluded)."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any
    raw_body: bytes
    timestamp: float
    request_id: str
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    usage: dict[str, Any] | None = None
    events: list[str] = field(default_factory=list)
    outcome: str = ""

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None


ScriptItem = Reply | ApiError
DefaultBehaviour = Reply | ApiError | Callable[[RecordedRequest], ScriptItem]


@dataclass(frozen=True)
class CostSummary:
    """Token totals over message requests that got a reply (HTTP 200).

    A reply is counted when it is produced, before any scripted delay or stream
    fault, so timed-out or cut requests still count (the API would bill them).
    """

    requests: int = 0
    input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_5m_input_tokens: int = 0
    cache_creation_1h_input_tokens: int = 0
    output_tokens: int = 0

    READ_FACTOR = 0.1
    WRITE_5M_FACTOR = 1.25
    WRITE_1H_FACTOR = 2.0

    @property
    def cache_creation_input_tokens(self) -> int:
        return self.cache_creation_5m_input_tokens + self.cache_creation_1h_input_tokens

    @property
    def billed_equivalent_input_tokens(self) -> float:
        """input + 0.1 * reads + 1.25 * 5m writes + 2 * 1h writes."""
        return (
            self.input_tokens
            + self.READ_FACTOR * self.cache_read_input_tokens
            + self.WRITE_5M_FACTOR * self.cache_creation_5m_input_tokens
            + self.WRITE_1H_FACTOR * self.cache_creation_1h_input_tokens
        )

    def add(self, usage: Mapping[str, Any]) -> CostSummary:
        creation = usage.get("cache_creation") or {}
        return CostSummary(
            requests=self.requests + 1,
            input_tokens=self.input_tokens + usage["input_tokens"],
            cache_read_input_tokens=self.cache_read_input_tokens + usage["cache_read_input_tokens"],
            cache_creation_5m_input_tokens=self.cache_creation_5m_input_tokens
            + creation.get("ephemeral_5m_input_tokens", 0),
            cache_creation_1h_input_tokens=self.cache_creation_1h_input_tokens
            + creation.get("ephemeral_1h_input_tokens", 0),
            output_tokens=self.output_tokens + usage["output_tokens"],
        )

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cache_creation_input_tokens"] = self.cache_creation_input_tokens
        d["billed_equivalent_input_tokens"] = self.billed_equivalent_input_tokens
        return d


class _Abort(Exception):
    """The exchange must end by closing the connection."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "compactd-emulator/1"
    sys_version = ""
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def _dispatch(self) -> None:
        self.server.emulator._handle(self)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # handler threads are joined by close_connections()

    def __init__(self, emulator: Emulator, port: int) -> None:
        self.emulator = emulator
        self._conn_lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._handler_threads: list[threading.Thread] = []
        self._conn_seq = 0
        super().__init__((LOOPBACK, port), _Handler)

    def server_bind(self) -> None:
        # Skip HTTPServer's reverse DNS lookup (getfqdn); nothing here needs it.
        TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conn_lock:
            self._open.add(request)
            self._conn_seq += 1
            self._handler_threads = [t for t in self._handler_threads if t.is_alive()]
            t = threading.Thread(
                target=self.process_request_thread,
                args=(request, client_address),
                name=f"{THREAD_PREFIX}-conn-{self._conn_seq}",
                daemon=True,
            )
            self._handler_threads.append(t)
        t.start()

    def shutdown_request(self, request: Any) -> None:
        with self._conn_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
            return
        traceback.print_exc()

    def close_connections(self, timeout: float) -> None:
        with self._conn_lock:
            sockets = list(self._open)
            threads = list(self._handler_threads)
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def live_threads(self) -> list[threading.Thread]:
        with self._conn_lock:
            return [t for t in self._handler_threads if t.is_alive()]


@dataclass
class _Exchange:
    handler: _Handler
    rec: RecordedRequest


def _signature_for(thinking: str) -> str:
    digest = hashlib.sha256(thinking.encode()).digest()
    return "EmuSig" + base64.b64encode(digest).decode()


def _chunks(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


class Emulator:
    """In-process emulator of the Messages API on a loopback port.

    Parameters
    ----------
    port: port to bind on 127.0.0.1 (0 = pick a free one).
    clock: callable returning seconds for cache expiry (default ``time.monotonic``);
        ``advance_time`` adds an offset on top of it.
    context_window: default context window for every model (200_000).
    min_cacheable_tokens: default minimum cacheable prefix length (1024).
    lookback: cache lookback in block positions (20).
    ping_every: send a ``ping`` event after every N content deltas (also one
        right after message_start); 0 disables the extra ones.
    chunk_chars: characters per text/thinking/json delta.
    api_key: when set, only this key is accepted; otherwise any key is.
    summary_max_quotes: how many user messages the default summary lists.
    chat_server: whose context-length error ``/v1/chat/completions`` answers a request too
        large for the window with: "openai", "llama" (llama-server) or "ollama" (see
        ``tests.emulator.chat``).
    """

    def __init__(
        self,
        *,
        port: int = 0,
        clock: Callable[[], float] | None = None,
        context_window: int = 200_000,
        min_cacheable_tokens: int = 1024,
        lookback: int = 20,
        ping_every: int = 5,
        chunk_chars: int = 24,
        api_key: str | None = None,
        summary_max_quotes: int = 40,
        chat_server: str = "openai",
    ) -> None:
        if chat_server not in CHAT_SERVERS:
            raise ValueError(f"chat_server must be one of {CHAT_SERVERS}")
        self.chat_server = chat_server
        self._requested_port = port
        self._clock = clock or time.monotonic
        self._time_offset = 0.0
        self.default_context_window = context_window
        self.default_min_cacheable_tokens = min_cacheable_tokens
        self.context_windows: dict[str, int] = {}
        self.min_cacheable: dict[str, int] = {}
        self.ping_every = ping_every
        self.chunk_chars = chunk_chars
        self.api_key = api_key
        self.summary_max_quotes = summary_max_quotes

        self._lock = threading.RLock()
        self._queue: deque[ScriptItem] = deque()
        self._default: DefaultBehaviour = Reply()
        self._requests: list[RecordedRequest] = []
        self._seq = 0
        self._totals = CostSummary()
        self._cache = PromptCache(lookback=lookback)
        self._latency: dict[str, float] = {}
        # Kinds of request whose replies wait for ``release`` (``hold``): each a gate.
        self._held: dict[str, threading.Event] = {}
        # Every pause served before a reply or between stream chunks, in seconds, in order: what
        # a test checks instead of timing the client (a busy machine only makes that slower).
        self._waits: list[float] = []

        # The Gemini API (tests.emulator.gemini): its own scripts and defaults.
        self.gemini = GeminiApi(self)

        self._server: _Server | None = None
        self._serve_thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._address: tuple[str, int] | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> Emulator:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _Server(self, self._requested_port)
        ready = threading.Event()

        def serve() -> None:
            ready.set()
            server.serve_forever(poll_interval=0.05)

        self._server = server
        self._address = (str(server.server_address[0]), int(server.server_address[1]))
        self._serve_thread = threading.Thread(
            target=serve, name=f"{THREAD_PREFIX}-serve", daemon=True
        )
        self._serve_thread.start()
        ready.wait()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving, close open connections (even mid-stream) and join all threads."""
        server, thread = self._server, self._serve_thread
        if server is None:
            return
        self._server = None
        self._stopping.set()
        self._open_gates()  # a held reply ends with the connection, as a delayed one does
        server.shutdown()
        server.server_close()
        server.close_connections(timeout)
        if thread is not None:
            thread.join(timeout)
        self._last_server = server

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def server_address(self) -> tuple[str, int]:
        if self._address is None:
            raise RuntimeError("emulator not started")
        return self._address

    @property
    def host(self) -> str:
        return self.server_address[0]

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def base_url(self) -> str:
        host, port = self.server_address
        return f"http://{host}:{port}"

    def live_threads(self) -> list[threading.Thread]:
        """Threads owned by this emulator that are still alive."""
        out: list[threading.Thread] = []
        if self._serve_thread is not None and self._serve_thread.is_alive():
            out.append(self._serve_thread)
        server = self._server or getattr(self, "_last_server", None)
        if server is not None:
            out.extend(server.live_threads())
        return out

    # -------------------------------------------------------------- clients

    def client(self, **kw: Any) -> Any:
        """A sync ``anthropic.Anthropic`` pointed at the emulator (api_key "test")."""
        import anthropic

        kw.setdefault("api_key", "test")
        return anthropic.Anthropic(base_url=self.base_url, **kw)

    def async_client(self, **kw: Any) -> Any:
        """An ``anthropic.AsyncAnthropic`` pointed at the emulator (api_key "test")."""
        import anthropic

        kw.setdefault("api_key", "test")
        return anthropic.AsyncAnthropic(base_url=self.base_url, **kw)

    # ------------------------------------------------------------- scripting

    def script(self, *items: ScriptItem, times: int = 1) -> Emulator:
        """Queue behaviours for the next message requests (each item ``times`` times)."""
        for item in items:
            if not isinstance(item, (Reply, ApiError)):
                raise TypeError(
                    f"script items must be Reply or ApiError, got {type(item).__name__}"
                )
        with self._lock:
            for item in items:
                for _ in range(times):
                    self._queue.append(item)
        return self

    def set_default(self, behaviour: DefaultBehaviour) -> None:
        """Behaviour when the queue is empty: a Reply, an ApiError, or ``f(RecordedRequest)``."""
        with self._lock:
            self._default = behaviour

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def clear_script(self) -> None:
        with self._lock:
            self._queue.clear()

    def set_latency(self, kind: str, seconds: float) -> None:
        """Make every reply to a request of ``kind`` (``script.request_kind``: ``"summary"`` or
        ``"main"``) start ``seconds`` later, on top of the reply's own ``delay``: a model that
        takes its time to write a summary, whatever the script says."""
        if kind not in REQUEST_KINDS:
            raise ValueError(f"unknown request kind {kind!r}; expected one of {REQUEST_KINDS}")
        if seconds < 0:
            raise ValueError("a latency cannot be negative")
        with self._lock:
            self._latency[kind] = seconds

    def latency(self, kind: str) -> float:
        with self._lock:
            return self._latency.get(kind, 0.0)

    def hold(self, kind: str) -> None:
        """Keep every reply to a request of ``kind`` (``script.request_kind``) from starting
        until ``release(kind)``: a model still writing for as long as the test needs, however
        fast or slow the machine, where a latency would be a guess. The request is received and
        recorded at once; only its reply waits."""
        if kind not in REQUEST_KINDS:
            raise ValueError(f"unknown request kind {kind!r}; expected one of {REQUEST_KINDS}")
        with self._lock:
            self._held.setdefault(kind, threading.Event())

    def release(self, kind: str) -> None:
        """Let the held replies to ``kind`` go on (and later ones start at once)."""
        with self._lock:
            gate = self._held.pop(kind, None)
        if gate is not None:
            gate.set()

    def held(self, kind: str) -> bool:
        with self._lock:
            return kind in self._held

    def _open_gates(self) -> None:
        with self._lock:
            gates = list(self._held.values())
            self._held.clear()
        for gate in gates:
            gate.set()

    def set_context_window(self, model: str, tokens: int) -> None:
        with self._lock:
            self.context_windows[model] = tokens

    def context_window(self, model: str | None) -> int:
        with self._lock:
            return self.context_windows.get(model or "", self.default_context_window)

    def set_min_cacheable_tokens(self, model: str, tokens: int) -> None:
        with self._lock:
            self.min_cacheable[model] = tokens

    def min_cacheable_tokens(self, model: str | None) -> int:
        with self._lock:
            return self.min_cacheable.get(model or "", self.default_min_cacheable_tokens)

    # ----------------------------------------------------------- clock/cache

    def now(self) -> float:
        return self._clock() + self._time_offset

    def advance_time(self, seconds: float) -> None:
        """Move the cache clock forward (to test TTL expiry)."""
        with self._lock:
            self._time_offset += seconds

    def clear_cache(self) -> None:
        self._cache.clear()

    def cache_entries(self) -> int:
        """Number of unexpired cached prefixes."""
        return self._cache.live_entries(self.now())

    # ----------------------------------------------------------- inspection

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def message_requests(self) -> list[RecordedRequest]:
        """Requests to ``/v1/messages`` (count_tokens excluded)."""
        return [r for r in self.requests if r.path.rstrip("/") == "/v1/messages"]

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """Requests to ``/v1/chat/completions``."""
        return self.requests_to(CHAT_PATH)

    @property
    def responses_requests(self) -> list[RecordedRequest]:
        """Requests to ``/v1/responses`` (``tests.emulator.responses``)."""
        return self.requests_to(RESPONSES_PATH)

    def requests_to(self, path: str) -> list[RecordedRequest]:
        """The requests received on ``path``, in order."""
        return [r for r in self.requests if r.path.rstrip("/") == path]

    @property
    def waits(self) -> list[float]:
        """The pauses served so far (scripted delays, chunk delays, latencies), in order."""
        with self._lock:
            return list(self._waits)

    def cost_summary(self) -> CostSummary:
        with self._lock:
            return self._totals

    def reset(self) -> None:
        """Forget requests, script, default behaviour, latencies, holds (their replies go on),
        cache and totals (keeps the context windows and cache minimums)."""
        self._open_gates()
        with self._lock:
            self._requests.clear()
            self._waits.clear()
            self._latency.clear()
            self._queue.clear()
            self._default = Reply()
            self._totals = CostSummary()
            self._cache.clear()
        self.gemini.reset()

    estimate_tokens = staticmethod(estimate_tokens)

    # ------------------------------------------------------- request handling

    def _pass_hold(self, kind: str) -> None:
        """Wait while ``kind`` is held (``hold``); a stop ends the exchange."""
        with self._lock:
            gate = self._held.get(kind)
        if gate is not None:
            gate.wait()
            if self._stopping.is_set():
                raise _Abort()

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            with self._lock:
                self._waits.append(seconds)
        if seconds > 0 and self._stopping.wait(seconds):
            raise _Abort()
        if self._stopping.is_set():
            raise _Abort()

    @staticmethod
    def _read_body(h: _Handler) -> bytes:
        if "chunked" in (h.headers.get("Transfer-Encoding") or "").lower():
            parts: list[bytes] = []
            while True:
                size_line = h.rfile.readline(65537)
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while h.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(h.rfile.read(size))
                h.rfile.readline(65537)
        length = int(h.headers.get("Content-Length") or 0)
        return h.rfile.read(length) if length > 0 else b""

    def _handle(self, h: _Handler) -> None:
        try:
            split = urlsplit(h.path)
            path = split.path
            raw = self._read_body(h)
            if path.startswith("/_emulator/"):
                self._control(h, path, raw)
                return
            body: Any = None
            parse_error: str | None = None
            if raw:
                try:
                    body = json.loads(raw)
                except ValueError as exc:
                    parse_error = str(exc)
            with self._lock:
                self._seq += 1
                seq = self._seq
                rec = RecordedRequest(
                    method=h.command,
                    path=path,
                    query=split.query,
                    headers={k.lower(): v for k, v in h.headers.items()},
                    body=body,
                    raw_body=raw,
                    timestamp=time.time(),
                    request_id=f"req_emu_{seq:08d}",
                )
                self._requests.append(rec)
            self._route(_Exchange(h, rec), seq, path, parse_error)
        except _Abort:
            self._close(h)
        except (ConnectionError, OSError):
            h.close_connection = True

    @staticmethod
    def _close(h: _Handler) -> None:
        h.close_connection = True
        try:
            h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # ---- responses

    def _start(self, x: _Exchange, status: int, headers: Mapping[str, str]) -> None:
        all_headers = {"request-id": x.rec.request_id, **headers}
        x.rec.status = status
        x.rec.response_headers = dict(all_headers)
        x.handler.send_response(status)
        for k, v in all_headers.items():
            x.handler.send_header(k, v)
        x.handler.end_headers()

    def _send_json(
        self, x: _Exchange, status: int, obj: Any, headers: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(obj).encode()
        self._start(
            x,
            status,
            {
                "content-type": "application/json",
                "content-length": str(len(data)),
                **(headers or {}),
            },
        )
        x.handler.wfile.write(data)

    def _error_body(self, x: _Exchange, err_type: str, message: str) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": err_type, "message": message},
            "request_id": x.rec.request_id,
        }

    def _send_error(self, x: _Exchange, err: ApiError, message: str | None = None) -> None:
        if err.delay:
            self._wait(err.delay)
        headers: dict[str, str] = {}
        if err.retry_after is not None:
            ra = err.retry_after
            headers["retry-after"] = str(int(ra)) if float(ra).is_integer() else str(ra)
        if err.retry_after_ms is not None:
            ms = err.retry_after_ms
            headers["retry-after-ms"] = str(int(ms)) if float(ms).is_integer() else str(ms)
        headers.update(err.headers)
        text = message if message is not None else err.text()
        x.rec.outcome = f"error:{err.type}"
        self._send_json(x, err.http_status, self._error_body(x, err.type, text), headers)

    def _simple_error(self, x: _Exchange, err_type: str, message: str) -> None:
        self._send_error(x, ApiError(type=err_type, message=message))

    # ---- routing

    # The other APIs the emulator serves beside the Messages API: POST path -> handler, each in
    # a module of its own (the handler answers; the request is recorded and authenticated here).
    API_ROUTES: dict[str, Callable[[Emulator, _Exchange, int], None]] = {
        CHAT_PATH: handle_chat,
        RESPONSES_PATH: handle_responses,
    }

    def _route(self, x: _Exchange, seq: int, path: str, parse_error: str | None) -> None:
        path = path.rstrip("/")
        method = x.handler.command
        if parse_gemini_path(path) is not None:
            self.gemini.handle(x, seq, parse_error)
            return
        handler = self.API_ROUTES.get(path)
        if handler is not None and method == "POST":
            if self._authenticate(x):
                handler(self, x, seq)
            return
        if path not in ("/v1/messages", "/v1/messages/count_tokens"):
            self._simple_error(x, "not_found_error", f"Not found: {method} {path}")
            return
        if method != "POST":
            self._simple_error(x, "not_found_error", f"Not found: {method} {path}")
            return
        if not self._authenticate(x):
            return
        body = x.rec.body
        if parse_error is not None or not isinstance(body, dict):
            self._simple_error(
                x,
                "invalid_request_error",
                f"Request body is not a valid JSON object: {parse_error}",
            )
            return
        problem = self._validate(body, count_only=path.endswith("count_tokens"))
        if problem:
            self._simple_error(x, "invalid_request_error", problem)
            return
        try:
            PromptCache.validate(prompt_blocks(body))
        except CacheControlError as exc:
            self._simple_error(x, "invalid_request_error", str(exc))
            return
        if path.endswith("count_tokens"):
            x.rec.outcome = "count_tokens"
            self._send_json(x, 200, {"input_tokens": estimate_tokens(body)})
            return
        self._messages(x, seq, body)

    def _authenticate(self, x: _Exchange) -> bool:
        headers = x.rec.headers
        key = headers.get("x-api-key")
        auth = headers.get("authorization", "")
        if key is None and auth.lower().startswith("bearer "):
            key = auth[7:].strip()
        if not key:
            self._simple_error(x, "authentication_error", "x-api-key header is required")
            return False
        if self.api_key is not None and key != self.api_key:
            self._simple_error(x, "authentication_error", "invalid x-api-key")
            return False
        return True

    @staticmethod
    def _validate(body: Mapping[str, Any], *, count_only: bool) -> str | None:
        if not isinstance(body.get("model"), str) or not body["model"]:
            return "model: Field required"
        if not count_only:
            mt = body.get("max_tokens")
            if not isinstance(mt, int) or isinstance(mt, bool):
                return "max_tokens: Field required"
            if mt < 1:
                return "max_tokens: Input should be greater than or equal to 1"
        messages = body.get("messages")
        if not isinstance(messages, list):
            return "messages: Field required"
        if not messages:
            return "messages: at least one message is required"
        for i, m in enumerate(messages):
            # Claude Code 2.1.330 sends system-role messages among the others (its attachments
            # with renderedRole "system"; seen in its requests), and the API takes them.
            if not isinstance(m, Mapping) or m.get("role") not in ("user", "assistant", "system"):
                return f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'"
            if not isinstance(m.get("content"), (str, list)):
                return f"messages.{i}.content: Field required"
        return None

    def _prompt_too_long_message(self, err: ApiError, body: Mapping[str, Any]) -> str:
        tokens = err.tokens if err.tokens is not None else estimate_tokens(body)
        maximum = err.maximum
        if maximum is None:
            window = self.context_window(body.get("model"))
            if tokens > window:
                maximum = window
            else:
                over = err.over_by if err.over_by is not None else max(1, tokens // 10)
                maximum = max(0, tokens - over)
        return f"prompt is too long: {tokens} tokens > {maximum} maximum"

    def _messages(self, x: _Exchange, seq: int, body: dict[str, Any]) -> None:
        model = body["model"]
        item: Any
        with self._lock:
            if self._queue and isinstance(self._queue[0], ApiError):
                item = self._queue.popleft()
            else:
                tokens = estimate_tokens(body)
                window = self.context_window(model)
                if tokens > window:
                    item = ApiError(
                        type="invalid_request_error",
                        prompt_too_long=True,
                        tokens=tokens,
                        maximum=window,
                    )
                elif self._queue:
                    item = self._queue.popleft()
                else:
                    item = self._default
        if callable(item) and not isinstance(item, (Reply, ApiError)):
            item = item(x.rec)
        if isinstance(item, ApiError):
            message = self._prompt_too_long_message(item, body) if item.prompt_too_long else None
            self._send_error(x, item, message)
            return
        if not isinstance(item, Reply):
            raise TypeError(f"default behaviour returned {item!r}")
        self._reply(x, seq, body, item)

    # ---- successful replies

    def _build_content(
        self, reply: Reply, body: Mapping[str, Any], seq: int
    ) -> tuple[list[dict[str, Any]], str, int]:
        if reply.empty:
            return [], reply.stop_reason or "end_turn", reply.output_tokens or 0
        content: list[dict[str, Any]] = []
        if reply.thinking is not None:
            content.append(
                {
                    "type": "thinking",
                    "thinking": reply.thinking,
                    "signature": reply.signature or _signature_for(reply.thinking),
                }
            )
        text = reply.text
        if text is DEFAULT:
            text = (
                None
                if reply.tool_uses
                else default_summary(body, max_quotes=self.summary_max_quotes)
            )
        if text is not None:
            content.append({"type": "text", "text": str(text)})
        for i, tool in enumerate(reply.tool_uses):
            content.append(
                {
                    "type": "tool_use",
                    "id": tool.id or f"toolu_emu_{seq:08d}_{i}",
                    "name": tool.name,
                    "input": tool.input,
                }
            )

        max_tokens = int(body["max_tokens"])
        kept: list[dict[str, Any]] = []
        used = 0
        hit_limit = False
        for blk in content:
            cost = output_tokens_for(blk)
            if used + cost > max_tokens:
                hit_limit = True
                if blk["type"] == "text":
                    room = max(0, max_tokens - used)
                    blk = {**blk, "text": blk["text"][: room * 4]}
                    cost = output_tokens_for(blk)
                kept.append(blk)
                used += cost
                break
            kept.append(blk)
            used += cost
        if reply.stop_reason:
            stop = reply.stop_reason
        elif hit_limit:
            stop = "max_tokens"
        elif any(b["type"] == "tool_use" for b in kept):
            stop = "tool_use"
        else:
            stop = "end_turn"
        out_tokens = reply.output_tokens if reply.output_tokens is not None else used
        return kept, stop, out_tokens

    def _account(self, body: Mapping[str, Any], out_tokens: int) -> dict[str, Any]:
        model = body["model"]
        settings = {"tool_choice": body.get("tool_choice"), "thinking": body.get("thinking")}
        outcome: CacheOutcome = self._cache.process(
            model,
            prompt_blocks(body),
            now=self.now(),
            min_tokens=self.min_cacheable_tokens(model),
            message_settings=settings,
        )
        usage = {
            "input_tokens": outcome.input_tokens,
            "cache_creation_input_tokens": outcome.write_tokens,
            "cache_read_input_tokens": outcome.read_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": outcome.write_5m_tokens,
                "ephemeral_1h_input_tokens": outcome.write_1h_tokens,
            },
            "output_tokens": out_tokens,
            "service_tier": "standard",
        }
        with self._lock:
            self._totals = self._totals.add(usage)
        return usage

    def _reply(self, x: _Exchange, seq: int, body: dict[str, Any], reply: Reply) -> None:
        content, stop_reason, out_tokens = self._build_content(reply, body, seq)
        usage = self._account(body, out_tokens)
        x.rec.usage = usage
        msg_id = f"msg_emu_{seq:08d}"
        kind = request_kind(body)
        self._pass_hold(kind)
        delay = reply.delay + self.latency(kind)
        if delay:
            self._wait(delay)
        if body.get("stream"):
            x.rec.outcome = f"fault:{reply.fault}" if reply.fault else "stream"
            self._stream(x, msg_id, body["model"], content, stop_reason, usage, reply)
            return

        message = {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }
        if reply.fault == "error":
            self._send_error(x, reply.fault_error or ApiError(type="overloaded_error"))
            return
        data = json.dumps(message).encode()
        if reply.fault == "cut":
            x.rec.outcome = "fault:cut"
            self._start(
                x, 200, {"content-type": "application/json", "content-length": str(len(data))}
            )
            x.handler.wfile.write(data[: len(data) // 2])
            raise _Abort()
        x.rec.outcome = "message"
        self._start(x, 200, {"content-type": "application/json", "content-length": str(len(data))})
        x.handler.wfile.write(data)

    def _stream_events(
        self,
        msg_id: str,
        model: str,
        content: list[dict[str, Any]],
        stop_reason: str,
        usage: dict[str, Any],
        chunk: int,
    ) -> list[tuple[str, dict[str, Any], bool]]:
        start_usage = {**usage, "output_tokens": min(1, usage["output_tokens"])}
        events: list[tuple[str, dict[str, Any], bool]] = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": msg_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": start_usage,
                    },
                },
                False,
            )
        ]
        for index, blk in enumerate(content):
            kind = blk["type"]
            deltas: list[dict[str, Any]]
            start: dict[str, Any]
            if kind == "text":
                start = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": c} for c in _chunks(blk["text"], chunk)]
            elif kind == "thinking":
                start = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [
                    {"type": "thinking_delta", "thinking": c}
                    for c in _chunks(blk["thinking"], chunk)
                ]
                deltas.append({"type": "signature_delta", "signature": blk["signature"]})
            elif kind == "tool_use":
                start = {"type": "tool_use", "id": blk["id"], "name": blk["name"], "input": {}}
                deltas = [{"type": "input_json_delta", "partial_json": ""}]
                deltas += [
                    {"type": "input_json_delta", "partial_json": c}
                    for c in _chunks(json.dumps(blk["input"]), chunk)
                ]
            else:
                start, deltas = blk, []
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": start},
                    False,
                )
            )
            for d in deltas:
                events.append(
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": d},
                        True,
                    )
                )
            events.append(
                ("content_block_stop", {"type": "content_block_stop", "index": index}, False)
            )
        delta_usage = {
            "input_tokens": usage["input_tokens"],
            "cache_creation_input_tokens": usage["cache_creation_input_tokens"],
            "cache_read_input_tokens": usage["cache_read_input_tokens"],
            "output_tokens": usage["output_tokens"],
        }
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": delta_usage,
                },
                False,
            )
        )
        events.append(("message_stop", {"type": "message_stop"}, False))
        return events

    def _stream(
        self,
        x: _Exchange,
        msg_id: str,
        model: str,
        content: list[dict[str, Any]],
        stop_reason: str,
        usage: dict[str, Any],
        reply: Reply,
    ) -> None:
        chunk = reply.chunk_chars or self.chunk_chars
        events = self._stream_events(msg_id, model, content, stop_reason, usage, chunk)
        h = x.handler
        self._start(
            x,
            200,
            {
                "content-type": "text/event-stream; charset=utf-8",
                "cache-control": "no-cache",
                "transfer-encoding": "chunked",
            },
        )

        def emit(name: str, payload: Mapping[str, Any]) -> None:
            data = f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            x.rec.events.append(name)

        def finish() -> None:
            h.wfile.write(b"0\r\n\r\n")

        total_deltas = sum(1 for e in events if e[2])
        fault = reply.fault
        fault_at = (
            min(max(0, reply.fault_after), total_deltas)
            if fault in ("error", "cut", "truncate")
            else None
        )
        sent = 0
        since_ping = 0
        for position, (name, payload, is_delta) in enumerate(events):
            if fault_at is not None and sent == fault_at and (is_delta or name == "message_delta"):
                if fault == "error":
                    err = reply.fault_error or ApiError(type="overloaded_error")
                    emit("error", self._error_body(x, err.type, err.text()))
                    finish()
                elif fault == "truncate":
                    finish()
                else:  # cut
                    raise _Abort()
                return
            if fault == "no_message_stop" and name == "message_stop":
                finish()
                return
            if position and reply.chunk_delay:
                self._wait(reply.chunk_delay)
            elif self._stopping.is_set():
                raise _Abort()
            emit(name, payload)
            if name == "message_start":
                emit("ping", {"type": "ping"})
            if is_delta:
                sent += 1
                since_ping += 1
                if self.ping_every and since_ping >= self.ping_every:
                    emit("ping", {"type": "ping"})
                    since_ping = 0
        finish()

    # ---- control endpoints (for a separately running emulator)

    def _control(self, h: _Handler, path: str, raw: bytes) -> None:
        rec = RecordedRequest(h.command, path, "", {}, None, raw, time.time(), "req_emu_control")
        x = _Exchange(h, rec)
        try:
            payload = json.loads(raw) if raw else {}
        except ValueError:
            payload = {}
        name = path[len("/_emulator/") :].strip("/")
        result: Any
        if name == "health":
            result = {"ok": True}
        elif name == "cost":
            result = self.cost_summary().as_dict()
        elif name == "requests":
            result = [
                {
                    "method": r.method,
                    "path": r.path,
                    "status": r.status,
                    "request_id": r.request_id,
                    "timestamp": r.timestamp,
                    "outcome": r.outcome,
                    "usage": r.usage,
                }
                for r in self.requests
            ]
        elif name == "reset" and h.command == "POST":
            self.reset()
            result = {"ok": True}
        elif name == "script" and h.command == "POST":
            items = [reply_from_dict(s) for s in payload.get("replies", [])]
            self.script(*items)
            result = {"ok": True, "pending": self.pending}
        elif name == "advance_time" and h.command == "POST":
            self.advance_time(float(payload.get("seconds", 0)))
            result = {"ok": True}
        elif name == "latency" and h.command == "POST":
            self.set_latency(str(payload["kind"]), float(payload["seconds"]))
            result = {"ok": True}
        elif name == "context_window" and h.command == "POST":
            self.set_context_window(str(payload["model"]), int(payload["tokens"]))
            result = {"ok": True}
        else:
            self._send_json(
                x, 404, self._error_body(x, "not_found_error", f"unknown control endpoint {path}")
            )
            return
        self._send_json(x, 200, result)


def iter_sse(raw: bytes) -> Iterable[tuple[str, Any]]:
    """Parse an SSE body into (event, data) pairs (helper for raw-HTTP tests)."""
    for frame in raw.decode().split("\n\n"):
        name, data = None, []
        for line in frame.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if name:
            yield name, json.loads("\n".join(data)) if data else None
