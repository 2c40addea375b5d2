"""Which model's window a session is measured against: the one the client names, else the one
the imported transcript names, else the session's own, else the default
(docs/thresholds.md#model-limits)."""

from __future__ import annotations

from pathlib import Path

import pytest
from compactd_client import RpcError

from compactd.core.constants import DEFAULT_MODEL
from tests.conftest import FIXTURES
from tests.helpers import CWD
from tests.inproc import InProc

# Recorded by Claude Code 2.1.330 with claude-opus-5-5 (1M window, 128K output).
R2_AUTO = FIXTURES / "claude-code-2.1.330__r2_auto.jsonl"
VIEWER = FIXTURES / "d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"


async def test_an_import_without_a_model_keeps_the_transcripts_window(
    app_daemon: InProc,
) -> None:
    async with app_daemon() as client:
        opened = await client.open_session(cwd=CWD, transcript_path=str(R2_AUTO))
        assert opened.model == "claude-opus-5-5"
        # Claude Code's own threshold for that model: 1M - 20K - 13K.
        assert opened.status.context_window == 1_000_000
        assert opened.status.auto_compact_threshold == 967_000
        # Reopened without a model, the session keeps its own.
        again = await client.open_session(cwd=CWD, session_id=opened.session_id)
        assert again.model == "claude-opus-5-5" and again.status == opened.status
        listed = {s.session_id: s.model for s in (await client.list_sessions()).sessions}
        assert listed[opened.session_id] == "claude-opus-5-5"

        # A model the client names wins over the transcript's.
        named = await client.open_session(
            cwd=CWD, transcript_path=str(R2_AUTO), model="claude-sonnet-4-5"
        )
        assert named.model == "claude-sonnet-4-5"
        assert named.status.auto_compact_threshold == 167_000

        other = await client.open_session(cwd=CWD, transcript_path=str(VIEWER))
        assert other.model == "claude-sonnet-4-20250514"
        empty = await client.open_session(cwd=CWD)
        assert empty.model == DEFAULT_MODEL


async def test_a_transcript_naming_no_known_model_gets_the_default(
    app_daemon: InProc, tmp_path: Path
) -> None:
    lines = R2_AUTO.read_text().replace('"claude-opus-5-5"', '"<synthetic>"')
    path = tmp_path / "unknown.jsonl"
    path.write_text(lines)
    async with app_daemon() as client:
        opened = await client.open_session(cwd=CWD, transcript_path=str(path))
        assert opened.model == DEFAULT_MODEL
        assert opened.status.auto_compact_threshold == 167_000
        with pytest.raises(RpcError) as info:
            await client.open_session(cwd=CWD, model="  ")
        assert info.value.code == "invalidParams" and "omit it" in info.value.message


async def test_a_window_too_small_for_the_transcripts_model_is_refused_and_creates_nothing(
    app_daemon: InProc,
) -> None:
    async with app_daemon() as client:
        with pytest.raises(RpcError) as info:
            # claude-opus-5-5 reserves 20,000 of output and 13,000 of buffer: 1,000 is no room.
            await client.open_session(cwd=CWD, transcript_path=str(R2_AUTO), context_window=1_000)
        assert info.value.code == "invalidParams" and "1,000-token window" in info.value.message
        assert (await client.list_sessions()).sessions == []
