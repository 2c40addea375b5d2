"""What a client sends can neither stop the daemon nor lose an acknowledged entry.

Raw frames over the real daemon's stdio: bytes no editor would send, the LSP lifecycle as the
specification states it, exact-once answers, and the two ways acknowledged entries were lost.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compactd import protocol as p
from tests.conftest import daemon_args
from tests.helpers import CWD, assistant, user
from tests.wire import Wire

INIT = {"processId": None, "capabilities": {}}


def start(tmp: Path, *, init: bool = True, options: dict[str, Any] | None = None) -> Wire:
    data = tmp / "data"
    w = Wire(data, tmp / "daemon.log")
    if init:
        res = w.call(
            "initialize",
            {**INIT, "initializationOptions": {"dataDir": str(data), **(options or {})}},
        )
        assert "result" in res, res
        w.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    return w


@pytest.fixture
def wire(tmp_path: Path) -> Iterator[Wire]:
    w = start(tmp_path)
    yield w
    w.close()


def error_code(msg: dict[str, Any]) -> tuple[int, str]:
    assert "error" in msg, msg
    return msg["error"]["code"], msg["error"]["data"]["code"]


def transcript(tmp: Path, sid: str) -> bytes:
    return (tmp / "data" / "sessions" / sid / "transcript.jsonl").read_bytes()


def open_session(w: Wire, sid: str, **fields: Any) -> dict[str, Any]:
    res = w.call(
        p.SESSION_OPEN, {"cwd": CWD, "model": "claude-sonnet-4-5", "sessionId": sid, **fields}
    )
    assert "result" in res, res
    return res["result"]


def conversation(n: int, prefix: str = "m") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append(user(f"request {i}: " + "words " * 40, uuid=f"{prefix}-u{i}"))
        out.append(assistant(f"answer {i}: " + "more words " * 40, uuid=f"{prefix}-a{i}"))
    return out


# -- bytes -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [b'"\xff\xfe"', b'"\xc0\xaf"', b'"\xed\xa0\x80"'],
    ids=["invalid", "overlong", "surrogate"],
)
def test_bodies_that_are_not_utf8_are_parse_errors_with_their_id(wire: Wire, bad: bytes) -> None:
    for where in (b'{"sessionId": %s}' % bad, b"{%s: 1}" % bad):
        wire.send_body(
            b'{"jsonrpc": "2.0", "id": 71, "method": "tokens/status", "params": ' + where + b"}"
        )
        wire.flush()
        msg = wire.recv()
        assert msg["id"] == 71
        assert error_code(msg) == (-32700, "parseError")
    assert "result" in wire.call(p.SESSION_LIST, {})


def test_a_huge_content_length_is_answered_at_once_and_the_next_frame_served(wire: Wire) -> None:
    wire.stdin.write(b"Content-Length: 999999999999999999\r\n\r\n")
    wire.flush()
    msg = wire.recv(wait=5)
    assert msg["id"] is None and error_code(msg) == (-32600, "frameTooLarge")
    assert "result" in wire.call(p.SESSION_LIST, {})


def _list(i: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": i, "method": p.SESSION_LIST, "params": {}}).encode()


def test_a_header_split_across_writes_after_a_lying_length_is_found(wire: Wire) -> None:
    """Issue 26: a Content-Length that lies (long or short) and a next header that arrives in
    two writes. Each first write starts with a request whose answer shows the daemon has read
    it all before the second is sent; the valid request behind the bad frame runs once."""
    answers: dict[int, dict[str, Any]] = {}

    def until(msg_id: int) -> None:
        while msg_id not in answers:
            msg = wire.answer()
            assert msg["id"] not in answers, f"answered twice: {msg}"
            answers[msg["id"]] = msg

    cases = [(5, 5), (5, 1), (12, 9), (3, 17), (-5, 5), (-9, 12), (40, 5)]
    for k, (lie, cut) in enumerate(cases):
        n = 1000 + 10 * k
        bad = _list(n + 1)
        valid = _list(n + 2)
        header = b"Content-Length: %d\r\n\r\n" % len(valid)
        stream = b"Content-Length: %d\r\n\r\n" % (len(bad) + lie) + bad + header + valid
        split = stream.index(header) + cut
        wire.send_body(_list(n))
        wire.stdin.write(stream[:split])
        wire.flush()
        until(n)  # the first write has been read
        wire.stdin.write(stream[split:])
        wire.flush()
        until(n + 2)
        assert "result" in answers[n] and "result" in answers[n + 2], (lie, cut, answers)
        if lie > 0:  # the message before the swallowed header was whole: it ran too
            until(n + 1)
            assert "result" in answers[n + 1], (lie, cut)
    assert "result" in wire.call(p.SESSION_LIST, {})
    assert not [m for m in wire.drain(0.2) if "id" in m and "method" not in m]


def test_a_float_id_is_echoed_in_its_error(wire: Wire) -> None:
    for raw in ("1.5", "7.0", "1e3"):
        body = f'{{"jsonrpc": "2.0", "id": {raw}, "method": "session/list", "params": {{}}}}'
        wire.send_body(body.encode())
        wire.send_body(body[:-3].encode())  # cut: a parse error whose id can still be read
        wire.flush()
        refused, unparsed = wire.answer(), wire.answer()
        assert refused["id"] == float(raw) and error_code(refused) == (-32600, "invalidRequest")
        assert unparsed["id"] == float(raw) and error_code(unparsed) == (-32700, "parseError")
    assert "result" in wire.call(p.SESSION_LIST, {})


def test_requests_with_a_null_id_are_answered_with_a_null_id(wire: Wire) -> None:
    wire.send({"jsonrpc": "2.0", "id": None, "method": p.SESSION_LIST, "params": 5})
    wire.flush()
    msg = wire.recv()
    assert "id" in msg and msg["id"] is None
    assert error_code(msg) == (-32602, "invalidParams")


# -- params ------------------------------------------------------------------------------------


def test_omitted_params_are_invalid_params(wire: Wire) -> None:
    wire.send({"jsonrpc": "2.0", "id": 93, "method": p.SESSION_OPEN})
    wire.flush()
    msg = wire.recv()
    assert msg["id"] == 93
    assert error_code(msg) == (-32602, "invalidParams")
    assert "cwd" in msg["error"]["message"]


def test_edge_values_are_refused_and_change_nothing(wire: Wire, tmp_path: Path) -> None:
    open_session(wire, "s")
    assert wire.call(p.SESSION_APPEND, {"sessionId": "s", "entries": conversation(2)})["result"]
    before = transcript(tmp_path, "s")
    deep: Any = "x"
    for _ in range(600):
        deep = [deep]
    for method, params in [
        (p.FILESTATE_RECORD, {"sessionId": "s", "path": f"{CWD}/a.py", "timestamp": 1e20}),
        (p.FILESTATE_RECORD, {"sessionId": "s", "path": f"{CWD}/a.py", "offset": 2**70}),
        (p.SESSION_APPEND, {"sessionId": "s", "entries": [user(deep, uuid="deep")]}),
        (p.SESSION_OPEN, {"cwd": CWD, "model": "m", "sessionId": ""}),
        (p.SESSION_OPEN, {"cwd": CWD, "model": "m", "contextWindow": 2**80}),
    ]:
        msg = wire.call(method, params)
        assert error_code(msg) == (-32602, "invalidParams"), (method, msg)
    assert transcript(tmp_path, "s") == before
    sessions = wire.call(p.SESSION_LIST, {})["result"]["sessions"]
    assert [s["sessionId"] for s in sessions] == ["s"]


def test_paths_mean_what_they_mean_in_the_sessions_cwd(wire: Wire, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "logs").mkdir(parents=True)
    lines = [json.dumps(e) for e in conversation(2)]
    (project / "logs" / "t.jsonl").write_text("\n".join(lines) + "\n")
    opened = wire.call(
        p.SESSION_OPEN,
        {"cwd": str(project), "model": "m", "sessionId": "rel", "transcriptPath": "logs/t.jsonl"},
    )
    assert opened["result"]["entryCount"] == 4
    assert opened["result"]["importedFrom"] == str(project / "logs" / "t.jsonl")

    missing = wire.call(p.SESSION_OPEN, {"cwd": str(tmp_path / "nope"), "model": "m"})
    assert error_code(missing) == (-32602, "invalidParams")
    assert "not an existing directory" in missing["error"]["message"]

    (project / "notes.jsonl").write_text('{"name": "a", "size": 1}\n{"name": "b"}\n')
    foreign = wire.call(
        p.SESSION_OPEN,
        {
            "cwd": str(project),
            "model": "m",
            "sessionId": "foreign",
            "transcriptPath": "notes.jsonl",
        },
    )
    assert error_code(foreign) == (-32000, "transcriptUnreadable")
    assert (
        "without 'type'" in foreign["error"]["message"]
        and "name, size" in foreign["error"]["message"]
    )
    assert not (tmp_path / "data" / "sessions" / "foreign").exists()


# -- methods and lifecycle -----------------------------------------------------------------------


def test_every_error_has_a_stable_code(wire: Wire) -> None:
    unknown = wire.call("compact/everything", {})
    assert error_code(unknown) == (-32601, "methodNotFound")
    for notification in ("initialized", "$/cancelRequest", "textDocument/didOpen", "exit"):
        msg = wire.call(notification, {})
        assert error_code(msg) == (-32600, "invalidRequest"), notification
    again = wire.call("initialize", {**INIT})
    assert error_code(again) == (-32600, "invalidRequest")


def test_only_compactds_capabilities_are_advertised(tmp_path: Path) -> None:
    w = start(tmp_path, init=False)
    try:
        res = w.call(
            "initialize", {**INIT, "initializationOptions": {"dataDir": str(tmp_path / "d")}}
        )
        caps = res["result"]["capabilities"]
        assert set(caps) == {"experimental"}
        assert p.COMPACT_AUTO in caps["experimental"]["compactd"]["methods"]
    finally:
        w.close()


def test_lifecycle_as_lsp_says(tmp_path: Path) -> None:
    w = start(tmp_path, init=False)
    early = w.call(p.SESSION_LIST, {})
    assert error_code(early) == (-32002, "serverNotInitialized")
    assert error_code(w.call("shutdown", None)) == (-32002, "serverNotInitialized")
    w.call("initialize", {**INIT, "initializationOptions": {"dataDir": str(tmp_path / "data")}})
    assert w.call("shutdown", None)["result"] is None
    late = w.call(p.SESSION_LIST, {})
    assert error_code(late) == (-32600, "shuttingDown")
    w.send({"jsonrpc": "2.0", "method": "exit"})
    w.flush()
    assert w.proc.wait(10) == 0
    w.log.close()

    (tmp_path / "bare").mkdir()
    bare = start(tmp_path / "bare")
    bare.send({"jsonrpc": "2.0", "method": "exit"})
    bare.flush()
    assert bare.proc.wait(10) == 1
    bare.log.close()


def test_work_done_progress_over_the_wire(tmp_path: Path) -> None:
    """The daemon's own request (``window/workDoneProgress/create``) and its reply: accepted,
    the operation reports ``$/progress`` under that token; refused, it goes on without one; a
    reply to no request of the daemon's changes nothing."""
    w = start(tmp_path, init=False)
    try:
        res = w.call(
            "initialize",
            {
                "processId": None,
                "capabilities": {"window": {"workDoneProgress": True}},
                "initializationOptions": {
                    "dataDir": str(tmp_path / "data"),
                    "summarizer": {"offline": True},
                },
            },
        )
        assert "result" in res, res
        w.send({"jsonrpc": "2.0", "id": "nobody-asked", "result": None})
        for msg_id, accept in ((501, True), (502, False)):
            sid = f"progress-{msg_id}"
            open_session(w, sid)
            w.call(p.SESSION_APPEND, {"sessionId": sid, "entries": conversation(6, sid)})
            w.send(
                {
                    "jsonrpc": "2.0",
                    "id": msg_id,
                    "method": p.COMPACT_FULL,
                    "params": {"sessionId": sid},
                }
            )
            w.flush()
            create = w.recv()
            while create.get("method") != "window/workDoneProgress/create":
                assert create.get("id") != msg_id, create
                create = w.recv()
            token = create["params"]["token"]
            if accept:
                w.send({"jsonrpc": "2.0", "id": create["id"], "result": None})
            else:
                w.send(
                    {
                        "jsonrpc": "2.0",
                        "id": create["id"],
                        "error": {"code": -32603, "message": "no"},
                    }
                )
            w.flush()
            seen: list[dict[str, Any]] = []
            while not (answer := w.recv()).get("id") == msg_id or "method" in answer:
                seen.append(answer)
            assert "result" in answer, answer
            progress = [m["params"] for m in seen if m.get("method") == "$/progress"]
            if not accept:
                assert progress == []
                continue
            kinds = [v["value"]["kind"] for v in progress]
            assert kinds[0] == "begin" and kinds[-1] == "end" and "report" in kinds, kinds
            assert {v["token"] for v in progress} == {token}
            assert progress[0]["value"]["cancellable"] is True
            # Ended: a cancel from the progress bar now reaches nothing.
            w.send(
                {
                    "jsonrpc": "2.0",
                    "method": "window/workDoneProgress/cancel",
                    "params": {"token": token},
                }
            )
        assert "result" in w.call(p.SESSION_LIST, {})
    finally:
        w.close()


def test_a_cancel_answer_has_its_code(tmp_path: Path) -> None:
    w = start(tmp_path, options={"summarizer": {"offline": True}})
    try:
        open_session(w, "c")
        w.call(p.SESSION_APPEND, {"sessionId": "c", "entries": conversation(30)})
        before = transcript(tmp_path, "c")
        # The cancel follows in the same write: it reaches the daemon before the compaction
        # can start writing.
        w.send(
            {
                "jsonrpc": "2.0",
                "id": "cancel-1",
                "method": p.COMPACT_FULL,
                "params": {"sessionId": "c"},
            }
        )
        w.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": "cancel-1"}})
        w.flush()
        msg = w.answer()
        assert msg["id"] == "cancel-1"
        assert error_code(msg) == (-32800, "cancelled")
        assert transcript(tmp_path, "c") == before
    finally:
        w.close()


def test_offline_summaries_say_when_instructions_could_not_be_followed(tmp_path: Path) -> None:
    w = start(tmp_path, options={"summarizer": {"offline": True}})
    try:
        open_session(w, "o")
        w.call(p.SESSION_APPEND, {"sessionId": "o", "entries": conversation(10)})
        res = w.call(
            p.COMPACT_FULL, {"sessionId": "o", "customInstructions": "keep the SQL schema"}
        )["result"]
        assert res["summarizer"] == "offline"
        assert any("custom instructions could not be followed" in x for x in res["warnings"])
        assert "keep the SQL schema" in json.dumps(res["summary"])
    finally:
        w.close()


# -- the editor goes away -------------------------------------------------------------------------

_EDITOR = textwrap.dedent(
    """
    import os, subprocess, sys, time
    # Spawn the daemon on pipes the test holds too, so they stay open when this process dies.
    proc = subprocess.Popen(sys.argv[3:], stdin=int(sys.argv[1]), stdout=int(sys.argv[2]),
                            pass_fds=(int(sys.argv[1]), int(sys.argv[2])))
    print(proc.pid, flush=True)
    time.sleep(600)
    """
)


def test_the_daemon_exits_when_its_editor_dies_though_the_pipe_stays_open(tmp_path: Path) -> None:
    to_daemon_r, to_daemon_w = os.pipe()
    from_daemon_r, from_daemon_w = os.pipe()
    log = open(tmp_path / "daemon.log", "wb")  # noqa: SIM115
    editor = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _EDITOR,
            str(to_daemon_r),
            str(from_daemon_w),
            *daemon_args(tmp_path / "data"),
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        pass_fds=(to_daemon_r, from_daemon_w),
    )
    assert editor.stdout is not None
    daemon_pid = int(editor.stdout.readline())
    os.close(to_daemon_r)
    os.close(from_daemon_w)
    w = Wire.__new__(Wire)
    w.stdin = os.fdopen(to_daemon_w, "wb")
    w.fd = from_daemon_r
    w.buf = bytearray()
    w.next_id = 1
    w.call("initialize", {**INIT, "initializationOptions": {"dataDir": str(tmp_path / "data")}})
    open_session(w, "e")
    entries = conversation(3)
    assert (
        w.call(p.SESSION_APPEND, {"sessionId": "e", "entries": entries})["result"]["appended"] == 6
    )
    editor.kill()
    editor.wait()
    started = time.monotonic()
    while time.monotonic() - started < 10:
        try:
            os.kill(daemon_pid, 0)
        except ProcessLookupError:
            break
        try:
            os.waitpid(daemon_pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    else:
        os.kill(daemon_pid, signal.SIGKILL)
        pytest.fail("the daemon was still running 10 s after its editor died")
    took = time.monotonic() - started
    print(f"daemon gone {took:.1f} s after the editor")
    w.stdin.close()
    os.close(from_daemon_r)
    log.close()
    lines = transcript(tmp_path, "e").splitlines()
    assert [json.loads(x)["uuid"] for x in lines] == [e["uuid"] for e in entries]


def test_the_daemon_exits_when_the_process_id_it_was_given_dies(tmp_path: Path) -> None:
    editor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    w = start(tmp_path, init=False)
    try:
        w.call(
            "initialize",
            {
                "processId": editor.pid,
                "capabilities": {},
                "initializationOptions": {"dataDir": str(tmp_path / "data")},
            },
        )
        editor.kill()
        editor.wait()
        assert w.proc.wait(10) == 0
    finally:
        if w.proc.poll() is None:
            w.proc.kill()
        w.log.close()


# -- acknowledged entries ------------------------------------------------------------------------


def test_a_client_entry_with_compactds_group_size_loses_nothing(tmp_path: Path) -> None:
    w = start(tmp_path, options={"summarizer": {"offline": True}})
    acked: list[str] = []
    try:
        open_session(w, "g")
        for i in range(9):
            entry = user(f"entry {i}", uuid=f"g{i}")
            if i == 3:
                entry["compactdGroupSize"] = 50
            res = w.call(p.SESSION_APPEND, {"sessionId": "g", "entries": [entry]})
            assert res["result"]["appended"] == 1
            acked.append(entry["uuid"])
        w.call(p.SESSION_APPEND, {"sessionId": "g", "entries": conversation(10)})
        acked += [e["uuid"] for e in conversation(10)]
        result = w.call(p.COMPACT_FULL, {"sessionId": "g"})["result"]
        assert "compactdGroupSize" not in result["boundary"]
        # A client that appends what it was given, with the field put back in, as before.
        returned = {**result["boundary"], "uuid": "client-copy", "compactdGroupSize": 50}
        assert w.call(p.SESSION_APPEND, {"sessionId": "g", "entries": [returned]})["result"]
        acked.append("client-copy")
        for i in range(3):
            w.call(
                p.SESSION_APPEND, {"sessionId": "g", "entries": [user(f"after {i}", uuid=f"z{i}")]}
            )
            acked.append(f"z{i}")
    finally:
        w.close()
    assert b'compactdGroupSize":50' not in transcript(tmp_path, "g")
    again = start(tmp_path)
    try:
        open_session(again, "g")
    finally:
        again.close()
    stored = {json.loads(x).get("uuid") for x in transcript(tmp_path, "g").splitlines()}
    assert set(acked) <= stored
    assert "dropped" not in (tmp_path / "daemon.log").read_text()


@pytest.mark.parametrize("first", ["plain", "import"])
def test_racing_an_import_and_an_open_of_one_id_loses_no_acknowledged_entry(
    tmp_path: Path, first: str
) -> None:
    big = tmp_path / "big.jsonl"
    with open(big, "w") as fh:
        for i in range(25_000):
            fh.write(json.dumps(user(f"imported {i} " + "x" * 1_500, uuid=f"imp-{i}")) + "\n")
    opens = {
        "plain": {"cwd": CWD, "model": "m", "sessionId": "race"},
        "import": {"cwd": CWD, "model": "m", "sessionId": "race", "transcriptPath": str(big)},
    }
    order = [first, "import" if first == "plain" else "plain"]
    w = start(tmp_path)
    try:
        for name in order:
            w.send({"jsonrpc": "2.0", "id": name, "method": p.SESSION_OPEN, "params": opens[name]})
        w.flush()
        answers: dict[Any, dict[str, Any]] = {}
        msg = w.answer(wait=60)
        answers[msg["id"]] = msg
        # Appends go out as soon as one open has answered, while the other may still run.
        for i in range(52):
            w.send(
                {
                    "jsonrpc": "2.0",
                    "id": f"append-{i}",
                    "method": p.SESSION_APPEND,
                    "params": {
                        "sessionId": "race",
                        "entries": [user(f"mine {i}", uuid=f"mine-{i}")],
                    },
                }
            )
        w.flush()
        while len(answers) < 54:
            msg = w.answer(wait=60)
            assert msg["id"] not in answers, f"answered twice: {msg}"
            answers[msg["id"]] = msg
    finally:
        w.close()
    acked = [f"mine-{i}" for i in range(52) if "result" in answers[f"append-{i}"]]
    opened = [k for k in order if "result" in answers[k]]
    stored = {json.loads(x).get("uuid") for x in transcript(tmp_path, "race").splitlines()}
    lost = [u for u in acked if u not in stored]
    print(f"{len(acked)} appends acknowledged, {len(lost)} lost; opens that succeeded: {opened}")
    assert acked and opened
    assert lost == []
