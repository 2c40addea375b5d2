"""Per-session features: each keeps its state for a session in one object, hooked into its life.

A feature (files and rehydration, session memory, cache-break detection, ...) registers a
factory with the runtime's ``Features``; every session gets one state object per feature,
made when the session is opened or loaded and kept in ``Session.features``. The state object
is the feature's only per-session home, and its hooks are the only way it follows the session:
``on_open`` once it is attached, ``on_append`` after entries are durably appended,
``on_compacted`` after a compaction or an undo rewrote the context, ``on_close`` when the
session is closed. Failures are isolated per feature: a hook that raises is logged and the
append, the compaction or the close goes on (docs/engine.md#features; esbonio's
``LanguageFeature`` and ``call_features`` are the model).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from compactd import protocol as p
    from compactd.transcript.model import Record

__all__ = ["Feature", "Features", "HasFeatures", "feature_of"]

log = logging.getLogger(__name__)


class HasFeatures(Protocol):
    """What the registry needs of a session: its id and its feature states. The session type is
    a parameter (``Feature[Session]``), so this module does not import the session's."""

    @property
    def session_id(self) -> str: ...

    @property
    def features(self) -> dict[type[Any], Any]: ...


S = TypeVar("S", bound=HasFeatures)


class Feature(Generic[S]):
    """The state one feature keeps for one session. Every hook does nothing by default."""

    def on_open(self, session: S) -> None:
        """The session was opened or loaded and this state attached to it."""

    def on_append(self, session: S, records: Sequence[Record]) -> None:
        """``records`` were durably appended (the session's derived state already has them)."""

    def on_compacted(self, session: S, records: Sequence[Record]) -> None:
        """``records`` rewrote the context (a compaction or an undo); the session is rebuilt."""

    async def on_close(self, session: S) -> None:
        """The session is closed: release what the state holds (watches, tasks)."""

    def on_status(self, status: p.TokenStatus) -> p.TokenStatus:
        """``tokens/status`` of the session, with what this feature adds to it."""
        return status


F = TypeVar("F", bound="Feature[Any]")


def feature_of(session: HasFeatures, kind: type[F]) -> F | None:
    """``session``'s state of feature ``kind``, or None when that feature is not registered
    (switched off): the one typed way to reach a feature's state from outside it."""
    found = session.features.get(kind)
    return found if isinstance(found, kind) else None


class Features(Generic[S]):
    """The registry of features and the one place their hooks are called, each isolated."""

    def __init__(self) -> None:
        self._factories: dict[type[Feature[S]], Callable[[S], Feature[S]]] = {}

    def register(self, kind: type[F], factory: Callable[[S], F]) -> None:
        """Give every session a ``kind`` state made by ``factory`` (registration order is the
        order hooks are called in)."""
        self._factories[kind] = factory

    def attach(self, session: S) -> None:
        """Make the state of every registered feature for ``session`` and call ``on_open``."""
        for kind in self._factories:
            self.state(session, kind)

    def state(self, session: S, kind: type[F]) -> F:
        """``session``'s state of feature ``kind``, made (and opened) on first use."""
        found = session.features.get(kind)
        if found is None:
            found = self._factories[kind](session)
            session.features[kind] = found
            self._call(found, "on_open", lambda: found.on_open(session))
        assert isinstance(found, kind)
        return found

    def appended(self, session: S, records: Sequence[Record]) -> None:
        """Tell every feature of ``session`` about records just committed."""
        rewrote = any(
            r.entry.is_compact_boundary for r in records
        )  # a compaction or an undo: the context was rebuilt, not extended
        for state in list(session.features.values()):
            hook = state.on_compacted if rewrote else state.on_append
            self._call(state, hook.__name__, partial(hook, session, records))

    @staticmethod
    def status(session: S, status: p.TokenStatus) -> p.TokenStatus:
        """``status`` with what each feature of ``session`` adds to it."""
        for state in session.features.values():
            status = state.on_status(status)
        return status

    async def close(self, session: S) -> None:
        """Call every feature's ``on_close``; one that fails does not stop the others."""
        for state in list(session.features.values()):
            try:
                await state.on_close(session)
            except Exception:
                log.exception(
                    "session %s: %s.on_close failed", session.session_id, type(state).__name__
                )
        session.features.clear()

    @staticmethod
    def _call(state: Feature[Any], hook: str, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception:  # one broken feature must not fail the append (docs/engine.md#features)
            log.exception("%s.%s failed", type(state).__name__, hook)
