"""Following a live transcript: the lines an agent appends to the file a session was imported from.

A session opened with ``follow`` keeps reading the Claude Code transcript it was imported from
(docs/follow.md). One ``Follower`` per session holds everything about it: the file, how far it
was read (``services.tail.Position``) and its own task in the daemon's task group, cancelled
when the session closes. It lives on the session's ``Following`` feature state and nowhere
else. The ``Followers`` (one per daemon) owns the watcher of the followed files' directories
and pokes the follower of a file that changed, found through the feature states it indexes by
file; a follower also looks now and then without an event, in case a change was not reported.

What a follower reads goes through the runtime's one writer (``Runtime.commit``) under the
session lock, exactly as an import would copy it, so the session stays what a fresh import of
the file would give: Claude Code's compactions and microcompactions are ordinary lines and
the session recognizes them as it does on import. Lines the session already holds (same uuid;
for lines without one, the same bytes, as many times) are not added again, which is what makes
reading a replaced or rewritten file from its start safe. The followed file is never written.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import anyio
import msgspec

from compactd import port
from compactd import protocol as p
from compactd.core import tokens
from compactd.engine.features import Feature, feature_of
from compactd.engine.runtime import Runtime
from compactd.engine.session import Session
from compactd.services.store import MAX_IMPORT_BYTES, as_imported
from compactd.services.tail import Position, TailRead, position_of, read_new
from compactd.services.watch import DirWatcher
from compactd.transcript.model import ParseReport, Record

log = logging.getLogger(__name__)

# A followed file is read once it has been quiet this long, or at the latest this long after
# its first change (compactd's choice: Claude Code writes a turn's lines within a few ms of
# each other, and the gauge should move well within a second of a new line).
FOLLOW_QUIET_SECONDS: Final = 0.05
FOLLOW_MAX_WAIT_SECONDS: Final = 0.25
# Without any event, a follower still looks at its file this often (a change the watcher
# missed, or a file system it cannot watch). Looking costs two small reads.
FOLLOW_POLL_SECONDS: Final = 2.0
# How long a new follower waits for the watcher to cover its file before its first read:
# a line appended before then is caught by that first read.
_WATCH_READY_SECONDS: Final = 5.0


class Follower:
    """Follows one session's source transcript; all its state lives here."""

    def __init__(
        self,
        runtime: Runtime,
        session: Session,
        path: Path,
        position: Position | None,
        consumed: bytes | None = None,
    ) -> None:
        self.runtime = runtime
        self.session = session
        self.path = path
        # How far the file was read; None: read it whole and keep what the session lacks.
        self.position = position
        # The file's reader, with what it keeps across chunks (docs/agents.md#reading), and the
        # bytes an import already took in, read for that state before the first new chunk.
        self.reading = port.Reading()
        self._consumed = consumed
        # Lines without a uuid that the session holds and the file, read again from its start,
        # has not shown (yet): a truncated file written again must not add them twice.
        self._held: Counter[bytes] = Counter()
        self.scope = anyio.CancelScope()
        self._changed = anyio.Event()
        # One read at a time: the task's and a reopen's (two reading from one position would
        # both add the lines that have no uuid).
        self._reading = anyio.Lock()

    def poke(self) -> None:
        """The file changed: read it soon."""
        self._changed.set()

    def stop(self) -> None:
        self.scope.cancel()

    async def run(self, watched: Callable[[], Awaitable[None]]) -> None:
        """Read the file whenever it changes, until stopped (the session closes)."""
        with self.scope:
            with anyio.move_on_after(_WATCH_READY_SECONDS):
                await watched()
            while True:
                self._changed = anyio.Event()
                try:
                    await self.sync()
                except FileNotFoundError:
                    # Between the unlink and the rename of a replacement, or deleted: the
                    # next change (or look) reads what is there then.
                    log.debug("followed transcript %s is missing", self.path)
                except Exception:  # a bad read must not end the following
                    log.exception("following %s failed", self.path)
                with anyio.move_on_after(FOLLOW_POLL_SECONDS):
                    await self._changed.wait()

    async def sync(self) -> int:
        """Take in what was appended since the last read; the number of entries added."""
        async with self._reading:
            return await self._sync()

    async def _sync(self) -> int:
        # Read and decoded in a worker thread: a file read again may be large.
        read, records, skipped = await anyio.to_thread.run_sync(self._read)
        if not read.data and not read.reread:
            self.position = read.position
            return 0
        session = self.session
        runtime = self.runtime
        async with session.lock:
            if read.reread:
                held = await anyio.to_thread.run_sync(
                    runtime.store.lines_without_uuid, session.session_id
                )
            else:
                held = Counter(self._held)  # taken only if the commit succeeds
            fresh = _missing(records, session, held)
            await runtime.commit(session, fresh)
            await self._follow_model(fresh)
            self.position = read.position
            self._held = held
            if not read.reread:
                session.skipped_lines += skipped
        if fresh or read.reread:
            status = runtime.status(session)
            runtime.check_thresholds(session, status)
            runtime.notify(
                p.NOTIFY_SESSION_FOLLOWED,
                p.FollowedNotification(
                    session_id=session.session_id,
                    appended=len(fresh),
                    reread=read.reread,
                    entry_count=len(session.records),
                    status=status,
                ),
            )
        if read.reread:
            log.info(
                "session %s: %s was replaced or rewritten; read again, %d new entries",
                session.session_id,
                self.path,
                len(fresh),
            )
        return len(fresh)

    def _read(self) -> tuple[TailRead, list[Record], int]:
        """What the file gained, its records as an import copies them, and the lines skipped
        (in a worker thread, one read at a time)."""
        if self._consumed is not None:
            self.reading.warm(self._consumed)
            self._consumed = None
        read = read_new(self.path, self.position, MAX_IMPORT_BYTES)
        if read.reread:
            self.reading.reset()
        report = ParseReport()
        records = [as_imported(r) for r in self.reading.records(read.data, report)]
        return read, records, report.skipped

    async def _follow_model(self, fresh: list[Record]) -> None:
        """Measure against the model the latest response names, as an import of the file
        would (docs/thresholds.md#model-limits), unless the client named one. Lock held."""
        session = self.session
        if not session.meta.follow_model:
            return
        model = tokens.recorded_model(r.entry for r in reversed(fresh))
        if model is None or model == session.meta.model:
            return
        meta = msgspec.structs.replace(session.meta, model=model)
        await anyio.to_thread.run_sync(self.runtime.store.write_meta, meta)
        session.meta = meta
        log.info("session %s: the followed transcript now uses %s", session.session_id, model)


def _missing(records: list[Record], session: Session, held: Counter[bytes]) -> list[Record]:
    """The records the session does not hold yet, in order.

    A uuid the session has (or that came earlier in ``records``) is held. A line without a
    uuid is held as many times as ``held`` counts its bytes (each match uses one up).
    """
    seen: set[str] = set()
    out: list[Record] = []
    for r in records:
        uid = r.uuid
        if uid is None:
            if held[r.raw] > 0:
                held[r.raw] -= 1
                if not held[r.raw]:
                    del held[r.raw]
                continue
        elif uid in seen or session.records.index_of(uid) is not None:
            continue
        else:
            seen.add(uid)
        out.append(r)
    return out


class Following(Feature["Session"]):
    """A session's part in following (docs/engine.md#features): the one home of its
    follower, which stops with the session."""

    def __init__(self, owner: Followers) -> None:
        self.owner = owner
        self.follower: Follower | None = None

    async def on_close(self, session: Session) -> None:
        self.owner.stop(session)


def follower_of(session: Session) -> Follower | None:
    """``session``'s follower; None when it does not follow its transcript."""
    state = feature_of(session, Following)
    return state.follower if state is not None else None


class Followers:
    """Per-daemon owner of the watcher of the followed files' directories.

    A follower lives on its session's ``Following`` state only. To poke the followers of a
    file that changed, the watcher goes through ``_following``: the states of the sessions
    following each file (the same index the watcher's filter reads).
    """

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        runtime.features.register(Following, lambda session: Following(self))
        # Followed file -> the states of the sessions following it.
        self._following: dict[str, set[Following]] = {}
        self.watcher = DirWatcher(
            self._on_change,
            lambda path: path in self._following,
            quiet=FOLLOW_QUIET_SECONDS,
            max_wait=FOLLOW_MAX_WAIT_SECONDS,
        )
        self._watching = False

    def following(self, session: Session) -> bool:
        return follower_of(session) is not None

    def start(self, session: Session, path: Path, consumed: bytes | None = None) -> bool:
        """Follow ``path`` for ``session`` (idempotent); False when there is nowhere to run.

        ``consumed``: the file's bytes the session was just imported from, so reading goes on
        after them; None (a reopen) reads the file whole first and keeps what the session lacks.
        """
        sid = session.session_id
        state = self._runtime.features.state(session, Following)
        current = state.follower
        if current is not None and current.path == path:
            current.poke()
            return True
        group = self._runtime.task_group
        if group is None:
            log.warning("session %s: no task group to follow %s in", sid, path)
            return False
        self.stop(session)
        position = position_of(consumed) if consumed is not None else None
        follower = state.follower = Follower(self._runtime, session, path, position, consumed)
        self._following.setdefault(str(path), set()).add(state)
        self.watcher.set_dirs(sid, [str(path.parent)])
        if not self._watching:
            self._watching = True
            group.start_soon(self.watcher.run)
        group.start_soon(follower.run, lambda: self.watcher.until_covers(str(path)))
        log.info("session %s: following %s", sid, path)
        return True

    async def catch_up(self, session: Session) -> None:
        """Read what the followed file gained, now (a reopen answers with the file's state)."""
        follower = follower_of(session)
        if follower is None:
            return
        try:
            await follower.sync()
        except OSError as exc:  # the open still succeeds; the follower keeps trying
            log.warning("session %s: cannot read %s: %s", session.session_id, follower.path, exc)

    def stop(self, session: Session) -> None:
        """Stop following for ``session`` (nothing when it does not follow)."""
        state = feature_of(session, Following)
        follower = state.follower if state is not None else None
        if state is None or follower is None:
            return
        state.follower = None
        follower.stop()
        key = str(follower.path)
        sharing = self._following.get(key, set())
        sharing.discard(state)
        if not sharing:
            self._following.pop(key, None)
        self.watcher.drop(session.session_id)

    async def _on_change(self, path: str) -> None:
        for state in list(self._following.get(path, ())):
            if state.follower is not None:
                state.follower.poke()
