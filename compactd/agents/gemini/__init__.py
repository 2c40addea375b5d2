"""Gemini CLI, an agent through the port (docs/agents.md, docs/gemini.md).

The package holds what is Gemini CLI's: the reader of its chats (``format``), its tool names
(``vocabulary``), and its doors: where its chats are, its hooks and install and uninstall of its
settings (``services``) and ``compactd gemini`` (``cli``). ``AGENT`` is what the port
(``compactd.port``) knows of it; a door is imported when it is used.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from compactd.agents.gemini.vocabulary import VOCABULARY
from compactd.core.vocabulary import Vocabulary

if TYPE_CHECKING:
    from compactd.port import Agent, AgentFormat, FoundSession, Session

__all__ = ["AGENT"]


class Gemini:
    """Gemini CLI as the port sees it (``compactd.port.Agent``)."""

    name: Final = "Gemini CLI"
    command: Final = "gemini"
    help: Final = "hooks, install and uninstall for Gemini CLI"
    # A chat (0.39 and later), or an older version's whole-object chat (docs/gemini.md#chat-files).
    suffixes: Final = (".jsonl", ".json")
    # Gemini CLI starts its MCP servers in the project folder and names it to hooks only.
    project_env: Final = None

    @property
    def vocabulary(self) -> Vocabulary:
        return VOCABULARY

    def format(self) -> AgentFormat:
        from compactd.agents.gemini.format import GEMINI

        return GEMINI

    def main(self, argv: list[str]) -> int:
        from compactd.agents.gemini.cli import main

        return main(argv)

    def handlers(self) -> Mapping[str, Any]:
        return {}

    def session_named(self, cwd: str, name: str) -> FoundSession | None:
        from compactd.agents.gemini.services import sessions

        return sessions.named(cwd, name)

    def current_session(self, data_dir: Path, cwd: str) -> FoundSession | None:
        from compactd.agents.gemini.services import sessions

        return sessions.current(data_dir, cwd)

    def no_current_session(self, cwd: str) -> str:
        from compactd.agents.gemini.services import sessions

        return sessions.no_current(cwd)

    def mcp_companion(
        self, data_dir: Path, cwd: str, environ: Mapping[str, str]
    ) -> Callable[[], Awaitable[None]] | None:
        return None  # nothing beside the tools: Gemini CLI compresses by itself

    def sessions_in(self, folder: Path) -> list[Session]:
        from compactd.agents.gemini.services import sessions

        return sessions.sessions_in(folder)

    def sessions_of_folder(self, spellings: Sequence[str]) -> list[Session]:
        from compactd.agents.gemini.services import sessions

        return sessions.sessions_of_folder(spellings)

    def no_sessions_of_folder(self, folder: Path, command: str, *, named: str) -> list[str]:
        from compactd.agents.gemini.services import sessions

        return sessions.hint(folder, command, named=named)

    def session_home(self, cwd: str) -> Path | None:
        from compactd.agents.gemini.services import sessions

        return sessions.chats_of(cwd)


AGENT: Final[Agent] = Gemini()
