"""Claude Code's transcript line format: entries, records and the history of a session."""
