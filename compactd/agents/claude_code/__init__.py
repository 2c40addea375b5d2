"""Claude Code, the first agent through the port (docs/agents.md, docs/claude-code.md).

The package holds what is Claude Code's: its reader and the lines of a session written for
``claude --resume`` (``format``), its tool names (``vocabulary``), and its doors: the hooks, the
status line and the state they share, install and uninstall (``services``), the
``claudeCode/compact`` export (``engine``, ``handlers``) and ``compactd claude-code`` (``cli``);
and its plugin (``plugin/``: the hooks, the MCP server and the ``session.compact`` module), whose
summaries ``preparer`` prepares in ``compactd mcp`` (docs/claude-code.md#the-plugin).
``AGENT`` is what the port (``compactd.port``) knows of it; a door is imported when it is used.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
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
        request = None
        if argv == ["session-compact"]:
            # The plugin's call, at every compaction: a warm compactd mcp answers it, if one
            # runs beside the session, before this process imports the rest of compactd.
            import os
            import sys

            from compactd.agents.claude_code.services.warm import plugin_call
            from compactd.port import project_dir

            request, reply = plugin_call(project_dir(os.environ) or os.getcwd())
            if reply is not None:
                sys.stdout.buffer.write(reply)
                sys.stdout.flush()
                return 0
        from compactd.agents.claude_code.cli import main

        return main(argv, request)

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

    def mcp_companion(
        self, data_dir: Path, cwd: str, environ: Mapping[str, str]
    ) -> Callable[[], Awaitable[None]] | None:
        """The plugin's summaries prepared in the background, when ``COMPACTD_SUMMARIZER``
        chooses a model (docs/claude-code.md#prepared-in-the-background)."""
        from compactd.agents.claude_code.services.choice import summarizer_choice

        if not summarizer_choice(environ).prepares:
            return None

        async def prepare() -> None:
            import anyio

            from compactd.agents.claude_code.preparer import prepare
            from compactd.agents.claude_code.services.warm import serve

            # Beside the preparation, the plugin's call answered warm (docs/claude-code.md#the-seam).
            async with anyio.create_task_group() as tg:
                tg.start_soon(serve, data_dir, cwd, environ)
                await prepare(data_dir, cwd, environ)
                tg.cancel_scope.cancel()

        return prepare

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
