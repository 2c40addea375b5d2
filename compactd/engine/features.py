"""Per-session features: each keeps its state for a session in one object, hooked into its life.

A feature (files and rehydration, session memory, cache-break detection, ...) registers a
factory with the runtime's ``Features``; every session gets one state object per feature,
made when the session is opened or loaded and kept in ``Session.features``. The state object
is the feature's only per-session home, and its hooks are the only way it follows the session:
``derive`` when the session works out its derived state from the context (in the rebuild's
worker thread), ``on_open`` once it is attached, ``on_append`` after entries are durably
appended, ``on_compacted`` after a compaction or an undo rewrote the context, ``on_close`` when
the session is closed; ``on_status`` and ``on_snapshot`` add the feature's part to what the
session reports. Failures are isolated per feature: a hook that raises is logged and the
append, the compaction or the close goes on (docs/engine.md#features; esbonio's
``LanguageFeature`` and ``call_features`` are the model).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence, Set
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from compactd import protocol as p
    from compactd.engine.snapshot import Snapshot
    from compactd.transcript.model import Record

__all__ = ["Feature", "Features", "HasFeatures", "derive_states", "feature_of"]

log = logging.getLogger(__name__)


class HasFeatures(Protocol):
    """What the registry needs of a session: its id and its feature states. The session type is
    a parameter (``Feature[Session]``), so this module does not import the session's."""

    @property
    def session_id(self) -> str: ...

    @property
    def features(self) -> dict[type[Any], Any]: ...

    def adopt(self, state: Feature[Any]) -> None:
        """Work out ``state``'s part of the derived state now (a state made after the session
        derived it): ``Feature.derive`` on the context as it is."""


S = TypeVar("S", bound=HasFeatures)


class Feature(Generic[S]):
    """The state one feature keeps for one session. Every hook does nothing by default."""

    def derive(
        self, session: S, context: Sequence[Record], cleared: Set[str]
    ) -> Callable[[], None] | None:
        """This state's part of what ``session`` derives from ``context`` (the records the
        model sees; ``cleared``: the tool results cleared in it), worked out when the session
        is loaded or rebuilt (a compaction, an undo, a moved cwd) and when the state is made.

        It runs in the rebuild's worker thread, beside the session's own derivation, so it
        only reads: it returns what adopts the result, called on the event loop in the same
        step as the session's derived state is replaced (None: nothing to adopt).
        """
        return None

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

    def on_snapshot(self, snap: Snapshot) -> Snapshot:
        """A snapshot of the session (taken under its lock), with what this feature adds."""
        return snap


F = TypeVar("F", bound="Feature[Any]")


def feature_of(session: HasFeatures, kind: type[F]) -> F | None:
    """``session``'s state of feature ``kind``, or None when that feature is not registered
    (switched off): the one typed way to reach a feature's state from outside it."""
    found = session.features.get(kind)
    return found if isinstance(found, kind) else None


def derive_states(
    states: Sequence[Feature[S]], session: S, context: Sequence[Record], cleared: Set[str]
) -> Callable[[], None]:
    """Every state's ``derive`` of ``context``, worked out now (a worker thread may call
    this); the call returned adopts them all, each isolated (on the event loop). A state
    whose ``derive`` fails keeps what it had."""
    adopt: list[tuple[Feature[S], Callable[[], None]]] = []
    for state in states:
        try:
            found = state.derive(session, context, cleared)
        except Exception:  # one broken feature must not fail the rebuild
            log.exception("%s.derive failed", type(state).__name__)
            continue
        if found is not None:
            adopt.append((state, found))

    def apply() -> None:
        for state, call in adopt:
            Features._call(state, "derive", call)

    return apply


class Features(Generic[S]):
    """The registry of features and the one place their hooks are called, each isolated."""

    def __init__(self) -> None:
        self._factories: dict[type[Feature[S]], Callable[[S], Feature[S]]] = {}

    def register(self, kind: type[F], factory: Callable[[S], F]) -> None:
        """Give every session a ``kind`` state made by ``factory`` (registration order is the
        order hooks are called in)."""
        self._factories[kind] = factory

    def make(self, session: S) -> None:
        """Make the state of every registered feature ``session`` lacks, without opening it.

        A factory only builds an object (reading the feature's own files at most) and a new
        state derives its part at once (``HasFeatures.adopt``), so this may run in a worker
        thread: the load calls it there, after the session's own derivation, so that no
        feature works out its derived state on the event loop.
        """
        for kind, factory in self._factories.items():
            if kind not in session.features:
                self._make(session, factory, kind)

    def attach(self, session: S) -> None:
        """Make the states ``make`` has not, then call every state's ``on_open``: once per
        session, on the event loop, when the session is registered."""
        self.make(session)
        for state in list(session.features.values()):
            self._call(state, "on_open", partial(state.on_open, session))

    def state(self, session: S, kind: type[F]) -> F:
        """``session``'s state of feature ``kind``, made (and opened) on first use."""
        found = session.features.get(kind)
        if found is None:
            found = self._make(session, self._factories[kind], kind)
            self._call(found, "on_open", partial(found.on_open, session))
        assert isinstance(found, kind)
        return found

    @staticmethod
    def _make(session: S, factory: Callable[[S], Feature[S]], kind: type[Any]) -> Feature[S]:
        state = factory(session)
        session.adopt(state)
        session.features[kind] = state
        return state

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
