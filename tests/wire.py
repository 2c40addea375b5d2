"""Raw LSP-framed JSON-RPC to a daemon subprocess: for tests that send bytes no client would."""

from __future__ import annotations

import json
import os
import select
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import daemon_args


class Wire:
    """Blocking LSP-framed JSON-RPC over a subprocess's pipes."""

    def __init__(self, data_dir: Path, log: Path, args: list[str] | None = None) -> None:
        self.log = open(log, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            args or daemon_args(data_dir),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        assert self.proc.stdin and self.proc.stdout
        self.stdin = self.proc.stdin
        self.stdout = self.proc.stdout
        self.next_id = 1
        self.fd = self.stdout.fileno()
        self.buf = bytearray()

    def send_body(self, body: bytes) -> None:
        self.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def send(self, msg: Any) -> None:
        self.send_body(json.dumps(msg).encode())

    def flush(self) -> None:
        self.stdin.flush()

    def _fill(self, wait: float) -> None:
        ready, _, _ = select.select([self.fd], [], [], wait)
        if not ready:
            raise AssertionError(f"no answer from the daemon within {wait} s")
        chunk = os.read(self.fd, 1 << 16)
        assert chunk, f"daemon died (exit {self.proc.poll()})"
        self.buf += chunk

    def _readline(self, wait: float) -> bytes:
        while (i := self.buf.find(b"\n")) < 0:
            self._fill(wait)
        line = bytes(self.buf[: i + 1])
        del self.buf[: i + 1]
        return line

    def _read(self, n: int, wait: float) -> bytes:
        while len(self.buf) < n:
            self._fill(wait)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def recv(self, wait: float = 20.0) -> dict[str, Any]:
        length = None
        while True:
            line = self._readline(wait)
            if not line.strip():
                if length is not None:
                    break
                continue
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        msg = json.loads(self._read(length, wait))
        assert isinstance(msg, dict)
        return msg

    def drain(self, quiet: float) -> list[dict[str, Any]]:
        """Every message that arrives until none has for ``quiet`` seconds."""
        out = []
        while True:
            if b"\n" not in self.buf:
                ready, _, _ = select.select([self.fd], [], [], quiet)
                if not ready:
                    return out
            out.append(self.recv())

    def answer(self, wait: float = 20.0) -> dict[str, Any]:
        """The next response, notifications skipped."""
        while True:
            msg = self.recv(wait)
            if "id" in msg and "method" not in msg:
                return msg

    def call(self, method: str, params: Any) -> dict[str, Any]:
        msg_id = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        self.flush()
        while True:
            msg = self.recv()
            if msg.get("id") == msg_id:
                return msg

    def close(self) -> None:
        try:
            self.call("shutdown", None)
            self.send({"jsonrpc": "2.0", "method": "exit"})
            self.flush()
            self.stdin.close()
            self.proc.wait(10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.log.close()


def digest(root: Path) -> list[tuple[str, int, int]]:
    out = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            st_ = os.stat(os.path.join(dirpath, name))
            out.append(
                (os.path.relpath(os.path.join(dirpath, name), root), st_.st_size, st_.st_mtime_ns)
            )
    return sorted(out)
