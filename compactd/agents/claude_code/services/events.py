"""A Claude Code hook event as compactd reads it, and the answer a hook prints: every agent's
(``services/hook_events``), with Claude Code's limit on the context a hook may give.

Shared by the hook front ends (``hooks`` dispatches; ``handback`` answers the
events that hand back what a summary dropped). Imports only msgspec: the hooks start often.
"""

from __future__ import annotations

from typing import Final

from compactd.services.hook_events import (
    ENV_NO_WARNING,
    HookAnswer,
    HookEvent,
    HookInputError,
    context_json,
    parse_event,
    transcript_of,
)

__all__ = [
    "CC_HOOK_CONTEXT_CHARS",
    "CONTEXT_LIMIT",
    "ENV_NO_WARNING",
    "HookAnswer",
    "HookEvent",
    "HookInputError",
    "context_json",
    "parse_event",
    "transcript_of",
]

# Claude Code puts hook context above this many characters into a file and shows the model only
# its path and a preview (docs/claude-code.md#hooks); compactd's text stays below it with room
# for the JSON around it.
CC_HOOK_CONTEXT_CHARS: Final = 10_000
CONTEXT_LIMIT: Final = 9_000
