"""Read-file state, rehydration, nested memory and watching through the real daemon."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from compactd_client import Client, RpcError

from compactd import protocol as p
from compactd.core.rehydrate import estimate_text_tokens
from tests.helpers import collect, numbered_call, numbered_read, numbered_result
from tests.inproc import InProc

# -- helpers ------------------------------------------------------------------------------------


def _files(atts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kinds = ("file", "compact_file_reference")
    return [a["attachment"] for a in atts if a["attachment"]["type"] in kinds]


def _kinds(atts: list[dict[str, Any]]) -> list[str]:
    return [a["attachment"]["type"] for a in atts]


async def _rehydrate(client: Client, sid: str, **params: Any) -> list[dict[str, Any]]:
    result = await client.request(p.ATTACHMENTS_REHYDRATE, {"sessionId": sid, **params})
    atts: list[dict[str, Any]] = result["attachments"]
    return atts


async def _open(client: Client, ws: Path) -> str:
    opened = await client.open_session(cwd=str(ws), model="claude-sonnet-4-5")
    return opened.session_id


async def _notes(queue: asyncio.Queue[tuple[str, Any]]) -> list[Any]:
    """The next notification (however long a busy machine takes to deliver it) and any that
    follow it closely: a debounced change must come alone."""
    first = (await asyncio.wait_for(queue.get(), 20.0))[1]
    return [first, *await collect(queue, 0.8, quiet=True)]


async def _wait_watched(client: Client, sid: str, paths: set[str]) -> None:
    deadline = time.monotonic() + 20
    while True:
        state = await client.file_state(sid)
        watched = {f.path for f in state.files if f.watched}
        if paths <= watched:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not watched: {paths - watched}")
        await asyncio.sleep(0.05)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


# -- rehydration --------------------------------------------------------------------------------


async def test_rehydrate_restores_the_five_most_recent_files_from_disk(
    app_daemon: InProc, ws: Path
) -> None:
    for i in range(6):
        (ws / f"f{i}.py").write_text(f"# file {i}\nvalue = {i}\n")
    big = ws / "big.py"
    big.write_text("".join(f"line_{n:05d} = {'x' * 30}\n" for n in range(3000)))  # ~33K tokens
    (ws / "CLAUDE.md").write_text("# rules\n")
    (ws / "rec.txt").write_text("recorded by the client\n")
    base = time.time() - 1000
    entries: list[dict[str, Any]] = [
        {"type": "user", "uuid": "u0", "message": {"role": "user", "content": "go"}}
    ]
    order = ["f0.py", "f1.py", "f2.py", "f5.py", "f3.py", "big.py", "f4.py"]
    for i, name in enumerate(order):
        entries += numbered_read(i, ws / name, base + i)
    entries += numbered_read(50, "f0.py", base + 9, "File unchanged since last read. See above.")
    entries += numbered_read(51, ws / "CLAUDE.md", base + 10)  # a memory file: never re-attached
    async with app_daemon() as client:
        sid = await _open(client, ws)
        await client.append(sid, entries)
        await client.record_file(sid, str(ws / "rec.txt"), timestamp=base + 20)
        # Edited on disk after the agent read it: the new content must come back.
        (ws / "f3.py").write_text("# file 3, edited after the read\nvalue = 33\n")
        atts = await _rehydrate(client, sid)

    files = _files(atts)
    assert [f["displayPath"] for f in files] == ["rec.txt", "f4.py", "big.py", "f3.py", "f5.py"]
    assert all(f["type"] == "file" for f in files)
    contents = {f["displayPath"]: f["content"]["file"]["content"] for f in files}
    assert contents["f3.py"] == "# file 3, edited after the read\nvalue = 33\n"
    assert contents["rec.txt"] == "recorded by the client\n"
    big_att = next(f for f in files if f["displayPath"] == "big.py")
    assert big_att["truncated"] is True and big_att["filename"] == str(big)
    assert estimate_text_tokens(contents["big.py"]) <= 5_000
    assert contents["big.py"].startswith("line_00000")
    assert "[compactd: content cut after line" in contents["big.py"]
    assert "of 3000 to fit the restore budget" in contents["big.py"]
    assert sum(estimate_text_tokens(c) for c in contents.values()) <= 50_000
    assert big_att["content"]["file"]["totalLines"] == 3000
    # Every attachment is a full transcript entry with a rendered copy for the model.
    first = atts[0]
    assert first["type"] == "attachment" and first["uuid"] and first["sessionId"] == sid
    assert "rec.txt" in first["rendered"][0]["content"]


async def test_rehydrate_restores_todos_plan_skills_agents_and_announcements(
    app_daemon: InProc, ws: Path
) -> None:
    (ws / ".claude" / "skills" / "deploy").mkdir(parents=True)
    (ws / ".claude" / "skills" / "deploy" / "SKILL.md").write_text("Deploy with make ship.\n")
    (ws / "plan.md").write_text("# Plan\n1. do it\n")
    (ws / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00binary")
    base = time.time() - 500
    todos = [{"content": "write tests", "status": "in_progress", "activeForm": "Writing"}]
    entries = [
        {"type": "user", "uuid": "u0", "message": {"role": "user", "content": "go"}},
        numbered_call(1, "TodoWrite", {"todos": todos}, base),
        numbered_result(1, "ok", base),
        numbered_call(2, "Skill", {"skill": "deploy"}, base + 1),
        numbered_result(2, "Launching skill: deploy", base + 1),
        numbered_call(
            3, "Task", {"description": "audit deps", "subagent_type": "general"}, base + 2
        ),
        numbered_call(4, "EnterPlanMode", {}, base + 3),
        numbered_result(4, "ok", base + 3),
        *numbered_read(5, ws / "logo.png", base + 4),
        {
            "type": "attachment",
            "uuid": "d1",
            "attachment": {
                "type": "deferred_tools_delta",
                "addedNames": ["WebFetch", "WebSearch"],
                "addedLines": ["WebFetch", "WebSearch"],
                "removedNames": [],
            },
        },
    ]
    async with app_daemon() as client:
        sid = await _open(client, ws)
        await client.append(sid, entries)
        extras = {
            "planFilePath": "plan.md",
            "announcements": [{"type": "mcp_instructions_delta", "addedNames": ["db"]}],
        }
        atts = await _rehydrate(client, sid, extras=extras)
        # The extras are remembered for the next rehydration (e.g. after compact/full).
        again = await _rehydrate(client, sid)
        with pytest.raises(RpcError) as bad:
            await _rehydrate(client, sid, extras={"announcements": [{"no": "type"}]})
        assert bad.value.code == p.ErrorCode.INVALID_PARAMS

    # The transcript's own deferred-tools listing is not repeated (the main loop announces it
    # again after a compaction); the announcement the client supplied is.
    assert _kinds(atts) == [
        "compact_file_reference",
        "todo",
        "plan_file_reference",
        "plan_mode",
        "invoked_skills",
        "task_status",
        "mcp_instructions_delta",
    ]
    assert _kinds(again) == _kinds(atts)
    by = {a["attachment"]["type"]: a["attachment"] for a in atts}
    assert by["compact_file_reference"]["reason"] == "binary"
    assert by["todo"]["content"] == todos and by["todo"]["itemCount"] == 1
    assert by["plan_file_reference"]["planContent"] == "# Plan\n1. do it\n"
    assert by["plan_file_reference"]["planFilePath"] == str(ws / "plan.md")
    assert by["plan_mode"]["planExists"] is True
    [skill] = by["invoked_skills"]["skills"]
    assert skill["name"] == "deploy" and skill["content"] == "Deploy with make ship.\n"
    assert by["task_status"]["taskId"] == "toolu_3"
    assert by["task_status"]["description"] == "audit deps"
    assert by["mcp_instructions_delta"]["addedNames"] == ["db"]


# -- nested memory and watching -----------------------------------------------------------------


async def test_nested_memory_is_attached_once_and_changes_are_reported(
    app_daemon: InProc, ws: Path
) -> None:
    mod = ws / "pkg" / "mod"
    mod.mkdir(parents=True)
    (ws / "CLAUDE.md").write_text("top rules\n")
    pkg_memory = ws / "pkg" / "CLAUDE.md"
    pkg_memory.write_text("pkg rules\n")
    (ws / "pkg" / "CLAUDE.local.md").write_text("my notes\n")
    (mod / "x.py").write_text("x = 1\n")
    (mod / "y.py").write_text("y = 1\n")
    now = time.time()
    async with app_daemon() as client:
        sid = await _open(client, ws)
        await client.append(sid, numbered_read(1, mod / "x.py", now))
        pending = (await client.pending_attachments(sid)).attachments
        memory = [a["attachment"] for a in pending]
        assert [m["type"] for m in memory] == ["nested_memory"] * 3
        assert [m["displayPath"] for m in memory] == [
            "CLAUDE.md",
            "pkg/CLAUDE.md",
            "pkg/CLAUDE.local.md",
        ]
        assert memory[1]["content"] == {
            "path": str(pkg_memory),
            "type": "Project",
            "content": "pkg rules\n",
        }
        assert memory[2]["content"]["type"] == "Local"
        # Another read under the same directories attaches nothing new; draining empties.
        await client.append(sid, numbered_read(2, mod / "y.py", now + 1))
        assert (await client.pending_attachments(sid)).attachments == []
        state = await client.file_state(sid)
        sources = {f.path: f.source for f in state.files}
        assert sources[str(pkg_memory)] == "nested_memory"
        assert sources[str(mod / "y.py")] == "Read"

        await _wait_watched(client, sid, {str(pkg_memory), str(mod / "x.py")})
        async with client.subscribe(p.NOTIFY_MEMORY_CHANGED) as queue:
            pkg_memory.write_text("pkg rules, edited\n")
            name, note = await asyncio.wait_for(queue.get(), 20.0)
            assert note == {"sessionId": sid, "path": str(pkg_memory), "change": "modified"}
            [att] = (await client.pending_attachments(sid)).attachments
            assert att["attachment"]["type"] == "nested_memory"
            assert att["attachment"]["content"]["content"] == "pkg rules, edited\n"

            # A burst of 50 writes over about half a second (longer than watchfiles groups
            # events) is one notification, with the last content.
            for i in range(50):
                pkg_memory.write_text(f"burst {i}\n")
                await asyncio.sleep(0.01)
            notes = await _notes(queue)
            assert notes == [{"sessionId": sid, "path": str(pkg_memory), "change": "modified"}]
            [att] = (await client.pending_attachments(sid)).attachments
            assert att["attachment"]["content"]["content"] == "burst 49\n"

            # A read file changed behind the agent's back gets a changed-file notice.
            (mod / "x.py").write_text("x = 2\n")
            notes = await _notes(queue)
            assert notes == [{"sessionId": sid, "path": str(mod / "x.py"), "change": "modified"}]
            [att] = (await client.pending_attachments(sid)).attachments
            assert att["attachment"]["type"] == "edited_text_file"
            assert att["attachment"]["snippet"] == "x = 2\n"

            # Rewriting a file with the same bytes is not a change.
            (mod / "x.py").write_text("x = 2\n")
            assert await collect(queue, 0.8) == []

            # A memory file that appears next to a read file is attached too.
            (mod / "CLAUDE.md").write_text("mod rules\n")
            notes = await _notes(queue)
            assert notes == [{"sessionId": sid, "path": str(mod / "CLAUDE.md"), "change": "added"}]
            [att] = (await client.pending_attachments(sid)).attachments
            assert att["attachment"]["displayPath"] == "pkg/mod/CLAUDE.md"
            assert att["attachment"]["content"]["content"] == "mod rules\n"


async def test_watching_stops_when_the_session_closes(app_daemon: InProc, ws: Path) -> None:
    (ws / "CLAUDE.md").write_text("rules\n")
    (ws / "a.py").write_text("a = 1\n")
    async with app_daemon() as client:
        sid = await _open(client, ws)
        await client.append(sid, numbered_read(1, ws / "a.py", time.time()))
        await _wait_watched(client, sid, {str(ws / "CLAUDE.md")})
        async with client.subscribe(p.NOTIFY_MEMORY_CHANGED) as queue:
            await client.close_session(sid)
            (ws / "CLAUDE.md").write_text("changed after close\n")
            assert await collect(queue, 1.0) == []


# -- confinement and bad input ------------------------------------------------------------------


async def test_paths_outside_the_roots_are_refused(
    app_daemon: InProc, ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (ws / "escape.txt").symlink_to(outside / "secret.txt")
    (ws / "escape_dir").symlink_to(outside)
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "ok.txt").write_text("fine\n")
    async with app_daemon(options={"workspaceRoots": [str(extra)]}) as client:
        sid = await _open(client, ws)
        for bad in (
            "../../etc/passwd",
            str(outside / "secret.txt"),
            "escape.txt",
            "escape_dir/secret.txt",
        ):
            with pytest.raises(RpcError) as err:
                await client.record_file(sid, bad)
            assert err.value.code == p.ErrorCode.PATH_OUTSIDE_ROOTS, bad
            assert "outside the session's working directory and workspace roots" in str(err.value)
            assert err.value.data["path"] == bad
        assert (await client.file_state(sid)).files == []

        with pytest.raises(RpcError) as err:
            await client.record_file(sid, "missing.txt")
        assert err.value.code == p.ErrorCode.INVALID_PARAMS
        with pytest.raises(RpcError) as err:
            await client.record_file(sid, str(extra / "ok.txt"), offset=-1)
        assert err.value.code == p.ErrorCode.INVALID_PARAMS
        with pytest.raises(RpcError) as err:
            await client.record_file("no-such-session", str(extra / "ok.txt"))
        assert err.value.code == p.ErrorCode.SESSION_NOT_FOUND
        assert (await client.file_state(sid)).files == []

        # A workspace root is inside; so is a file given with its content.
        state = await client.record_file(sid, str(extra / "ok.txt"), offset=1, limit=1)
        [entry] = state.files
        assert entry.path == str(extra / "ok.txt") and entry.source == "record"
        assert (entry.offset, entry.limit) == (1, 1) and entry.content_hash

        # A read the agent made outside the roots is in the state but never re-read.
        await client.append(sid, numbered_read(1, outside / "secret.txt", time.time()))
        paths = [f.path for f in (await client.file_state(sid)).files]
        assert paths == [str(outside / "secret.txt"), str(extra / "ok.txt")]
        names = [f["filename"] for f in _files(await _rehydrate(client, sid))]
        assert names == [str(extra / "ok.txt")]


async def test_file_state_survives_a_restart(app_daemon: InProc, ws: Path, tmp_path: Path) -> None:
    (ws / "a.py").write_text("a = 1\n")
    (ws / "b.py").write_text("b = 1\n")
    data = tmp_path / "data"
    base = time.time() - 100
    async with app_daemon(data_dir=data) as client:
        sid = await _open(client, ws)
        await client.append(
            sid,
            [
                numbered_call(
                    1, "Read", {"file_path": str(ws / "a.py"), "offset": 2, "limit": 10}, base
                ),
                numbered_result(1, "...", base, toolUseResult={"file": {"content": "a = 1\n"}}),
                numbered_call(
                    2, "Write", {"file_path": str(ws / "w.py"), "content": "w"}, base + 1
                ),
                numbered_result(2, "ok", base + 1),
                numbered_call(3, "Read", {"file_path": str(ws / "nope.py")}, base + 2),
                numbered_result(3, "File does not exist.", base + 2, is_error=True),
            ],
        )
        await client.record_file(sid, "b.py", content="b = 1\n", timestamp=base + 3)
        before = (await client.file_state(sid)).files
    assert [(f.path, f.source) for f in before] == [
        (str(ws / "b.py"), "record"),
        (str(ws / "w.py"), "Write"),
        (str(ws / "a.py"), "Read"),
    ]
    assert (before[2].offset, before[2].limit) == (2, 10)
    async with app_daemon(data_dir=data) as client:
        after = (await client.file_state(sid)).files
    strip = [(f.path, f.timestamp, f.offset, f.limit, f.content_hash, f.source) for f in after]
    assert strip == [
        (f.path, f.timestamp, f.offset, f.limit, f.content_hash, f.source) for f in before
    ]


async def test_rehydrate_on_an_unknown_session_is_an_error(app_client: Client) -> None:
    for method in (p.ATTACHMENTS_REHYDRATE, p.ATTACHMENTS_PENDING, p.FILESTATE_LIST):
        with pytest.raises(RpcError) as err:
            await app_client.request(method, {"sessionId": "nope"})
        assert err.value.code == p.ErrorCode.SESSION_NOT_FOUND
