"""``compactd status``: where a transcript stands against its window, in parts that add up, and
what ``compact/auto`` would do next; with ``--follow``, a gauge line each time the agent appends
to it (docs/follow.md). The transcript is a file, the newest session of a folder, or the current
folder's newest Claude Code session (``cli/transcripts``), and the report says which."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compactd_client import Client, RpcError, Subscription
from compactd_client import protocol as p

import compactd.cli.report as report
from compactd.cli.inputs import DEFAULT_MODEL, daemon_args, scratch_data_dir, unreadable
from compactd.cli.term import Terminal, gauge
from compactd.cli.transcripts import Chosen, NoTranscript, choose


async def previews(
    client: Client, session_id: str
) -> tuple[p.PreviewResult, p.PreviewResult | str]:
    """``compact/auto``'s decision now, and a full compaction's outcome (or why it cannot run)."""
    auto = await client.compact_preview(session_id, mechanism="auto")
    full: p.PreviewResult | str
    try:
        full = await client.compact_preview(session_id, mechanism="full")
    except RpcError as exc:
        full = exc.message
    return auto, full


async def status(
    term: Terminal,
    transcript: str | None,
    *,
    model: str | None,
    as_json: bool,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    follow: bool = False,
    auto_compact_tokens: int | None = None,
) -> int:
    """Token status, breakdown and outlook of a transcript, through a throwaway daemon; with
    ``follow``, then a line per read of the growing transcript until interrupted."""
    try:
        chosen = choose(transcript, command="status")
    except NoTranscript as exc:
        term.error(str(exc))
        return 1
    path = chosen.path
    problem = unreadable(path)
    if problem is not None:
        term.error(f"{path}: {problem}")
        return 1
    with scratch_data_dir() as tmp:
        # Offline: a preview never calls a model, and nothing here may need a key.
        options: dict[str, Any] = {"summarizer": {"offline": True}}
        if auto_compact_tokens is not None:
            options["autoCompactTokens"] = auto_compact_tokens
        async with Client.spawn(daemon_args(tmp), initialization_options=options) as client:
            updates = client.follow_updates()  # listening before the open: nothing is missed
            opened = await client.open_session(
                cwd=str(Path.cwd()),
                model=model,
                transcript_path=str(path),
                context_window=context_window,
                max_output_tokens=max_output_tokens,
                follow=follow or None,
            )
            sid = opened.session_id
            bd = await client.tokens_breakdown(sid)
            st = await client.stats(sid)
            auto, full = await previews(client, sid)
            _print(term, chosen, model, as_json, opened, bd, st, auto, full)
            if follow:
                await _follow(term, updates, as_json)
    return 0


async def _follow(
    term: Terminal, updates: Subscription[p.FollowedNotification], as_json: bool
) -> None:
    """A line per read of the followed transcript (one JSON object a line with ``--json``)."""
    if not as_json:
        term.say("following the transcript; Ctrl-C to stop", style="dim")
        term.stream.flush()  # a pipe sees each line as it comes
    async for note in updates:
        if as_json:
            term.json(note)
            continue
        what = "read again" if note.reread else f"+{note.appended}"
        term.show(gauge(term, note.status, before=f"{what} ({note.entry_count:,} entries) "))
        term.stream.flush()


def _print(
    term: Terminal,
    chosen: Chosen,
    model: str | None,
    as_json: bool,
    opened: p.OpenResult,
    bd: p.BreakdownResult,
    st: p.StatsResult,
    auto: p.PreviewResult,
    full: p.PreviewResult | str,
) -> None:
    if as_json:
        out: dict[str, Any] = {"transcript": str(chosen.path.absolute())}
        if chosen.how is not None:
            out["picked"] = {
                "rule": "newest",
                "folder": str(chosen.folder),
                "sessions": chosen.sessions,
                "how": chosen.how,
            }
        out |= {
            "model": opened.model,
            "entries": opened.entry_count,
            "skippedLines": opened.skipped_lines,
            "status": opened.status,
            "breakdown": bd,
            "stats": st,
            "preview": {"auto": auto, "full": full if isinstance(full, p.PreviewResult) else None},
        }
        if isinstance(full, str):
            out["preview"]["fullRefused"] = full
        term.json(out)
        return
    skipped = f", {opened.skipped_lines} corrupt line(s) skipped" if opened.skipped_lines else ""
    if chosen.how is not None:
        term.say(chosen.how, style="dim")
    term.say(chosen.path.name, style="bold")
    # Without --model the daemon takes the model the transcript names (docs/thresholds.md).
    used = opened.model or DEFAULT_MODEL
    named = " (named by the transcript)" if not model and used != DEFAULT_MODEL else ""
    term.say(f"{opened.entry_count:,} entries{skipped}, model {used}{named}", style="dim")
    report.status_lines(term, opened.status)
    term.say()
    report.accounting(term, opened.status, bd)
    report.tools(term, bd)
    report.duplicates(term, bd)
    report.compactions(term, st)
    report.next_step(term, opened.status, auto, full)
