"""Codex rollouts through the real daemon over stdio (docs/codex.md#how-compactd-reads-a-rollout).

``session/open`` with a rollout's path (plain and ``.jsonl.zst``), and with ``follow`` while
the test writes the rollout the way Codex does (a line in two pieces, the compaction line, an
unknown line type): the token status agrees with the rollout's last token count, Codex's
compactions are compactions, recall finds what they dropped, and a followed rollout ends as a
fresh import of the whole file would. The daemon's ``session/followed`` notifications are
waited on, never time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from compactd_client import Client

from compactd import protocol as p
from tests.codex_rollouts import CAPTURED, compressed, older_rollout
from tests.conftest import SpawnDaemon
from tests.helpers import CWD

DEADLINE = 15.0


def _last_tokens(data: bytes) -> int:
    """The rollout's last token count: its last response's total."""
    for raw in reversed(data.splitlines()):
        line = json.loads(raw)
        if line["type"] == "event_msg" and line["payload"].get("type") == "token_count":
            info = line["payload"].get("info") or {}
            last = info.get("last_token_usage") or {}
            if last.get("total_tokens"):
                return int(last["total_tokens"])
    raise AssertionError("no token count")


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


async def _open(client: Client, path: Path, sid: str, **kw: Any) -> p.OpenResult:
    return await client.open_session(cwd=CWD, session_id=sid, transcript_path=str(path), **kw)


@pytest.mark.parametrize("rollout", CAPTURED, ids=lambda path: path.name.split("__")[1])
async def test_a_captured_rollout_opens_with_its_compactions_and_its_count(
    spawn_daemon: SpawnDaemon, tmp_path: Path, rollout: Path
) -> None:
    data = rollout.read_bytes()
    packed = tmp_path / (rollout.name + ".zst")
    packed.write_bytes(compressed(data))
    async with spawn_daemon() as client:
        opened = await _open(client, rollout, "plain")
        assert opened.skipped_lines == 0 and opened.entry_count > 30
        assert opened.status.exact_tokens == _last_tokens(data)
        stats = await client.stats("plain")
        assert len(stats.compactions) == 2
        # What the model sees after the second compaction: Codex's kept prompts and summary,
        # then what came after; no command of the first turns.
        messages = json.dumps((await client.messages("plain")).messages)
        assert "Check the count again and note that you did" in messages
        assert "seq 1 4000" not in messages.split("use the information in this summary")[0]
        # recall finds what the compactions dropped, in the rollout's own words.
        found = await client.recall("plain", "seq 1 4000")
        assert found.hits and any("seq 1 4000" in h.snippet and h.compacted for h in found.hits)

        # The same rollout compressed, as Codex rewrites an idle one, reads the same.
        zst = await _open(client, packed, "zst")
        assert zst.entry_count == opened.entry_count
        assert zst.status == opened.status


async def test_an_older_rollout_with_a_remote_compaction_reads_as_compactions(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    rollout = older_rollout()
    path = tmp_path / "rollout-2025-09-01T10-00-00-0198f0c2-1111-7222-8333-444455556666.jsonl"
    path.write_bytes(rollout.data(corrupt=True))
    async with spawn_daemon() as client:
        opened = await _open(client, path, "old")
        # The damaged line and the line of an unknown type are skipped, and counted.
        assert opened.skipped_lines == 1 + rollout.unknown
        assert opened.status.exact_tokens == 9_000
        stats = await client.stats("old")
        assert len(stats.compactions) == 2
        messages = json.dumps((await client.messages("old")).messages)
        # The old compaction line kept no history: the user's messages before it are rebuilt.
        assert "Keep the old CSV dialect as it is; never change quoting" in messages
        assert "The importer was fixed" in messages
        for query in ("trailing_comma", "pytest -q tests/test_importer.py", "rstrip"):
            assert (await client.recall("old", query)).hits, query


async def test_a_live_rollout_is_followed_as_codex_writes_it(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    source = CAPTURED[0]
    lines = source.read_bytes().splitlines(keepends=True)
    path = tmp_path / "rollout-live.jsonl"
    path.write_bytes(b"".join(lines[:12]))
    whole = tmp_path / "rollout-whole.jsonl"
    whole.write_bytes(source.read_bytes())
    async with spawn_daemon() as client, client.follow_updates("live") as updates:
        opened = await _open(client, path, "live", follow=True)
        assert opened.following

        async def until(count: int) -> p.FollowedNotification:
            while True:
                note: p.FollowedNotification = await updates.next(DEADLINE)
                if note.entry_count >= count:
                    return note

        # The rest as Codex writes it: in bursts, one line in two pieces, an unknown line.
        rest = lines[12:]
        middle = len(rest) // 2
        _append(path, b"".join(rest[:middle]) + rest[middle][:40])  # a line still being written
        unknown = b'{"timestamp":"2026-11-28T08:27:00.000Z","type":"future_kind","payload":{}}\n'
        _append(path, rest[middle][40:] + unknown + b"".join(rest[middle + 1 :]))
        imported = await _open(client, whole, "whole")
        note = await until(imported.entry_count)
        assert note.entry_count == imported.entry_count
        assert (
            note.status.exact_tokens
            == imported.status.exact_tokens
            == _last_tokens(source.read_bytes())
        )
        live = (await client.messages("live")).messages
        assert live == (await client.messages("whole")).messages
        assert len((await client.stats("live")).compactions) == 2
