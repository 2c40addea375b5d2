"""The port agents plug into: what an agent's package gives compactd, the list of agents, and
the one way compactd reads an agent's files (docs/agents.md).

compactd keeps a session as its own transcript lines (``compactd/transcript``, the shape Claude
Code writes). Each agent it works inside has a package under ``compactd/agents/`` with its
reader (from the agent's files to compactd's records), its tool vocabulary and its doors (hooks,
status line, install, its protocol methods), and gives compactd one ``Agent`` (its ``AGENT``).
Every module that reads an agent's session file goes through the functions here, and the
format is told from the file's content, never from its name: the first agent's format that
claims the file's first bytes reads it; a file none claims is read as compactd's own lines
(Claude Code's reader, the ``native`` one), which also says what it could not read.

Agents are found by their package name in ``INSTALLED`` and imported by name, so that nothing
here (and nothing that reads through here) imports an agent: the core knows no agent, and no
agent knows another (import-linter checks both, docs/agents.md#layers). The ``compactd``
package imports this module, which installs the agents' tool vocabulary into the core before
any of the core runs. Importing it stays cheap (the hooks and ``compactd --version`` start with
it): what reads transcripts is imported in the functions that read.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from compactd.core.vocabulary import Vocabulary, install

if TYPE_CHECKING:
    from compactd.transcript.model import ParseReport, Record

__all__ = [
    "AGENTS",
    "INSTALLED",
    "Agent",
    "AgentFormat",
    "FoundSession",
    "Reading",
    "RecordStream",
    "RecordedLimits",
    "Session",
    "agent_for",
    "complete",
    "current_session",
    "detect",
    "latest_model",
    "mcp_companions",
    "format_of",
    "formats",
    "handlers",
    "no_current_session",
    "no_sessions_of_folder",
    "project_dir",
    "names_a_session",
    "read_lines",
    "recorded_limits",
    "records",
    "session_named",
    "session_suffixes",
    "sessions_in",
    "sessions_of",
    "sessions_of_folder",
    "transcript",
]

# The agents compactd knows, by package under ``compactd/agents/``: adding an agent is its
# package and its name here (docs/agents.md#adding-an-agent).
INSTALLED: Final = ("claude_code", "codex", "gemini")

# How much of a file's start a format is told from (a few complete lines of any agent's): at
# most its first lines, within the first bytes.
_HEAD_BYTES: Final = 64 * 1024
_HEAD_LINES: Final = 8


class RecordStream(Protocol):
    """One file read chunk after chunk: what a reader learnt from earlier chunks (a turn's
    model, how usage is written, the messages an old compaction line leaves out) is kept for
    the next ones (docs/agents.md#reading)."""

    def feed(self, data: bytes, report: ParseReport | None = None) -> list[Record]:
        """The records of ``data``: the file's next whole lines (or the whole file)."""
        ...


@dataclass(frozen=True, slots=True)
class RecordedLimits:
    """What an agent's file says of the model it runs, when the model's name alone does not
    tell compactd its window (docs/agents.md#reading): the model, its window, and the size at
    which the agent compacts."""

    model: str | None = None
    context_window: int | None = None
    auto_compact_tokens: int | None = None


class AgentFormat(Protocol):
    """How one agent's session files are read into compactd's records."""

    @property
    def name(self) -> str: ...

    @property
    def native(self) -> bool:
        """Whether the agent's lines are compactd's own (read as they are; one format is)."""
        ...

    @property
    def compaction_marks(self) -> re.Pattern[bytes]:
        """Matches, in a raw line, every line that belongs to a compaction."""
        ...

    @property
    def boundary_mark(self) -> re.Pattern[bytes]:
        """Matches the first line of a compaction (where the span it replaced ends)."""
        ...

    def claims(self, head: bytes) -> bool:
        """Whether a file that starts with ``head`` is in this format (``head``: its first
        lines, eight at most, within its first 64 KB)."""
        ...

    def records(self, lines: Iterable[bytes], report: ParseReport | None = None) -> list[Record]:
        """The lines as compactd's records (corrupt ones skipped, and counted in ``report``)."""
        ...

    def recognizes(self, records: Iterable[Record]) -> bool:
        """Whether these records came from lines in this format."""
        ...

    def transcript(self, data: bytes, report: ParseReport | None = None) -> bytes:
        """A whole file's bytes as compactd's transcript lines (the file itself when native);
        lines it cannot read are counted in ``report`` (a native file's, by the store)."""
        ...

    def stream(self) -> RecordStream:
        """A reader that keeps its state across the chunks of one file."""
        ...

    def complete(self, data: bytes) -> int:
        """How many bytes of a file's start can be read now: up to its last newline (a last
        line without one is being written), or the whole of a file written at once."""
        ...

    def recorded_limits(self, data: bytes) -> tuple[str | None, int | None, int | None] | None:
        """The model, window and compaction size (``RecordedLimits``) a whole file records,
        when its model names are not Claude's (None: the model its responses name is enough)."""
        ...


@dataclass(frozen=True, slots=True)
class Session:
    """A session file an agent keeps, found for a person (``compactd status`` with a folder or
    nothing): when it was last written, and the folder a report says it was found in."""

    mtime: float
    path: Path
    folder: Path
    agent: str


@dataclass(frozen=True, slots=True)
class FoundSession:
    """An agent's session file that a front end (``compactd mcp``) was asked about."""

    transcript: Path
    session_id: str
    how: str  # how it was found, said to the model in every answer


class Agent(Protocol):
    """What an agent's package gives compactd: ``AGENT`` in ``compactd/agents/<name>/``.

    Its doors are imported only when they are used (a hook must not load the daemon).
    """

    @property
    def name(self) -> str:
        """The agent's name for people ("Claude Code")."""
        ...

    @property
    def command(self) -> str:
        """``compactd <command> ...`` runs the agent's own command line (``main``)."""
        ...

    @property
    def help(self) -> str:
        """One line for ``compactd --help``."""
        ...

    @property
    def vocabulary(self) -> Vocabulary:
        """Its tools by what their calls do (``core.vocabulary``)."""
        ...

    @property
    def suffixes(self) -> tuple[str, ...]:
        """How the names of its session files end (``.jsonl``): a path a person gives
        ``compactd mcp`` is taken for a session file by it."""
        ...

    @property
    def project_env(self) -> str | None:
        """The environment variable that names the project folder to the processes the agent
        starts (its MCP server), if it sets one."""
        ...

    def format(self) -> AgentFormat:
        """The reader of its session files."""
        ...

    def main(self, argv: list[str]) -> int:
        """Its command line (hooks, status line, install...): the exit status."""
        ...

    def handlers(self) -> Mapping[str, Any]:
        """The daemon's protocol methods that are the agent's own (``handlers.Handler`` each)."""
        ...

    def session_named(self, cwd: str, name: str) -> FoundSession | None:
        """Its session called ``name`` (a session id) for the project folder ``cwd``."""
        ...

    def current_session(self, data_dir: Path, cwd: str) -> FoundSession | None:
        """The session the agent is running in ``cwd``, as far as compactd can tell."""
        ...

    def mcp_companion(
        self, data_dir: Path, cwd: str, environ: Mapping[str, str]
    ) -> Callable[[], Awaitable[None]] | None:
        """Work ``compactd mcp`` does beside its tools for as long as the agent's session lasts
        (the process lives that long; a hook never starts one), or None; imported when it runs
        (docs/agents.md)."""
        ...

    def no_current_session(self, cwd: str) -> str:
        """Why ``current_session`` found none, for a person."""
        ...

    def sessions_in(self, folder: Path) -> list[Session]:
        """Its session files in a folder a person named (newest first; none when the folder
        is not one it keeps sessions in)."""
        ...

    def sessions_of_folder(self, spellings: Sequence[str]) -> list[Session]:
        """Its sessions of the working folder spelled ``spellings`` (as typed, as resolved),
        newest first."""
        ...

    def no_sessions_of_folder(self, folder: Path, command: str, *, named: str) -> list[str]:
        """Where it keeps a working folder's sessions and how to name one, for a person who
        found none (``named``: words that open its first line, or "")."""
        ...

    def session_home(self, cwd: str) -> Path | None:
        """The folder it keeps ``cwd``'s sessions in, when it keeps them by working folder."""
        ...


def _load(name: str) -> Agent:
    module = importlib.import_module(f"compactd.agents.{name}")
    return cast(Agent, module.AGENT)


AGENTS: Final[tuple[Agent, ...]] = tuple(_load(name) for name in INSTALLED)
install(agent.vocabulary for agent in AGENTS)


def agent_for(command: str) -> Agent | None:
    """The agent whose command line is ``compactd <command>``."""
    return next((a for a in AGENTS if a.command == command), None)


def handlers() -> dict[str, Any]:
    """Every agent's protocol methods (the daemon adds them to its own)."""
    out: dict[str, Any] = {}
    for agent in AGENTS:
        out.update(agent.handlers())
    return out


def project_dir(environ: Mapping[str, str]) -> str | None:
    """The project folder an agent named to the process it started, if one did."""
    for agent in AGENTS:
        name = agent.project_env
        if name and environ.get(name):
            return environ[name]
    return None


# -- reading an agent's files ---------------------------------------------------------------------


@functools.cache
def formats() -> tuple[AgentFormat, ...]:
    """Every agent's reader, in ``INSTALLED`` order."""
    return tuple(agent.format() for agent in AGENTS)


def _native() -> AgentFormat:
    return next(f for f in formats() if f.native)


def detect(data: bytes) -> AgentFormat:
    """The format of a session file, from its content (see the module docstring)."""
    others = [f for f in formats() if not f.native]
    if others:
        head = data[: _head_end(data)]
        for fmt in others:
            if fmt.claims(head):
                return fmt
    return _native()


def _head_end(data: bytes) -> int:
    """Where the head a format is told from ends: after the ``_HEAD_LINES``-th line, or at
    ``_HEAD_BYTES`` (a copy of the head is all that is made of a large file)."""
    end = 0
    for _ in range(_HEAD_LINES):
        found = data.find(b"\n", end, _HEAD_BYTES)
        if found < 0:
            return _HEAD_BYTES
        end = found + 1
    return end


def transcript(data: bytes, report: ParseReport | None = None) -> bytes:
    """A session file's bytes as compactd's transcript lines (what an import stores); the
    agent's lines that could not be read are counted in ``report`` (compactd's own lines are
    counted when the store reads them)."""
    return detect(data).transcript(data, report)


def records(data: bytes, report: ParseReport | None = None) -> list[Record]:
    """A session file's bytes (or what was appended to it) as compactd's records.

    Lines that cannot be read are skipped and counted in ``report``.
    """
    return detect(data).stream().feed(data, report)


def complete(data: bytes) -> bytes:
    """The part of a session file's bytes that can be read now (``AgentFormat.complete``)."""
    return data[: detect(data).complete(data)]


class Reading:
    """One session file read chunk after chunk (a followed file, a recall index): the format
    is told from the first chunk, and its reader keeps its state for the next ones."""

    def __init__(self) -> None:
        self._stream: RecordStream | None = None

    def records(self, data: bytes, report: ParseReport | None = None) -> list[Record]:
        """The records of the file's next whole lines."""
        if self._stream is None:
            if not data.strip():
                return []
            self._stream = detect(data).stream()
        return self._stream.feed(data, report)

    def warm(self, data: bytes) -> None:
        """Read the file's start already taken in elsewhere (an import), for the state its
        reader keeps; of compactd's own lines only the last is read again (the line after it
        may be a compaction's summary, known by the boundary line before it)."""
        if not data.strip():
            return
        fmt = detect(data)
        self._stream = fmt.stream()
        if fmt.native:
            data = data[data.rstrip(b"\n").rfind(b"\n") + 1 :]
        self._stream.feed(data)

    def reset(self) -> None:
        """The file is read again from its start."""
        self._stream = None


def read_lines(lines: Sequence[bytes], report: ParseReport | None = None) -> list[Record]:
    """Like ``records``, for a file already cut into lines."""
    return detect(b"\n".join(lines[:64])).records(lines, report)


def recorded_limits(data: bytes, fmt: AgentFormat | None = None) -> RecordedLimits | None:
    """The model, window and compaction size a session file records (``AgentFormat``);
    ``fmt``: its format, when already told."""
    found = (fmt or detect(data)).recorded_limits(data)
    return RecordedLimits(*found) if found is not None else None


def latest_model(lines: bytes) -> str | None:
    """The model the latest response among compactd's own lines names (a file read by its
    format first, ``transcript``; docs/thresholds.md#model-limits)."""
    from compactd.core.tokens import recorded_model as latest
    from compactd.transcript.model import newest_first

    return latest(newest_first(lines, containing=b'"assistant"'))


def format_of(lines: Sequence[bytes]) -> tuple[AgentFormat, list[Record]] | None:
    """The format that recognizes ``lines`` (complete lines from a running agent's file, read
    from its end) and their records, or None when no reader knows them."""
    for fmt in formats():
        found = fmt.records(lines)
        if fmt.recognizes(found):
            return fmt, found
    return None


# -- an agent's sessions, for the front ends it starts ---------------------------------------------


def session_named(cwd: str, name: str) -> FoundSession | None:
    """The session some agent keeps for ``cwd`` under the id ``name``."""
    return next((f for a in AGENTS if (f := a.session_named(cwd, name)) is not None), None)


def current_session(data_dir: Path, cwd: str) -> FoundSession | None:
    """The session an agent is running in ``cwd``: of the agents that know one, the one whose
    file was written last (two agents may have run in the same folder)."""
    found = [f for a in AGENTS if (f := a.current_session(data_dir, cwd)) is not None]
    if len(found) <= 1:
        return found[0] if found else None

    def written(f: FoundSession) -> float:
        try:
            return f.transcript.stat().st_mtime
        except OSError:
            return 0.0

    return max(found, key=written)


def names_a_session(path: Path) -> bool:
    """Whether ``path`` is named as some agent names its session files."""
    name = "".join(path.suffixes)
    return any(name.endswith(suffix) for agent in AGENTS for suffix in agent.suffixes)


def session_suffixes() -> str:
    """The endings of the agents' session files, for a message: ".jsonl"."""
    return " or ".join(dict.fromkeys(s for agent in AGENTS for s in agent.suffixes))


def sessions_of(cwd: str) -> str:
    """What ``session_named`` looked for, for a message: "a Claude Code session of <cwd>"."""
    return ", not ".join(f"a {agent.name} session of {cwd}" for agent in AGENTS)


def sessions_in(folder: Path) -> list[Session]:
    """Every agent's session files in a folder a person named, newest first.

    Each file once. Where several agents list files (to Claude Code, a Gemini CLI chats folder
    is a folder of ``.jsonl`` files too), a file is kept for the agent whose content it holds,
    and left out when that agent did not list it (a Gemini CLI stub holds no session)."""
    listed: dict[Path, list[Session]] = {}
    for agent in AGENTS:
        for found in agent.sessions_in(folder):
            listed.setdefault(found.path, []).append(found)
    if len({s.agent for sessions in listed.values() for s in sessions}) > 1:
        listed = {p: owned for p, sessions in listed.items() if (owned := _owned(p, sessions))}
    return sorted((s[0] for s in listed.values()), key=lambda s: s.mtime, reverse=True)


def _owned(path: Path, sessions: list[Session]) -> list[Session]:
    """Of the agents that list ``path``, the one whose format its content is in (none: the
    agent it belongs to did not take it for a session)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD_BYTES)
    except OSError:
        return []
    name = detect(head).name
    owner = next((a.name for a in AGENTS if a.format().name == name), None)
    return [s for s in sessions if s.agent == owner]


def sessions_of_folder(spellings: Sequence[str]) -> list[Session]:
    """Every agent's sessions of a working folder, newest first."""
    return sorted(
        (s for agent in AGENTS for s in agent.sessions_of_folder(spellings)),
        key=lambda s: s.mtime,
        reverse=True,
    )


def no_sessions_of_folder(folder: Path, command: str, *, named: str = "") -> list[str]:
    """Where each agent keeps a working folder's sessions, for a person who found none
    (``named`` opens the first line)."""
    lines: list[str] = []
    for agent in AGENTS:
        lines += agent.no_sessions_of_folder(folder, command, named="" if lines else named)
    return lines


def no_current_session(cwd: str) -> str:
    """Why no agent's session was found for ``cwd``, for a message."""
    names = " or ".join(agent.name for agent in AGENTS)
    reasons = "; ".join(agent.no_current_session(cwd) for agent in AGENTS)
    return f"no {names} session found for {cwd}: {reasons}"


def mcp_companions(
    data_dir: Path, cwd: str, environ: Mapping[str, str]
) -> list[Callable[[], Awaitable[None]]]:
    """What the agents have ``compactd mcp`` do beside its tools (``Agent.mcp_companion``)."""
    return [c for a in AGENTS if (c := a.mcp_companion(data_dir, cwd, environ)) is not None]
