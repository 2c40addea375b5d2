"""End-to-end tests of the daemon's foundation: lifecycle, sessions, restart, fixture import,
and every class of bad input (the daemon answers, changes nothing, keeps going). The lifecycle
and bad frames go over real stdio; sessions, imports and bad params run in process
(tests/inproc.py: the same requests through ``handlers.invoke``, no wire).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from compactd_client import Client, RpcError

from compactd import protocol as p
from compactd.agents.claude_code.format import is_hook_summary
from compactd.transcript.model import parse_lines
from tests.conftest import daemon_args, fixture_transcripts
from tests.helpers import CWD, assistant, text_block, user
from tests.inproc import InProc


def _user(uid: str, content: str, parent: str | None = None) -> dict[str, Any]:
    return user(
        content,
        uuid=uid,
        parentUuid=parent,
        timestamp="2026-11-22T10:00:00.000Z",
        someFutureField={"kept": [1, 2, 3]},
    )


def _assistant(uid: str, content: str, parent: str, msg_id: str, total: int) -> dict[str, Any]:
    return assistant(
        [text_block(content)],
        uuid=uid,
        msg_id=msg_id,
        model="claude-sonnet-4-5",
        usage={"input_tokens": total - 10, "output_tokens": 10},
        parentUuid=parent,
        timestamp="2026-11-22T10:00:01.000Z",
    )


# -- lifecycle ----------------------------------------------------------------------------------


async def test_initialize_reports_server_info_and_methods(daemon: Client) -> None:
    assert daemon.server_info["name"] == "compactd"
    info = daemon.capabilities["experimental"]["compactd"]
    assert info["protocolVersion"] == p.PROTOCOL_VERSION
    assert set(info["methods"]) == set(p.REQUESTS)
    assert set(info["notifications"]) == set(p.NOTIFICATIONS)


async def test_shutdown_then_exit_ends_the_process_cleanly(tmp_path: Path) -> None:
    client = await Client.spawn_process(daemon_args(tmp_path / "data"))
    await client.initialize({})
    code = await client.shutdown()
    assert code == 0


async def test_exit_without_shutdown_exits_with_error_code(tmp_path: Path) -> None:
    client = await Client.spawn_process(daemon_args(tmp_path / "data"))
    await client.initialize({})
    await client.notify("exit")
    assert client.process is not None
    assert await asyncio.wait_for(client.process.wait(), 10) == 1


async def test_stdin_eof_ends_the_process(tmp_path: Path) -> None:
    client = await Client.spawn_process(daemon_args(tmp_path / "data"))
    await client.initialize({})
    client._writer.close()
    assert client.process is not None
    assert await asyncio.wait_for(client.process.wait(), 10) == 0


async def test_daemon_exits_when_its_parent_dies(tmp_path: Path) -> None:
    # A middle process spawns the daemon with a pipe it keeps open, prints the daemon's pid,
    # then dies; the daemon must notice it was orphaned even though stdin is still open.
    script = (
        "import subprocess, sys, os, time\n"
        f"proc = subprocess.Popen({daemon_args(tmp_path / 'data')!r}, stdin=subprocess.PIPE,"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(proc.pid, flush=True)\n"
        "time.sleep(0.5)\n"
        "os._exit(0)\n"
    )
    middle = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE
    )
    assert middle.stdout is not None
    pid = int((await middle.stdout.readline()).strip())
    await middle.wait()
    for _ in range(300):  # a generous deadline: a busy machine starts a daemon slowly
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the daemon outlived its parent by more than 30 s")


async def test_requests_before_initialize_are_refused(tmp_path: Path) -> None:
    client = await Client.spawn_process(daemon_args(tmp_path / "data"))
    try:
        with pytest.raises(RpcError) as err:
            await client.request(p.SESSION_LIST, {})
        assert err.value.code == "serverNotInitialized"
        await client.initialize({})
        assert (await client.list_sessions()).sessions == []
    finally:
        await client.shutdown()


# -- sessions -----------------------------------------------------------------------------------


async def test_open_append_messages_list_close(app_client: Client) -> None:
    opened = await app_client.open_session(cwd=CWD, model="claude-sonnet-4-5")
    sid = opened.session_id
    assert opened.entry_count == 0
    assert opened.status.tokens == 0
    assert opened.status.auto_compact_threshold == 167_000

    res = await app_client.append(
        sid,
        [
            _user("u1", "hello there"),
            _assistant("a1", "hi! how can I help?", "u1", "msg_1", 5_000),
            _user("u2", "fix the bug", "a1"),
        ],
    )
    assert res.appended == 3
    # usage of msg_1 (5,000) plus an estimate of the user message after it
    assert res.status.exact_tokens == 5_000
    assert res.status.estimated_tokens > 0
    assert res.status.tokens == res.status.exact_tokens + res.status.estimated_tokens

    msgs = await app_client.messages(sid)
    assert [m["role"] for m in msgs.messages] == ["user", "assistant", "user"]
    assert msgs.messages[0]["content"] == [{"type": "text", "text": "hello there"}]

    status = await app_client.tokens_status(sid)
    assert status == res.status

    listed = await app_client.list_sessions()
    assert [(s.session_id, s.entry_count, s.open) for s in listed.sessions] == [(sid, 3, True)]

    # the transcript on disk holds the lines exactly as given, unknown fields included
    lines = Path(opened.transcript_path).read_bytes().splitlines()
    assert json.loads(lines[0])["someFutureField"] == {"kept": [1, 2, 3]}

    assert (await app_client.close_session(sid)).closed is True
    listed = await app_client.list_sessions()
    assert [(s.session_id, s.open) for s in listed.sessions] == [(sid, False)]
    # a closed session is loaded again on demand, with its history
    assert (await app_client.tokens_status(sid)).tokens == status.tokens


async def test_open_with_explicit_id_and_reopen(app_client: Client) -> None:
    opened = await app_client.open_session(
        session_id="my-session.1", cwd=CWD, model="claude-opus-4-6"
    )
    assert opened.session_id == "my-session.1"
    assert opened.status.context_window == 1_000_000
    await app_client.append("my-session.1", [_user("u1", "x")])
    again = await app_client.open_session(
        session_id="my-session.1", cwd=CWD, model="claude-opus-4-6"
    )
    assert again.entry_count == 1


async def test_client_overrides_window(app_client: Client) -> None:
    opened = await app_client.open_session(
        cwd=CWD, model="some-local-model", context_window=100_000, max_output_tokens=8_000
    )
    st = opened.status
    assert (st.context_window, st.effective_window) == (100_000, 92_000)
    assert st.auto_compact_threshold == 79_000
    assert st.blocking_limit == 89_000


async def test_restart_restores_sessions(app_daemon: InProc, tmp_path: Path) -> None:
    data = tmp_path / "shared-data"
    async with app_daemon(data_dir=data) as first:
        opened = await first.open_session(cwd=CWD, model="claude-sonnet-4-5")
        await first.append(
            opened.session_id,
            [_user("u1", "remember me"), _assistant("a1", "ok", "u1", "msg_1", 1234)],
        )
        before = await first.messages(opened.session_id)
        status_before = await first.tokens_status(opened.session_id)
    async with app_daemon(data_dir=data) as second:
        listed = await second.list_sessions()
        assert [s.session_id for s in listed.sessions] == [opened.session_id]
        assert (await second.messages(opened.session_id)).messages == before.messages
        assert await second.tokens_status(opened.session_id) == status_before
        res = await second.append(opened.session_id, [_user("u2", "and continue", "a1")])
        assert res.appended == 1


@pytest.mark.parametrize("path", fixture_transcripts(), ids=lambda p: p.name[:40])
async def test_import_every_fixture_transcript(app_client: Client, path: Path) -> None:
    records = list(parse_lines(path.read_bytes().splitlines()))
    opened = await app_client.open_session(
        cwd=CWD, model="claude-sonnet-4-5", transcript_path=str(path)
    )
    assert opened.entry_count == len(records)
    assert opened.skipped_lines == 0
    assert opened.imported_from == str(path.resolve())
    msgs = await app_client.messages(opened.session_id)
    roles = [m["role"] for m in msgs.messages]
    assert roles and roles[0] == "user"
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False)), "roles must alternate"
    # the source is read, never modified; the copy holds the same lines, except that the summary
    # of a compaction a plugin hook answered gains the mark of a summary
    # (docs/claude-code.md#what-the-transcript-keeps)
    copy = Path(opened.transcript_path).read_bytes().splitlines()
    assert len(copy) == len(records)
    boundaries = {r.uuid for r in records if r.entry.is_compact_boundary}
    for line, record in zip(copy, records, strict=True):
        if is_hook_summary(record.entry, boundaries):
            assert json.loads(line) == {**record.to_builtins(), "isCompactSummary": True}
        else:
            assert line == record.raw
    bd = await app_client.tokens_breakdown(opened.session_id)
    assert bd.total_tokens > 0


async def test_import_with_corrupt_lines_skips_and_counts(
    app_client: Client, tmp_path: Path
) -> None:
    src = tmp_path / "broken.jsonl"
    good = json.dumps(_user("u1", "fine"))
    src.write_text(f'{good}\n{{"type": "user", "trunc\nnot json at all\n[1,2]\n')
    opened = await app_client.open_session(
        cwd=CWD, model="claude-sonnet-4-5", transcript_path=str(src)
    )
    assert (opened.entry_count, opened.skipped_lines) == (1, 3)


async def test_import_of_missing_transcript_is_a_clear_error(
    app_client: Client, tmp_path: Path
) -> None:
    with pytest.raises(RpcError) as err:
        await app_client.open_session(
            cwd=CWD, model="m", transcript_path=str(tmp_path / "nope.jsonl")
        )
    assert err.value.code == p.ErrorCode.TRANSCRIPT_UNREADABLE
    assert "nope.jsonl" in err.value.message
    assert (await app_client.list_sessions()).sessions == []


# -- bad input through the typed client ---------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "params", "code"),
    [
        (p.SESSION_OPEN, {"model": "m"}, "invalidParams"),  # cwd missing
        (p.SESSION_OPEN, {"cwd": CWD, "model": 5}, "invalidParams"),
        (p.SESSION_OPEN, {"cwd": CWD, "model": "m", "bogus": 1}, "invalidParams"),
        (p.SESSION_OPEN, {"cwd": CWD, "model": "m", "sessionId": "../../etc"}, "invalidParams"),
        (p.SESSION_OPEN, {"cwd": CWD, "model": "m", "sessionId": "a/b"}, "invalidParams"),
        (p.SESSION_OPEN, {"cwd": CWD, "model": "m", "contextWindow": -5}, "invalidParams"),
        (p.SESSION_APPEND, {"sessionId": "nope", "entries": []}, "sessionNotFound"),
        (p.SESSION_APPEND, {"sessionId": "..", "entries": []}, "invalidParams"),
        (p.TOKENS_STATUS, {"sessionId": "missing"}, "sessionNotFound"),
        (p.TOKENS_STATUS, {}, "invalidParams"),
        (p.TOKENS_STATUS, {"sessionId": ["x"]}, "invalidParams"),
        (p.SESSION_MESSAGES, {"sessionId": "x" * 5000}, "invalidParams"),
    ],
)
async def test_invalid_params_get_clear_errors(
    app_client: Client, method: str, params: dict[str, Any], code: str
) -> None:
    with pytest.raises(RpcError) as err:
        await app_client.request(method, params)
    assert err.value.code == code
    assert err.value.message
    assert (await app_client.list_sessions()).sessions == []


async def test_bad_entries_reject_the_whole_append(app_client: Client) -> None:
    sid = (await app_client.open_session(cwd=CWD, model="m")).session_id
    for entries in (
        [_user("u1", "ok"), "not an object"],
        [_user("u1", "ok"), {"no": "type"}],
        [_user("u1", "ok"), {"type": "user", "uuid": 12}],
    ):
        with pytest.raises(RpcError) as err:
            await app_client.append(sid, entries)  # type: ignore[arg-type]
        assert err.value.code == "invalidParams"
    assert (await app_client.tokens_status(sid)).tokens == 0
    assert (await app_client.list_sessions()).sessions[0].entry_count == 0


async def test_unknown_method(daemon: Client) -> None:
    with pytest.raises(RpcError) as err:
        await daemon.request("compact/everything", {})
    assert err.value.number == -32601
    assert "compact/everything" in err.value.message


# -- bad frames on the raw wire -----------------------------------------------------------------


class RawWire:
    """Bytes in, framed JSON out: for input no well-behaved client would send."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self.stdin = proc.stdin
        self.stdout = proc.stdout

    def send_raw(self, data: bytes) -> None:
        self.stdin.write(data)

    def send(self, msg: Any) -> None:
        body = json.dumps(msg).encode()
        self.send_raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def recv(self) -> dict[str, Any]:
        length = 0
        while True:
            line = await asyncio.wait_for(self.stdout.readline(), 10)
            assert line, "daemon closed stdout"
            if not line.strip():
                break
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        msg = json.loads(await self.stdout.readexactly(length))
        assert isinstance(msg, dict)
        return msg

    async def call(self, msg_id: int, method: str, params: Any) -> dict[str, Any]:
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        while True:
            msg = await self.recv()
            if msg.get("id") == msg_id:
                return msg


@pytest.fixture
async def wire(tmp_path: Path) -> Any:
    proc = await asyncio.create_subprocess_exec(
        *daemon_args(tmp_path / "data"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    w = RawWire(proc)
    init = await w.call(
        0,
        "initialize",
        {"processId": None, "capabilities": {}, "initializationOptions": {"maxFrameBytes": 4096}},
    )
    assert "result" in init
    w.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    opened = await w.call(1, p.SESSION_OPEN, {"cwd": CWD, "model": "m", "sessionId": "s1"})
    assert opened["result"]["sessionId"] == "s1"
    yield w
    w.stdin.close()
    try:
        await asyncio.wait_for(proc.wait(), 10)
    except TimeoutError:
        proc.kill()
        await proc.wait()


async def _still_serving(w: RawWire, msg_id: int) -> None:
    res = await w.call(msg_id, p.TOKENS_STATUS, {"sessionId": "s1"})
    assert res["result"]["tokens"] == 0


@pytest.mark.parametrize(
    ("raw", "jsonrpc_code", "code"),
    [
        (b"Content-Length: 7\r\n\r\n{oops!}", -32700, "parseError"),
        (b"Content-Length: abc\r\n\r\n", -32700, "parseError"),
        (b"Content-Type: application/json\r\n\r\n", -32700, "parseError"),
        (b'{"jsonrpc":"2.0","id":5,"method":"session/list"}\r\n', -32700, "parseError"),
        (b"Content-Length: 2\r\n\r\n[]", -32600, "invalidRequest"),
        (b"Content-Length: 4\r\n\r\n1234", -32600, "invalidRequest"),
        (b'Content-Length: 17\r\n\r\n{"jsonrpc":"2.0"}', -32600, "invalidRequest"),
        (
            b'Content-Length: 38\r\n\r\n{"jsonrpc":"1.0","id":1,"method":"x"} ',
            -32600,
            "invalidRequest",
        ),
    ],
    ids=[
        "invalid-json",
        "bad-length",
        "no-length",
        "no-headers",
        "batch",
        "scalar",
        "no-method",
        "wrong-version",
    ],
)
async def test_malformed_frames_are_answered(
    wire: RawWire, raw: bytes, jsonrpc_code: int, code: str
) -> None:
    wire.send_raw(raw)
    err = await wire.recv()
    assert err["error"]["code"] == jsonrpc_code
    assert err["error"]["data"]["code"] == code
    assert err["error"]["message"]
    await _still_serving(wire, 100)


async def test_oversized_frame_is_refused_and_skipped(wire: RawWire) -> None:
    big = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": p.SESSION_APPEND,
            "params": {"sessionId": "s1", "entries": [_user("u1", "x" * 10_000)]},
        }
    ).encode()
    wire.send_raw(b"Content-Length: %d\r\n\r\n" % len(big) + big)
    err = await wire.recv()
    assert err["error"]["data"]["code"] == "frameTooLarge"
    assert "4096" in err["error"]["message"]
    await _still_serving(wire, 101)


async def test_params_of_wrong_shape_on_the_wire(wire: RawWire) -> None:
    res = await wire.call(8, p.TOKENS_STATUS, ["s1"])
    assert res["error"]["code"] == -32602
    res = await wire.call(9, p.TOKENS_STATUS, {"sessionId": "s1", "extra": True})
    assert res["error"]["data"]["code"] == "invalidParams"
    assert "extra" in res["error"]["message"]
    res = await wire.call(
        10,
        p.SESSION_APPEND,
        {"sessionId": "s1", "entries": [{"type": "user", "jsonrpc": "2.0", "method": "exit"}]},
    )
    assert res["result"]["appended"] == 1  # a nested object that looks like a message is just data
    await _still_serving_with(wire, 102, tokens_above=0)


async def _still_serving_with(w: RawWire, msg_id: int, tokens_above: int) -> None:
    res = await w.call(msg_id, p.TOKENS_STATUS, {"sessionId": "s1"})
    assert res["result"]["tokens"] >= tokens_above


def test_generated_protocol_files_are_current() -> None:
    from compactd import protocol_gen

    for path, text in protocol_gen.render().items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is stale: run make protocol"
    schema = msgspec.json.decode(protocol_gen.SCHEMA_PATH.read_bytes())
    assert set(schema["methods"]) == set(p.REQUESTS)


async def test_window_too_small_for_the_reserves_is_refused(app_client: Client) -> None:
    with pytest.raises(RpcError) as err:
        await app_client.open_session(cwd=CWD, model="m", context_window=30_000)
    assert err.value.code == "invalidParams"
    assert "maxOutputTokens" in err.value.message
    ok = await app_client.open_session(
        cwd=CWD, model="m", context_window=30_000, max_output_tokens=4_000
    )
    assert ok.status.auto_compact_threshold == 13_000


async def test_append_is_idempotent_by_uuid(app_client: Client) -> None:
    sid = (await app_client.open_session(cwd=CWD, model="m")).session_id
    first = await app_client.append(sid, [_user("u1", "hello"), _user("u2", "again", "u1")])
    assert (first.appended, first.skipped_duplicates) == (2, 0)
    retry = await app_client.append(
        sid, [_user("u1", "hello"), _user("u2", "again", "u1"), _user("u3", "new", "u2")]
    )
    assert (retry.appended, retry.skipped_duplicates) == (1, 2)
    same_batch = await app_client.append(sid, [_user("u4", "x", "u3"), _user("u4", "x", "u3")])
    assert (same_batch.appended, same_batch.skipped_duplicates) == (1, 1)
    info = (await app_client.list_sessions()).sessions[0]
    assert info.entry_count == 4
    assert len(Path(info.transcript_path).read_bytes().splitlines()) == 4
