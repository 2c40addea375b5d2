"""compactd: a context-window manager daemon for AI coding agents."""

__version__ = "0.1.0"

# The agents compactd works inside, and their tool vocabulary installed into the core before any
# of it runs (docs/agents.md).
from compactd import port as port  # noqa: E402
