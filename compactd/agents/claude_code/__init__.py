"""Claude Code, the first agent through the port (docs/agents.md, docs/claude-code.md)."""
