"""What survives a compaction, in both summarizer modes, and what it leaves.

The survival ledger is docs/compaction.md#survival-ledger.

Each session is appended to a real daemon over stdio (model claude-sonnet-4-5: 200K window,
180K effective; a fixture with the model it was recorded with, whose window may be 1M), then
``compact/full`` runs once, either with the offline summarizer or with the Messages API
emulator answering a fixed summary (the model mode: the ledger checks that summary
and restores what it left out). What the model sees next (``session/messages``) is measured by
the survival measure (``tests/fidelity.py``): user messages by their first 60 characters, files by
basename, shell commands by their first 40 characters. The view is its ``tokens/status`` count,
as a share of the effective window and of the count before the compaction.

Sessions: the six public fixtures (``tests/data/transcripts``; those with a Claude Code
compaction are cut at it and answered with Claude Code's own summary of that part, the others
with a summary written the way Claude Code's are, ``cc_like_summary``), and six synthetic ones
(``tests/fidelity.SESSIONS``: long pastes, harness messages, 300 commands, Grep / Glob paths,
multi-line requests, a long mixed session) whose read files exist on disk so that rehydration
attaches them.

The same synthetic sessions are then compacted in a 60,000-token window (40,000 effective), where
the budget binds: what survives there, and that the view still stays within it.

Then one session is compacted 150 times in a row in each mode (15 short user messages and 15
replies between two compactions; the emulator's model quotes the request's
user texts), with the number of refusals and the view after some of the compactions. And one
long session is compacted after each of 8 rounds of 50 distinct shell commands (and 25 new
files) in the 200K window, the model answering each time with a summary written the way
Claude Code's are: what survives of every command run since the session began, after each
compaction (what earlier compactions carry forward, docs/compaction.md#survival-ledger).

``--modes openai`` adds the same measures with the summaries written through the Chat
Completions API by a model with an 8,192-token window (in pieces), the emulated model answering
each piece with its own summary (``--modes offline,model,openai`` runs all three).

Figures, not a pass/fail test. Run: ``.venv/bin/python tests/bench/bench_fidelity.py``
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "clients" / "python")]

from compactd_client import Client, RpcError  # noqa: E402

from compactd import protocol as p  # noqa: E402
from compactd.core.tokens import estimate_text_tokens, recorded_model  # noqa: E402
from compactd.transcript.model import record_from_dict  # noqa: E402
from tests.emulator import Emulator, Reply  # noqa: E402
from tests.fidelity import (  # noqa: E402
    SESSIONS,
    Recall,
    cc_like_summary,
    command_rounds,
    items_of,
    recalls,
    view_text,
    write_files,
)
from tests.helpers import SessionBuilder  # noqa: E402

MODEL = "claude-sonnet-4-5"
FIXTURES = ROOT / "tests" / "data" / "transcripts"
ROUNDS = 150
ROUND_MESSAGES = 15
SMALL_WINDOW = 60_000
# The "openai" mode (``--modes openai``): the summaries come through the Chat Completions API
# from a model whose window is 8,192 tokens, as a small local model behind llama-server would
# write them: every conversation longer than that is summarized in pieces
# (docs/providers.md#pieces). The emulated model answers each piece with its own summary.
OPENAI_MODEL = "local-8k"
OPENAI_WINDOW = 8_192
MODES = ("offline", "model", "openai")


@dataclass
class Row:
    session: str
    mode: str
    messages: Recall
    files: Recall
    commands: Recall
    pre: int
    post: int
    summary: int  # the continuation message's share of ``post``
    effective: int
    restored: int


def _label(path: Path) -> str:
    """A fixture's name, short: its origin's last part."""
    return "fixture " + path.stem.split("__")[-1][:16]


def _fixture(path: Path) -> tuple[list[dict[str, Any]], str]:
    """The entries a fixture's first compaction summarized (or all of them) and the answer."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    at = next((i for i, e in enumerate(lines) if e.get("subtype") == "compact_boundary"), None)
    if at is None:
        return lines, cc_like_summary(lines)
    summary = next(e for e in lines[at:] if e.get("isCompactSummary"))
    content = summary["message"]["content"]
    text = content if isinstance(content, str) else content[0]["text"]
    match = re.search(r"Summary:\n(.*?)(?:\nIf you need specific details|\Z)", text, re.DOTALL)
    body = match.group(1) if match else text
    return lines[:at], f"<summary>\n{body}\n</summary>"


async def _compact(
    client: Client,
    emu: Emulator | None,
    cwd: str,
    entries: list[dict[str, Any]],
    answer: str,
    window: int | None,
    model: str = MODEL,
) -> tuple[p.TokenStatus, p.CompactResult, p.MessagesResult, p.TokenStatus]:
    params: dict[str, Any] = {"cwd": cwd, "model": model}
    if window is not None:
        params["contextWindow"] = window
    opened = await client.request(p.SESSION_OPEN, params)
    sid = str(opened["sessionId"])
    await client.append(sid, entries)
    before = await client.tokens_status(sid)
    if emu is not None:
        emu.script(Reply(text=answer))
    result = await client.compact_full(sid)
    return before, result, await client.messages(sid), await client.tokens_status(sid)


async def measure(
    client: Client, emu: Emulator | None, mode: str, cwd: str, window: int | None = None
) -> list[Row]:
    cases: list[tuple[str, list[dict[str, Any]], str, str]] = []
    if window is None:
        for path in sorted(FIXTURES.glob("*.jsonl")):
            entries, answer = _fixture(path)
            # Opened with the model it ran with: a 1M-token session does not fit 200K. (The
            # entries are appended, not imported, so the daemon cannot read it from them.)
            newest_first = (record_from_dict(e).entry for e in reversed(entries))
            cases.append((_label(path), entries, answer, recorded_model(newest_first) or MODEL))
    for name, make in SESSIONS.items():
        session = make(cwd)
        write_files(session.files_on_disk)
        cases.append((name, session.entries, cc_like_summary(session.entries), MODEL))
    rows = []
    for name, entries, answer, model in cases:
        before, result, view, after = await _compact(
            client, emu, cwd, entries, answer, window, model
        )
        m, f, c = recalls(items_of(entries), view_text(view.messages))
        # As the status counts it: plain, not padded (docs/thresholds.md#after-a-compaction).
        summary = estimate_text_tokens(result.summary["message"]["content"])
        rows.append(
            Row(
                name,
                mode,
                m,
                f,
                c,
                before.tokens,
                after.tokens,
                summary,
                after.effective_window,
                len(result.restored_from_ledger or []),
            )
        )
    return rows


def _cell(r: Recall) -> str:
    return f"{r.found:>4}/{r.total:<4} {r.share * 100:5.1f}%" if r.total else f"{'-':>16}"


def print_rows(rows: list[Row]) -> None:
    print(
        f"{'mode':<8} {'session':<25} {'user messages':>16} {'files':>16} {'commands':>16} "
        f"{'view':>7} {'summary':>7} {'of window':>9} {'of pre':>7} {'restored':>8}"
    )
    for r in rows:
        print(
            f"{r.mode:<8} {r.session:<25} {_cell(r.messages)} {_cell(r.files)} "
            f"{_cell(r.commands)} {r.post:>7,} {r.summary:>7,} "
            f"{r.post / r.effective * 100:8.1f}% {r.post / max(1, r.pre) * 100:6.1f}% "
            f"{r.restored:>8}"
        )
    for mode in dict.fromkeys(r.mode for r in rows):
        mine = [r for r in rows if r.mode == mode]
        total = [
            Recall(sum(getattr(r, k).found for r in mine), sum(getattr(r, k).total for r in mine))
            for k in ("messages", "files", "commands")
        ]
        worst = max(r.post / r.effective for r in mine)
        print(
            f"{mode:<8} {'ALL':<25} {_cell(total[0])} {_cell(total[1])} {_cell(total[2])} "
            f"{'':>15} {worst * 100:8.1f}%*"
        )
    print(
        "(view: tokens/status after the compaction; summary: the continuation message's part "
        "of it, the rest is attachments; * the largest view of the mode)"
    )


async def repeated(client: Client, emu: Emulator | None, mode: str, cwd: str) -> str:
    """Compact one session ``ROUNDS`` times in a row; the view after some of the rounds."""
    opened = await client.request(p.SESSION_OPEN, {"cwd": cwd, "model": MODEL})
    sid = str(opened["sessionId"])
    b = SessionBuilder()
    refused = 0
    views: dict[int, int] = {}
    effective = 0
    for n in range(1, ROUNDS + 1):
        start = len(b.entries)
        for i in range(ROUND_MESSAGES):
            b.user(f"Round {n}, request {i}: rename the helper in module_{n}_{i}.")
            b.reply(
                f"Renamed the helper in module_{n}_{i} and updated its callers; the tests pass. "
                * 6
            )
        await client.append(sid, b.entries[start:])
        try:
            await client.compact_full(sid)
        except RpcError:
            refused += 1
        status = await client.tokens_status(sid)
        views[n] = status.tokens
        effective = status.effective_window
    largest = max(views.values())
    shown = "  ".join(f"{views[n]:>6,}" for n in (1, 10, 50, 100, ROUNDS))
    return (
        f"{mode:<8} {refused:>7} {shown}  {largest:>6,} ({largest / effective * 100:.1f}% of "
        f"{effective:,})"
    )


async def rounds_with_commands(client: Client, emu: Emulator | None, mode: str, cwd: str) -> str:
    """``command_rounds``: the session compacted after each round (200K window, the model's
    summary written the way Claude Code's are, ``cc_like_summary`` of the round); what the model
    sees after each compaction of every command run since the session began (and of the user
    messages and files, named when short of all)."""
    opened = await client.request(p.SESSION_OPEN, {"cwd": cwd, "model": MODEL})
    sid = str(opened["sessionId"])
    session, ends = command_rounds(cwd)
    write_files(session.files_on_disk)
    start = 0
    cells: list[str] = []
    for end in ends:
        await client.append(sid, session.entries[start:end])
        if emu is not None:
            emu.script(Reply(text=cc_like_summary(session.entries[start:end])))
        await client.compact_full(sid)
        start = end
        view = view_text((await client.messages(sid)).messages)
        messages, files, commands = recalls(items_of(session.entries[:end]), view)
        cell = f"{commands.found}/{commands.total}"
        if messages.share < 1 or files.share < 1:
            cell += f" (users {_fraction(messages)}, files {_fraction(files)})"
        cells.append(cell)
    status = await client.tokens_status(sid)
    return (
        f"{mode:<8} "
        + "  ".join(f"{c:>9}" for c in cells)
        + f"  (view after the last: {status.tokens:,} tokens)"
    )


def _fraction(r: Recall) -> str:
    return f"{r.found}/{r.total}"


def _options(mode: str, emu: Emulator) -> dict[str, Any]:
    if mode == "offline":
        return {"summarizer": {"offline": True}}
    if mode == "openai":
        summarizer = {
            "provider": "openai",
            "baseUrl": f"{emu.base_url}/v1",
            "model": OPENAI_MODEL,
            "contextWindow": OPENAI_WINDOW,
        }
        return {"summarizer": summarizer}
    return {"summarizer": {"baseUrl": emu.base_url, "apiKey": "test"}}


def _modes(argv: list[str]) -> list[str]:
    """``--modes offline,model,openai`` (default: offline and model)."""
    if "--modes" not in argv:
        return ["offline", "model"]
    chosen = argv[argv.index("--modes") + 1].split(",")
    unknown = [m for m in chosen if m not in MODES]
    if unknown:
        raise SystemExit(f"unknown modes {unknown}; choose among {', '.join(MODES)}")
    return chosen


def _chat_line(emu: Emulator) -> str | None:
    """What the "openai" mode sent: requests, and the largest against the window."""
    from tests.emulator.chat import chat_prompt_tokens

    sent = [r.body for r in emu.chat_requests]
    if not sent:
        return None
    largest = max(chat_prompt_tokens(b) + int(b.get("max_tokens") or 0) for b in sent)
    return (
        f"openai: {len(sent):,} requests to {OPENAI_MODEL}, the largest {largest:,} tokens "
        f"(prompt + reply limit) in a {OPENAI_WINDOW:,}-token window; "
        f"{sum(1 for r in emu.chat_requests if r.status != 200)} refused"
    )


async def main() -> None:
    rows: list[Row] = []
    small: list[Row] = []
    lines: list[str] = []
    rounds: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, Emulator(chat_server="llama") as emu:
        emu.set_context_window(OPENAI_MODEL, OPENAI_WINDOW)
        cwd = str(Path(tmp) / "project")
        Path(cwd).mkdir()
        for mode in _modes(sys.argv[1:]):
            options = _options(mode, emu)
            data = Path(tmp) / f"data-{mode}"
            args = [sys.executable, "-m", "compactd", "serve", "--data-dir", str(data)]
            async with Client.spawn(args, initialization_options=options) as client:
                answering = emu if mode == "model" else None
                rows += await measure(client, answering, mode, cwd)
                small += await measure(client, answering, mode, cwd, SMALL_WINDOW)
                lines.append(await repeated(client, answering, mode, cwd))
                rounds.append(await rounds_with_commands(client, answering, mode, cwd))
    print(
        "What the model sees after one compact/full (the survival measure of tests/fidelity.py), 200K window:"
    )
    print_rows(rows)
    print()
    print(
        f"The same synthetic sessions in a {SMALL_WINDOW:,}-token window, where the budget binds:"
    )
    print_rows(small)
    print()
    print(
        f"{ROUNDS} compactions in a row ({ROUND_MESSAGES} user messages and replies between two):"
    )
    print(f"{'mode':<8} {'refused':>7} {'view after 1, 10, 50, 100, 150 compactions':>42}  largest")
    for line in lines:
        print(line)
    print()
    print(
        "A session compacted after each of 8 rounds (50 distinct commands and 25 new files a "
        "round, 200K window): the commands of the whole session in the view after each compaction"
    )
    for line in rounds:
        print(line)
    chat = _chat_line(emu)
    if chat is not None:
        print(chat)


if __name__ == "__main__":
    asyncio.run(main())
