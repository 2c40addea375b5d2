"""``compactd demo`` (what ``make demo`` runs): the main job, offline, on a real transcript."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compactd_client import Client, RpcError

import compactd.cli.report as report
from compactd import __version__, port
from compactd.cli.inputs import DEFAULT_MODEL, daemon_args, scratch_data_dir
from compactd.cli.replay import (
    REPLAY_SYNTHETIC_WINDOW,
    outcome_json,
    plan_replay,
    replay_session,
    show_outcome,
)
from compactd.cli.synthetic import make_session, to_jsonl
from compactd.cli.term import Terminal

# The demo's default transcript is one of the test fixtures (tests/data/README.md); an
# installed package without the tests falls back to a synthetic session.
FIXTURE_TRANSCRIPTS = Path(__file__).resolve().parents[2] / "tests" / "data" / "transcripts"
DEMO_FIXTURE = "d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"

# The synthetic session the demo replays: big enough to cross the 100K window's auto-compact
# threshold more than once, small enough to replay in a few seconds.
_DEMO_REPLAY_ENTRIES = 1_000
_DEMO_REPLAY_TOKENS = 150_000


async def demo(
    term: Terminal, transcript: str | None, data_dir: str | None, as_json: bool = False
) -> int:
    """Import a transcript into a fresh daemon, show its status, compact it offline, show it
    again, then let ``compact/auto`` manage a synthetic session and check nothing was lost."""
    source = Path(transcript) if transcript else FIXTURE_TRANSCRIPTS / DEMO_FIXTURE
    say = (lambda *a, **k: None) if as_json else term.say
    out: dict[str, Any] = {}
    # The data folder is the same throwaway form as ``compactd status``'s: the summary names the
    # session's transcript in it, so both show the same size after the compaction.
    with scratch_data_dir() as tmp:
        work = Path(data_dir) if data_dir else Path(tmp)
        if not source.is_file():
            source = Path(tmp) / "synthetic-session.jsonl"
            source.write_bytes(to_jsonl(make_session()))
            say("(no fixture transcript found; using a synthetic session)")
        say(f"compactd {__version__} demo: {source.name}", style="bold")
        async with Client.spawn(
            daemon_args(str(work)),
            initialization_options={"summarizer": {"offline": True}},
        ) as client:
            opened = await client.open_session(
                cwd=str(Path.cwd()),
                transcript_path=str(source),
            )
            sid = opened.session_id
            skipped = (
                f" ({opened.skipped_lines} corrupt lines skipped)" if opened.skipped_lines else ""
            )
            where = (
                f"stored at {opened.transcript_path}"
                if data_dir
                else "stored in a temporary folder, deleted at exit (--data-dir keeps it)"
            )
            say(f"imported {opened.entry_count:,} entries{skipped} as session {sid}, {where}")
            bd = await client.tokens_breakdown(sid)
            msgs = await client.messages(sid)
            out["import"] = {
                "sessionId": sid,
                "entries": opened.entry_count,
                "skippedLines": opened.skipped_lines,
                "transcriptPath": opened.transcript_path if data_dir else None,
                "status": opened.status,
                "breakdown": bd,
                "apiMessages": len(msgs.messages),
            }
            if not as_json:
                report.status_lines(term, opened.status)
                term.say()
                report.accounting(term, opened.status, bd)
                term.say(f"API view: {len(msgs.messages)} messages after normalization")
                term.say()
            # A temporary folder is gone when the demo ends: the summary names it as such.
            hidden = None if data_dir else str(work)
            out["compaction"] = await _compaction(term, client, sid, as_json, hidden)
            out["auto"] = await _auto(term, client, as_json)
            listed = await client.list_sessions()
            say(f"the daemon holds {len(listed.sessions)} session(s)")
    if as_json:
        term.json(out)
    return 0


async def _compaction(
    term: Terminal, client: Client, session_id: str, as_json: bool, hidden: str | None
) -> dict[str, Any]:
    """Compact with the offline summarizer and show what changed."""
    if not as_json:
        term.say(
            "compacting offline (no API key: a structured summary built from the transcript)",
            style="bold",
        )
    try:
        result = await client.compact_full(session_id)
    except RpcError as exc:
        if not as_json:
            term.say(f"  not compacted: {exc}")
        return {"refused": str(exc)}
    summary: str = result.summary["message"]["content"]
    if hidden:
        summary = summary.replace(hidden, "<temporary folder>")
    status = await client.tokens_status(session_id)
    after = await client.messages(session_id)
    if not as_json:
        term.say(
            f"  {result.pre_compact_tokens:,} -> {result.post_compact_tokens:,} tokens (the system "
            f"prompt and tools, {status.fixed_prefix_tokens:,}, are sent either way) in "
            f"{result.duration_ms:,} ms ({result.summarizer} summary, {len(summary):,} characters; "
            f"{len(result.attachments)} attachment(s) re-injected)"
        )
        # The whole of it: the survival ledger keeps it within the view budget.
        for line in summary.splitlines():
            term.say(f"  | {line}".rstrip(), style="dim")
        report.status_lines(term, status)
        term.say(report.parts_line(status), style="dim")
        term.say(f"API view after compaction: {len(after.messages)} message(s)")
        term.say()
    return {
        "preCompactTokens": result.pre_compact_tokens,
        "postCompactTokens": result.post_compact_tokens,
        "summarizer": result.summarizer,
        "summary": summary,
        "attachments": len(result.attachments),
        "durationMs": result.duration_ms,
        "status": status,
        "apiMessages": len(after.messages),
    }


async def _auto(term: Terminal, client: Client, as_json: bool) -> dict[str, Any]:
    """Replay a synthetic session as an agent would, letting compact/auto decide, and show
    that the stored transcript still holds every original entry."""
    entries = make_session(entries=_DEMO_REPLAY_ENTRIES, target_tokens=_DEMO_REPLAY_TOKENS)
    if not as_json:
        term.say(
            f"automatic compaction: an agent appends a synthetic session of {len(entries):,} "
            "entries round by round and calls compact/auto before each request",
            style="bold",
        )
    plan = plan_replay(to_jsonl(entries).splitlines())
    outcome = await replay_session(
        client,
        plan,
        model=DEFAULT_MODEL,
        context_window=REPLAY_SYNTHETIC_WINDOW,
        term=term,
        quiet=as_json,
    )
    stored = [
        r.entry for r in port.read_lines(Path(outcome.transcript_path).read_bytes().splitlines())
    ]
    uuids = {e.uuid for e in stored}
    kept = sum(1 for e in entries if e.get("uuid") in uuids)
    boundaries = sum(1 for e in stored if e.is_compact_boundary or e.is_microcompact_boundary)
    if not as_json:
        show_outcome(term, outcome)
        term.say(
            f"the transcript still holds {kept:,} of {len(entries):,} original entries, plus "
            f"{boundaries} compaction boundary entries"
        )
    return {
        **outcome_json(outcome, plan, kept=False),
        "originalEntries": len(entries),
        "originalEntriesKept": kept,
        "boundaryEntries": boundaries,
    }
