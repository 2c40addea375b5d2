"""One accounting: the status, the breakdown, a compaction's figures, an undo and the stats agree,
and every one of them counts the fixed prefix the next request carries (docs/thresholds.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from compactd_client import Client

from compactd import protocol as p
from tests.conftest import fixture_transcripts
from tests.helpers import CWD, assistant, user
from tests.inproc import InProc

FIXTURES = fixture_transcripts()


def _close(a: int, b: int, share: float = 0.01) -> bool:
    return abs(a - b) <= max(2, int(max(a, b) * share))


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name[:40] for p in FIXTURES])
async def test_every_figure_is_one_accounting(app_daemon: InProc, path: Path) -> None:
    async with app_daemon(options={"summarizer": {"offline": True}}) as client:
        opened = await client.open_session(
            cwd=CWD, model="claude-sonnet-4-5", transcript_path=str(path)
        )
        sid = opened.session_id
        status = await client.tokens_status(sid)
        parts = (
            status.fixed_prefix_tokens
            + status.message_tokens
            + status.attachment_tokens
            - status.cleared_tokens
        )
        assert parts == status.tokens
        breakdown = await client.tokens_breakdown(sid)
        assert _close(breakdown.total_tokens, status.tokens), (breakdown.total_tokens, status)
        # The rows add up exactly: a table a person sums by hand must match its total.
        assert sum(c.tokens for c in breakdown.categories) == breakdown.total_tokens
        if status.fixed_prefix_tokens:
            assert breakdown.categories[0].name == "fixedPrefix"
            assert breakdown.categories[0].tokens == status.fixed_prefix_tokens

        if "sessclone" in path.name:
            return  # its last compaction left too little to compact again
        result = await client.compact_full(sid)
        after = await client.tokens_status(sid)
        assert result.post_compact_tokens == after.tokens
        assert result.pre_compact_tokens == status.tokens
        # The prefix is still sent after a compaction: it is carried, not forgotten.
        assert after.fixed_prefix_tokens == status.fixed_prefix_tokens
        assert after.tokens >= after.fixed_prefix_tokens
        if "fe5e1c67" in path.name:
            assert after.tokens >= 12_000, after
        stats = await client.stats(sid)
        assert stats.compactions[-1].post_tokens == result.post_compact_tokens

        undone = await client.compact_undo(sid)
        assert undone.status.tokens == status.tokens
        assert (await client.tokens_status(sid)) == status
        stats = await client.stats(sid)
        assert all(c.boundary_uuid != undone.boundary.get("uuid") for c in stats.compactions)
        assert stats.compactions[-1].undone and stats.compactions[-1].post_tokens == after.tokens


async def _open_described(client: Client) -> str:
    """A new session whose client described a system prompt of about 2,800 tokens."""
    system = [{"type": "text", "text": "You are a careful engineer. " * 400}]
    opened = await client.open_session(
        cwd=CWD,
        model="claude-sonnet-4-5",
        cache_safe_params=p.CacheSafeParams(system=system, tools=[]),
    )
    return opened.session_id


async def test_a_fresh_session_counts_the_prefix_its_client_described(
    app_daemon: InProc,
) -> None:
    async with app_daemon() as client:
        sid = await _open_described(client)
        await client.append(sid, [user("hello", uuid="u1")])
        status = await client.tokens_status(sid)
        assert status.fixed_prefix_source == "carried"
        assert 2_500 < status.fixed_prefix_tokens < 4_500
        # The first response's usage replaces the estimate with what was really sent.
        await client.append(
            sid,
            [
                assistant(
                    "hi",
                    uuid="a1",
                    msg_id="m1",
                    model="claude-sonnet-4-5",
                    usage={"input_tokens": 5_000, "output_tokens": 2},
                )
            ],
        )
        learned = await client.tokens_status(sid)
        assert learned.fixed_prefix_source == "usage"
        assert learned.tokens == 5_002
        assert learned.fixed_prefix_tokens + learned.message_tokens == learned.tokens


async def test_a_usage_implying_less_than_the_described_prefix_is_not_believed(
    app_daemon: InProc,
) -> None:
    async with app_daemon() as client:
        sid = await _open_described(client)
        await client.append(sid, [user("x" * 40_000, uuid="u1")])
        described = (await client.tokens_status(sid)).fixed_prefix_tokens
        assert described > 2_500
        # 15,001 reported, less the padded estimate of the message (13,334): 1,667 would be
        # the prefix, less than the system prompt the client described.
        await client.append(
            sid,
            [
                assistant(
                    "ok",
                    uuid="a1",
                    msg_id="m1",
                    model="claude-sonnet-4-5",
                    usage={"input_tokens": 15_000, "output_tokens": 1},
                )
            ],
        )
        status = await client.tokens_status(sid)
        assert status.tokens == 15_001 and status.fixed_prefix_source == "usage"
        assert status.fixed_prefix_tokens == described
        assert status.fixed_prefix_tokens + status.message_tokens == status.tokens
