"""Gemini CLI chats through the real daemon over stdio (docs/gemini.md#how-compactd-reads-a-chat).

``session/open`` with a chat's path (the captured JSONL, the older ``.json``, synthetic edge
cases), and with ``follow`` while the test writes the chat the way Gemini CLI does (records
written again by id, a line in two pieces, a resume writing the list back, compressions at a
resume and mid-turn; an older chat rewritten whole): the token status agrees with the chat's
last answer, Gemini CLI's compressions are compactions, recall finds what they dropped, and a
followed chat ends as a fresh import of the whole file would. The daemon's
``session/followed`` notifications are waited on, never time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from compactd_client import Client

from compactd import protocol as p
from tests.conftest import SpawnDaemon
from tests.gemini_chats import CAPTURED, LEGACY, edge_chat, legacy, long_chat
from tests.helpers import CWD, run_cli

DEADLINE = 15.0
COMPRESSED = next(path for path in CAPTURED if "compressed_on_resume" in path.name)
FIRST = "FIRST: read notes.txt, then run the alpha check and count the notes"


def _last_total(data: bytes) -> int:
    if data.lstrip().startswith(b"{\n"):
        messages = json.loads(data)["messages"]
    else:
        messages = [json.loads(line) for line in data.splitlines() if line.strip()]
        messages = [m for m in messages if "id" in m]
    return int(
        [m for m in messages if m.get("type") == "gemini" and "tokens" in m][-1]["tokens"]["total"]
    )


async def _open(client: Client, path: Path, sid: str, **kw: Any) -> p.OpenResult:
    return await client.open_session(cwd=CWD, session_id=sid, transcript_path=str(path), **kw)


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


# The older form is built from the capture by the pre-0.39 rules (tests/data/README.md): 0.61.0
# no longer writes it.
async def test_a_captured_chat_and_its_older_form_open_with_their_compression(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    async with spawn_daemon() as client:
        for name, path in (("jsonl", COMPRESSED), ("json", LEGACY)):
            data = path.read_bytes()
            opened = await _open(client, path, name)
            assert opened.skipped_lines == 0, name
            assert opened.status.exact_tokens == _last_total(data), name
            # Gemini CLI's window, from the model the chat names (docs/gemini.md#compression).
            assert opened.status.context_window == 1_048_576, name
            stats = await client.stats(name)
            assert len(stats.compactions) == 1, name
            # What the model sees now: the snapshot (or the note), then what came after.
            messages = json.dumps((await client.messages(name)).messages)
            assert "SECOND: now run the beta check" in messages and FIRST not in messages
            # recall finds what the compression dropped, in the chat's own words.
            found = await client.recall(name, "alpha-check-7d1")
            assert any("alpha-check-7d1" in h.snippet and h.compacted for h in found.hits), name
            assert (await client.recall(name, "read notes.txt then run the alpha check")).hits


async def test_the_edge_cases_open_with_their_damage_counted(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    chat = edge_chat()
    path = tmp_path / "session-2026-05-01T10-00-5b1c0e55.jsonl"
    path.write_bytes(chat.data(corrupt=True, torn=True))
    async with spawn_daemon() as client:
        opened = await _open(client, path, "edge")
        # The damaged line, the line of no known kind, and (not followed) the last line still
        # being written are skipped, and counted.
        assert opened.skipped_lines == 1 + chat.unknown + 1
        assert opened.status.exact_tokens == chat.last_total
        assert len((await client.stats("edge")).compactions) == 2
        for span in chat.spans:
            for command in span["commands"]:
                assert (await client.recall("edge", command)).hits, command


async def test_a_live_chat_is_followed_as_gemini_cli_writes_it(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    source = long_chat(seed=5, turns=26).data()
    lines = source.splitlines(keepends=True)
    path = tmp_path / "session-live.jsonl"
    path.write_bytes(b"".join(lines[:20]))
    whole = tmp_path / "session-whole.jsonl"
    whole.write_bytes(source)
    async with spawn_daemon() as client, client.follow_updates("live") as updates:
        opened = await _open(client, path, "live", follow=True)
        assert opened.following

        async def until(count: int) -> p.FollowedNotification:
            while True:
                note: p.FollowedNotification = await updates.next(DEADLINE)
                if note.entry_count >= count:
                    return note

        # The rest as Gemini CLI writes it: in bursts, one line in two pieces (a resume's list
        # written back, compressions among them).
        rest = lines[20:]
        for at in range(0, len(rest), 60):
            burst = b"".join(rest[at : at + 60])
            cut = len(burst) // 2
            _append(path, burst[:cut])
            _append(path, burst[cut:])
        imported = await _open(client, whole, "whole")
        note = await until(imported.entry_count)
        assert note.entry_count == imported.entry_count
        assert note.status.exact_tokens == imported.status.exact_tokens == _last_total(source)
        live = (await client.messages("live")).messages
        assert live == (await client.messages("whole")).messages
        assert len((await client.stats("live")).compactions) == 2


async def test_an_older_chat_rewritten_whole_is_read_again(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    chat = long_chat(seed=6, turns=14)
    final = legacy(chat)
    early = json.loads(final)
    early["messages"] = early["messages"][: len(early["messages"]) // 2]
    path = tmp_path / "session-2026-05-01T10-00-5b1c0e55.json"
    path.write_bytes(json.dumps(early, indent=2).encode())
    whole = tmp_path / "session-whole.json"
    whole.write_bytes(final)
    async with spawn_daemon() as client, client.follow_updates("old") as updates:
        opened = await _open(client, path, "old", follow=True)
        assert opened.following and opened.entry_count > 10
        # Written again whole, as Gemini CLI before 0.39 did on every change.
        path.write_bytes(final)
        imported = await _open(client, whole, "whole")
        while True:
            note: p.FollowedNotification = await updates.next(DEADLINE)
            if note.entry_count >= imported.entry_count:
                break
        assert note.entry_count == imported.entry_count and note.reread
        assert note.status.exact_tokens == _last_total(final)
        assert (await client.messages("old")).messages == (await client.messages("whole")).messages


async def test_compactd_status_and_replay_on_a_chat(tmp_path: Path) -> None:
    """``compactd status`` in a project's folder finds its newest chat (not the stub a resume
    left beside it), and measures it against Gemini CLI's window; ``compactd replay`` replays
    a chat (the older format too) into that window."""
    home = tmp_path / "home"
    project = tmp_path / "pelican"
    project.mkdir()
    chats = home / ".gemini" / "tmp" / "pelican" / "chats"
    chats.mkdir(parents=True)
    (home / ".gemini" / "projects.json").write_text(
        json.dumps({"projects": {str(project): "pelican"}})
    )
    chat = chats / "session-2026-11-28T08-47-c051a701.jsonl"
    chat.write_bytes(COMPRESSED.read_bytes())
    stub = chats / "session-2026-11-28T08-49-c051a701.jsonl"
    stub.write_bytes(b"\n".join(COMPRESSED.read_bytes().splitlines()[:2]) + b"\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEMINI", "CODEX", "CLAUDE"))}
    env.update(HOME=str(home), PWD=str(project))
    code, out, err = await run_cli("status", "--plain", env=env, cwd=project)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("the only session of this folder, in ~/.gemini/tmp/pelican/chats")
    assert lines[1] == chat.name
    assert f"{_last_total(COMPRESSED.read_bytes()):,} / 524,288 tokens" in out
    assert "window 1,048,576" in out and "compactions in the transcript: 1" in out
    for source in (COMPRESSED, LEGACY):
        code, out, err = await run_cli("replay", str(source), "--plain", env=env)
        assert code == 0, err
        assert "into a 1,048,576-token window (auto-compact at 524,288)" in out, out
        assert "next request [" in out and f"{_last_total(source.read_bytes()):,} / 524,288" in out
