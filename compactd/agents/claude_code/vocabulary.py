"""Claude Code's tools by what their calls do: the names its transcripts give them.

The core reads tool calls through the union of the agents' vocabularies
(``compactd.core.vocabulary``); these are Claude Code's entries in it (docs/rehydration.md#tool-names,
docs/microcompact.md#clearable-tools). Imports only the vocabulary type: the hooks load it at
start.
"""

from __future__ import annotations

from typing import Final

from compactd.core.vocabulary import Vocabulary

__all__ = ["VOCABULARY"]

VOCABULARY: Final = Vocabulary(
    # Read-file state is inferred from the calls that name a file the agent has seen or
    # produced (docs/rehydration.md#tool-names).
    reads=frozenset({"Read"}),
    views=frozenset({"NotebookRead"}),
    writes=frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"}),
    rewrites=frozenset({"Write"}),
    runs=frozenset({"Bash", "PowerShell"}),
    # A call without a result yet is a background agent still running, re-announced after
    # compaction; "Task" is the older name (docs/rehydration.md#tool-names).
    agents=frozenset({"Task", "Agent"}),
    skills=frozenset({"Skill"}),
    todos=frozenset({"TodoWrite"}),
    # docs/rehydration.md#todo-list-and-plan (the plan-mode reminder).
    plan_enter=frozenset({"EnterPlanMode"}),
    plan_exit=frozenset({"ExitPlanMode"}),
    # Reading a file, running a shell command, grep, glob, fetching or searching the web, and
    # the confirmations of edits and writes (MultiEdit is an edit). Everything else -- questions
    # to the user, task and todo management, notebooks, sub-agents -- is never cleared
    # (docs/microcompact.md#clearable-tools).
    clearable=frozenset(
        {"Read", "Bash", "Grep", "Glob", "WebFetch", "WebSearch", "Edit", "Write", "MultiEdit"}
    ),
    # When the latest of these for a file is cleared, the file leaves the read-file state; edits
    # and writes record the file too, so a later edit keeps it (docs/microcompact.md#read-file-state).
    file_state=frozenset({"Read", "Edit", "Write", "MultiEdit"}),
    # File tools name their file in ``file_path`` (Read, Edit, MultiEdit, Write) or
    # ``notebook_path`` (NotebookEdit, NotebookRead); searches name a folder or file in ``path``
    # (Grep, Glob, LS).
    file_args=("file_path", "notebook_path"),
    path_args=("path", "filePath"),
    # What the Read tool returns instead of content when the file has not changed since the
    # agent last read it: such reads carry nothing worth restoring
    # (docs/rehydration.md#recent-files, "file unchanged" stubs).
    unchanged_stubs=("File unchanged since last read",),
)
