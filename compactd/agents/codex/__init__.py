"""Codex CLI, an agent through the port (docs/agents.md, docs/codex.md).

The package holds what is Codex's: the reader of its rollouts (``format``), its tool names
(``vocabulary``), and its doors: where its sessions are, its hooks and the state they share,
install and uninstall of its config (``services``) and ``compactd codex`` (``cli``). ``AGENT``
is what the port (``compactd.port``) knows of it; a door is imported when it is used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from compactd.agents.codex.vocabulary import VOCABULARY
from compactd.core.vocabulary import Vocabulary

if TYPE_CHECKING:
    from compactd.port import Agent, AgentFormat, FoundSession, Session

__all__ = ["AGENT"]


class Codex:
    """Codex CLI as the port sees it (``compactd.port.Agent``)."""

    name: Final = "Codex"
    command: Final = "codex"
    help: Final = "hooks, install and uninstall for Codex CLI"
    # A rollout, or one Codex compressed after a week idle (docs/codex.md#rollouts).
    suffixes: Final = (".jsonl", ".jsonl.zst")
    # Codex starts its MCP servers in the project folder; it names it in no variable.
    project_env: Final = None

    @property
    def vocabulary(self) -> Vocabulary:
        return VOCABULARY

    def format(self) -> AgentFormat:
        from compactd.agents.codex.format import CODEX

        return CODEX

    def main(self, argv: list[str]) -> int:
        from compactd.agents.codex.cli import main

        return main(argv)

    def handlers(self) -> Mapping[str, Any]:
        return {}

    def session_named(self, cwd: str, name: str) -> FoundSession | None:
        from compactd.agents.codex.services import sessions

        return sessions.named(name)

    def current_session(self, data_dir: Path, cwd: str) -> FoundSession | None:
        from compactd.agents.codex.services import sessions

        return sessions.current(data_dir, cwd)

    def no_current_session(self, cwd: str) -> str:
        from compactd.agents.codex.services import sessions

        return sessions.no_current(cwd)

    def sessions_in(self, folder: Path) -> list[Session]:
        from compactd.agents.codex.services import sessions

        return sessions.sessions_in(folder)

    def sessions_of_folder(self, spellings: Sequence[str]) -> list[Session]:
        from compactd.agents.codex.services import sessions

        return sessions.sessions_of_folder(spellings)

    def no_sessions_of_folder(self, folder: Path, command: str, *, named: str) -> list[str]:
        from compactd.agents.codex.services import sessions

        return sessions.hint(folder, command, named=named)

    def session_home(self, cwd: str) -> Path | None:
        return None  # Codex files sessions by date, each naming its working folder inside


AGENT: Final[Agent] = Codex()
