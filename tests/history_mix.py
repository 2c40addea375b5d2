"""A seeded random mix of history operations on one session, driven through a real daemon.

Shared by the end-to-end test of long histories (tests/e2e/test_history_ops.py) and the
benchmark (tests/bench/bench_history_ops.py). A ``Mix`` appends turns (a prompt, a Bash call,
its output, a reply), and runs ``compact/full``, ``compact/partial`` (``from`` and ``upTo`` at a
random prompt of the current view), ``compact/micro`` and ``compact/undo``, timing each request
and the ``session/messages`` and ``tokens/status`` that follow it.

With ``check`` it also keeps its own account of what every undo must show: each compaction or
microcompact that wrote a boundary pushes the view it replaced (``session/messages`` just before
it) and the turns appended after it collect on top; an undo pops the latest one and the view
must then be exactly that view followed by those turns. Views are compared block by block
(``flat_blocks``): how consecutive blocks of one role are grouped into messages, and where the
prompt-cache markers sit, are not part of what an undo restores.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from compactd_client import Client, RpcError

from compactd import protocol as p
from tests.helpers import CWD, MODEL, assistant, text_block, tool_call, tool_result, user

T = TypeVar("T")

# Relative weights of the operations; appends dominate, and compactions outnumber undos so
# that the context stays compacted (its size, not the history's, is what each request costs).
WEIGHTS: Final = {
    "append": 34,
    "full": 10,
    "partialFrom": 13,
    "partialUpTo": 13,
    "micro": 10,
    "undo": 20,
}
KINDS: Final = tuple(WEIGHTS)
# Refusals that leave the session unchanged (a pivot with nothing to summarize, a compaction
# that would not shrink the context): the operation is counted as refused, not timed.
REFUSALS: Final = frozenset(
    {
        p.ErrorCode.NOT_ENOUGH_MESSAGES,
        p.ErrorCode.COMPACTION_INEFFECTIVE,
        p.ErrorCode.NOTHING_TO_UNDO,
    }
)
# The daemon's options: the offline summarizer, and microcompact clearing every Bash output but
# the last two, however small.
OPTIONS: Final = {
    "summarizer": {"offline": True},
    "microcompact": {"keepRecent": 2, "protectedTokens": 0, "minSavings": 0},
}
# A wide window: no threshold is crossed, so nothing compacts on its own.
CONTEXT_WINDOW: Final = 2_000_000
_PROMPT: Final = re.compile(r"question (\d+):")

Block = tuple[str, str]


def flat_blocks(messages: list[dict[str, Any]]) -> list[Block]:
    """Every content block of ``messages`` in order, as (role, JSON without cache markers)."""
    out: list[Block] = []
    for message in messages:
        role = str(message.get("role"))
        content = message.get("content")
        blocks = [text_block(content)] if isinstance(content, str) else content or []
        for block in blocks:
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            out.append((role, json.dumps(plain, sort_keys=True)))
    return out


def turn(i: int, parent: str | None, output_lines: int = 60) -> list[dict[str, Any]]:
    """Turn ``i``: the prompt ``q{i}``, a Bash call ``c{i}``, its output ``r{i}``, a reply."""
    out = "\n".join(f"step {k} of build {i}: compiled module {k} ok" for k in range(output_lines))
    return [
        user(f"question {i}: how does part {i} work?", uuid=f"q{i}", parentUuid=parent),
        tool_call(
            f"toolu_{i}",
            "Bash",
            {"command": f"make part{i}"},
            uuid=f"c{i}",
            msg_id=f"msg_c{i}",
            model=MODEL,
            parentUuid=f"q{i}",
        ),
        tool_result(f"toolu_{i}", out, uuid=f"r{i}", parentUuid=f"c{i}"),
        assistant(
            [text_block(f"part {i} builds cleanly. " * 8)],
            uuid=f"a{i}",
            msg_id=f"msg_a{i}",
            model=MODEL,
            parentUuid=f"r{i}",
        ),
    ]


@dataclass
class _Undoable:
    """A compaction in effect, as the test saw it: the view it replaced, turns added since."""

    kind: str
    before: list[Block]
    since: list[Block] = field(default_factory=list)


@dataclass
class Mix:
    client: Client
    sid: str
    rng: random.Random
    check: bool = False
    turns: int = 0
    parent: str | None = None
    # Milliseconds per request kind, in order; refused operations are counted, not timed.
    times: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    # Beside each time: the context's tokens (tokens/status) when the request was sent.
    sizes: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    tokens: int = 0
    refused: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    undo_checks: int = 0
    _stack: list[_Undoable] = field(default_factory=list)
    _view: list[Block] = field(default_factory=list)

    @classmethod
    async def open(cls, client: Client, rng: random.Random, *, check: bool = False) -> Mix:
        opened = await client.open_session(cwd=CWD, model=MODEL, context_window=CONTEXT_WINDOW)
        return cls(client, opened.session_id, rng, check)

    async def _timed(self, kind: str, call: Awaitable[T]) -> T:
        start = time.perf_counter()
        result = await call
        self.times[kind].append((time.perf_counter() - start) * 1000)
        self.sizes[kind].append(self.tokens)
        return result

    async def view(self) -> list[Block]:
        """The current view (timed as ``session/messages``) and, after it, ``tokens/status``."""
        got = await self._timed("session/messages", self.client.messages(self.sid))
        status = await self._timed("tokens/status", self.client.tokens_status(self.sid))
        self.tokens = status.tokens
        self._view = flat_blocks(got.messages)
        return self._view

    def prompts(self) -> list[str]:
        """Uuids of the prompts in the last view seen, the places a partial compaction may cut."""
        found = []
        for role, block in self._view:
            text = json.loads(block).get("text")
            if role == "user" and isinstance(text, str) and (m := _PROMPT.match(text)):
                found.append(f"q{m.group(1)}")
        return found

    async def append(self, count: int = 1) -> None:
        for _ in range(count):
            entries = turn(self.turns, self.parent)
            self.turns += 1
            self.parent = entries[-1]["uuid"]
            before = len(self._view)
            await self._timed("append", self.client.append(self.sid, entries))
            added = (await self.view())[before:]
            for item in self._stack:
                item.since.extend(added)

    async def grow(self, count: int, batch: int = 50) -> None:
        """Append ``count`` turns in a few requests, untimed and unchecked (to set a scene)."""
        assert not self._stack, "grow would leave the account of undos behind"
        for start in range(0, count, batch):
            entries = []
            for _ in range(min(batch, count - start)):
                entries += turn(self.turns, self.parent)
                self.turns += 1
                self.parent = entries[-1]["uuid"]
            await self.client.append(self.sid, entries)
        await self.view()

    async def long_history(self, rounds: int, turns: int) -> None:
        """``rounds`` times: ``turns`` turns, then a full compaction; then ``turns`` more."""
        for _ in range(rounds):
            await self.grow(turns)
            result = await self.client.compact_full(self.sid)
            self.parent = str(result.summary["uuid"])
        await self.grow(turns)

    async def step(self, kind: str | None = None) -> str:
        """Run one operation (random by ``WEIGHTS`` unless named); returns its kind."""
        if kind is None:
            kind = self.rng.choices(KINDS, weights=[WEIGHTS[k] for k in KINDS])[0]
        if kind == "append":
            await self.append()
        elif kind == "undo":
            await self.undo()
        else:
            await self._compact(kind)
        return kind

    def _request(self, kind: str) -> Callable[[], Awaitable[Any]] | None:
        c, sid = self.client, self.sid
        if kind == "full":
            return lambda: c.compact_full(sid)
        if kind == "micro":
            return lambda: c.compact_micro(sid, "count")
        pivots = self.prompts()
        if not pivots:
            return None
        pivot = self.rng.choice(pivots)
        direction = "from" if kind == "partialFrom" else "upTo"
        return lambda: c.compact_partial(sid, pivot, direction)

    async def _compact(self, kind: str) -> None:
        before = list(self._view)
        call = self._request(kind)
        if call is None:
            self.refused[kind] += 1
            return
        try:
            result = await self._timed(kind, call())
        except RpcError as err:
            if err.code not in REFUSALS:
                raise
            self.refused[kind] += 1
            return
        if result.boundary is None:  # a microcompact with nothing to clear writes nothing
            self.times[kind].pop()
            self.sizes[kind].pop()
            self.refused[kind] += 1
            return
        if kind != "micro":
            # The agent's next entry hangs off the last one the compaction wrote.
            written = [result.summary, *result.attachments]
            self.parent = str(written[-1]["uuid"])
        self._stack.append(_Undoable(kind, before))
        await self.view()

    async def undo(self) -> None:
        if not self._stack:
            self.refused["undo"] += 1
            return
        await self._timed("undo", self.client.compact_undo(self.sid))
        undone = self._stack.pop()
        view = await self.view()
        if self.check:
            expected = undone.before + undone.since
            assert view == expected, (
                f"undo #{self.undo_checks + 1} (of a {undone.kind}) did not restore the view "
                f"before it: {len(view)} blocks, expected {len(expected)}"
            )
            self.undo_checks += 1

    async def undo_all(self) -> int:
        """Undo every compaction still in effect, newest first; returns how many."""
        count = len(self._stack)
        while self._stack:
            await self.undo()
        return count


async def status_while(client: Client, sid: str, work: Awaitable[T]) -> tuple[T, list[float]]:
    """Await ``work`` while asking for ``tokens/status`` of ``sid`` over and over; returns the
    result of ``work`` and how long each status answer took, in milliseconds."""
    answers: list[float] = []
    done = asyncio.Event()

    async def poll() -> None:
        while not done.is_set():
            start = time.perf_counter()
            await client.tokens_status(sid)
            answers.append((time.perf_counter() - start) * 1000)
            await asyncio.sleep(0.002)

    poller = asyncio.create_task(poll())
    try:
        result = await work
    finally:
        done.set()
        await poller
    return result, answers


async def partial_undo_cycle(client: Client, sid: str, pivot: str) -> tuple[float, float]:
    """One ``compact/partial`` (``from`` ``pivot``) then ``compact/undo``: their times in ms."""
    start = time.perf_counter()
    await client.compact_partial(sid, pivot, "from")
    middle = time.perf_counter()
    await client.compact_undo(sid)
    end = time.perf_counter()
    return (middle - start) * 1000, (end - middle) * 1000
