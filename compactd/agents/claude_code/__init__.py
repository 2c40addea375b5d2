"""Claude Code, the first agent through the port (docs/agents.md, docs/claude-code.md).

The package holds what is Claude Code's: its reader and the lines of a session written for
``claude --resume`` (``format``), its tool names (``vocabulary``), and its doors: the hooks, the
status line and the state they share, install and uninstall (``services``), the
``claudeCode/compact`` export (``engine``, ``handlers``) and ``compactd claude-code`` (``cli``).
``AGENT`` is what the port (``compactd.port``) knows of it; a door is imported when it is used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from compactd.agents.claude_code.vocabulary import VOCABULARY
from compactd.core.vocabulary import Vocabulary

if TYPE_CHECKING:
    from compactd.port import Agent, AgentFormat, FoundSession, Session

__all__ = ["AGENT"]


class ClaudeCode:
    """Claude Code as the port sees it (``compactd.port.Agent``)."""

    name: Final = "Claude Code"
    command: Final = "claude-code"
    help: Final = "hooks, status line and install for Claude Code"
    suffixes: Final = (".jsonl",)
    # Claude Code names the project in it to the MCP servers it starts (docs/recall.md).
    project_env: Final = "CLAUDE_PROJECT_DIR"

    @property
    def vocabulary(self) -> Vocabulary:
        return VOCABULARY

    def format(self) -> AgentFormat:
        from compactd.agents.claude_code.format import CLAUDE_CODE

        return CLAUDE_CODE

    def main(self, argv: list[str]) -> int:
        from compactd.agents.claude_code.cli import main

        return main(argv)

    def handlers(self) -> Mapping[str, Any]:
        from compactd.agents.claude_code.handlers import HANDLERS

        return HANDLERS

    def session_named(self, cwd: str, name: str) -> FoundSession | None:
        from compactd.agents.claude_code.services.state import project_dir
        from compactd.port import FoundSession

        path = project_dir(cwd) / f"{name}.jsonl"
        if not path.is_file():
            return None
        return FoundSession(path, name, f"Claude Code session in {path.parent}")

    def current_session(self, data_dir: Path, cwd: str) -> FoundSession | None:
        from compactd.agents.claude_code.services.state import find_current
        from compactd.port import FoundSession

        current = find_current(data_dir, cwd)
        if current is None:
            return None
        how = (
            "the current Claude Code session, as compactd's hook recorded it"
            if current.found_by == "hook"
            else "the newest Claude Code transcript of this folder (no hook has recorded one)"
        )
        return FoundSession(Path(current.transcript_path), current.session_id, how)

    def no_current_session(self, cwd: str) -> str:
        from compactd.agents.claude_code.services.state import project_dir

        return f"no compactd hook has recorded one and {project_dir(cwd)} has no transcript"

    def sessions_in(self, folder: Path) -> list[Session]:
        from compactd.agents.claude_code.services.sessions import sessions_in

        return sessions_in(folder)

    def sessions_of_folder(self, spellings: Sequence[str]) -> list[Session]:
        from compactd.agents.claude_code.services.sessions import sessions_of_folder

        return sessions_of_folder(spellings)

    def no_sessions_of_folder(self, folder: Path, command: str, *, named: str) -> list[str]:
        from compactd.agents.claude_code.services.sessions import hint

        return hint(folder, command, named=named)

    def session_home(self, cwd: str) -> Path | None:
        from compactd.agents.claude_code.services.state import project_dir

        return project_dir(cwd)


AGENT: Final[Agent] = ClaudeCode()
