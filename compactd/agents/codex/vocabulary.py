"""Codex CLI's tools by what their calls do, as its reader writes them (docs/codex.md#vocabulary).

Codex runs commands through ``exec_command`` (recent), ``shell`` / ``shell_command`` (older) and
``local_shell_call`` items (the reader names them ``local_shell``), each read with its command in
a ``command`` string. It changes files with ``apply_patch``: its own tool, an argv, or a heredoc
in a command; the reader writes one ``apply_patch`` use per file, naming it in ``file_path``.
Codex has no tool that reads a file: a command that only shows files (``cat``, ``sed -n``...)
is a command, and the reader adds a ``shell_read`` use for each file it showed, which the
ledger counts as read (a view: the read-file state is not told, since the output may be part of
the file). MCP tools keep their namespaced name (``mcp__<server>__<tool>``).
"""

from __future__ import annotations

from typing import Final

from compactd.core.vocabulary import Vocabulary

__all__ = ["VOCABULARY"]

VOCABULARY: Final = Vocabulary(
    views=frozenset({"shell_read"}),
    writes=frozenset({"apply_patch"}),
    runs=frozenset({"exec_command", "shell", "shell_command", "local_shell", "container.exec"}),
    agents=frozenset({"spawn_agent"}),
    # A command's output and a patch's confirmation can be called again: microcompact may clear
    # them (docs/microcompact.md#clearable-tools).
    clearable=frozenset(
        {"exec_command", "shell", "shell_command", "local_shell", "container.exec", "apply_patch"}
    ),
    file_args=("file_path",),
)
