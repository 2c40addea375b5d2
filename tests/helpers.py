"""Builders and readers shared by the unit and end-to-end tests (no tests here).

Entries are built as the dicts Claude Code writes to a transcript; an argument left as None
leaves its field out, so that each test states only the fields it depends on. The notification
helpers read the queues of ``Client.subscribe``: ``(method, params)`` pairs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compactd.services.store import Store
from compactd.transcript.model import Entry, Record, record_from_dict

if TYPE_CHECKING:
    from tests.emulator import Emulator

MODEL = "claude-sonnet-4-5"


def iso(ts: float, timespec: str = "auto") -> str:
    """A Unix time as a transcript timestamp: ISO 8601 in UTC with a ``Z``."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def numbering(prefix: str, start: int = 1) -> Callable[[], str]:
    """Fresh ids ``prefix1``, ``prefix2``, ... (from ``start``), one sequence per call."""
    count = itertools.count(start)
    return lambda: f"{prefix}{next(count)}"


# -- content blocks -----------------------------------------------------------------------------


def text_block(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def tool_use_block(
    tid: str, name: str = "Bash", inp: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": {} if inp is None else inp}


def tool_result_block(tid: str, content: Any = "ok", *, is_error: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tid, "content": content}
    if is_error:
        block["is_error"] = True
    return block


# -- entries ------------------------------------------------------------------------------------


def user(content: Any, *, uuid: str | None = None, **fields: Any) -> dict[str, Any]:
    """A user entry; ``fields`` are further top-level fields (parentUuid, isMeta, ...)."""
    entry: dict[str, Any] = {"type": "user"}
    if uuid is not None:
        entry["uuid"] = uuid
    entry["message"] = {"role": "user", "content": content}
    return {**entry, **fields}


def assistant(
    content: Any,
    *,
    uuid: str | None = None,
    msg_id: str | None = None,
    model: str | None = None,
    usage: dict[str, int] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """An assistant entry (one part of the response ``msg_id``)."""
    message: dict[str, Any] = {"role": "assistant"}
    if msg_id is not None:
        message["id"] = msg_id
    if model is not None:
        message["model"] = model
    message["content"] = content
    if usage is not None:
        message["usage"] = usage
    entry: dict[str, Any] = {"type": "assistant"}
    if uuid is not None:
        entry["uuid"] = uuid
    entry["message"] = message
    return {**entry, **fields}


def tool_call(
    tid: str,
    name: str,
    inp: dict[str, Any] | None = None,
    *,
    uuid: str | None = None,
    msg_id: str | None = None,
    model: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """An assistant entry whose only block calls the tool ``name``."""
    return assistant(
        [tool_use_block(tid, name, inp)], uuid=uuid, msg_id=msg_id, model=model, **fields
    )


def tool_result(
    tid: str, content: Any = "ok", *, uuid: str | None = None, is_error: bool = False, **fields: Any
) -> dict[str, Any]:
    """A user entry carrying the result of the tool call ``tid``."""
    return user([tool_result_block(tid, content, is_error=is_error)], uuid=uuid, **fields)


def numbered_call(i: int, name: str, args: dict[str, Any], ts: float) -> dict[str, Any]:
    """Call number ``i``: uuid ``a{i}``, response ``msg_{i}``, tool id ``toolu_{i}``."""
    return tool_call(f"toolu_{i}", name, args, uuid=f"a{i}", msg_id=f"msg_{i}", timestamp=iso(ts))


def numbered_result(
    i: int, content: str, ts: float, is_error: bool = False, **fields: Any
) -> dict[str, Any]:
    """The result of call number ``i``: uuid ``r{i}``."""
    return tool_result(
        f"toolu_{i}", content, uuid=f"r{i}", is_error=is_error, timestamp=iso(ts), **fields
    )


def numbered_read(
    i: int, path: Path | str, ts: float, content: str = "(content)"
) -> list[dict[str, Any]]:
    """A Read of ``path`` (call number ``i``) and its result."""
    return [numbered_call(i, "Read", {"file_path": str(path)}, ts), numbered_result(i, content, ts)]


def linked_record(
    uuid: str, kind: str = "user", parent: str | None = None, **fields: Any
) -> Record:
    """A record of type ``kind`` under ``parent``; a user or assistant one says
    ``text of {uuid}`` unless ``fields`` give its message."""
    obj: dict[str, Any] = {"type": kind, "uuid": uuid, "parentUuid": parent}
    if kind in ("user", "assistant") and "message" not in fields:
        obj["message"] = {"role": kind, "content": f"text of {uuid}"}
    return record_from_dict({**obj, **fields})


def counting_calls(counted: Counter[str], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, counting each call in ``counted[name]``: monkeypatched in where a test counts
    how often a real function runs."""

    def call(*args: Any, **kwargs: Any) -> Any:
        counted[name] += 1
        return fn(*args, **kwargs)

    return call


def uuids(records: Iterable[Record]) -> list[str | None]:
    return [r.entry.uuid for r in records]


def to_records(entries: Iterable[dict[str, Any]]) -> list[Record]:
    """Entries through the real parser, as the daemon reads them."""
    return [record_from_dict(e) for e in entries]


def to_entries(entries: Iterable[dict[str, Any]]) -> list[Entry]:
    return [r.entry for r in to_records(entries)]


class SessionBuilder:
    """A linked coding session with large Read and Bash results, stamped relative to now."""

    def __init__(self, ago_minutes: float = 0.5) -> None:
        self.entries: list[dict[str, Any]] = []
        self.n = 0
        self.parent: str | None = None
        self.t0 = time.time() - ago_minutes * 60

    def _add(self, entry: dict[str, Any]) -> dict[str, Any]:
        self.n += 1
        uid = f"e{self.n:05d}"
        stamp = iso(self.t0, "milliseconds")
        entry = {"uuid": uid, "parentUuid": self.parent, "timestamp": stamp, **entry}
        self.parent = uid
        self.entries.append(entry)
        return entry

    def user(self, content: str) -> None:
        self._add(user(content))

    def reply(self, text: str) -> None:
        self._add(assistant(text, msg_id=f"msg_{self.n + 1:05d}", model=MODEL))

    def call(self, name: str, inp: dict[str, Any], output: str, *, is_error: bool = False) -> str:
        tid = f"toolu_{self.n + 1:05d}"
        self._add(tool_call(tid, name, inp, msg_id=f"msg_{self.n + 1:05d}", model=MODEL))
        self._add(tool_result(tid, output, is_error=is_error))
        return tid

    def read(self, path: str, tokens: int) -> str:
        body = "\n".join(f"{i:>6}\tdef f{i}(): return {i}  # {path}" for i in range(tokens // 12))
        return self.call("Read", {"file_path": path}, body)

    def bash(self, command: str, tokens: int) -> str:
        out = "\n".join(f"line {i} of {command}: ok ok ok ok" for i in range(tokens // 10))
        return self.call("Bash", {"command": command}, out)


# -- transcripts --------------------------------------------------------------------------------


def stored_transcript(data_dir: Path, sid: str) -> Path:
    """Where a daemon on ``data_dir`` keeps the transcript of session ``sid``."""
    return Store(data_dir).transcript_path(sid)


def transcript_lines(path: str | Path) -> list[dict[str, Any]]:
    """The entries of a JSONL transcript (split on newlines only, blank lines skipped)."""
    return [json.loads(line) for line in Path(path).read_bytes().splitlines() if line.strip()]


# -- notifications ------------------------------------------------------------------------------


def drain(queue: asyncio.Queue[tuple[str, Any]]) -> list[Any]:
    """The params of everything queued so far (notifications sent before a response arrive
    before it)."""
    out: list[Any] = []
    while not queue.empty():
        out.append(queue.get_nowait()[1])
    return out


async def collect(
    queue: asyncio.Queue[tuple[str, Any]], wait: float, *, quiet: bool = False
) -> list[Any]:
    """The params of the notifications that arrive within ``wait`` seconds; with ``quiet``,
    until none has arrived for ``wait`` seconds."""
    out: list[Any] = []
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        try:
            out.append((await asyncio.wait_for(queue.get(), left))[1])
        except TimeoutError:
            break
        if quiet:
            deadline = time.monotonic() + wait
    return out


# -- daemon options -----------------------------------------------------------------------------


def emulator_options(emu: Emulator, **extra: Any) -> dict[str, Any]:
    """initializationOptions with the summarizer on ``emu``; ``summarizer`` adds to its options.

    Summaries are not prepared in the background unless ``backgroundCompaction`` says so: the
    tests of compaction itself count and script the model's requests one by one, and a
    preparation would send its own (tests/e2e/test_background.py turns it on)."""
    summarizer = {"baseUrl": emu.base_url, "apiKey": "test", **extra.pop("summarizer", {})}
    return {
        "summarizer": summarizer,
        "keepAliveIntervalMs": 200,
        "backgroundCompaction": {"enabled": False},
        **extra,
    }


# A real directory to use as a session's cwd: the daemon refuses a cwd that does not exist.
WORKDIR = Path(tempfile.gettempdir()) / "compactd-tests" / "project"
WORKDIR.mkdir(parents=True, exist_ok=True)
CWD = str(WORKDIR)


# ``compactd`` as a shell starts a foreground job: SIGINT at its default and not blocked. A
# child inherits an ignored or blocked SIGINT across exec, and pytest may carry one: started
# in the background by a non-interactive shell (``pytest &``, as a CI script may), it ignores
# SIGINT, and so did the replay, which ran to its end through the signal.
AS_A_SHELL_JOB = (
    "import signal, sys\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
    "from compactd.cli.entry import main\n"
    "sys.exit(main())\n"
)


async def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[int, str, str]:
    """``python -m compactd ARGS`` to its end: exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "compactd",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env if env is not None else dict(os.environ),
        cwd=cwd,
    )
    out, err = await asyncio.wait_for(process.communicate(), 50)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def index_pages(path: Path) -> int:
    """The pages of the SQLite file at ``path``, its write-ahead log folded in first (so that
    every page a reader sees is in the file)."""
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = path.read_bytes()
    return len(data) // _page_size(data)


def _page_size(header: bytes) -> int:
    size = int.from_bytes(header[16:18], "big")
    return 65536 if size == 1 else size


def damage_page(path: Path, page: int, seed: int) -> bytes:
    """Write random bytes over the whole page ``page`` (from 0) of the SQLite file at
    ``path``, in place (same inode); the bytes written."""
    import random

    with path.open("r+b") as fh:
        size = _page_size(fh.read(18))
        garbage = random.Random(seed * 100_003 + page).randbytes(size)
        fh.seek(page * size)
        fh.write(garbage)
    return garbage


def page_bytes(path: Path, page: int) -> bytes:
    """Page ``page`` of the SQLite file at ``path`` as it is now (b"" past its end)."""
    with path.open("rb") as fh:
        size = _page_size(fh.read(18))
        fh.seek(page * size)
        return fh.read(size)
