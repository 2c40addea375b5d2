"""Microcompact of a session (issue 5 fills this in).

``microcompact_session`` clears old tool results without a model call, durably records a
``microcompact_boundary`` and returns what it did. ``compact/auto`` runs it first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compactd import protocol as p

if TYPE_CHECKING:
    from compactd.app import App
    from compactd.session import Session


async def microcompact_session(
    app: App, session: Session, strategy: str | None, trigger: str
) -> p.MicroResult:
    """Run microcompact; the caller holds ``session.lock``."""
    status = app.status(session)
    return p.MicroResult(
        strategy=strategy or "count",
        cleared_tool_ids=[],
        tokens_saved=0,
        pre_tokens=status.tokens,
        post_tokens=status.tokens,
        reason="microcompact is not implemented yet",
    )
