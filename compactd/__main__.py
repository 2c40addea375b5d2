"""``python -m compactd`` is the same as the ``compactd`` command."""

from __future__ import annotations

import sys

from compactd import port

agent = port.agent_for(sys.argv[1]) if len(sys.argv) > 1 else None
if agent is not None:
    # What an agent runs at every hook event and status line render (``compactd claude-code``):
    # straight to its module, without importing the rest of the command line
    # (docs/claude-code.md#hooks).
    sys.exit(agent.main(sys.argv[2:]))

from compactd.cli.main import main  # noqa: E402 (only when no agent's command line runs)

sys.exit(main())
