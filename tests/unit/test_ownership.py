"""The session lock helper (``compactd/services/ownership.py``) and the store's part in
ownership: who holds a session, a probe that never stands in an opener's way, a killed holder's
lock going with it, temporary files unique per writer, and a read-only load that changes no byte.

``flock`` locks belong to an open file description, so two ``acquire`` calls in one process
conflict exactly as two processes do; the kill test uses a real second process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from compactd.services import ownership
from compactd.services.store import Store, atomic_write
from compactd.transcript.model import GROUP_SIZE_FIELD
from tests.helpers import CWD

pytestmark = pytest.mark.timeout(20)


def test_a_second_acquire_is_refused_and_names_the_holder(tmp_path: Path) -> None:
    before = time.time()
    lock = ownership.acquire(tmp_path)
    try:
        with pytest.raises(ownership.SessionHeld) as refused:
            ownership.acquire(tmp_path)
        holder = refused.value.holder
        assert holder.pid == os.getpid()
        assert holder.host == socket.gethostname()
        assert holder.since is not None and before <= holder.since <= time.time()
        assert ownership.probe(tmp_path) == holder
    finally:
        lock.release()
    assert ownership.probe(tmp_path) is None
    assert ownership.read_record(tmp_path) == ownership.Holder()  # the record went with it
    again = ownership.acquire(tmp_path)  # released: the next one gets it
    again.release()
    again.release()  # idempotent


def test_a_probe_of_a_directory_never_owned_creates_nothing(tmp_path: Path) -> None:
    assert ownership.probe(tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_probes_never_make_an_opener_fail(tmp_path: Path) -> None:
    # A probe that took the owner's lock, even for an instant, would make a concurrent opener
    # believe the session is held. 300 acquire/release rounds against a stream of probes.
    stop = threading.Event()
    probes = 0

    def prober() -> None:
        nonlocal probes
        while not stop.is_set():
            ownership.probe(tmp_path)
            probes += 1

    ownership.acquire(tmp_path).release()  # the files exist, so the probes really lock
    threads = [threading.Thread(target=prober) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(300):
            ownership.acquire(tmp_path).release()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert probes > 0


_HOLD = """
import sys
from pathlib import Path
from compactd.services import ownership
lock = ownership.acquire(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


def test_a_killed_holders_lock_goes_with_it(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"held\n"
        with pytest.raises(ownership.SessionHeld) as refused:
            ownership.acquire(tmp_path)
        assert refused.value.holder.pid == child.pid
        assert ownership.probe(tmp_path) == refused.value.holder
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    lock = ownership.acquire(tmp_path)
    try:
        assert ownership.read_record(tmp_path).pid == os.getpid()  # the stale record replaced
    finally:
        lock.release()


def test_writers_of_one_file_never_share_a_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "meta.json"
    errors: list[BaseException] = []

    def writer(tag: bytes) -> None:
        try:
            for i in range(150):
                atomic_write(target, tag + str(i).encode())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in (b"a", b"b", b"c")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert target.read_bytes()[:1] in (b"a", b"b", b"c")
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]  # no temporary file left


def _line(obj: dict[str, object]) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def _stored(tmp_path: Path, body: bytes) -> tuple[Store, Path]:
    store = Store(tmp_path / "data")
    path = store.transcript_path("s")
    path.parent.mkdir(parents=True)
    path.write_bytes(body)
    return store, path


def _user(n: int) -> dict[str, object]:
    return {
        "type": "user",
        "uuid": f"u{n}",
        "cwd": CWD,
        "message": {"role": "user", "content": f"message {n}"},
    }


def test_a_read_only_load_leaves_a_torn_tail_in_the_file(tmp_path: Path) -> None:
    body = _line(_user(1)) + _line(_user(2)) + b'{"type": "user", "uu'
    store, path = _stored(tmp_path, body)
    loaded = store.load("s", repair=False)
    assert [r.entry.uuid for r in loaded.records] == ["u1", "u2"]
    assert loaded.truncated_bytes == len(b'{"type": "user", "uu')
    assert path.read_bytes() == body
    repaired = store.load("s")  # the owner's load cuts it
    assert [r.entry.uuid for r in repaired.records] == ["u1", "u2"]
    assert path.read_bytes() == _line(_user(1)) + _line(_user(2))


def test_a_read_only_load_leaves_a_cut_group_in_the_file(tmp_path: Path) -> None:
    boundary = {
        "type": "system",
        "subtype": "compact_boundary",
        "uuid": "b1",
        "cwd": CWD,
        "content": "Conversation compacted",
        "compactMetadata": {"trigger": "manual", "preTokens": 10},
        GROUP_SIZE_FIELD: 3,
    }
    summary = {**_user(9), "uuid": "s1", "isCompactSummary": True}
    body = _line(_user(1)) + b"not json\n" + _line(_user(2)) + _line(boundary) + _line(summary)
    store, path = _stored(tmp_path, body)
    loaded = store.load("s", repair=False)
    assert [r.entry.uuid for r in loaded.records] == ["u1", "u2"]
    assert path.read_bytes() == body
    # The records are located in the file as it is: a released line reads back right.
    assert [r.raw for r in loaded.records] == [_line(_user(1))[:-1], _line(_user(2))[:-1]]
    assert [store.load("s").records[i].entry.uuid for i in range(2)] == ["u1", "u2"]
    assert b"b1" not in path.read_bytes()
