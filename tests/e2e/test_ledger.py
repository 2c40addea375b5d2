"""End-to-end tests of what survives a compaction (the survival ledger, its budget, recall
pointers), over stdio with real daemons: one summarizing offline, one whose model is the
Messages API emulator answering a summary that leaves things out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from compactd_client import Client

from compactd import protocol as p
from compactd.core.ledger import LEDGER_SECTION_TITLE, VIEW_BUDGET_SHARE
from compactd.core.recall import pointer, pointer_uuids
from tests.e2e.test_compact_support import Harness, harness_fixture, open_session
from tests.emulator import Reply
from tests.fidelity import (
    cc_like_summary,
    harness_messages,
    items_of,
    long_pastes,
    many_commands,
    multiline_requests,
    normalize,
    recalls,
    search_paths,
    view_text,
    write_files,
)
from tests.helpers import CWD, SessionBuilder
from tests.inproc import inproc

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio(loop_scope="module")]

harness = harness_fixture()

# A summary that keeps nothing of what the user said, for the ledger to complete.
TERSE = "<summary>1. Primary Request and Intent: the user asked for some changes.</summary>"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def offline(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    root = tmp_path_factory.mktemp("offline")
    async with inproc(root / "data", {"summarizer": {"offline": True}}) as client:
        yield client


async def _compacted_view(
    client: Client, entries: list[dict[str, Any]], answer: str | None, h: Harness
) -> tuple[str, p.CompactResult, p.TokenStatus, str]:
    sid = await open_session(client, entries)
    if answer is not None:
        h.emu.script(Reply(text=answer))
    result = await client.compact_full(sid)
    view = view_text((await client.messages(sid)).messages)
    return view, result, await client.tokens_status(sid), sid


@pytest.fixture(params=["offline", "model"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _client(mode: str, h: Harness, offline: Client) -> Client:
    return offline if mode == "offline" else h.client


def _in_budget(status: p.TokenStatus) -> bool:
    return status.tokens <= status.effective_window * VIEW_BUDGET_SHARE


async def test_a_multi_line_request_survives_verbatim(
    mode: str, h: Harness, offline: Client
) -> None:
    session = multiline_requests(CWD)
    view, result, status, _ = await _compacted_view(
        _client(mode, h, offline), session.entries, TERSE, h
    )
    requests = items_of(session.entries).messages
    assert len(requests) == 12 and all("\n" in r for r in requests)
    # Each one appears as the user wrote it: one block, line breaks and indentation kept.
    for request in requests:
        assert request in view
    assert _in_budget(status)
    if mode == "model":
        assert LEDGER_SECTION_TITLE in view
        assert result.restored_from_ledger is not None
        assert (
            sum(r.startswith("restored: user message:") for r in result.restored_from_ledger) == 12
        )


async def test_a_long_paste_keeps_head_and_tail_and_its_pointer_returns_it_whole(
    mode: str, h: Harness, offline: Client
) -> None:
    client = _client(mode, h, offline)
    paste = "Here is the full build log:\n" + "\n".join(
        f"step {i:05d}: compiled module_{i} in {i % 97} ms" for i in range(520)
    )
    assert len(paste) >= 20_000
    b = SessionBuilder()
    b.user("Find out why the build is slow.")
    b.bash("make build", 300)
    b.user(paste)
    b.reply("Module 519 is the slowest; looking at it now.")
    view, _, status, sid = await _compacted_view(client, b.entries, TERSE, h)
    head, tail = paste[:300], paste[-300:]
    assert head in view and tail in view
    assert paste not in view
    uid = b.entries[3]["uuid"]
    assert pointer(uid) in view and uid in pointer_uuids(view)
    # The pointer, given to recall/search as it stands, returns the whole message.
    found = await client.recall(sid, query=pointer(uid))
    [hit] = found.hits
    assert hit.uuid == uid and hit.compacted is True
    assert hit.entry is not None and hit.entry["message"]["content"] == paste
    assert _in_budget(status)


async def test_three_hundred_commands_survive_within_the_budget(
    mode: str, h: Harness, offline: Client
) -> None:
    session = many_commands(CWD, n=300)
    view, _, status, _ = await _compacted_view(
        _client(mode, h, offline), session.entries, cc_like_summary(session.entries), h
    )
    _, _, commands = recalls(items_of(session.entries), view)
    assert commands.total == 300
    assert commands.share >= 0.95
    assert _in_budget(status)
    # Failed ones say how they failed, not only that they did.
    assert "failed: exit 1: e assertionerror: expected" in normalize(view)


async def test_a_harness_message_is_not_listed_as_the_users_words(
    mode: str, h: Harness, offline: Client
) -> None:
    session = harness_messages(CWD)
    view, result, status, _ = await _compacted_view(
        _client(mode, h, offline), session.entries, TERSE, h
    )
    hay = normalize(view)
    for message in items_of(session.entries).messages:
        assert normalize(message) in hay
    # The server configuration in a task notification's result is not quoted as the user's.
    assert "server.alpha.parser" not in hay
    assert "request interrupted" not in normalize(
        view.split("6. All User Messages:")[-1].split("Messages from the harness")[0]
    )
    if mode == "offline":
        # Harness messages are one line each, under their own heading.
        harness = hay.split("messages from the harness, not typed by the user:")[1]
        assert 'task notification: agent "index the repo" completed' in harness
        assert "slash command: /model opus" in harness
    else:
        restored = result.restored_from_ledger or []
        assert restored and all(
            "task-notification" not in r and "/model" not in r and "interrupted" not in r
            for r in restored
        )
    assert _in_budget(status)


async def test_a_grep_path_is_kept(mode: str, h: Harness, offline: Client) -> None:
    session = search_paths(CWD)
    view, result, _, _ = await _compacted_view(_client(mode, h, offline), session.entries, TERSE, h)
    _, files, _ = recalls(items_of(session.entries), view)
    assert files.total > 10 and files.found == files.total
    searched = next(line for line in view.splitlines() if "src/: " in line)
    assert "core" in searched and "config" in searched  # a Grep path, an LS path
    assert "legacy" in next(line for line in view.splitlines() if "src/api/: " in line)  # Glob
    if mode == "model":
        assert f"restored: file: {CWD}/src/core" in (result.restored_from_ledger or [])


async def test_150_compactions_in_a_row_are_never_refused_and_stay_in_budget(
    mode: str, h: Harness, offline: Client
) -> None:
    client = _client(mode, h, offline)
    sid = await open_session(client, [])
    b = SessionBuilder()
    views = []
    for n in range(150):
        start = len(b.entries)
        for i in range(15):
            b.user(f"Round {n}, request {i}: rename the helper in module_{n}_{i}.")
            b.reply(
                f"Renamed the helper in module_{n}_{i} and updated its callers; the tests pass. "
                * 6
            )
        await client.append(sid, b.entries[start:])
        result = await client.compact_full(sid)  # a refusal would raise
        status = await client.tokens_status(sid)
        assert _in_budget(status), (n, status.tokens)
        views.append(result.post_compact_tokens)
    # The view does not grow with the number of compactions.
    assert max(views[100:]) <= max(views[20:50]) * 1.1
    view = view_text((await client.messages(sid)).messages)
    assert "Round 0, request 0: rename the helper in module_0_0." in view
    assert "Round 149, request 14: rename the helper in module_149_14." in view


async def test_the_offline_preview_is_exact_attachments_included(
    offline: Client, tmp_path: Path
) -> None:
    session = long_pastes(str(tmp_path))
    write_files(session.files_on_disk)
    sid = await open_session(offline, session.entries, cwd=str(tmp_path))
    planned = await offline.compact_preview(sid, mechanism="full")
    result = await offline.compact_full(sid)
    kinds = {a["attachment"]["type"] for a in result.attachments}
    assert "file" in kinds  # files re-read from disk, within what the summary leaves
    assert planned.estimated_post_tokens == result.post_compact_tokens


async def test_the_todo_list_appears_once_and_listings_are_not_repeated(
    mode: str, h: Harness, offline: Client
) -> None:
    b = SessionBuilder()
    b.user("Ship the release: bump the version, tag it, write the notes.")
    todos = [
        {"content": "bump the version", "status": "completed", "activeForm": "Bumping"},
        {"content": "tag the release commit", "status": "in_progress", "activeForm": "Tagging"},
        {"content": "write the release notes", "status": "pending", "activeForm": "Writing"},
    ]
    b.call("TodoWrite", {"todos": todos}, "ok")
    b._add(
        {
            "type": "attachment",
            "attachment": {
                "type": "deferred_tools_delta",
                "addedNames": ["WebFetch", "WebSearch"],
                "addedLines": ["WebFetch", "WebSearch"],
                "removedNames": [],
            },
        }
    )
    b.bash("make dist", 6_000)
    b.bash("git tag v1.2.0", 50)
    b.reply("Tagged; the notes are next.")
    view, result, _, _ = await _compacted_view(_client(mode, h, offline), b.entries, TERSE, h)
    kinds = [a["attachment"]["type"] for a in result.attachments]
    assert kinds.count("todo") == 1 and "deferred_tools_delta" not in kinds
    assert view.count("tag the release commit") == 1
    assert view.count("write the release notes") == 1
