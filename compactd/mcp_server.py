"""``compactd mcp``: recall and context status as MCP tools, for the agent itself (docs/recall.md).

A second front end beside the daemon (``server.py``), as thin: each tool finds the session,
calls the index (``services/recall_index.py``) or the core, and shapes the answer as text for
the model. Built on the official MCP Python SDK's ``MCPServer``, on stdio.

Which session: the ``session`` argument (a compactd session id, an agent's session id of the
working folder, or a transcript path), else the one given at start (``--session``), else the
agent's session running in the working folder (asked of each agent through ``compactd.port``:
for Claude Code, the one a hook recorded, else the newest transcript there). Each answer says
which and how it was found; the transcript is read through the port too.

The process starts often and must start fast: it imports the SDK, SQLite and compactd's core,
never a summarizer's SDK (docs/recall.md#mcp-tools).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final

import msgspec
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from compactd import __version__, port
from compactd.core.recall import RECALL_MAX_LIMIT
from compactd.core.recall_render import render_fetch, render_hits
from compactd.core.recall_words import parse_query
from compactd.services.recall_index import open_index
from compactd.services.store import Store, valid_session_id
from compactd.transcript.model import is_compact_boundary_line

__all__ = ["McpConfig", "build_server", "context_answer", "recall_answer", "run"]

log = logging.getLogger(__name__)

# Hits a recall answer shows when the call names no limit (compactd's choice: enough to see
# the best few with what revised them, little enough to read at a glance).
MCP_DEFAULT_LIMIT: Final = 8

INSTRUCTIONS: Final = (
    "compactd keeps this session's full history searchable. After a compaction the summary "
    "is all you see of earlier turns; the transcript still has every original message, tool "
    "call, command and result. Use `recall` to get them back instead of guessing or redoing "
    "work, and `context` to see how full the context window is."
)

RECALL_DESCRIPTION: Final = """\
Search this session's full history, including everything before its compactions, and return \
the original entries word for word.

Call it after a compaction (when the conversation starts with a summary), before redoing work \
that may already be done, and whenever the summary is vague about exact words the user wrote, \
file paths, commands, error messages or decisions.

query: a few words (ranked; all words first, then any of them; "dont" finds "don't"), \
a "quoted phrase", a file name or path (src/app.py), a command (npm run build), \
or recall:<uuid> to fetch one entry whole (summaries and cut results name these).

Returns the best matches first: who said it (user, assistant, tool, summary), when, the text \
(long ones cut, with the recall:<uuid> that returns the whole), and, under a hit, a later \
entry that changed it (a later edit of the same file, the user's next message correcting it). \
Output is bounded; when more entries match it says how many: narrow the query."""

CONTEXT_DESCRIPTION: Final = """\
How full this session's context window is, and what happens next.

Call it before starting a long task, when deciding whether to save notes or state first, or \
when asked how much room is left.

Returns the tokens the next request carries, their share of the automatic-compaction \
threshold and of the window, the warning/error/auto-compact/blocking levels, whether a \
compaction is near, and how many compactions the session has had."""


@dataclass(frozen=True, slots=True)
class McpConfig:
    data_dir: Path  # compactd's data dir: its sessions, the recall indexes, the hooks' records
    cwd: str  # the project folder whose Claude Code session is "the current one"
    session: str | None = None  # a session named at start (``--session``)


@dataclass(frozen=True, slots=True)
class _Target:
    transcript: Path
    session_id: str
    how: str  # how it was found, said in every answer
    model: str | None = None
    context_window: int | None = None

    def describe(self) -> str:
        return f"session {self.session_id} ({self.how})"


def _named(config: McpConfig, name: str) -> _Target:
    store = Store(config.data_dir)
    if valid_session_id(name) and store.transcript_path(name).is_file():
        try:
            meta = store.read_meta(name)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            # Without its meta the transcript still answers; the model comes from its lines.
            return _Target(store.transcript_path(name), name, "compactd session")
        return _Target(
            store.transcript_path(name), name, "compactd session", meta.model, meta.context_window
        )
    found = port.session_named(config.cwd, name) if valid_session_id(name) else None
    if found is not None:
        return _Target(found.transcript, found.session_id, found.how)
    path = Path(name).expanduser()
    if port.names_a_session(path) and path.is_file():
        return _Target(path, path.stem, f"transcript {path}")
    raise ToolError(
        f"unknown session {name!r}: not a compactd session in {config.data_dir}, not "
        f"{port.sessions_of(config.cwd)}, not a {port.session_suffixes()} transcript path"
    )


def find_target(config: McpConfig, session: str | None) -> _Target:
    """The session a call is about (module docstring); ToolError when there is none."""
    name = session or config.session
    if name:
        return _named(config, name.strip())
    current = port.current_session(config.data_dir, config.cwd)
    if current is None:
        raise ToolError(
            f"{port.no_current_session(config.cwd)}; pass `session` "
            "(a session id or a transcript path)"
        )
    return _Target(current.transcript, current.session_id, current.how)


def recall_answer(config: McpConfig, query: str, limit: int, session: str | None) -> str:
    """The ``recall`` tool's answer (text), or ToolError for bad input."""
    if not query.strip():
        raise ToolError("query is empty: give a few words, a file name, a command or recall:<uuid>")
    if not 1 <= limit <= RECALL_MAX_LIMIT:
        raise ToolError(f"limit must be between 1 and {RECALL_MAX_LIMIT} (got {limit})")
    target = find_target(config, session)
    parsed = parse_query(query)
    try:
        index = open_index(config.data_dir, target.transcript)
    except OSError as exc:
        raise ToolError(f"cannot read the transcript {target.transcript}: {exc.strerror}") from exc
    with index:
        if parsed.fetch_uuid is not None:
            entry = index.fetch(parsed.fetch_uuid)
            if entry is None:
                raise ToolError(
                    f"no entry recall:{parsed.fetch_uuid} in {target.describe()}; "
                    "search with words instead"
                )
            if parsed.fetch_from > len(entry.text):
                raise ToolError(
                    f"recall:{parsed.fetch_uuid} has {len(entry.text):,} characters "
                    f"(asked from {parsed.fetch_from:,})"
                )
            return render_fetch(entry, parsed.fetch_from, header=f"From {target.describe()}:")
        outcome = index.search(parsed, limit)
    header = f"{outcome.total} matching entries in {target.describe()}, best first:"
    if not outcome.found:
        return (
            f"Nothing matches {query!r} in {target.describe()}. Try fewer or other words, "
            "a file name, or part of a command."
        )
    return render_hits(outcome.found, parsed.terms, header=header, total=outcome.total)


def context_answer(config: McpConfig, session: str | None) -> str:
    """The ``context`` tool's answer (text), or ToolError."""
    # Token counting imports a good part of the core: paid by the first `context` call, not by
    # every start of the server (docs/recall.md#mcp-tools).
    from compactd.core.outlook import outlook

    target = find_target(config, session)
    try:
        data = target.transcript.read_bytes()
    except OSError as exc:
        raise ToolError(f"cannot read the transcript {target.transcript}: {exc.strerror}") from exc
    # Only whole lines: the agent may be writing the last one.
    records = port.records(data[: data.rfind(b"\n") + 1])
    seen = outlook(records, os.environ, model=target.model, context_window=target.context_window)
    g = seen.gauge
    s = g.status
    compactions = sum(1 for r in records if is_compact_boundary_line(r.entry.type, r.entry.subtype))
    crossed = [
        name
        for name, above in (
            ("warning", s.is_above_warning_threshold),
            ("error", s.is_above_error_threshold),
            ("auto-compact", s.is_above_auto_compact_threshold),
            ("blocking", s.is_at_blocking_limit),
        )
        if above
    ]
    return "\n".join(
        [
            f"{target.describe()}, model {seen.model}",
            f"context: {s.tokens:,} tokens ({s.exact_tokens:,} from the last response's usage, "
            f"{s.estimated_tokens:,} estimated since)",
            f"share: {g.share:.0%} of the "
            f"{'auto-compact threshold' if g.auto_compact else 'usable window'} ({g.limit:,}), "
            f"{g.share_of_window:.0%} of the {g.window:,}-token window",
            f"levels: warning {s.warning_threshold:,}, error {s.error_threshold:,}, "
            f"auto-compact {s.auto_compact_threshold:,}, blocking {s.blocking_limit:,}; "
            f"crossed: {', '.join(crossed) or 'none'}",
            f"compaction near: {'yes' if g.level is not None else 'no'}; next: {g.next_step}",
            f"compactions so far: {compactions} (recall finds what came before them)",
        ]
    )


def build_server(config: McpConfig) -> MCPServer[object]:
    server: MCPServer[object] = MCPServer(
        "compactd", instructions=INSTRUCTIONS, version=__version__
    )

    @server.tool(name="recall", description=RECALL_DESCRIPTION)
    def recall(
        query: Annotated[
            str, Field(description="words, a quoted phrase, a path, a command, or recall:<uuid>")
        ],
        limit: Annotated[int, Field(description="most entries to return")] = MCP_DEFAULT_LIMIT,
        session: Annotated[
            str | None, Field(description="a session id or transcript path (default: this session)")
        ] = None,
    ) -> str:
        return recall_answer(config, query, limit, session)

    @server.tool(name="context", description=CONTEXT_DESCRIPTION)
    def context(
        session: Annotated[
            str | None, Field(description="a session id or transcript path (default: this session)")
        ] = None,
    ) -> str:
        return context_answer(config, session)

    return server


def run(config: McpConfig) -> int:
    """Serve on stdio until the client closes stdin."""
    build_server(config).run("stdio")
    return 0
