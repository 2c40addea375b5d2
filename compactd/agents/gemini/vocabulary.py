"""Gemini CLI's tools by what their calls do, as its chats name them (docs/gemini.md#vocabulary).

Gemini CLI 0.61.0 reads a file with ``read_file`` (``file_path``; ``absolute_path`` in early
versions, which the reader writes as ``file_path``), writes one whole with ``write_file``
(``file_path``, ``content``), edits one with ``replace`` (``file_path``, ``old_string``,
``new_string``), and runs a command with ``run_shell_command`` (``command``). Searches and
listings name a folder in ``dir_path``. Its chats give paths as the model wrote them, often
relative to the project: the reader makes them absolute against the project folder the chat's
session context names. MCP tools keep their name (``mcp_<server>_<tool>``).
"""

from __future__ import annotations

from typing import Final

from compactd.core.vocabulary import Vocabulary

__all__ = ["VOCABULARY"]

VOCABULARY: Final = Vocabulary(
    reads=frozenset({"read_file"}),
    writes=frozenset({"write_file", "replace"}),
    rewrites=frozenset({"write_file"}),
    runs=frozenset({"run_shell_command"}),
    agents=frozenset({"invoke_agent"}),
    skills=frozenset({"activate_skill"}),
    plan_enter=frozenset({"enter_plan_mode"}),
    plan_exit=frozenset({"exit_plan_mode"}),
    # What calling again brings back: reads, commands, searches, fetches, and the confirmations
    # of edits and writes (docs/microcompact.md#clearable-tools).
    clearable=frozenset(
        {
            "read_file",
            "read_many_files",
            "run_shell_command",
            "grep_search",
            "glob",
            "list_directory",
            "web_fetch",
            "google_web_search",
            "write_file",
            "replace",
        }
    ),
    file_state=frozenset({"read_file", "write_file", "replace"}),
    file_args=("file_path",),
    path_args=("dir_path",),
)
