"""What a tool call does, told by the names an agent gives its tools (docs/agents.md#vocabulary).

The core reads tool calls to keep the read-file state, the survival ledger, rehydration and
microcompact: it needs to know which calls read a file, which change one, which run a command,
and which arguments name the file. Those names are each agent's own (Claude Code's ``Read``,
``Edit``, ``Bash``...), so they live in the agent's package (``compactd/agents/<agent>/
vocabulary.py``) and the core never spells one. It reads ``vocabulary()``: the union of the
vocabularies of every agent compactd knows, which the port installs (``compactd/port.py``) when
the ``compactd`` package is imported, before any of the core runs. The names of different agents
do not collide, and a session may hold records of any of them (an import is read by its own
agent's reader, into compactd's records), so the union is what every session is read with.

Imports nothing of compactd: the short processes (hooks, the status line) load it at start.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["Vocabulary", "install", "vocabulary"]


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """One agent's tool names by what their calls do (or the union of several agents')."""

    # Tools whose call reads the one file it names into the agent's read-file state.
    reads: frozenset[str] = frozenset()
    # Other tools that show the model a file's content (the survival ledger counts them as reads).
    views: frozenset[str] = frozenset()
    # Tools whose call changes the one file it names.
    writes: frozenset[str] = frozenset()
    # Of ``writes``, the tools that write the whole file from a ``content`` argument.
    rewrites: frozenset[str] = frozenset()
    # Tools that run the shell command given in a ``command`` argument.
    runs: frozenset[str] = frozenset()
    # Tools that start a sub-agent (a call without a result yet is one still running).
    agents: frozenset[str] = frozenset()
    # The tools that load a skill, keep the todo list, and enter and leave plan mode.
    skills: frozenset[str] = frozenset()
    todos: frozenset[str] = frozenset()
    plan_enter: frozenset[str] = frozenset()
    plan_exit: frozenset[str] = frozenset()
    # Microcompact: the tools whose results may be cleared (calling again brings them back), and
    # those whose cleared result takes its file out of the read-file state.
    clearable: frozenset[str] = frozenset()
    file_state: frozenset[str] = frozenset()
    # The arguments that name the one file a file tool works on, in the order they are tried;
    # then the other arguments that name a path (a search's folder).
    file_args: tuple[str, ...] = ()
    path_args: tuple[str, ...] = ()
    # How a read tool's result starts when it holds no content because the file had not changed
    # since the agent last read it.
    unchanged_stubs: tuple[str, ...] = ()

    def __or__(self, other: Vocabulary) -> Vocabulary:
        """Both vocabularies: sets joined, ordered names kept in order (this one's first)."""
        merged: dict[str, Any] = {}
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, frozenset):
                merged[f.name] = mine | theirs
            else:
                merged[f.name] = (*mine, *(name for name in theirs if name not in mine))
        return Vocabulary(**merged)


_in_use: Vocabulary | None = None


def install(vocabularies: Iterable[Vocabulary]) -> None:
    """Read tool calls with the union of ``vocabularies`` from now on (the port calls it)."""
    global _in_use
    union = Vocabulary()
    for one in vocabularies:
        union = union | one
    _in_use = union


def vocabulary() -> Vocabulary:
    """The tool names of every agent compactd knows (see the module docstring)."""
    if _in_use is None:
        raise RuntimeError("no agent vocabulary installed: compactd.port installs it on import")
    return _in_use
