"""claudeCode/*: the Claude Code round trip (docs/claude-code.md).

``claudeCode/compact`` imports a Claude Code transcript as ``session/open`` does, compacts it
and writes the result as a new Claude Code session beside the original
(``engine``). Bad input (a relative path, a missing file, not a transcript) is an
error before anything is imported or written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import compactd.agents.claude_code.engine as engine
from compactd import protocol as p
from compactd.handlers.base import Context, Handler

if TYPE_CHECKING:
    from compactd.app import App


def _transcript_path(raw: str) -> Path:
    """``transcriptPath`` as an absolute path to an existing file, else the error to answer."""
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
    return path


async def compact(
    app: App, params: p.ClaudeCodeCompactParams, ctx: Context
) -> p.ClaudeCodeCompactResult:
    path = _transcript_path(params.transcript_path)
    engine.check_online(app, bool(params.online))
    source = await engine.read_resumable(path, params.transcript_path)
    opened = await app.open_session(
        p.OpenParams(cwd=engine.import_cwd(source, path), transcript_path=str(path))
    )
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
