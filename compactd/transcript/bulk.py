"""Reading a whole transcript at once without the cycle collector in the way.

Importing or loading a transcript makes tens of thousands of objects in one go (a record, its
entry, the blocks and the dicts of every line) and none of them is garbage: the cycle collector,
which runs each time enough new objects were made, walks them again and again for nothing. On
``tests/bench/bench_ingest.py``'s 15 MB transcript that was about half the time of the decoding.
``collector_paused`` turns it off for the duration and back on after, when no other bulk read is
still running (the collector is one per process).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]

_lock = threading.Lock()
_active = 0
_was_enabled = True


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cycle collector for the block (thread-safe, nestable)."""
    global _active, _was_enabled
    with _lock:
        if _active == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _was_enabled:
                _promote_young()
                gc.enable()


def _promote_young() -> None:
    """Move every object the collector tracks into its oldest generation, walking none.

    Turned back on, the collector would walk all that was made during the pause at its next
    run, tens of milliseconds after a large transcript, for nothing: the records are not
    garbage. ``gc.freeze`` moves the tracked objects aside and ``gc.unfreeze`` puts them back
    in the oldest generation, without looking at them; they are collected there, as every
    long-lived object is, by the full collections to come (frozen for good, whatever else is
    alive now would never be collected again, and a daemon runs for days). Objects another
    thread made meanwhile are promoted too: garbage among them waits for a full collection.
    """
    gc.freeze()
    gc.unfreeze()
