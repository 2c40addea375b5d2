"""Released history through the real daemon: lines a compaction took out of the context are
read back from the transcript for appends, recall, undo and stats, before and after a restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from compactd_client import Client, RpcError

from compactd import protocol as p
from tests.helpers import CWD
from tests.inproc import InProc

OFFLINE = {"summarizer": {"offline": True}}


def _turn(i: int, parent: str | None) -> list[dict[str, Any]]:
    question = {
        "type": "user",
        "uuid": f"q{i}",
        "parentUuid": parent,
        "message": {"role": "user", "content": f"question {i}: how does part {i} work?"},
    }
    answer = {
        "type": "assistant",
        "uuid": f"a{i}",
        "parentUuid": f"q{i}",
        "message": {
            "id": f"msg_{i}",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": f"part {i} works like this. " * 20}],
        },
    }
    return [question, answer]


async def _session_with_history(client: Client, turns: int) -> str:
    sid = (await client.open_session(cwd=CWD, model="claude-sonnet-4-5")).session_id
    parent = None
    for i in range(turns):
        await client.append(sid, _turn(i, parent))
        parent = f"a{i}"
    await client.compact_full(sid)
    return sid


async def _check_history(client: Client, sid: str, turns: int) -> None:
    # An append retried long after its lines left the context is still recognised.
    again = await client.append(sid, _turn(3, "a2"))
    assert (again.appended, again.skipped_duplicates) == (0, 2)
    # Recall reads the summarized lines back from the file.
    hits = (await client.recall(sid, uuids=["q3", "a40", "missing"])).hits
    assert [(h.uuid, h.compacted) for h in hits] == [("q3", True), ("a40", True)]
    # The offline summary quotes every question, so it is found too, in the current context.
    found = {h.uuid: h.compacted for h in (await client.recall(sid, query="question 17:")).hits}
    assert found.pop("q17") is True
    assert list(found.values()) == [False]
    stats = await client.stats(sid)
    assert len(stats.compactions) == 1
    assert stats.compactions[0].trigger == "manual"


async def test_released_history_serves_appends_recall_and_stats(app_daemon: InProc) -> None:
    turns = 60
    async with app_daemon(options=OFFLINE) as client:
        sid = await _session_with_history(client, turns)
        await _check_history(client, sid, turns)
        # Undo brings the summarized lines back into the context from the file.
        before_undo = (await client.messages(sid)).messages
        await client.compact_undo(sid)
        restored = (await client.messages(sid)).messages
        assert len(restored) == 2 * turns > len(before_undo)
        assert restored[6]["content"][0]["text"] == "question 3: how does part 3 work?"


async def test_released_history_after_a_restart(app_daemon: InProc, tmp_path: Path) -> None:
    turns = 60
    data = tmp_path / "restart"
    async with app_daemon(options=OFFLINE, data_dir=data) as client:
        sid = await _session_with_history(client, turns)
        count = (await client.list_sessions()).sessions[0].entry_count
        view = (await client.messages(sid)).messages
    async with app_daemon(options=OFFLINE, data_dir=data) as client:
        assert (await client.messages(sid)).messages == view
        await _check_history(client, sid, turns)
        assert (await client.list_sessions()).sessions[0].entry_count == count


async def test_an_import_with_no_entries_fails_and_leaves_nothing(
    app_daemon: InProc, tmp_path: Path
) -> None:
    src = tmp_path / "notes.jsonl"
    src.write_text("just some notes\n[1, 2, 3]\n")
    data = tmp_path / "import-data"
    async with app_daemon(options=OFFLINE, data_dir=data) as client:
        with pytest.raises(RpcError) as err:
            await client.open_session(
                cwd=CWD, model="claude-sonnet-4-5", transcript_path=str(src), session_id="imp"
            )
        assert err.value.code == p.ErrorCode.TRANSCRIPT_UNREADABLE
        assert "none of its 2 lines" in err.value.message
        assert (await client.list_sessions()).sessions == []
        assert not (data / "sessions" / "imp").exists()
        # The id is free: a real transcript imports under it.
        src.write_text("".join(json.dumps(e) + "\n" for e in _turn(0, None)))
        opened = await client.open_session(
            cwd=CWD, model="claude-sonnet-4-5", transcript_path=str(src), session_id="imp"
        )
        assert (opened.session_id, opened.entry_count) == ("imp", 2)
