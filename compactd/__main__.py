"""``python -m compactd`` is the same as the ``compactd`` command."""

from __future__ import annotations

import sys

if sys.argv[1:2] == ["claude-code"]:
    # What Claude Code runs at every hook event and status line render: straight to its
    # module, without importing the rest of the command line (docs/claude-code.md#hooks).
    from compactd.agents.claude_code.cli import main as claude_code

    sys.exit(claude_code(sys.argv[2:]))

from compactd.cli.main import main

sys.exit(main())
