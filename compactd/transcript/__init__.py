"""compactd's transcript line format (the shape Claude Code writes): entries, records and the history
of a session."""
