"""Following a live Claude Code transcript (docs/follow.md), end to end over stdio.

The test writes a Claude Code transcript the way Claude Code does while a real daemon follows
it: whole lines, a line in two pieces, Claude Code's own compaction and a microcompaction, the
file replaced by a rename and truncated. After each step the followed session must equal a
fresh import of the file as it then is: the same API messages, token status and stored lines.
The daemon reports each read with ``session/followed``; the tests wait on those, never on time.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from compactd_client import Client, RpcError, Subscription

from compactd import protocol as p
from compactd.core.normalize import CLEARED_TOOL_RESULT_PLACEHOLDER
from tests.conftest import FIXTURES, SpawnDaemon
from tests.helpers import AS_A_SHELL_JOB, CWD, stored_transcript

R2_AUTO = FIXTURES / "claude-code-2.1.330__r2_auto.jsonl"
R16_MANUAL = FIXTURES / "claude-code-2.1.330__r16_manual.jsonl"
# Generous: the daemon reads a change within a second; a loaded machine may take longer.
DEADLINE = 15.0


def project_dir(tmp_path: Path) -> Path:
    """Where the test's Claude Code keeps its transcripts (not beside the daemon's log)."""
    path = tmp_path / "projects"
    path.mkdir()
    return path


def fixture_lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


class Transcript:
    """A transcript file another process (this test) appends to, as Claude Code does."""

    def __init__(self, path: Path, lines: Sequence[bytes] = ()) -> None:
        self.path = path
        self.written = b"".join(lines)
        path.write_bytes(self.written)

    def append(self, data: bytes) -> None:
        with open(self.path, "ab") as fh:
            fh.write(data)
            fh.flush()
        self.written += data

    def replace(self, data: bytes) -> None:
        """Atomically, as an editor saves: a new file renamed over the old one."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)
        self.written = data

    def truncate(self) -> None:
        with open(self.path, "r+b") as fh:
            fh.truncate(0)
        self.written = b""

    def entries(self) -> int:
        """How many entries a fresh import of the file holds (every complete line parses)."""
        complete = self.written[: self.written.rfind(b"\n") + 1]
        return sum(1 for line in complete.splitlines() if line.strip())


async def until_entries(
    updates: Subscription[p.FollowedNotification], count: int
) -> p.FollowedNotification:
    """The first ``session/followed`` at which the session holds ``count`` entries."""
    while True:
        note = await updates.next(DEADLINE)
        assert note.entry_count <= count, f"{note.entry_count} entries, expected {count}: {note}"
        if note.entry_count == count:
            return note


async def assert_same_as_import(
    client: Client, sid: str, path: Path, data_dir: Path, **open_args: Any
) -> None:
    """The followed session equals a fresh import of the file as it is now."""
    fresh = await client.open_session(cwd=CWD, transcript_path=str(path), **open_args)
    try:
        followed_msgs = await client.messages(sid)
        fresh_msgs = await client.messages(fresh.session_id)
        assert followed_msgs.messages == fresh_msgs.messages
        assert followed_msgs.boundary_uuid == fresh_msgs.boundary_uuid
        assert await client.tokens_status(sid) == await client.tokens_status(fresh.session_id)
        followed_lines = stored_transcript(data_dir, sid).read_bytes().splitlines()
        fresh_lines = stored_transcript(data_dir, fresh.session_id).read_bytes().splitlines()
        assert [_uuid(x) for x in followed_lines] == [_uuid(x) for x in fresh_lines]
        assert followed_lines == fresh_lines
    finally:
        await client.close_session(fresh.session_id)


def _uuid(line: bytes) -> str | None:
    value = json.loads(line).get("uuid")
    return value if isinstance(value, str) else None


def microcompact_line(tool_use_id: str, parent: str) -> bytes:
    """A microcompact boundary in the shape Claude Code writes (docs/microcompact.md)."""
    entry = {
        "parentUuid": parent,
        "isSidechain": False,
        "type": "system",
        "subtype": "microcompact_boundary",
        "content": "Context microcompacted",
        "level": "info",
        "microcompactMetadata": {
            "trigger": "auto",
            "preTokens": 30000,
            "tokensSaved": 120,
            "compactedToolIds": [tool_use_id],
            "clearedAttachmentUUIDs": [],
        },
        "uuid": "0f0e0d0c-follow-micro-0001",
        "timestamp": "2026-11-22T11:20:00.000Z",
        "sessionId": "8e10c8b3-98a3-428c-9390-a97a120a8b55",
    }
    return json.dumps(entry).encode() + b"\n"


def _first_tool_use(lines: Sequence[bytes]) -> tuple[str, str]:
    """The id of the first tool call in ``lines`` and the uuid of the last line holding one."""
    for line in lines:
        obj = json.loads(line)
        if obj.get("type") != "assistant":
            continue
        content = obj["message"]["content"]
        if isinstance(content, list):
            for block in content:
                if block.get("type") == "tool_use":
                    return block["id"], obj["uuid"]
    raise AssertionError("no tool call in the lines")


async def test_follow_line_by_line_through_a_claude_code_compaction(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    lines = fixture_lines(R2_AUTO)
    boundary = next(i for i, x in enumerate(lines) if b'"compact_boundary"' in x)
    src = Transcript(project_dir(tmp_path) / "live.jsonl", lines[:4])
    data_dir = tmp_path / "data"
    sid = "followed"
    async with spawn_daemon() as client, client.follow_updates(sid) as updates:
        opened = await client.open_session(
            cwd=CWD, session_id=sid, transcript_path=str(src.path), follow=True
        )
        assert opened.following and opened.entry_count == 4
        listed = {s.session_id: s for s in (await client.list_sessions()).sessions}
        assert listed[sid].following
        tokens = opened.status.tokens
        # Whole lines, one at a time: the count follows each line that adds to the context.
        for i, line in enumerate(lines[4:boundary], start=4):
            src.append(line)
            note = await until_entries(updates, src.entries())
            assert note.appended == 1 and not note.reread
            assert note.status == await client.tokens_status(sid)
            if json.loads(line)["type"] == "user":
                assert note.status.tokens != tokens, f"line {i} did not change the count"
            tokens = note.status.tokens
        # A line in two pieces: the first waits for its newline. The reopen reads the file
        # now and answers with what it holds, so the check does not depend on timing.
        piece = lines[boundary]
        src.append(piece[:40])
        reopened = await client.open_session(cwd=CWD, session_id=sid)
        assert reopened.following and reopened.entry_count == src.entries()
        src.append(piece[40:])
        await until_entries(updates, src.entries())
        # The rest of Claude Code's compaction and what followed it, in one write.
        src.append(b"".join(lines[boundary + 1 :]))
        note = await until_entries(updates, src.entries())
        assert note.status.tokens < tokens  # the compaction took the old turns out
        messages = await client.messages(sid)
        assert messages.boundary_uuid == json.loads(lines[boundary])["uuid"]
        await assert_same_as_import(client, sid, src.path, data_dir)
        # Claude Code's microcompaction clears a tool result: recognized as in an import.
        tool_id, parent = _first_tool_use(lines[boundary:])
        src.append(microcompact_line(tool_id, parent))
        await until_entries(updates, src.entries())
        cleared = json.dumps((await client.messages(sid)).messages)
        assert CLEARED_TOOL_RESULT_PLACEHOLDER in cleared
        await assert_same_as_import(client, sid, src.path, data_dir)
    # The followed file was only read.
    assert src.path.read_bytes() == src.written


async def test_follow_sends_thresholds_as_the_count_crosses_them(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    lines = fixture_lines(R2_AUTO)
    boundary = next(i for i, x in enumerate(lines) if b'"compact_boundary"' in x)
    src = Transcript(project_dir(tmp_path) / "live.jsonl", lines[:4])
    sid = "gauge"
    async with (
        spawn_daemon() as client,
        client.follow_updates(sid) as updates,
        client.threshold_crossings(sid) as crossings,
    ):
        # A small window, so the turns before Claude Code's compaction fill it.
        opened = await client.open_session(
            cwd=CWD,
            session_id=sid,
            transcript_path=str(src.path),
            follow=True,
            model="claude-sonnet-4-5",
            context_window=40_000,
            max_output_tokens=4_000,
        )
        assert not opened.status.is_above_warning_threshold
        crossed: list[str] = []
        above = levels_above(opened.status)
        # A line at a time: each crossing comes with the line that made the count cross.
        for line in lines[4:boundary]:
            src.append(line)
            note = await until_entries(updates, src.entries())
            now = levels_above(note.status)
            # Sent before the session/followed of the same read, so already here.
            sent = crossings.drain()
            assert [c.level for c in sent] == [lvl for lvl in now if lvl not in above]
            assert all(c.tokens == note.status.tokens >= c.threshold for c in sent)
            crossed += [c.level for c in sent]
            above = now
        assert crossed == ["warning", "error", "autoCompact", "blocking"]


def levels_above(status: p.TokenStatus) -> list[str]:
    """The threshold levels ``status`` is above, lowest first."""
    flags = {
        "warning": status.is_above_warning_threshold,
        "error": status.is_above_error_threshold,
        "autoCompact": status.is_above_auto_compact_threshold,
        "blocking": status.is_at_blocking_limit,
    }
    return [level for level, on in flags.items() if on]


async def test_follow_a_replaced_and_a_truncated_file(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    lines = fixture_lines(R16_MANUAL)
    src = Transcript(project_dir(tmp_path) / "live.jsonl", lines[:20])
    data_dir = tmp_path / "data"
    sid = "replaced"
    async with spawn_daemon() as client, client.follow_updates(sid) as updates:
        await client.open_session(
            cwd=CWD, session_id=sid, transcript_path=str(src.path), follow=True
        )
        # Saved by a rename: the same lines and new ones.
        src.replace(b"".join(lines[:30]))
        await until_entries(updates, src.entries())
        await assert_same_as_import(client, sid, src.path, data_dir)
        # Replaced by a file that starts differently (an entry is gone): read again from its
        # start; nothing the session holds is added twice, and nothing is removed.
        src.replace(b"".join(lines[:4] + lines[5:40]))
        note = await until_entries(updates, 40)
        assert note.reread and note.appended == 10
        # Truncated, then written again from the start with more lines.
        src.truncate()
        note = await updates.next(DEADLINE)
        assert note.reread and note.appended == 0 and note.entry_count == 40
        src.append(b"".join(lines[:75]))
        note = await until_entries(updates, 75)
        assert note.appended == 35
        await assert_same_as_import(client, sid, src.path, data_dir)


async def test_follow_resumes_after_a_restart_and_stops_at_close(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    lines = fixture_lines(R16_MANUAL)
    src = Transcript(project_dir(tmp_path) / "live.jsonl", lines[:10])
    data_dir = tmp_path / "data"
    sid = "resumed"
    async with spawn_daemon() as client, client.follow_updates(sid) as updates:
        await client.open_session(
            cwd=CWD, session_id=sid, transcript_path=str(src.path), follow=True
        )
        src.append(b"".join(lines[10:25]))
        await until_entries(updates, src.entries())
    # Claude Code goes on while no daemon runs.
    src.append(b"".join(lines[25:50]))
    async with spawn_daemon() as client, client.follow_updates(sid) as updates:
        listed = {s.session_id: s for s in (await client.list_sessions()).sessions}
        assert not listed[sid].following  # nothing follows it until it is opened
        reopened = await client.open_session(cwd=CWD, session_id=sid)
        assert reopened.following and reopened.entry_count == src.entries()
        src.append(b"".join(lines[50:]))
        await until_entries(updates, src.entries())
        await assert_same_as_import(client, sid, src.path, data_dir)
        await client.close_session(sid)
        listed = {s.session_id: s for s in (await client.list_sessions()).sessions}
        assert not listed[sid].following
        # Opened again with follow false: the session stays as it is.
        src.append(lines[-1].replace(b'"cost-state"', b'"cost-state-2"'))
        stopped = await client.open_session(cwd=CWD, session_id=sid, follow=False)
        assert not stopped.following and stopped.entry_count == src.entries() - 1


async def test_two_sessions_follow_one_file_until_one_closes(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    # Each session's follower is its own; a change of the file reaches every follower of it,
    # and closing one session stops its follower only.
    lines = fixture_lines(R16_MANUAL)
    src = Transcript(project_dir(tmp_path) / "live.jsonl", lines[:10])
    async with (
        spawn_daemon() as client,
        client.follow_updates("one") as one,
        client.follow_updates("two") as two,
    ):
        for sid in ("one", "two"):
            await client.open_session(
                cwd=CWD, session_id=sid, transcript_path=str(src.path), follow=True
            )
        src.append(b"".join(lines[10:20]))
        await until_entries(one, src.entries())
        await until_entries(two, src.entries())
        await client.close_session("one")
        src.append(b"".join(lines[20:30]))
        await until_entries(two, src.entries())
        listed = {s.session_id: s for s in (await client.list_sessions()).sessions}
        assert not listed["one"].following and listed["two"].following
        assert listed["two"].entry_count == 30
        # The closed session read nothing after it closed.
        stopped = await client.open_session(cwd=CWD, session_id="one", follow=False)
        assert stopped.entry_count == 20


async def test_follow_a_file_from_its_first_line(spawn_daemon: SpawnDaemon, tmp_path: Path) -> None:
    lines = fixture_lines(R2_AUTO)
    # Claude Code has not finished writing its first line.
    src = Transcript(project_dir(tmp_path) / "live.jsonl", [lines[0][:30]])
    sid = "new"
    async with spawn_daemon() as client, client.follow_updates(sid) as updates:
        opened = await client.open_session(
            cwd=CWD, session_id=sid, transcript_path=str(src.path), follow=True
        )
        assert opened.following and opened.entry_count == 0 and opened.skipped_lines == 0
        src.append(lines[0][30:] + b"".join(lines[1:6]))
        note = await until_entries(updates, 6)
        assert note.appended == 6
        await assert_same_as_import(client, sid, src.path, tmp_path / "data")
        # A file that is not a transcript is still refused.
        other = Transcript(src.path.with_name("notes.jsonl"), [b"not json\n"])
        with pytest.raises(RpcError) as err:
            await client.open_session(cwd=CWD, transcript_path=str(other.path), follow=True)
        assert err.value.data["code"] == p.ErrorCode.TRANSCRIPT_UNREADABLE


async def test_follow_needs_a_transcript(daemon: Client, tmp_path: Path) -> None:
    with pytest.raises(RpcError) as err:
        await daemon.open_session(cwd=CWD, follow=True)
    assert err.value.data["code"] == p.ErrorCode.INVALID_PARAMS
    assert not (await daemon.list_sessions()).sessions  # nothing was created
    await daemon.open_session(cwd=CWD, session_id="plain")
    with pytest.raises(RpcError) as err:
        await daemon.open_session(cwd=CWD, session_id="plain", follow=True)
    assert err.value.data["code"] == p.ErrorCode.INVALID_PARAMS
    listed = (await daemon.list_sessions()).sessions
    assert [s.following for s in listed] == [False]


async def test_status_follow_prints_a_line_per_change(tmp_path: Path) -> None:
    lines = fixture_lines(R2_AUTO)
    src = Transcript(project_dir(tmp_path) / "live.jsonl", lines[:5])
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        AS_A_SHELL_JOB,  # SIGINT at its default, whatever this process inherited
        "status",
        "--follow",
        "--plain",
        str(src.path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    try:

        async def line_with(text: str) -> str:
            while True:
                line = (await asyncio.wait_for(process.stdout.readline(), DEADLINE)).decode()
                assert line, "the command ended"
                if text in line:
                    return line

        await line_with("following the transcript")
        src.append(b"".join(lines[5:12]))
        update = await line_with("entries)")
        assert update.startswith("+7 (12 entries) [")
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), DEADLINE) == 128 + signal.SIGINT
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert src.path.read_bytes() == src.written


async def test_a_followed_session_answers_reads_and_refuses_writes(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    # Claude Code writes the followed file; a compaction or an append made in compactd's copy
    # would never reach it, and the gauge would stop telling what Claude Code sends.
    lines = fixture_lines(R16_MANUAL)
    src = Transcript(project_dir(tmp_path) / "live.jsonl", lines[:40])
    data_dir = tmp_path / "data"
    sid = "watched"
    async with spawn_daemon() as client:
        await client.open_session(
            cwd=CWD, session_id=sid, transcript_path=str(src.path), follow=True
        )
        stored = stored_transcript(data_dir, sid)
        before = stored.read_bytes()
        answer = {
            "type": "assistant",
            "uuid": "from-the-ide",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
        }
        refused = [
            client.compact_full(sid),
            client.compact_auto(sid, force=True),
            client.append(sid, [answer]),
            client.request(p.COMPACT_MICRO, {"sessionId": sid}),
        ]
        for call in refused:
            with pytest.raises(RpcError) as err:
                await call
            assert err.value.data["code"] == p.ErrorCode.SESSION_FOLLOWED
            assert "claudeCode/compact" in err.value.message
        assert stored.read_bytes() == before
        # Reads answer as on any session.
        status = await client.tokens_status(sid)
        preview = await client.request(p.COMPACT_PREVIEW, {"sessionId": sid})
        assert status.tokens > 0 and preview["preTokens"] == status.tokens
        # Reopened without following, it is compactd's own copy again and compacts.
        await client.open_session(cwd=CWD, session_id=sid, follow=False)
        done = await client.compact_full(sid)
        assert done.post_compact_tokens < done.pre_compact_tokens
    assert src.path.read_bytes() == src.written
