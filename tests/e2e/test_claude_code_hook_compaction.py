"""A compaction the Claude Code plugin answered is a compaction to every reader of compactd.

Claude Code 2.1.332 files what a plugin's ``session.compact`` returned after the boundary as
``rowSource: "hook"`` lines, without ``isCompactSummary`` (docs/claude-code.md#what-the-transcript-keeps).
The fixture ``claude-code-2.1.332__plugin_compact.jsonl`` is such a session (the real CLI with
compactd's plugin answering ``/compact``). The follower, the token status, the hooks' resume,
recall, ``compactd status``, the MCP ``context`` tool and the resume round trip must all see its
compaction: the view starts at compactd's summary, and nothing from before it is counted twice.
"""

from __future__ import annotations

import json
from pathlib import Path

from compactd.agents.claude_code.format import is_hook_summary
from compactd.core.handback import last_compaction
from compactd.core.recall_words import parse_query
from compactd.mcp_server import McpConfig, context_answer
from compactd.services.agent_tail import read_tail
from compactd.services.recall_index import use_index
from compactd.services.safe_io import Deadline
from compactd.transcript.model import parse_lines
from tests.conftest import FIXTURES, SpawnDaemon
from tests.e2e.test_follow import Transcript, assert_same_as_import, project_dir, until_entries
from tests.helpers import CWD, run_cli, stored_transcript

HOOKED = FIXTURES / "claude-code-2.1.332__plugin_compact.jsonl"
OPENING = "This session continues an earlier conversation"
FIRST_PROMPT = "Read notes.txt then run the echo steps"


def _lines() -> list[bytes]:
    return HOOKED.read_bytes().splitlines(keepends=True)


def _boundary_at(lines: list[bytes]) -> int:
    return next(i for i, x in enumerate(lines) if b'"compact_boundary"' in x)


def test_the_fixture_is_what_claude_code_files_for_a_hooks_answer() -> None:
    lines = _lines()
    at = _boundary_at(lines)
    summary = json.loads(lines[at + 1])
    assert summary["rowSource"] == "hook" and "isCompactSummary" not in summary
    assert summary["parentUuid"] == json.loads(lines[at])["uuid"]
    assert summary["message"]["content"].startswith(OPENING)
    records = list(parse_lines(lines))
    boundaries = {r.uuid for r in records if r.entry.is_compact_boundary}
    assert [r.uuid for r in records if is_hook_summary(r.entry, boundaries)] == [summary["uuid"]]


def test_the_hooks_see_the_compaction_and_its_span() -> None:
    tail = read_tail(HOOKED)
    compaction = last_compaction(tail.records, whole=tail.whole)
    assert compaction is not None
    assert compaction.boundary_id == json.loads(_lines()[_boundary_at(_lines())])["uuid"]
    assert compaction.summary.startswith(OPENING)
    replaced = json.dumps([r.to_builtins() for r in compaction.replaced])
    assert FIRST_PROMPT in replaced
    # The kept tail the hook wrote after its summary is no part of the span it replaced.
    assert "Carry on" not in replaced


async def test_import_and_status_start_after_the_compaction(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    async with spawn_daemon() as client:
        opened = await client.open_session(cwd=CWD, transcript_path=str(HOOKED))
        # The copy carries the summary's mark; every other line is the file's, byte for byte.
        copy = stored_transcript(tmp_path / "data", opened.session_id).read_bytes().splitlines()
        source = _lines()
        summary = _boundary_at(source) + 1
        assert json.loads(copy[summary]) == {
            **json.loads(source[summary]),
            "isCompactSummary": True,
        }
        assert [line for i, line in enumerate(copy) if i != summary] == [
            line.rstrip(b"\n") for i, line in enumerate(source) if i != summary
        ]
        messages = await client.messages(opened.session_id)
        first = messages.messages[0]["content"]
        text = first if isinstance(first, str) else json.dumps(first)
        assert OPENING in text
        assert messages.boundary_uuid == json.loads(_lines()[_boundary_at(_lines())])["uuid"]
        # What the compaction replaced is not counted again.
        assert FIRST_PROMPT not in json.dumps(messages.messages[1:])
    code, out, err = await run_cli("status", str(HOOKED), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert len(report["stats"]["compactions"]) == 1


async def test_follow_through_a_hook_compaction_read_in_pieces(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    lines = _lines()
    at = _boundary_at(lines)
    src = Transcript(project_dir(tmp_path) / "live.jsonl", lines[:at])
    data_dir = tmp_path / "data"
    sid = "followed"
    async with spawn_daemon() as client, client.follow_updates(sid) as updates:
        await client.open_session(
            cwd=CWD, session_id=sid, transcript_path=str(src.path), follow=True
        )
        # The boundary in one read, the hook's summary in the next: it is still its summary.
        src.append(lines[at])
        await until_entries(updates, src.entries())
        src.append(b"".join(lines[at + 1 :]))
        await until_entries(updates, src.entries())
        messages = await client.messages(sid)
        assert OPENING in json.dumps(messages.messages[0])
        await assert_same_as_import(client, sid, src.path, data_dir)


async def test_follow_after_an_import_that_ends_at_the_boundary(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    lines = _lines()
    at = _boundary_at(lines)
    src = Transcript(project_dir(tmp_path) / "live.jsonl", lines[: at + 1])
    data_dir = tmp_path / "data"
    sid = "followed"
    async with spawn_daemon() as client, client.follow_updates(sid) as updates:
        # The import takes the boundary; the hook's summary comes in the follower's first read.
        await client.open_session(
            cwd=CWD, session_id=sid, transcript_path=str(src.path), follow=True
        )
        src.append(b"".join(lines[at + 1 :]))
        await until_entries(updates, src.entries())
        messages = await client.messages(sid)
        assert OPENING in json.dumps(messages.messages[0])
        await assert_same_as_import(client, sid, src.path, data_dir)


def test_recall_and_context_know_the_summary(tmp_path: Path) -> None:
    found, _ = use_index(
        tmp_path / "data",
        HOOKED,
        lambda index: index.search(parse_query("continues an earlier conversation"), 5),
        deadline=Deadline(60),
    )
    assert found.found and found.found[0].entry.role == "summary"
    config = McpConfig(tmp_path / "data", CWD, str(HOOKED))
    assert "compactions so far: 1" in context_answer(config, None)


async def test_the_resume_round_trip_carries_what_came_before_it(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    cwd = tmp_path / "project"
    cwd.mkdir()
    folder = tmp_path / "claude" / "projects" / str(cwd).replace("/", "-")
    folder.mkdir(parents=True)
    source = folder / HOOKED.name
    source.write_bytes(HOOKED.read_bytes().replace(b"/home/dev/project", str(cwd).encode()))
    async with spawn_daemon(options={"summarizer": {"offline": True}}) as client:
        result = await client.claude_code_compact(str(source))
    lines = [json.loads(x) for x in Path(result.new_transcript_path).read_bytes().splitlines()]
    summary = lines[1]
    assert summary["isCompactSummary"] is True
    # The user's words from before the hook compaction come through it, into the new summary.
    assert FIRST_PROMPT in summary["message"]["content"]
    assert result.user_messages_kept == result.user_messages
