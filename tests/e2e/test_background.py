"""Zero-wait compaction end to end: a summary prepared in the background and applied at once.

The daemon's summarizer talks to the emulator over real HTTP; the emulator's summary latency
makes the preparation take its time, and the tests wait on the ``compact/status``
notifications that say ``background: true`` (docs/background.md), never on sleeps. The window
is small (40,000 tokens, 4,096 of output: an auto-compact threshold of 22,904), so a few
turns of about 1,000 tokens move the session across the start level and the threshold.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from compactd_client import Client
from compactd_client.protocol import AutoResult

from compactd import protocol as p
from compactd.core.ledger import view_budget
from compactd.core.ledger.check import LEDGER_VERBATIM_PREFIX_CHARS
from tests.conftest import daemon_args, daemon_log
from tests.e2e.test_compact_support import CACHE_SAFE, Harness, harness_fixture
from tests.emulator import Emulator, Reply, api_error, request_kind
from tests.fidelity import items_of, recalls, view_text
from tests.helpers import (
    CWD,
    MODEL,
    assistant,
    emulator_options,
    text_block,
    tool_call,
    tool_result,
    transcript_lines,
    user,
)

# Generous guards, not measures: a busy two-core machine slows every step (docs/testing.md#no-test-depends-on-the-machines-load).
pytestmark = [pytest.mark.timeout(240), pytest.mark.asyncio(loop_scope="module")]

# The summary prepared at the start level is the one applied (refreshing has tests of its own).
ON = {"enabled": True, "refresh": False}
# Count-based microcompact clears any tool result but the last, whatever it saves.
MICRO = {"protectedTokens": 0, "minSavings": 0, "keepRecent": 1}
harness = harness_fixture(backgroundCompaction=ON, microcompact=MICRO)

WINDOW = {"contextWindow": 40_000, "maxOutputTokens": 4_096}
# Characters of one side of a turn: about 500 tokens each.
SIDE = 2_000


class Convo:
    """A linked conversation: each entry's parent is the previous one (a rewind picks another)."""

    def __init__(self, tag: str, answer: int = SIDE, side: int = SIDE) -> None:
        self.tag = tag
        # Characters of each answer and of each user message.
        self.answer = answer
        self.side = side
        self.n = 0
        self.last: str | None = None
        self.uuids: list[str] = []
        # The prompts of the turns that ran a command (``cat <uuid>.log``).
        self.tool_uuids: list[str] = []

    def _uuid(self) -> str:
        self.n += 1
        return f"{self.tag}-{self.n:05d}"

    def turns(self, count: int, *, label: str = "turn", parent: str | None = "last") -> list[Any]:
        out: list[dict[str, Any]] = []
        for _ in range(count):
            u, a = self._uuid(), self._uuid()
            up = self.last if parent == "last" else parent
            parent = "last"
            words = f"{label} {u}: " + "lorem ipsum dolor sit amet " * (self.side // 27)
            answer = f"answer to {u}: " + "consectetur adipiscing " * (self.answer // 23)
            out.append(user(words, uuid=u, parentUuid=up, sessionId="s"))
            out.append(
                assistant(
                    [text_block(answer)],
                    uuid=a,
                    parentUuid=u,
                    msg_id=f"msg-{a}",
                    model=MODEL,
                )
            )
            self.last = a
            self.uuids += [u, a]
        return out

    def tool_turns(self, count: int) -> list[Any]:
        """Turns that run a command whose output (about 1,000 tokens) microcompact may clear."""
        out: list[dict[str, Any]] = []
        for _ in range(count):
            u, c, r, a = self._uuid(), self._uuid(), self._uuid(), self._uuid()
            out.append(user(f"run it {u}", uuid=u, parentUuid=self.last))
            out.append(
                tool_call(f"t{c}", "Bash", {"command": f"cat {u}.log"}, uuid=c, parentUuid=u)
            )
            output = f"log {u}\n" + "line of output\n" * 280
            out.append(tool_result(f"t{c}", output, uuid=r, parentUuid=c))
            out.append(assistant([text_block(f"done {u}")], uuid=a, parentUuid=r, model=MODEL))
            self.last = a
            self.uuids += [u, c, r, a]
            self.tool_uuids.append(u)
        return out


async def open_convo(
    client: Client, convo: Convo, turns: int, window: dict[str, int] = WINDOW
) -> str:
    opened = await client.request(
        p.SESSION_OPEN, {"cwd": CWD, "model": MODEL, "cacheSafeParams": CACHE_SAFE, **window}
    )
    sid = str(opened["sessionId"])
    await client.append(sid, convo.turns(turns))
    return sid


async def grow_until(
    client: Client, sid: str, convo: Convo, level: int, label: str = "turn"
) -> p.AppendResult:
    """Append turns one at a time until the count reaches ``level``."""
    while True:
        result = await client.append(sid, convo.turns(1, label=label))
        if result.status.tokens >= level:
            return result


async def next_phase(
    queue: asyncio.Queue[tuple[str, Any]], phase: str, within: float = 90.0
) -> dict[str, Any]:
    """The next background ``compact/status`` of ``phase`` (others are skipped)."""
    deadline = time.monotonic() + within
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"no background {phase!r} notification"
        _, note = await asyncio.wait_for(queue.get(), left)
        if note.get("background") and note["phase"] in (phase, "failed"):
            assert note["phase"] == phase, note
            return dict(note)


def summary_requests(emu: Emulator) -> int:
    return sum(1 for r in emu.message_requests if request_kind(r.body) == "summary")


async def test_prepared_summary_is_applied_with_no_model_call(h: Harness) -> None:
    client, emu = h.client, h.emu
    convo = Convo("a")
    sid = await open_convo(client, convo, 10)
    status = await client.tokens_status(sid)
    start = int(status.auto_compact_threshold * 0.8)
    assert status.tokens < start and status.preparation is None
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        crossed = await grow_until(client, sid, convo, start)
        # The preparation starts with the append that crossed the start level, never delaying it.
        assert crossed.status.preparation is not None
        assert crossed.status.preparation.state == "preparing"
        covered_upto = convo.last
        prepared = await next_phase(queue, "prepared")
    assert prepared["sessionId"] == sid and prepared["trigger"] == "auto"
    status = await client.tokens_status(sid)
    assert status.preparation is not None and status.preparation.state == "ready"
    assert status.preparation.entries_covered == convo.uuids.index(covered_upto or "") + 1
    assert summary_requests(emu) == 1

    # Entries appended after the snapshot, then the threshold.
    after = await grow_until(client, sid, convo, status.auto_compact_threshold, label="late")
    late = [u for u in convo.uuids if u > (covered_upto or "")]
    before_view = (await client.messages(sid)).messages
    requests_before = len(emu.message_requests)
    auto = await client.compact_auto(sid)
    assert auto.was_compacted and auto.mechanism == "full", auto
    assert auto.result is not None and auto.result.prepared
    assert len(emu.message_requests) == requests_before  # no model call at that moment
    assert auto.status is not None and auto.status.tokens < after.status.tokens
    assert auto.status.preparation is None
    # Every entry appended after the snapshot is kept verbatim after the summary.
    kept = [e["uuid"] for e in auto.result.kept_entries]
    assert kept == late
    view = (await client.messages(sid)).messages
    texts = [str(m["content"]) for m in view]
    assert any("late" in t for t in texts[1:])
    meta = auto.result.boundary["compactMetadata"]
    assert meta["prepared"] is True and meta["waitMs"] >= 0

    stats = await client.stats(sid)
    applied = [c for c in stats.compactions if c.compaction_id == auto.result.compaction_id]
    assert applied and applied[0].prepared and applied[0].wait_ms is not None

    # compact/undo restores the view exactly.
    await client.request(p.COMPACT_UNDO, {"sessionId": sid})
    assert (await client.messages(sid)).messages == before_view


async def test_what_survives_a_prepared_compaction_is_what_the_model_sees(h: Harness) -> None:
    """bench_fidelity's measure on a prepared compaction: a command run after the snapshot is
    kept verbatim in a tool call, quotes and newlines included, and counts as kept (the measure
    once looked for it in the call's JSON, where they are escaped, and missed it)."""
    client = h.client
    convo = Convo("f")
    sid = await open_convo(client, convo, 10)
    status = await client.tokens_status(sid)
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        await grow_until(client, sid, convo, int(status.auto_compact_threshold * 0.8))
        await next_phase(queue, "prepared")
    commands = [
        "cat > types/state.ts << 'EOF'\nexport type State = { done: boolean };\nEOF",
        'ls -la types/ && echo "--- File count ---" && find types/ -name "*.ts" | wc -l',
    ]
    late: list[dict[str, Any]] = []
    for i, command in enumerate(commands):
        u, c, r, a = (f"f-late-{i}-{k}" for k in "ucra")
        late.append(user(f"late request {i}: write the types", uuid=u, parentUuid=convo.last))
        late.append(tool_call(f"t{c}", "Bash", {"command": command}, uuid=c, parentUuid=u))
        late.append(tool_result(f"t{c}", "ok", uuid=r, parentUuid=c))
        late.append(assistant([text_block(f"wrote {i}")], uuid=a, parentUuid=r, model=MODEL))
        convo.last = a
    await client.append(sid, late)
    await grow_until(client, sid, convo, status.auto_compact_threshold, label="late")
    entries = transcript_lines(h.root / "data" / "sessions" / sid / "transcript.jsonl")
    auto = await client.compact_auto(sid)
    assert auto.result is not None and auto.result.prepared, auto
    kept = {e["uuid"] for e in auto.result.kept_entries}
    assert {e["uuid"] for e in late} <= kept  # the commands are in the verbatim tail
    items = items_of(entries)
    assert set(commands) <= set(items.commands)
    view = view_text((await client.messages(sid)).messages)
    users, files, cmds = recalls(items, view)
    assert (users.found, files.found, cmds.found) == (users.total, files.total, cmds.total)


# A summary the way a model may paraphrase a long session: it quotes none of the person's
# messages, so each must come from the ledger's completion, in the room the view budget leaves.
TERSE_SUMMARY = (
    "<analysis>Many long requests, each answered in turn.</analysis>\n\n<summary>\n"
    "1. Primary Request and Intent:\n   The user sent a series of long requests.\n\n"
    "8. Current Work:\n   Answering the latest request.\n</summary>"
)


async def test_a_prepared_summary_leaving_a_user_message_to_a_pointer_is_set_aside(
    spawn_emulated: Any, emulator: Emulator, tmp_path: Path
) -> None:
    """docs/background.md#applying: the prepared summary, completed against the ledger, could
    carry the person's messages (a hundred of about 600 characters each) only cut short of
    the 200 characters they are checked by, around recall pointers, the room being a tenth of
    the window; it is set aside, the model is asked at the threshold and its summary (the
    emulator's, quoting every message) keeps them all. The unused preparation's tokens are
    counted."""
    emulator.summary_max_quotes = 1_000  # the second summary quotes every message
    emulator.script(Reply(text=TERSE_SUMMARY))  # the preparation's reply; then the default
    async with spawn_emulated(backgroundCompaction=ON) as client:
        convo = Convo("v", answer=100, side=600)
        sid = await open_convo(client, convo, 10)
        status = await client.tokens_status(sid)
        async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
            await grow_until(client, sid, convo, int(status.auto_compact_threshold * 0.8))
            await next_phase(queue, "prepared")
        covered_upto = convo.last or ""
        assert summary_requests(emulator) == 1
        # What the preparation was billed for, as the emulator answered it.
        usage = emulator.message_requests[0].usage or {}
        billed = ("input_tokens", "output_tokens", "cache_read_input_tokens")
        prepared_tokens = sum(usage[k] for k in (*billed, "cache_creation_input_tokens"))
        assert prepared_tokens > 0

        await grow_until(client, sid, convo, status.auto_compact_threshold, label="late")
        late = [u for u in convo.uuids if u > covered_upto]
        ready = await client.tokens_status(sid)
        assert ready.preparation is not None and ready.preparation.state == "ready"
        entries = transcript_lines(tmp_path / "data" / "sessions" / sid / "transcript.jsonl")
        said = items_of(entries).messages
        before = [m for m in said if not any(f"late {u}:" in m for u in late)]
        # The scenario: what the person wrote before the snapshot cannot all be restored as
        # written in the room the view budget gives the summary and what the ledger adds.
        room = view_budget(status.effective_window).summary_chars
        assert sum(len(m) for m in before) > room, (len(before), room)

        auto = await client.compact_auto(sid)
        assert auto.was_compacted and auto.mechanism == "full", auto
        assert auto.result is not None and not auto.result.prepared
        assert summary_requests(emulator) == 2  # the model was asked at that moment
        assert "prepared" not in auto.result.boundary["compactMetadata"]
        # Asked on the snapshot the preparation summarized: what came after it stays verbatim.
        assert [e["uuid"] for e in auto.result.kept_entries] == late
        view = " ".join(view_text((await client.messages(sid)).messages).split()).casefold()
        missing = [
            m[:40]
            for m in said
            if " ".join(m.split()).casefold()[:LEDGER_VERBATIM_PREFIX_CHARS].rstrip() not in view
        ]
        assert not missing, missing

        stats = await client.stats(sid)
        assert stats.preparation_tokens_unused == prepared_tokens
        assert [c.prepared for c in stats.compactions] == [False]
        assert auto.status is not None and auto.status.preparation is None


async def test_summary_preparing_below_the_blocking_limit_then_waits_at_it(h: Harness) -> None:
    client, emu = h.client, h.emu
    emu.hold("summary")  # the preparation is being written until released below
    convo = Convo("b")
    # A larger window: what is appended from the start level to the blocking limit, kept
    # verbatim after the summary, must leave the headroom (else it compacts as without one).
    sid = await open_convo(client, convo, 30, {"contextWindow": 80_000, "maxOutputTokens": 4_096})
    status = await client.tokens_status(sid)
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        await grow_until(client, sid, convo, int(status.auto_compact_threshold * 0.8))
        await next_phase(queue, "preparing")
        above = await grow_until(client, sid, convo, status.auto_compact_threshold)
        assert above.status.is_above_auto_compact_threshold
        if above.status.preparation is not None and above.status.preparation.state == "preparing":
            # compact/preview says what compact/auto would answer.
            preview = await client.request(p.COMPACT_PREVIEW, {"sessionId": sid})
            assert preview["reasonCode"] == "summaryPreparing" and not preview["wouldCompact"]
            auto = await client.compact_auto(sid)
            assert not auto.was_compacted and auto.reason_code == "summaryPreparing", auto
            assert auto.tokens_left == above.status.blocking_limit - above.status.tokens
        # At the blocking limit compact/auto waits for the preparation; what arrived after its
        # snapshot (from the start level to the blocking limit) passes the bound, a quarter of
        # the threshold, so it is brought into the summary before it is applied
        # (docs/background.md#bound): the verbatim tail stays under the bound.
        await grow_until(client, sid, convo, above.status.blocking_limit)
        # compact/auto is sent while the preparation is still being written, then the model
        # finishes it.
        _, answer = await client.request_with_id(p.COMPACT_AUTO, {"sessionId": sid})
        emu.release("summary")
        auto = msgspec.convert(await answer, AutoResult)
    assert auto.was_compacted and auto.result is not None, auto
    assert summary_requests(emu) >= 2
    quarter = status.auto_compact_threshold // 4
    kept = sum(len(json.dumps(e)) for e in auto.result.kept_entries) // 4
    assert kept <= quarter, (kept, quarter)


async def test_an_undo_or_a_rewind_drops_the_preparation(h: Harness) -> None:
    client = h.client
    convo = Convo("c")
    sid = await open_convo(client, convo, 10)
    status = await client.tokens_status(sid)
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        await grow_until(client, sid, convo, int(status.auto_compact_threshold * 0.8))
        first = await next_phase(queue, "prepared")
    assert (await client.tokens_status(sid)).preparation is not None
    kept_file = h.root / "data" / "sessions" / sid / "prepared.json"
    assert kept_file.is_file()
    # A rewind: the next entry continues from the third turn, not from the last one.
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        result = await client.append(sid, convo.turns(1, label="rewind", parent=convo.uuids[5]))
        assert not kept_file.exists()
        # Dropped; the count is still above the start level, so a new one starts at once.
        assert result.status.preparation is not None
        assert result.status.preparation.state == "preparing"
        assert result.status.preparation.entries_covered == 0
        again = await next_phase(queue, "preparing")
    assert again["compactionId"] != first["compactionId"]

    # An undo before it: compact, grow again, prepare, undo.
    await client.compact_full(sid)
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        status = await client.tokens_status(sid)
        await grow_until(client, sid, convo, int(status.auto_compact_threshold * 0.8))
        await next_phase(queue, "prepared")
    assert (await client.tokens_status(sid)).preparation is not None
    await client.request(p.COMPACT_UNDO, {"sessionId": sid})
    after = await client.tokens_status(sid)
    # The undo brought back the whole conversation: whatever is prepared now is a new one.
    assert after.preparation is None or after.preparation.state == "preparing"


async def test_no_preparation_when_the_fixed_prefix_is_above_the_threshold(h: Harness) -> None:
    client, emu = h.client, h.emu
    huge = {**CACHE_SAFE, "system": "You are a coding agent. " * 20_000}
    opened = await client.request(
        p.SESSION_OPEN, {"cwd": CWD, "model": MODEL, "cacheSafeParams": huge, **WINDOW}
    )
    sid = str(opened["sessionId"])
    result = await client.append(sid, Convo("d").turns(4))
    assert result.status.fixed_prefix_tokens >= result.status.auto_compact_threshold
    assert result.status.preparation is None
    assert summary_requests(emu) == 0


async def test_a_failed_preparation_is_counted_and_never_stops_the_agent(h: Harness) -> None:
    client, emu = h.client, h.emu
    convo = Convo("e")
    sid = await open_convo(client, convo, 10)
    status = await client.tokens_status(sid)
    # The SDK retries each request as usual; the answer's retry-after-ms keeps its backoff
    # (half a second, then one) from adding seconds of waiting per request.
    emu.set_default(api_error(message="prepared summaries fail here", retry_after_ms=5))
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        await grow_until(client, sid, convo, int(status.auto_compact_threshold * 0.8))
        failed = await next_phase(queue, "failed")
    assert failed["background"] is True
    stats = await client.stats(sid)
    assert stats.preparation_failures == 1
    failed_at = (await client.tokens_status(sid)).tokens
    # The agent goes on: appends work and compact/auto compacts as without a preparation.
    auto = await client.compact_auto(sid)
    assert not auto.was_compacted and auto.reason_code != "summaryPreparing", auto
    # Once the session has grown by 5% of the threshold, the preparation is tried again.
    emu.reset()
    retry = int(status.auto_compact_threshold * 0.05)
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        while True:
            grown = (await client.append(sid, convo.turns(1))).status
            if grown.tokens - failed_at < retry:
                assert grown.preparation is None, grown  # not yet
                continue
            assert grown.preparation is not None and grown.preparation.state == "preparing"
            break
        await next_phase(queue, "prepared")
    await grow_until(client, sid, convo, status.auto_compact_threshold)
    auto = await client.compact_auto(sid)
    assert auto.was_compacted and auto.result is not None and auto.result.prepared, auto
    assert (await client.stats(sid)).preparation_failures == 1


# -- a restart --------------------------------------------------------------------------------


async def _daemon(data: Path, emu: Emulator) -> Client:
    client = await Client.spawn_process(daemon_args(data), stderr=daemon_log(data.parent))
    await client.initialize(emulator_options(emu, backgroundCompaction=ON))
    return client


async def test_kill_during_a_preparation_loses_nothing_and_prepares_again(
    emulator: Emulator, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    emulator.set_latency("summary", 30.0)
    convo = Convo("f")
    client = await _daemon(data, emulator)
    try:
        sid = await open_convo(client, convo, 10)
        status = await client.tokens_status(sid)
        async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
            await grow_until(client, sid, convo, int(status.auto_compact_threshold * 0.8))
            await next_phase(queue, "preparing")
        view = (await client.messages(sid)).messages
    finally:
        assert client.process is not None
        client.process.kill()
        await client.process.wait()
    emulator.set_latency("summary", 0.0)
    client = await _daemon(data, emulator)
    try:
        async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
            # Loading the session (any request naming it) prepares again.
            assert (await client.messages(sid)).messages == view
            await next_phase(queue, "prepared")
    finally:
        await client.shutdown(grace=5)
    # Restarted once more, the kept summary is reused: no new request to the model.
    requests = summary_requests(emulator)
    client = await _daemon(data, emulator)
    try:
        async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
            status = await client.tokens_status(sid)
            note = await next_phase(queue, "prepared")
        assert "kept" in note["message"]
        assert summary_requests(emulator) == requests
        status = await client.tokens_status(sid)
        assert status.preparation is not None and status.preparation.state == "ready"
    finally:
        await client.shutdown(grace=5)


async def test_manual_compact_full_uses_it_only_without_custom_instructions(h: Harness) -> None:
    client, emu = h.client, h.emu
    for instructions, used in ((None, True), ("Keep the numbers.", False)):
        convo = Convo("g" if used else "k")
        sid = await open_convo(client, convo, 10)
        status = await client.tokens_status(sid)
        async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
            await grow_until(client, sid, convo, int(status.auto_compact_threshold * 0.8))
            await next_phase(queue, "prepared")
        requests = len(emu.message_requests)
        result = await client.compact_full(sid, custom_instructions=instructions)
        assert result.prepared is used
        assert len(emu.message_requests) == requests + (0 if used else 1)
        assert result.boundary["compactMetadata"]["trigger"] == "manual"
    stats = await client.stats(sid)
    # The summary prepared for the second session was not used: its cost is counted.
    assert stats.preparation_tokens_unused > 0


async def test_a_microcompact_after_the_snapshot_does_not_invalidate_it(h: Harness) -> None:
    client, emu = h.client, h.emu
    convo = Convo("m")
    opened = await client.request(
        p.SESSION_OPEN, {"cwd": CWD, "model": MODEL, "cacheSafeParams": CACHE_SAFE, **WINDOW}
    )
    sid = str(opened["sessionId"])
    await client.append(sid, convo.tool_turns(4) + convo.turns(4))
    status = await client.tokens_status(sid)
    async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
        await grow_until(client, sid, convo, int(status.auto_compact_threshold * 0.8))
        await next_phase(queue, "prepared")
    micro = await client.compact_micro(sid, "count")
    assert micro.tokens_saved > 0, micro
    status = await client.tokens_status(sid)
    assert status.preparation is not None and status.preparation.state == "ready"
    await grow_until(client, sid, convo, status.auto_compact_threshold, label="late")
    await client.append(sid, convo.tool_turns(1))  # a command after the snapshot, kept
    requests = len(emu.message_requests)
    auto = await client.compact_auto(sid)
    assert auto.was_compacted and auto.result is not None and auto.result.prepared, auto
    # The count fell with the microcompact and grew back: what arrived after the snapshot
    # passes the bound and is brought into the summary with one short model call
    # (docs/background.md#bound), not the whole context asked again.
    assert len(emu.message_requests) == requests + 1
    # Every command run survives: in the summary (the ledger) or verbatim after it.
    view = json.dumps((await client.messages(sid)).messages)
    missing = [f"cat {u}.log" for u in convo.tool_uuids if f"cat {u}.log" not in view]
    assert not missing, missing


async def test_an_idle_session_prepares_and_applies_when_asked(
    spawn_emulated: Any, emulator: Emulator
) -> None:
    idle = {"enabled": True, "idleMinutes": 0.01, "applyWhenIdle": True}  # 0.6 s
    async with spawn_emulated(backgroundCompaction=idle) as client:
        convo = Convo("i")
        async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
            sid = await open_convo(client, convo, 10)
            status = await client.tokens_status(sid)
            # Above half the threshold, below the start level: only idleness prepares it.
            assert status.auto_compact_threshold * 0.5 <= status.tokens
            assert status.tokens < status.auto_compact_threshold * 0.8
            note = await next_phase(queue, "prepared")
            assert note["sessionId"] == sid
            # applyWhenIdle: the compaction follows, with no other model call.
            deadline = time.monotonic() + 90
            while True:
                assert time.monotonic() < deadline, "the idle summary was never applied"
                _, done = await asyncio.wait_for(queue.get(), deadline - time.monotonic())
                if done["phase"] == "completed" and not done.get("background"):
                    break
        after = await client.tokens_status(sid)
        assert after.tokens < status.tokens
        stats = await client.stats(sid)
        assert [c.prepared for c in stats.compactions] == [True]
        assert summary_requests(emulator) == 1


# -- refreshing (docs/background.md#refreshing) -------------------------------------------------

# Prepare from 70% of the threshold, so that what the first summary would keep verbatim at the
# threshold is far more than what a refresh keeps, in a window where even what it keeps at the
# blocking limit leaves the headroom (else the compaction asks the model as without it).
EARLY = {"enabled": True, "startAt": 0.7}
WIDE = {"contextWindow": 80_000, "maxOutputTokens": 4_096}


async def _ready_early(client: Client, convo: Convo, queue: Any) -> tuple[str, p.TokenStatus]:
    """A session whose first summary, prepared from 70% of the threshold, is ready: the
    session id and its status before it grew."""
    sid = await open_convo(client, convo, 4, WIDE)
    status = await client.tokens_status(sid)
    await grow_until(client, sid, convo, int(status.auto_compact_threshold * 0.7))
    await next_phase(queue, "prepared")
    return sid, status


async def _refreshing(
    client: Client, sid: str, convo: Convo, queue: Any, status: p.TokenStatus
) -> p.TokenStatus:
    """Grow to the threshold, where the refresh starts; the status that crossed it."""
    crossed = await grow_until(client, sid, convo, status.auto_compact_threshold)
    refreshing = await next_phase(queue, "preparing")
    assert "refreshing" in refreshing["message"], refreshing
    return crossed.status


async def _refresh_that_fails(
    client: Client, convo: Convo, queue: Any, spoil: Callable[[], None]
) -> tuple[str, p.TokenStatus, str]:
    """A ready first summary, then ``spoil`` (the model made slow or failing), then the
    refresh started at the threshold: the session id, its status before it grew and the last
    entry the first summary covers."""
    sid, status = await _ready_early(client, convo, queue)
    upto = convo.last or ""
    spoil()
    await _refreshing(client, sid, convo, queue, status)
    return sid, status, upto


def after(convo: Convo, upto: str | None) -> list[str]:
    """The entries of ``convo`` appended after ``upto``: what a summary up to it keeps."""
    return [u for u in convo.uuids if u > (upto or "")]


async def test_a_refresh_at_the_threshold_keeps_fewer_entries_verbatim(
    spawn_emulated: Any, emulator: Emulator
) -> None:
    async with spawn_emulated(backgroundCompaction=EARLY) as client:
        convo = Convo("r")
        async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
            sid, status = await _ready_early(client, convo, queue)
            crossed = await _refreshing(client, sid, convo, queue, status)
            covered_upto = convo.last  # the refresh's snapshot: the append that crossed
            # The first summary stays ready (and shown) while the refresh is written.
            assert crossed.preparation is not None and crossed.preparation.state == "ready"
            assert crossed.preparation.refreshing
            await next_phase(queue, "prepared")
        assert summary_requests(emulator) == 2
        late = await client.append(sid, convo.turns(1, label="late"))
        requests = len(emulator.message_requests)
        auto = await client.compact_auto(sid)
        assert auto.was_compacted and auto.result is not None and auto.result.prepared, auto
        assert len(emulator.message_requests) == requests  # no model call at that moment
        # Only what came after the refresh's snapshot is kept verbatim.
        kept = [e["uuid"] for e in auto.result.kept_entries]
        assert kept == after(convo, covered_upto) and kept
        assert auto.status is not None and auto.status.tokens < late.status.tokens
        # The first summary was never applied: its tokens are counted as unused.
        stats = await client.stats(sid)
        assert stats.preparation_tokens_unused and stats.preparation_tokens_unused > 0


async def test_at_the_blocking_limit_the_ready_summary_is_applied_while_the_refresh_runs(
    spawn_emulated: Any, emulator: Emulator
) -> None:
    async with spawn_emulated(backgroundCompaction=EARLY) as client:
        convo = Convo("s")
        async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
            # The refresh will not be ready in time: the model takes a minute to answer it.
            sid, status, first = await _refresh_that_fails(
                client, convo, queue, lambda: emulator.set_latency("summary", 60.0)
            )
            # compact/preview says what compact/auto then answers.
            preview = await client.request(p.COMPACT_PREVIEW, {"sessionId": sid})
            assert preview["reasonCode"] == "summaryPreparing" and not preview["wouldCompact"]
            auto = await client.compact_auto(sid)
            assert not auto.was_compacted and auto.reason_code == "summaryPreparing", auto
            assert preview["reason"] == auto.reason
            await grow_until(client, sid, convo, status.blocking_limit)
            emulator.set_latency("summary", 0.0)
            # No wait for the refresh: the summary ready since the start level is applied,
            # what arrived after its snapshot (past the bound) brought into it first
            # (docs/background.md#bound).
            auto = await client.compact_auto(sid)
        assert auto.was_compacted and auto.result is not None, auto
        assert len(auto.result.kept_entries) < len(after(convo, first))
        assert auto.status is not None and auto.status.preparation is None
        # The first summary, the abandoned refresh and the call bringing the tail in (then the
        # whole context, when the emulator's summary of that leaves a message to a pointer).
        assert summary_requests(emulator) >= 3


async def test_a_failed_refresh_leaves_the_ready_summary_and_is_not_asked_again(
    spawn_emulated: Any, emulator: Emulator
) -> None:
    async with spawn_emulated(backgroundCompaction=EARLY) as client:
        convo = Convo("t")
        async with client.subscribe(p.NOTIFY_COMPACT_STATUS) as queue:
            sid, _, first = await _refresh_that_fails(
                client,
                convo,
                queue,
                # Retried by the SDK as usual, without its backoff (retry-after-ms).
                lambda: emulator.set_default(api_error(message="no", retry_after_ms=5)),
            )
            failed = await next_phase(queue, "failed")
        assert failed["background"] is True
        asked = summary_requests(emulator)  # the first summary, the refresh and its retries
        # The first summary is still ready, and no refresh of it is asked again.
        grown = await client.append(sid, convo.turns(1, label="late"))
        assert grown.status.preparation is not None
        assert grown.status.preparation.state == "ready"
        assert not grown.status.preparation.refreshing
        assert (await client.stats(sid)).preparation_failures == 1
        # Applied, what arrived after its snapshot (past the bound) brought into the summary;
        # the model still fails, so the offline summary covers it (docs/background.md#bound).
        auto = await client.compact_auto(sid)
        assert auto.was_compacted and auto.result is not None, auto
        assert len(auto.result.kept_entries) < len(after(convo, first))
        assert summary_requests(emulator) > asked
