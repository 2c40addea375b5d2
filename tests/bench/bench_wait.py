"""How long the agent waits at a compaction: prepared in the background vs. synchronous (docs/background.md).

The example agent's own loop (``examples/agent.py``, imported) replays real-shaped sessions
against the Messages API emulator: each user turn of a transcript is the agent's prompt, the
emulated model answers with that turn's recorded responses (text and tool calls), and the tool
results are the recorded ones. The pace is the transcript's own: the gap before each prompt,
each response and each tool result, cut to ``MAX_GAP_SECONDS`` (a longer pause is the user
away) and scaled by ``SCALE``. The emulator takes ``SUMMARY_SECONDS`` (scaled the same way) to
answer a summarization request. Each session runs twice, each time in a daemon of its own (and an
agent and an emulator in a process of their own, so that one replay's emulator does not hold the
interpreter while the other's agent waits): with
background compaction (``initializationOptions.backgroundCompaction.enabled: true``, the
default) and without it (``enabled: false``, the synchronous compaction Claude Code does),
the two side by side. Before its clock runs, each daemon compacts a throwaway session once, so
that loading the summarizer's SDK (seconds on a busy machine) is not counted as waiting. With
background compaction the summary is prepared before the threshold (docs/background.md) and
``compact/auto`` applies it at once; a daemon without it would show the synchronous behaviour
in both columns, and the output says so.

Sessions: the two fixture transcripts of ``tests/data/transcripts`` with real tool work (their
sub-agents' conversations replayed after the main one, as turns of the same agent) and a long
synthetic session (``compactd.cli.synthetic``). Each gets a window whose auto-compact threshold
is a third of its conversation above the agent's system prompt and tools, so it compacts more
than once.

Printed per compaction: where it happened, tokens before and after, the agent's wait (the time
``compact/auto`` took), the model's time (the compaction's ``durationMs``), the wait as a share
of the summary time, the tokens kept verbatim after the summary as a share of the size before
(``kept``), and what the model sees next by bench_fidelity's measure
(``tests/fidelity.py``: user messages, files, shell commands of everything before the
compaction). Then, per mode: p50 / p95 of that share, the billed-equivalent input tokens
(emulator: input + 0.1 x cache reads + 1.25 x 5-minute writes + 2 x 1-hour writes; all requests,
and the summaries alone) and the totals of the fidelity measure.

Where the wait goes: each daemon logs the stages of every compaction (``Stages``,
docs/background.md#where-the-wait-goes); the prepared compactions' stages are printed as
medians, beside the agent's wait and the part of it spent outside the daemon's compaction
(the JSON-RPC round trip, the answer's encoding and decoding).

A shared two-core machine makes single figures noisy, so the whole replay runs ``--rounds``
times (3 by default) and the figure is the median of the rounds' p50s, with every round's
shown. Each round also measures, in the same daemons at the same moments, the agent's
``compact/auto`` calls that did not compact (the floor of any request: the round trip and the
decision), as the machine's own baseline.

Figures, not a pass/fail test (about three minutes a round). Run: ``.venv/bin/python
tests/bench/bench_wait.py [--rounds N] [--load N] [--baseline DIR] [SESSION ...]``
(``--load N``: N CPU-bound processes run beside it, a busy machine made on purpose;
``--baseline DIR``: a third column prepared by the daemon of another checkout, e.g. ``git
worktree add /tmp/base <commit>``, side by side: a change to the daemon against its baseline in
the same run) (``fe5e1c67``, ``5c0375b4``,
``synthetic``, ``long``; all when none is named).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import typing
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "clients" / "python")]

import anthropic  # noqa: E402
from compactd_client import Client  # noqa: E402

from compactd import protocol as p  # noqa: E402
from compactd.cli.synthetic import make_session  # noqa: E402
from compactd.core import constants as c  # noqa: E402
from compactd.core.tokens import estimate_entries  # noqa: E402
from compactd.transcript.model import record_from_dict  # noqa: E402
from examples.agent import Agent  # noqa: E402
from tests.conftest import FIXTURES, daemon_args  # noqa: E402
from tests.emulator import Emulator, RecordedRequest, Reply, ToolUse, request_kind  # noqa: E402
from tests.emulator.server import CostSummary  # noqa: E402
from tests.fidelity import Recall, items_of, recalls, view_text  # noqa: E402
from tests.helpers import emulator_options, transcript_lines  # noqa: E402

# One second of a session lasts SCALE seconds here.
SCALE = 0.01
# A summary takes the model 90 s, inside the range real compactions take
# (docs/compaction.md#waiting-for-the-summary).
SUMMARY_SECONDS = 90.0
# A pause longer than this is the user away; it is cut to this before scaling.
MAX_GAP_SECONDS = 120.0
# The agent's max_tokens: it reserves room in the window and bounds a replayed response.
MAX_TOKENS = 8_192
# What the window keeps besides the auto-compact threshold: the output reserve and the buffer
# (docs/thresholds.md#auto-compact-threshold).
RESERVE = min(MAX_TOKENS, c.OUTPUT_RESERVE_CAP) + c.AUTO_COMPACT_BUFFER
FIXTURE_NAMES = (
    "d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl",
    "d-kimuson__claude-code-viewer__5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl",
)
MODES = ("prepared", "synchronous")
# ``--baseline DIR``: a third column, "baseline", prepared in the background by the daemon of
# another checkout (DIR, an earlier commit of this repository), side by side with the others:
# a change to the daemon measured against what it changes, on the same machine at the same time.
BASELINE = "baseline"
# The long synthetic session: about 480,000 tokens of conversation in the 200,000-token window
# of the Claude models (docs/thresholds.md), so that it compacts about three times.
LONG_ENTRIES = 2_000
LONG_TARGET = 1_200_000
REAL_WINDOW = 200_000


@dataclass
class Response:
    reply: Reply
    results: list[tuple[float, str]]  # per tool call, in order: (seconds before it, output)


@dataclass
class Turn:
    prompt: str
    gap: float  # seconds before the prompt
    responses: list[Response] = field(default_factory=list)


@dataclass
class Session:
    name: str
    turns: list[Turn]
    tools: list[dict[str, Any]]
    tokens: int  # the conversation's size, estimated (characters / 4)
    window: int = 0  # the context window; 0: one whose threshold is a third of the session

    def seconds(self) -> float:
        """The session's replayed time: every gap, scaled."""
        return sum(
            _scaled(t.gap)
            + sum(
                (r.reply.delay or 0.0) + sum(_scaled(g) for g, _ in r.results) for r in t.responses
            )
            for t in self.turns
        )


def _seconds(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, dict):
            kind = block.get("type")
            parts.append(str(block.get("text", "")) if kind == "text" else f"[{kind}]")
    return "\n".join(parts)


def _chains(entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The conversations of a transcript (the main one, then each sub-agent's), each in order."""
    root_of: dict[str, str] = {}
    chains: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        if e.get("type") not in ("user", "assistant") or not isinstance(e.get("message"), dict):
            continue
        if e.get("isCompactSummary") or e.get("isVisibleInTranscriptOnly"):
            continue
        # A sub-agent's conversation starts at a sidechain entry with no parent.
        parent = e.get("parentUuid") or ""
        root = root_of.get(parent, e["uuid"]) if e.get("isSidechain") else "main"
        root_of[e["uuid"]] = root
        chains.setdefault(root, []).append(e)
    return sorted(chains.values(), key=lambda chain: chain[0].get("isSidechain", False))


def turns_of(entries: list[dict[str, Any]]) -> list[Turn]:
    """A transcript as an agent's turns: prompts, the model's responses, the tools' results."""
    turns: list[Turn] = []
    results: dict[str, tuple[float, str]] = {}
    for chain in _chains(entries):
        last: float | None = None
        by_id: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        order: list[str] = []
        for e in chain:
            now = _seconds(e.get("timestamp"))
            gap = max(0.0, now - last) if now is not None and last is not None else 0.0
            last = now if now is not None else last
            content = e["message"].get("content")
            blocks = content if isinstance(content, list) else []
            if e["type"] == "assistant":
                mid = e["message"].get("id") or e["uuid"]
                if mid not in by_id:
                    by_id[mid] = (gap, [])
                    order.append(mid)
                by_id[mid][1].extend(b for b in blocks if isinstance(b, dict))
                continue
            tool_results = [
                b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"
            ]
            for b in tool_results:
                results[b.get("tool_use_id", "")] = (gap, _text(b.get("content")))
            if tool_results or not _text(content).strip():
                continue
            _close(turns, by_id, order, results)
            turns.append(Turn(_text(content), gap))
        _close(turns, by_id, order, results)
    return [t for t in turns if t.responses]


def _close(
    turns: list[Turn],
    by_id: dict[str, tuple[float, list[dict[str, Any]]]],
    order: list[str],
    results: dict[str, tuple[float, str]],
) -> None:
    """Give the open turn the responses gathered since its prompt."""
    if not turns:
        by_id.clear()
        order.clear()
        return
    pending_text = ""
    for mid in order:
        gap, blocks = by_id[mid]
        text = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text").strip()
        uses = [b for b in blocks if b.get("type") == "tool_use"]
        text = "\n".join(t for t in (pending_text, text) if t)
        if not uses:
            pending_text = text  # a reply without tools ends a turn: keep it for the next one
            continue
        pending_text = ""
        reply = Reply(
            text=text or None,
            tool_uses=[ToolUse(u["name"], u.get("input") or {}, u.get("id")) for u in uses],
            delay=_scaled(gap),
        )
        outs = [results.get(u.get("id", ""), (0.0, "(no result recorded)")) for u in uses]
        turns[-1].responses.append(Response(reply, outs))
    turns[-1].responses.append(Response(Reply(text=pending_text or "Done."), []))
    by_id.clear()
    order.clear()


def _scaled(seconds: float) -> float:
    return min(seconds, MAX_GAP_SECONDS) * SCALE


def session_of(name: str, entries: list[dict[str, Any]]) -> Session:
    turns = turns_of(entries)
    names: dict[str, None] = {}
    chars = 0
    for t in turns:
        chars += len(t.prompt)
        for r in t.responses:
            chars += len(json.dumps([u.input for u in r.reply.tool_uses])) + len(str(r.reply.text))
            chars += sum(len(out) for _, out in r.results)
            names.update((u.name, None) for u in r.reply.tool_uses)
    schema = {"type": "object"}
    tools = [{"name": n, "description": f"{n} (replayed)", "input_schema": schema} for n in names]
    return Session(name, turns, tools, chars // 4)


SESSION_NAMES = (*(name.split("__")[-1][:8] for name in FIXTURE_NAMES), "synthetic", "long")


def session_named(name: str) -> Session:
    """One of the sessions (``SESSION_NAMES``), built."""
    for fixture in FIXTURE_NAMES:
        if fixture.split("__")[-1][:8] == name:
            lines = (FIXTURES / fixture).read_text(encoding="utf-8").splitlines()
            entries = [
                e for e in (json.loads(x) for x in lines if x.strip()) if isinstance(e, dict)
            ]
            return session_of(name, entries)
    if name == "synthetic":
        return session_of(name, make_session(entries=700, target_tokens=120_000, seed=28))
    if name == "long":
        # A long one in the window the models have: what a summary's time is worth against it.
        long = make_session(entries=LONG_ENTRIES, target_tokens=LONG_TARGET, seed=29)
        return replace(session_of(name, long), window=REAL_WINDOW)
    raise SystemExit(f"no session {name!r}; choose among {', '.join(SESSION_NAMES)}")


@dataclass
class Compaction:
    session: str
    mode: str
    turn: int
    pre: int
    post: int
    wait: float
    model: float
    recall: tuple[Recall, Recall, Recall]
    kept: int = 0  # the tokens kept verbatim after the summary (the boundary's preserved tail)
    # The daemon's stages of this compaction (ms), from its log; empty when not logged.
    stages: dict[str, float] = field(default_factory=dict)
    stages_total: float = 0.0

    @property
    def share(self) -> float:
        return self.wait / (SUMMARY_SECONDS * SCALE)

    @property
    def kept_share(self) -> float:
        return self.kept / self.pre if self.pre else 0.0


@dataclass
class Run:
    compactions: list[Compaction]
    billed: float  # billed-equivalent input tokens of every request
    summary_cost: float
    seconds: float
    # Summary requests the emulator answered (preparations, refreshes, catch-ups, synchronous).
    summary_requests: int = 0
    # The agent's compact/auto calls that did not compact (seconds): the baseline.
    floor: list[float] = field(default_factory=list)


# The garbage collector's part of the daemon's stages (already counted in them).
GC_STAGE = "(of which gc)"
# The daemon's log line for each compaction (engine/compaction.py, ``Stages.describe``).
STAGES_LINE = re.compile(
    r"compaction (\S+)( \(prepared\))?, total ([\d.]+) ms(?: \(gc ([\d.]+)\))?: (.*)$"
)


def logged_stages(log: Path) -> dict[str, tuple[float, dict[str, float]]]:
    """The stages the daemon logged, by compaction id: (total ms, ms by stage)."""
    found: dict[str, tuple[float, dict[str, float]]] = {}
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = STAGES_LINE.search(line)
        if m is None:
            continue
        stages: dict[str, float] = {}
        for part in m.group(5).split(", "):
            name, _, ms = part.rpartition(" ")
            stages[name] = stages.get(name, 0.0) + float(ms)
        if m.group(4) is not None:
            stages[GC_STAGE] = float(m.group(4))
        found[m.group(1)] = (float(m.group(3)), stages)
    return found


async def warm_up(daemon: Client, cwd: str) -> None:
    """One compaction of a throwaway session, so that the daemon has loaded its summarizer (the
    anthropic SDK, imported on first use: seconds on a busy machine) before the clock runs."""
    opened = await daemon.open_session(cwd=cwd, model="claude-sonnet-4-6")
    said = "a long enough reply for the compaction to shrink the context " * 40
    lines = []
    for i in range(10):
        lines.append({"type": "user", "message": {"role": "user", "content": f"step {i}"}})
        message = {"id": f"msg_warm_{i}", "role": "assistant", "content": said}
        lines.append({"type": "assistant", "message": message})
    await daemon.append(opened.session_id, lines)
    await daemon.compact_full(opened.session_id)
    await daemon.close_session(opened.session_id)


def _billed(usage: dict[str, Any]) -> float:
    return CostSummary().add(usage).billed_equivalent_input_tokens


def _daemon(
    data: Path, mode: str, baseline: Path | None
) -> tuple[list[str], dict[str, str] | None]:
    """The command and environment of the daemon of ``mode``: this checkout's, or for
    ``BASELINE`` the one in ``baseline`` (``-P``: not this folder's package first)."""
    if mode != BASELINE or baseline is None:
        return daemon_args(data), None
    args = [sys.executable, "-P", *daemon_args(data)[1:]]
    return args, {**os.environ, "PYTHONPATH": str(baseline)}


async def replay(
    session: Session, mode: str, window: int, root: Path, baseline: Path | None = None
) -> Run:
    emu = Emulator()
    emu.set_latency("summary", SUMMARY_SECONDS * SCALE)
    responses: deque[Response] = deque()
    outputs: deque[tuple[float, str]] = deque()
    views: dict[int, list[dict[str, Any]]] = {}
    agent: Agent | None = None

    def model(rec: RecordedRequest) -> Reply:
        if request_kind(rec.body) == "summary":
            return Reply()  # the emulator's summary, quoting the user's messages
        done = len(agent.compactions) if agent is not None else 0
        if done and done - 1 not in views:
            views[done - 1] = rec.body["messages"]  # what the model sees after the compaction
        if not responses:
            return Reply(text="Done.")
        response = responses.popleft()
        outputs.extend(response.results)
        return response.reply

    async def tool(name: str, args: dict[str, Any]) -> str:
        gap, output = outputs.popleft() if outputs else (0.0, "(no result recorded)")
        await asyncio.sleep(_scaled(gap))
        return output

    emu.start()
    options = {
        **emulator_options(emu),
        "backgroundCompaction": {"enabled": mode != "synchronous"},
        # Tool results are never cleared: every compaction is one with a summary.
        "microcompact": {"clearableTools": []},
    }
    data = root / session.name / mode
    cwd = root / "project"
    cwd.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    log_path = data.parent / f"{mode}.log"
    floor: list[float] = []
    args, env = _daemon(data, mode, baseline)
    try:
        async with (
            Client.spawn(
                args, initialization_options=options, env=env, stderr=log_path.open("ab")
            ) as daemon,
            anthropic.AsyncAnthropic(base_url=emu.base_url, api_key="test") as api,
        ):
            await warm_up(daemon, str(cwd))
            auto_call = daemon.compact_auto

            async def timed_auto(*args: Any, **kwargs: Any) -> p.AutoResult:
                began = time.monotonic()
                result = await auto_call(*args, **kwargs)
                if not result.was_compacted:
                    floor.append(time.monotonic() - began)
                return result

            daemon.compact_auto = timed_auto  # type: ignore[method-assign]
            # Count from here: requests, cost and cache as a fresh emulator would.
            emu.reset()
            emu.set_latency("summary", SUMMARY_SECONDS * SCALE)
            emu.set_default(model)
            started = time.monotonic()
            agent = Agent(daemon, api, cwd=str(cwd), context_window=window, max_tokens=MAX_TOKENS)
            agent.tools = session.tools
            agent.tool_runner = tool
            await agent.open()
            turn_of: list[int] = []
            for i, turn in enumerate(session.turns):
                await asyncio.sleep(_scaled(turn.gap))
                responses.clear()
                responses.extend(turn.responses)
                outputs.clear()
                before = len(agent.compactions)
                await agent.turn(turn.prompt)
                turn_of += [i] * (len(agent.compactions) - before)
            lines = transcript_lines(data / "sessions" / agent.session_id / "transcript.jsonl")
    finally:
        emu.stop()
    seconds = time.monotonic() - started
    position = {line.get("uuid"): n for n, line in enumerate(lines)}
    stages = logged_stages(log_path)
    found: list[Compaction] = []
    for k, (wait, auto) in enumerate(agent.compactions):
        if auto.result is None:
            continue  # microcompact: no model involved
        cut = position[auto.result.boundary["uuid"]]
        measure = recalls(items_of(lines[:cut]), view_text(views.get(k, [])))
        result = auto.result
        total, by_stage = stages.get(result.compaction_id, (0.0, {}))
        found.append(
            Compaction(
                session.name,
                mode,
                turn_of[k],
                result.pre_compact_tokens,
                result.post_compact_tokens,
                wait,
                result.duration_ms / 1000,
                measure,
                estimate_entries(record_from_dict(e).entry for e in result.kept_entries),
                by_stage,
                total,
            )
        )
    summaries = sum(
        _billed(r.usage)
        for r in emu.message_requests
        if r.usage and request_kind(r.body) == "summary"
    )
    asked = sum(1 for r in emu.message_requests if request_kind(r.body) == "summary")
    return Run(
        found, emu.cost_summary().billed_equivalent_input_tokens, summaries, seconds, asked, floor
    )


async def replay_apart(
    name: str, mode: str, window: int, root: Path, baseline: Path | None = None
) -> Run:
    """``replay`` in a process of its own (this script, ``--replay``): the agent and its
    emulator then share a Python interpreter with nothing else. Side by side in one process,
    the other mode's emulator parsing a 700 KB request held the interpreter while this agent
    waited for its answer, and that counted as its wait."""
    root.mkdir(parents=True, exist_ok=True)
    out = root / f"{name}-{mode}.json"
    args = [sys.executable, __file__, "--replay", name, mode, str(window), str(root), str(out)]
    if baseline is not None:
        args.append(str(baseline))
    proc = await asyncio.create_subprocess_exec(*args)
    if await proc.wait() != 0:
        raise SystemExit(f"the replay of {name} ({mode}) failed")
    raw = json.loads(out.read_text(encoding="utf-8"))
    compactions = [
        Compaction(**{**c, "recall": tuple(Recall(**r) for r in c["recall"])})
        for c in raw.pop("compactions")
    ]
    return Run(compactions, **raw)


async def replay_main(argv: list[str]) -> None:
    """``--replay NAME MODE WINDOW ROOT OUT [BASELINE]``: one replay, its ``Run`` written to
    OUT."""
    name, mode, window, root, out, *rest = argv
    baseline = Path(rest[0]) if rest else None
    run = await replay(session_named(name), mode, int(window), Path(root), baseline)
    Path(out).write_text(json.dumps(dataclasses.asdict(run)), encoding="utf-8")


def percentile(values: Iterable[float], q: float) -> float:
    """The nearest-rank percentile (``q`` in 0..1) of ``values``; 0 for none."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))]


def _per(asked: int, compactions: int) -> str:
    return f"{asked / compactions:.2f}" if compactions else "-"


def _cell(r: Recall) -> str:
    return f"{r.found}/{r.total}"


def preparation_exists() -> bool:
    return "summaryPreparing" in typing.get_args(p.DecisionReason)


async def one_round(
    chosen: list[str], tmp: Path, modes: tuple[str, ...], baseline: Path | None
) -> dict[str, list[Run]]:
    """Every chosen session replayed in each mode, side by side; prints each compaction."""
    runs: dict[str, list[Run]] = {mode: [] for mode in modes}
    for name in SESSION_NAMES:
        if chosen and name not in chosen:
            continue
        session = session_named(name)
        window = session.window or RESERVE + 1_000 + max(8_000, session.tokens // 3)
        threshold = window - RESERVE
        growth = session.tokens / session.seconds() * SUMMARY_SECONDS * SCALE
        print(
            f"\n{session.name}: {len(session.turns)} turns, about {session.tokens:,} tokens, "
            f"window {window:,} (auto-compact at {threshold:,}); during one summary it grows "
            f"about {growth:,.0f} tokens, {growth / threshold:.0%} of the threshold"
        )
        print(
            f"  {'mode':<12}{'turn':>5}{'before':>9}{'after':>8}{'wait ms':>9}{'model ms':>9}"
            f"{'wait/summary':>13}{'kept':>7}{'users':>8}{'files':>8}{'commands':>9}"
        )
        # The modes side by side, each with its own emulator and daemon.
        both = await asyncio.gather(
            *(replay_apart(session.name, m, window, tmp, baseline) for m in modes)
        )
        for mode, run in zip(modes, both, strict=True):
            runs[mode].append(run)
            for k in run.compactions:
                users, files, commands = k.recall
                print(
                    f"  {mode:<12}{k.turn:>5}{k.pre:>9,}{k.post:>8,}{k.wait * 1000:>9,.0f}"
                    f"{k.model * 1000:>9,.0f}{k.share:>13.1%}{k.kept_share:>7.1%}"
                    f"{_cell(users):>8}"
                    f"{_cell(files):>8}{_cell(commands):>9}"
                )
            print(
                f"  {mode:<12}{len(run.compactions)} compaction(s) in {run.seconds:.1f} s, "
                f"billed-equivalent input {run.billed:,.0f} "
                f"(summaries {run.summary_cost:,.0f}); "
                f"{_per(run.summary_requests, len(run.compactions))} summary requests per "
                "compaction"
            )
        prepared, synchronous = (r.billed for r in both[:2])
        print(f"  prepared / synchronous billed-equivalent input: {prepared / synchronous:.2f}")
    return runs


def print_round(runs: dict[str, list[Run]]) -> None:
    modes = tuple(runs)
    print("\nover all sessions: the agent's wait as a share of the summary time")
    print(
        f"{'mode':<12}{'compactions':>12}{'p50':>8}{'p95':>8}{'billed input':>14}{'summaries':>11}"
        f"{'most kept':>10}{'users':>10}{'files':>10}{'commands':>10}"
    )
    for mode in modes:
        comps = [c for r in runs[mode] for c in r.compactions]
        shares = [c.share for c in comps]
        billed = sum(r.billed for r in runs[mode])
        summaries = sum(r.summary_cost for r in runs[mode])
        totals = [
            Recall(sum(c.recall[i].found for c in comps), sum(c.recall[i].total for c in comps))
            for i in range(3)
        ]
        print(
            f"{mode:<12}{len(comps):>12}{percentile(shares, 0.5):>8.1%}"
            f"{percentile(shares, 0.95):>8.1%}{billed:>14,.0f}{summaries:>11,.0f}"
            f"{max((c.kept_share for c in comps), default=0.0):>10.1%}"
            + "".join(f"{_cell(t):>10}" for t in totals)
        )
    for mode in modes:
        asked = sum(r.summary_requests for r in runs[mode])
        done = sum(len(r.compactions) for r in runs[mode])
        print(f"{mode}: {_per(asked, done)} summary requests per compaction ({asked} / {done})")
    base = sum(r.billed for r in runs["synchronous"])
    prepared = sum(r.billed for r in runs["prepared"])
    print(f"prepared / synchronous billed-equivalent input: {prepared / base:.2f}")


def _median(values: Iterable[float]) -> float:
    got = list(values)
    return statistics.median(got) if got else 0.0


def print_stages(comps: list[Compaction], mode: str) -> None:
    """Where the agent's wait goes at a prepared compaction: the daemon's stages (medians)."""
    logged = [c for c in comps if c.stages]
    if not logged:
        print(f"\n{mode}: (no stages logged by this daemon)")
        return
    names = list(dict.fromkeys(name for c in logged for name in c.stages))
    print(
        f"\n{mode}: where the wait goes at a prepared compaction (ms, over {len(logged)} of them):"
    )
    print(f"  {'stage':<26}{'median':>8}{'p95':>8}")
    cells = [(name, [c.stages.get(name, 0.0) for c in logged]) for name in names]
    cells.append(("in the daemon", [c.stages_total for c in logged]))
    cells.append(("round trip and the rest", [c.wait * 1000 - c.stages_total for c in logged]))
    cells.append(("the agent's wait", [c.wait * 1000 for c in logged]))
    for name, values in cells:
        print(f"  {name:<26}{_median(values):>8.1f}{percentile(values, 0.95):>8.1f}")


def _option(argv: list[str], name: str, default: int) -> tuple[int, list[str]]:
    """``name N`` taken out of ``argv``: N (``default`` without it) and the rest."""
    if name not in argv:
        return default, argv
    at = argv.index(name)
    return int(argv[at + 1]), argv[:at] + argv[at + 2 :]


@contextlib.contextmanager
def busy(processes: int) -> Iterator[None]:
    """``processes`` programs spinning on the CPU meanwhile (``--load``): a machine busy with
    other work, the same for every run that asks for it."""
    spin = [sys.executable, "-c", "while True: pass"]
    burners = [subprocess.Popen(spin) for _ in range(processes)]
    try:
        yield
    finally:
        for proc in burners:
            proc.kill()
            proc.wait()


async def main() -> None:
    rounds, argv = _option(sys.argv[1:], "--rounds", 3)
    load, argv = _option(argv, "--load", 0)
    baseline: Path | None = None
    if "--baseline" in argv:
        at = argv.index("--baseline")
        baseline = Path(argv[at + 1]).resolve()
        argv = argv[:at] + argv[at + 2 :]
    chosen = argv
    modes = (*MODES, BASELINE) if baseline is not None else MODES
    rounds = max(1, rounds)
    print(
        f"pace: the transcripts' gaps (at most {MAX_GAP_SECONDS:.0f} s) x {SCALE}; a summary takes "
        f"{SUMMARY_SECONDS:.0f} s x {SCALE} = {SUMMARY_SECONDS * SCALE * 1000:.0f} ms; "
        f"{rounds} round(s)" + (f"; {load} CPU-bound processes beside it" if load else "")
    )
    if baseline is not None:
        print(f"baseline: prepared in the background by the daemon in {baseline}")
    if not preparation_exists():
        print(
            "NOTE: this daemon has no background preparation yet (docs/background.md): the 'prepared' "
            "column runs with backgroundCompaction enabled but behaves synchronously."
        )
    every: list[dict[str, list[Run]]] = []
    with tempfile.TemporaryDirectory(prefix="compactd-bench-wait-") as tmp, busy(load):
        for n in range(rounds):
            print(f"\n===== round {n + 1} of {rounds}")
            runs = await one_round(chosen, Path(tmp) / f"round-{n}", modes, baseline)
            print_round(runs)
            every.append(runs)
    print(f"\n===== over {rounds} round(s): the agent's wait as a share of the summary time")
    shown = [m for m in modes if m != "synchronous"]
    print(
        f"{'round':<7}"
        + "".join(f"{m + ' p50':>15}{'p95':>8}{'wait ms':>9}" for m in shown)
        + f"{'synchronous p50':>16}{'floor ms':>10}"
    )
    p50s: dict[str, list[float]] = {m: [] for m in shown}
    p95s: dict[str, list[float]] = {m: [] for m in shown}
    for n, runs in enumerate(every, 1):
        cells = ""
        for m in shown:
            comps = [c for r in runs[m] for c in r.compactions]
            p50s[m].append(percentile((c.share for c in comps), 0.5))
            p95s[m].append(percentile((c.share for c in comps), 0.95))
            waits = _median(c.wait * 1000 for c in comps)
            cells += f"{p50s[m][-1]:>15.1%}{p95s[m][-1]:>8.1%}{waits:>9.1f}"
        sync = [c.share for r in runs["synchronous"] for c in r.compactions]
        floor = [f * 1000 for m in modes for r in runs[m] for f in r.floor]
        print(f"{n:<7}{cells}{percentile(sync, 0.5):>16.1%}{_median(floor):>10.1f}")
    for m in shown:
        pooled = [c for runs in every for r in runs[m] for c in r.compactions]
        print(
            f"{m}: median of the rounds p50 {_median(p50s[m]):.1%}, p95 {_median(p95s[m]):.1%}; "
            f"all {len(pooled)} compactions pooled: p50 "
            f"{percentile((c.share for c in pooled), 0.5):.1%}, p95 "
            f"{percentile((c.share for c in pooled), 0.95):.1%}"
        )
    print(
        "(targets: p50 <= 2%, p95 <= 10%, input <= 1.15, every user message kept, kept "
        "verbatim at most 25% of the size before; floor: the median compact/auto that did not "
        "compact, in the same daemons: the round trip and the decision every request pays)"
    )
    for m in shown:
        print_stages([c for runs in every for r in runs[m] for c in r.compactions], m)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--replay"]:
        asyncio.run(replay_main(sys.argv[2:]))
    else:
        asyncio.run(main())
