"""Reading a transcript's lines back by their place: in the file, where scans over released
history (recall, stats, undo) read each line through one cached descriptor per transcript, or
in the whole file's bytes an import or a load read (``BufferLines``)."""

from __future__ import annotations

import os
import threading
from typing import Final

__all__ = ["BufferLines", "forget_file", "read_line"]

# Open read-only descriptors of transcripts, so scans over released history (recall, stats,
# undo) do not open the file once per line. ``os.pread`` keeps no file position, so one
# descriptor is safe to share between the event loop and worker threads.
_READ_FDS: dict[str, int] = {}
# At most this many descriptors stay open (compactd's own bound: one per transcript a daemon
# reads from at once, far below the usual limit of 1,024 open files).
_READ_FDS_MAX: Final = 64
# Worker threads read history too: opening, evicting and reading a descriptor happen under it.
_READ_FDS_LOCK: Final = threading.Lock()


def forget_file(path: str) -> None:
    """Close the cached descriptor of a transcript that is about to be replaced."""
    with _READ_FDS_LOCK:
        fd = _READ_FDS.pop(path, None)
        if fd is not None:
            os.close(fd)


def read_line(path: str, offset: int, length: int) -> bytes:
    """The ``length`` bytes of a transcript line at ``offset`` (through a cached descriptor)."""
    with _READ_FDS_LOCK:
        fd = _READ_FDS.get(path)
        if fd is None:
            if len(_READ_FDS) >= _READ_FDS_MAX:
                # Dicts keep insertion order: the first key is the descriptor opened longest ago.
                os.close(_READ_FDS.pop(next(iter(_READ_FDS))))
            fd = os.open(path, os.O_RDONLY)
            _READ_FDS[path] = fd
        data = os.pread(fd, length, offset)
    if len(data) != length:
        raise OSError(f"transcript {path} is shorter than expected at offset {offset}")
    return data


class BufferLines:
    """The lines of a whole file's bytes held in memory once (``read_buffer(shared=True)``):
    the records read from it slice their line out when asked instead of each keeping a copy."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __call__(self, offset: int, length: int) -> bytes:
        return self.data[offset : offset + length]
