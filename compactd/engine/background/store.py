"""A ready summary kept in the session directory, so that a restarted daemon can reuse it.

``prepared.json`` (atomic replace, named by the store) holds the summary's text, the uuid of the
last entry E it covers and the fingerprint of the request it answered: a hash of the
conversation, the instruction, the model and the cache key inputs (docs/background.md#durable).
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from compactd.services.store import atomic_write
from compactd.services.summarizer import SummaryOutcome, SummaryRequest

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session

__all__ = ["Kept", "fingerprint", "forget", "read", "write"]

log = logging.getLogger(__name__)


class Kept(msgspec.Struct, rename="camel", kw_only=True):
    """A ready summary as kept in the session directory (docs/background.md#durable)."""

    snapshot_uuid: str
    fingerprint: str
    text: str
    mode: str
    model: str
    usage: dict[str, Any] | None = None
    duration_ms: int = 0

    def outcome(self) -> SummaryOutcome:
        """The summary as the summarizer returned it (no request was made by this daemon)."""
        return SummaryOutcome(
            text=self.text,
            mode=self.mode,  # type: ignore[arg-type]
            model=self.model,
            usage=self.usage,
            stop_reason="end_turn",
            attempts=0,
            ptl_retries=0,
            api_seconds=self.duration_ms / 1000,
        )


def fingerprint(request: SummaryRequest) -> str:
    """What identifies a summary request: the conversation, the instruction, the model and the
    main loop's cache key inputs (docs/background.md#durable)."""
    body = msgspec.json.encode(
        [request.messages, request.instruction, request.model, request.cache_safe]
    )
    return hashlib.sha256(body).hexdigest()


async def write(runtime: Runtime, session: Session, kept: Kept) -> None:
    path = runtime.store.prepared_path(session.session_id)
    await anyio.to_thread.run_sync(atomic_write, path, msgspec.json.encode(kept))


def read(runtime: Runtime, session: Session) -> Kept | None:
    """The summary an earlier daemon kept, or None (an unreadable one is removed)."""
    path = runtime.store.prepared_path(session.session_id)
    try:
        return msgspec.json.decode(path.read_bytes(), type=Kept)
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        log.warning("session %s: unreadable prepared summary dropped", session.session_id)
        forget(runtime, session)
        return None


def forget(runtime: Runtime, session: Session) -> None:
    path = runtime.store.prepared_path(session.session_id)
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("session %s: cannot remove %s: %s", session.session_id, path, exc)
