"""Where the ``compactd`` command starts: the console script and ``python -m compactd``.

An agent's command line (``compactd claude-code ...``, ``compactd codex ...``) is what other
programs run at every hook event, status line render and compaction, so it goes straight to the
agent's package (``compactd.port``) before the general command line (``compactd.cli.main``, with
argparse, logging and the summarizer flags) is imported: Claude Code waits for
``session-compact`` while it compacts (docs/claude-code.md#the-seam).
"""

from __future__ import annotations

import sys

from compactd import port

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    agent = port.agent_for(argv[0]) if argv else None
    if agent is not None:  # its own parser, in its package (compactd/agents/)
        return agent.main(argv[1:])
    from compactd.cli.main import main as general

    return general(argv)
