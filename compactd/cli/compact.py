"""``compactd compact``: compact a Claude Code transcript into a new session that
``claude --resume`` loads (docs/claude-code.md#compact-and-resume).

The work is the daemon's ``claudeCode/compact``, run in a throwaway daemon: the transcript is
imported, compacted (the offline summary unless ``--online``) and written as a new Claude Code
session beside it; the original is only read. The report says what was kept and the command
that resumes the new session, and when that command cannot work here, why: the session's folder
does not exist on this machine, or the transcript is not where Claude Code looks for that
folder's sessions (docs/claude-code.md#where-the-sessions-are).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from compactd_client import Client

from compactd import port
from compactd.agents.claude_code.format import resume_command
from compactd.cli.inputs import daemon_args, scratch_data_dir, unreadable
from compactd.cli.providers import SummarizerChoice
from compactd.cli.term import Terminal
from compactd.cli.transcripts import NoTranscript, choose, shown


def resume_notes(cwd: str | None, transcript: Path) -> list[str]:
    """Why the resume command would not work on this machine, said for a person: Claude Code
    resumes a session from the folder it ran in, looking in that folder's project folder
    (docs/claude-code.md#where-the-sessions-are)."""
    if not cwd:
        return []
    notes = []
    if not Path(cwd).is_dir():
        notes.append(
            f"{shown(Path(cwd))}, the folder the session ran in, does not exist on this machine, "
            "so the `cd` above fails: Claude Code resumes a session only from its own folder."
        )
    claude = port.agent_for("claude-code")
    home = claude.session_home(cwd) if claude is not None else None
    if home is not None and transcript.parent.name != home.name:
        notes.append(
            f"Claude Code looks for the sessions of {shown(Path(cwd))} in {shown(home)}/, and this "
            f"one was written to {shown(transcript.parent)}/: copy it there for `claude --resume` "
            "to find it."
        )
    return notes


async def compact(
    term: Terminal,
    transcript: str | None,
    *,
    summarizer: SummarizerChoice | str,
    instructions: str | None,
    as_json: bool,
) -> int:
    """Compact ``transcript`` into a new Claude Code session; print what it kept and how to
    resume it."""
    try:
        chosen = choose(transcript, command="compact")
    except NoTranscript as exc:
        term.error(str(exc))
        return 1
    path = chosen.path.absolute()
    problem = unreadable(path)
    if problem is not None:
        term.error(f"{chosen.path}: {problem}")
        return 1
    if isinstance(summarizer, str):
        term.error(summarizer)
        return 2
    # Without --online or --provider the summary is the offline one even when a key is set.
    options: dict[str, Any] = {"summarizer": summarizer.options}
    online = summarizer.online
    with scratch_data_dir() as tmp:
        async with Client.spawn(daemon_args(tmp), initialization_options=options) as client:
            result = await client.claude_code_compact(
                str(path), custom_instructions=instructions, online=online
            )
    # The command as the person runs it from here: no `cd` when they already are in its cwd.
    command = resume_command(result.new_session_id, result.cwd, here=str(Path.cwd()))
    notes = resume_notes(result.cwd, Path(result.new_transcript_path))
    if as_json:
        out: dict[str, Any] = msgspec.to_builtins(result)
        out["resumeCommand"] = command
        if notes:
            out["resumeNotes"] = notes
        term.json(out)
        return 0
    if chosen.how is not None:
        term.say(chosen.how, style="dim")
    term.say(f"{path.name} compacted into a new Claude Code session", style="bold")
    table = term.table("", "", text_columns=1)
    table.show_header = False
    table.add_row("tokens", f"{result.pre_tokens:,} -> {result.post_tokens:,}")
    table.add_row(
        "user messages carried over", f"{result.user_messages_kept} of {result.user_messages}"
    )
    table.add_row("entries summarized", f"{result.summarized_entries:,}")
    table.add_row("last assistant turn kept verbatim", f"{result.kept_entries} line(s)")
    table.add_row("files restored", f"{result.attachments}")
    table.add_row("summary by", result.summarizer or "offline")
    term.show(table)
    for warning in result.warnings or []:
        term.say(f"warning: {warning}", style="yellow")
    term.say(f"new session: {result.new_transcript_path}")
    term.say(f"the original is unchanged: {result.original_transcript_path}", style="dim")
    term.say("resume it in Claude Code with:")
    term.say(f"  {command}", style="bold")
    for note in notes:
        term.say(f"note: {note}", style="yellow")
    return 0
