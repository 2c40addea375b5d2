"""A second agent's file through the real daemon: the import of ``session/open``, following
it, and ``compactd mcp``'s tools all read it with its own reader, chosen by its content
(docs/agents.md#reading). The agent is the made-up one of ``tests/unit/test_port.py``,
registered before Claude Code for the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from compactd import port
from compactd import protocol as p
from compactd.core.constants import DEFAULT_MODEL
from compactd.mcp_server import McpConfig, context_answer, recall_answer
from tests.helpers import CWD
from tests.inproc import InProc
from tests.unit.test_port import CHAT, ChatFormat

DEADLINE = 15.0


@pytest.fixture(autouse=True)
def with_chat(monkeypatch: pytest.MonkeyPatch) -> None:
    native = port.AGENTS[0].format()
    monkeypatch.setattr(port, "formats", lambda: (ChatFormat(), native))


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


async def test_a_second_agent_s_file_is_imported_and_followed_by_its_reader(
    app_daemon: InProc, tmp_path: Path
) -> None:
    chat = tmp_path / "chat.log"  # no .jsonl: the content says what it is
    chat.write_bytes(CHAT)
    async with app_daemon() as client, client.follow_updates("chat") as updates:
        opened = await client.open_session(
            cwd=CWD, session_id="chat", transcript_path=str(chat), follow=True
        )
        assert opened.entry_count == 2 and opened.following
        assert opened.model == DEFAULT_MODEL  # named by the chat's own line
        messages = (await client.messages("chat")).messages
        assert [m["role"] for m in messages] == ["user", "assistant"]
        assert messages[0]["content"] in ("fix the bug", [{"type": "text", "text": "fix the bug"}])

        _append(chat, b'{"said": "now the tests", "by": "me"}\n')
        note: p.FollowedNotification = await updates.next(DEADLINE)
        while note.entry_count < 3:
            note = await updates.next(DEADLINE)
        assert note.entry_count == 3 and note.appended == 1


def test_the_mcp_tools_read_a_second_agent_s_file_by_its_reader(tmp_path: Path) -> None:
    chat = tmp_path / "chat.jsonl"
    chat.write_bytes(CHAT + b'{"said": "run the flaky suite again", "by": "me"}\n')
    config = McpConfig(tmp_path / "data", str(tmp_path), session=str(chat))
    assert "flaky suite" in recall_answer(config, "flaky suite", 5, None)
    assert "context:" in context_answer(config, None)
