"""A snapshot of a session: what a decision needs, immutable, to be worked on off the lock.

``Session.snapshot`` takes it (docs/engine.md#snapshot); the features add their part through
``Feature.on_snapshot`` (``engine/features.py``). A module of its own, so that the features,
which the session imports, can name it.
"""

from __future__ import annotations

from dataclasses import dataclass

from compactd import protocol as p
from compactd.core.rehydrate import FileCandidate
from compactd.services.store import SessionMeta
from compactd.transcript.history import History
from compactd.transcript.model import Record

__all__ = ["Snapshot"]


@dataclass(frozen=True, slots=True, eq=False)
class Snapshot:
    """An immutable view of a session up to its entry ``length`` (E), with what a decision
    needs besides the records (docs/engine.md#snapshot; ruff's ``DocumentSnapshot``).

    Records are append-only and never change, so the context is shared, not copied; a
    snapshot can be worked on in a worker thread while the session goes on.
    """

    session_id: str
    transcript_path: str
    meta: SessionMeta
    # The number of records it saw: every record after it was appended later.
    length: int
    last_uuid: str | None
    context: tuple[Record, ...]
    context_start: int
    cleared: frozenset[str]
    status: p.TokenStatus
    fixed_prefix: int
    # The session's history, only looked into below ``length`` (it only grows).
    records: History
    # Added by the features that own them (``Feature.on_snapshot``): the files feature's
    # read-file candidates and the rehydration extras the client supplied.
    file_candidates: tuple[FileCandidate, ...] = ()
    extras: p.RehydrationExtras | None = None

    def index_of(self, uuid: str) -> int | None:
        """Where ``uuid`` is in the history the snapshot saw, or None."""
        at = self.records.index_of(uuid)
        return at if at is not None and at < self.length else None
