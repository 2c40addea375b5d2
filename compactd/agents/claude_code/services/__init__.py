"""Claude Code's doors that do I/O: its hook events, the status line, its settings files and the
state the short processes share (docs/claude-code.md)."""
