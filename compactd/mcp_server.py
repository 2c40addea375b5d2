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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, cast

import msgspec
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from compactd import __version__, port
from compactd.core.outbound import bounded, echo, redact, upstream
from compactd.core.recall import RECALL_MAX_LIMIT
from compactd.core.recall_render import Stored, render_fetch, render_hits
from compactd.core.recall_words import parse_query
from compactd.services.fs import MAX_PATH_CHARS
from compactd.services.recall_index import (
    Coverage,
    RecallIndex,
    RecallIndexError,
    SearchOutcome,
    use_index,
)
from compactd.services.safe_io import Deadline, fdopen_regular, is_regular_file
from compactd.services.store import Store, valid_session_id
from compactd.transcript.model import is_compact_boundary_line

__all__ = ["McpConfig", "build_server", "context_answer", "recall_answer", "run"]

log = logging.getLogger(__name__)

# Hits a recall answer shows when the call names no limit (compactd's choice: enough to see
# the best few with what revised them, little enough to read at a glance).
MCP_DEFAULT_LIMIT: Final = 8
# A tool call's own deadline (compactd's choice, far under the agent's timeout for a tool):
# past it, recall answers from what the index holds and says how much that is.
TOOL_DEADLINE_S: Final = 20.0
# The longest query recall takes: a few words, a path, a command, an error line; a pasted page
# is no query (compactd's choice).
MAX_QUERY_CHARS: Final = 10_000

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
    if len(name) > MAX_PATH_CHARS:
        raise ToolError(
            f"session is {len(name):,} characters long: a session id or a transcript path has "
            f"at most {MAX_PATH_CHARS:,}"
        )
    if "\x00" in name:
        raise ToolError("session holds a NUL character: give a session id or a transcript path")
    store = Store(config.data_dir)
    if valid_session_id(name) and is_regular_file(store.transcript_path(name)):
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
    if port.names_a_session(path) and path.exists() and not is_regular_file(path):
        raise ToolError(f"{echo(name)} is not a regular file: a transcript is a file")
    if port.names_a_session(path) and is_regular_file(path):
        return _Target(path, path.stem, f"transcript {path}")
    raise ToolError(
        f"unknown session {echo(name)}: not a compactd session in {config.data_dir}, not "
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


def _coverage_note(coverage: Coverage) -> str:
    if coverage.complete:
        return ""
    why = (
        "another process is updating the index"
        if coverage.busy
        else f"indexing stopped at this call's {TOOL_DEADLINE_S:g} s deadline"
    )
    return (
        f"\n(Searched the first {coverage.indexed:,} of the transcript's {coverage.size:,} bytes: "
        f"{why}. Ask again to search the rest.)"
    )


def recall_answer(config: McpConfig, query: str, limit: int, session: str | None) -> str:
    """The ``recall`` tool's answer (text), or ToolError for bad input."""
    if not query.strip():
        raise ToolError("query is empty: give a few words, a file name, a command or recall:<uuid>")
    if len(query) > MAX_QUERY_CHARS:
        raise ToolError(
            f"query is {len(query):,} characters long, more than the {MAX_QUERY_CHARS:,} recall "
            "takes: give a few words, a file name, a command or recall:<uuid>"
        )
    if not 1 <= limit <= RECALL_MAX_LIMIT:
        raise ToolError(f"limit must be between 1 and {RECALL_MAX_LIMIT} (got {limit})")
    target = find_target(config, session)
    parsed = parse_query(query)

    def work(index: RecallIndex) -> Stored | SearchOutcome | None:
        if parsed.fetch_uuid is not None:
            return index.fetch(parsed.fetch_uuid)
        return index.search(parsed, limit)

    try:
        found, coverage = use_index(
            config.data_dir, target.transcript, work, deadline=Deadline(TOOL_DEADLINE_S)
        )
    except RecallIndexError as exc:
        raise ToolError(str(exc)) from exc
    note = _coverage_note(coverage)
    if parsed.fetch_uuid is not None:
        pointer = echo(f"recall:{parsed.fetch_uuid}", quote=False)
        if not isinstance(found, Stored):
            raise ToolError(
                f"no entry {pointer} in {target.describe()}; search with words instead{note}"
            )
        if parsed.fetch_from > len(found.text):
            raise ToolError(
                f"{pointer} has {len(found.text):,} characters (asked from {parsed.fetch_from:,})"
            )
        return render_fetch(found, parsed.fetch_from, header=f"From {target.describe()}:") + note
    assert isinstance(found, SearchOutcome)
    if not found.found:
        return (
            f"Nothing matches {echo(query)} in {target.describe()}. Try fewer or other words, "
            f"a file name, or part of a command.{note}"
        )
    header = f"{found.total} matching entries in {target.describe()}, best first:"
    return render_hits(found.found, parsed.terms, header=header, total=found.total) + note


def context_answer(config: McpConfig, session: str | None) -> str:
    """The ``context`` tool's answer (text), or ToolError."""
    # Token counting imports a good part of the core: paid by the first `context` call, not by
    # every start of the server (docs/recall.md#mcp-tools).
    from compactd.core.outlook import outlook

    target = find_target(config, session)
    try:
        with fdopen_regular(target.transcript) as fh:
            data = fh.read()
    except OSError as exc:
        raise ToolError(f"cannot read the transcript {target.transcript}: {exc.strerror}") from exc
    # Only whole lines: the agent may be writing the last one.
    records = port.records(port.complete(data))
    recorded = port.recorded_limits(data)  # an agent whose model names say no window (Codex)
    model = target.model or (recorded.model if recorded is not None else None)
    window = target.context_window or (recorded.context_window if recorded is not None else None)
    seen = outlook(records, os.environ, model=model, context_window=window)
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


def _answered(name: str, produce: Callable[[], str]) -> str:
    """A tool's answer, redacted; every failure a ToolError that says why, bounded (never the
    SDK's bare "Error executing tool")."""
    try:
        return redact(produce())
    except ToolError as exc:
        raise ToolError(bounded(str(exc))) from None
    except Exception as exc:  # noqa: BLE001 - the model gets a reason, the log the traceback
        log.exception("the %s tool failed", name)
        raise ToolError(f"{name} failed: {type(exc).__name__}: {upstream(str(exc))}") from None


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
        return _answered("recall", lambda: recall_answer(config, query, limit, session))

    @server.tool(name="context", description=CONTEXT_DESCRIPTION)
    def context(
        session: Annotated[
            str | None, Field(description="a session id or transcript path (default: this session)")
        ] = None,
    ) -> str:
        return _answered("context", lambda: context_answer(config, session))

    return server


# -- the stdio transport ----------------------------------------------------------------------
#
# The SDK's stdio transport drops a line it cannot validate without a word (a lone surrogate
# in a string, params that are not an object): the client waits for its own timeout. Lines go
# through ``_Frames`` first, which answers every malformed message that can be answered
# (JSON-RPC 2.0: a parse error or an invalid request with ``"id": null``, a request with its
# id) through the SDK's own writer, and passes the others on (docs/recall.md#mcp-tools).

# The longest line taken as one message (compactd's choice: tool calls are a few KB).
MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
_PARSE_ERROR: Final = -32700
_INVALID_REQUEST: Final = -32600


def _surrogate(value: object) -> str | None:
    """The first lone surrogate in the strings of ``value``, escaped, if any."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            for char in item:
                if "\ud800" <= char <= "\udfff":
                    return f"\\u{ord(char):04x}"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


_NO_REPLY: Final = object()


def _has_id(line: str) -> bool:
    import json

    try:
        message = json.loads(line)
    except ValueError:
        return False
    return isinstance(message, dict) and "id" in message


def _refusal(line: str, problem: Exception) -> tuple[object, int, str]:
    """The id to answer a line the SDK refused with (``_NO_REPLY``: a notification or a
    response, which get none), the JSON-RPC error code, and why, in words."""
    import json

    try:
        message = json.loads(line)
    except ValueError as exc:
        return None, _PARSE_ERROR, f"the message is not JSON ({exc})"
    if not isinstance(message, dict):
        return None, _INVALID_REQUEST, "the message is not a JSON-RPC object"
    msg_id = message.get("id")
    if "method" not in message or "id" not in message:
        return _NO_REPLY, _INVALID_REQUEST, ""
    if isinstance(msg_id, bool) or not isinstance(msg_id, str | int) or _surrogate(msg_id):
        msg_id = None
    lone = _surrogate(message)
    if lone is not None:
        why = f"the message holds a lone surrogate ({lone}) in a string: text must be valid Unicode"
    elif msg_id is None:
        why = "the message's id is neither a string nor an integer"
    else:
        first: list[dict[str, Any]] = getattr(problem, "errors", list)()
        detail = (
            f"{'.'.join(str(p) for p in first[0].get('loc', ()))}: {first[0].get('msg')}"
            if first
            else str(problem)
        )
        why = f"the message is not a valid JSON-RPC request ({upstream(detail, 300)})"
    return msg_id, _INVALID_REQUEST, why


class _Frames:
    """stdin as the lines the SDK's transport reads, the malformed ones answered here."""

    def __init__(self) -> None:
        import sys

        self._stdin = sys.stdin.buffer
        self.reply: Any = None  # the SDK's write stream, set once the transport is up

    async def _readline(self, limit: int) -> bytes:
        import anyio

        return await anyio.to_thread.run_sync(self._stdin.readline, limit, abandon_on_cancel=True)

    def __aiter__(self) -> _Frames:
        return self

    async def __anext__(self) -> str:
        import mcp_types as types

        while True:
            raw = await self._readline(MAX_FRAME_BYTES + 1)
            if not raw:
                raise StopAsyncIteration
            if len(raw) > MAX_FRAME_BYTES and not raw.endswith(b"\n"):
                while (rest := await self._readline(MAX_FRAME_BYTES)) and not rest.endswith(b"\n"):
                    pass
                await self._refuse(
                    None, _INVALID_REQUEST, f"a message longer than {MAX_FRAME_BYTES:,} bytes"
                )
                continue
            line: str = raw.decode("utf-8", "replace")
            if not line.strip():
                continue
            try:
                message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                if isinstance(message, types.JSONRPCNotification) and _has_id(line):
                    # An id the SDK cannot read makes a request look like a notification.
                    raise ValueError("the id is neither a string nor an integer")
            except Exception as exc:  # noqa: BLE001 - whatever the SDK refuses
                msg_id, code, why = _refusal(line, exc)
                if msg_id is _NO_REPLY:
                    log.warning("a malformed notification or response was dropped")
                else:
                    await self._refuse(msg_id, code, why)
                continue
            return line

    async def _refuse(self, msg_id: object, code: int, why: str) -> None:
        import mcp_types as types
        from mcp.shared.message import SessionMessage

        log.warning("answered a malformed message with an error: %s", why)
        if self.reply is None:
            return
        error = types.JSONRPCError(
            jsonrpc="2.0",
            id=msg_id if isinstance(msg_id, str | int) else None,
            error=types.ErrorData(code=code, message=why),
        )
        await self.reply.send(SessionMessage(error))


async def serve_stdio(server: MCPServer[object]) -> None:
    """``server`` on stdin and stdout, through ``_Frames``."""
    from mcp.server.stdio import stdio_server

    frames = _Frames()
    async with stdio_server(stdin=cast(Any, frames)) as (read, write):
        frames.reply = write
        # The SDK's low-level server: MCPServer runs it the same way in run_stdio_async.
        lowlevel = server._lowlevel_server
        await lowlevel.run(read, write, lowlevel.create_initialization_options())


def run(config: McpConfig) -> int:
    """Serve on stdio until the client closes stdin."""
    import anyio

    anyio.run(serve_stdio, build_server(config))
    return 0
