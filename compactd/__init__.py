"""compactd: a context-window manager daemon for AI coding agents."""

__version__ = "0.1.0"
