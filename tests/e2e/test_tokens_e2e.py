"""tokens/status and tokens/threshold through the real daemon."""

from __future__ import annotations

from typing import Any

from compactd_client import Client

from compactd import protocol as p
from tests.helpers import CWD, collect, user
from tests.inproc import InProc

# A wait for notifications ends after this many seconds without one.
QUIET_S = 0.3


def _user(i: int, chars: int) -> dict[str, Any]:
    return user("word " * (chars // 5), uuid=f"u{i}")


async def test_threshold_notification_once_per_crossing(app_client: Client) -> None:
    # 50K window, 8K output -> effective 42,000; auto-compact 29,000; warning = error = 9,000.
    opened = await app_client.open_session(
        cwd=CWD, model="m", context_window=50_000, max_output_tokens=8_000
    )
    sid = opened.session_id
    assert opened.status.warning_threshold == 9_000
    async with app_client.subscribe(p.NOTIFY_TOKENS_THRESHOLD) as queue:
        r1 = await app_client.append(sid, [_user(1, 20_000)])  # ~6,700 tokens: below warning
        assert not r1.status.is_above_warning_threshold
        assert await collect(queue, QUIET_S, quiet=True) == []
        r2 = await app_client.append(sid, [_user(2, 12_000)])  # crosses 9,000
        assert r2.status.is_above_warning_threshold
        notes = await collect(queue, QUIET_S, quiet=True)
        assert sorted(n["level"] for n in notes) == ["error", "warning"]
        assert all(n["sessionId"] == sid and n["tokens"] == r2.status.tokens for n in notes)
        await app_client.append(sid, [_user(3, 400)])  # still above: no new notification
        assert await collect(queue, QUIET_S, quiet=True) == []
        r4 = await app_client.append(sid, [_user(4, 70_000)])  # crosses auto-compact (29,000)
        assert r4.status.is_above_auto_compact_threshold
        assert [n["level"] for n in await collect(queue, QUIET_S, quiet=True)] == ["autoCompact"]


async def test_status_honours_env_overrides(app_daemon: InProc) -> None:
    options = {"env": {"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "50", "DISABLE_AUTO_COMPACT": "1"}}
    async with app_daemon(options=options) as client:
        opened = await client.open_session(cwd=CWD, model="claude-opus-4-6")
        st = opened.status
        assert st.effective_window == 980_000
        assert st.auto_compact_enabled is False
        assert st.compaction_enabled is True
    async with app_daemon(options={"env": {"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "50"}}) as client:
        st = (await client.open_session(cwd=CWD, model="claude-opus-4-6")).status
        assert st.auto_compact_threshold == 490_000


async def test_inline_subagent_turns_do_not_count_toward_the_main_context(
    app_client: Client,
) -> None:
    sid = (await app_client.open_session(cwd=CWD, model="claude-sonnet-4-5")).session_id
    main = [_user(1, 400)]
    side = {**_user(2, 80_000), "isSidechain": True}
    r1 = await app_client.append(sid, main)
    r2 = await app_client.append(sid, [side])
    assert r2.status.tokens == r1.status.tokens
    bd = await app_client.tokens_breakdown(sid)
    assert bd.total_tokens == r1.status.tokens
    # A sub-agent's own transcript (sidechain entries only) does count.
    sub = (
        await app_client.open_session(cwd=CWD, model="claude-sonnet-4-5", agent_kind="subagent")
    ).session_id
    r3 = await app_client.append(sub, [side])
    assert r3.status.tokens > 20_000
