"""claudeCode/*: the Claude Code round trip (docs/claude-code.md).

``claudeCode/compact`` imports a Claude Code transcript as ``session/open`` does, compacts it
and writes the result as a new Claude Code session beside the original
(``engine.claude_code``). Bad input (a relative path, a missing file, not a transcript) is an
error before anything is imported or written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from compactd import protocol as p
from compactd.engine import claude_code as engine
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App


async def compact(
    app: App, params: p.ClaudeCodeCompactParams, ctx: Context
) -> p.ClaudeCodeCompactResult:
    raw = params.transcript_path
    if not raw.strip() or "\x00" in raw:
        raise p.CompactdError(p.ErrorCode.INVALID_PARAMS, "transcriptPath must be a non-empty path")
    path = Path(raw).expanduser()
    if not path.is_absolute():
        raise p.CompactdError(
            p.ErrorCode.INVALID_PARAMS,
            f"transcriptPath {raw!r} must be absolute (a Claude Code transcript under "
            "~/.claude/projects/)",
        )
    if not path.is_file():
        raise p.CompactdError(
            p.ErrorCode.TRANSCRIPT_UNREADABLE, f"transcript {raw} does not exist or is not a file"
        )
    engine.check_online(app, bool(params.online))
    source = await engine.read_source(path)
    if source.session_id is None:
        raise p.CompactdError(
            p.ErrorCode.TRANSCRIPT_UNREADABLE,
            f"{raw} is not a Claude Code transcript (no line names a sessionId)",
        )
    if not source.has_assistant:
        raise p.CompactdError(
            p.ErrorCode.NOT_ENOUGH_MESSAGES,
            f"{raw} has no assistant response yet: there is nothing to compact or resume from",
        )
    # The agent's cwd when it still exists (file paths in the transcript are relative to it),
    # else the transcript's folder: the import needs an existing directory.
    cwd = source.cwd if source.cwd and Path(source.cwd).is_dir() else str(path.parent)
    opened = await app.open_session(p.OpenParams(cwd=cwd, transcript_path=str(path)))
    session = await app.get_session(opened.session_id)
    return await engine.compact_to_claude_code(
        app,
        session,
        source,
        custom_instructions=params.custom_instructions,
        online=bool(params.online),
        begin_progress=lambda title: ctx.begin_progress(title, "starting"),
    )


HANDLERS: dict[str, Handler] = {p.CLAUDE_CODE_COMPACT: compact}
