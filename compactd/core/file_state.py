"""The agent's read-file state: which files it read, wrote or was shown, derived from a context.

Pure: built from records by ``build_file_state`` and kept up to date by ``FileState.apply``;
``engine/files.py`` owns it at run time and ``services/fs.py`` does the reading.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from compactd.core import rehydrate as rh
from compactd.core.microcompact import parse_timestamp
from compactd.core.tools import file_path, result_text
from compactd.core.vocabulary import vocabulary
from compactd.transcript.entries import FILE_READ_ENTRY
from compactd.transcript.model import Record, ToolResultBlock, ToolUseBlock


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- read-file state (pure) ---------------------------------------------------------------------


@dataclass(slots=True)
class FileRead:
    """The latest thing the agent did with one file."""

    path: str
    timestamp: float
    seq: int
    offset: int | None = None
    limit: int | None = None
    content_hash: str | None = None
    source: str = "Read"
    tool_use_id: str | None = None
    stub: bool = False
    memory: bool = False

    def candidate(self) -> rh.FileCandidate:
        return rh.FileCandidate(
            path=self.path,
            timestamp=self.timestamp,
            seq=self.seq,
            offset=self.offset,
            limit=self.limit,
            stub=self.stub,
            memory=self.memory,
        )


@dataclass(slots=True)
class StateChanges:
    """What ``FileState.apply`` saw: files read (for nested memory) and files written."""

    read: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    changed: bool = False


class FileState:
    """Read-file state of one session, keyed by normalized absolute path."""

    def __init__(self) -> None:
        self.files: dict[str, FileRead] = {}
        self._seq = 0
        # Tool calls whose result has not been seen yet: tool_use id -> path.
        self._awaiting: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.files)

    def touch(self, path: str, timestamp: float, **fields: Any) -> FileRead:
        self._seq += 1
        read = FileRead(path=path, timestamp=timestamp, seq=self._seq, **fields)
        self.files[path] = read
        return read

    def remove(self, path: str) -> None:
        self.files.pop(path, None)

    def drop_tool_ids(self, ids: Iterable[str]) -> list[str]:
        """Forget files whose latest read is one of the cleared tool results (microcompact)."""
        wanted = set(ids)
        gone = [p for p, r in self.files.items() if r.tool_use_id in wanted]
        for path in gone:
            del self.files[path]
        return gone

    def recent(self) -> list[FileRead]:
        return sorted(self.files.values(), key=lambda r: (r.timestamp, r.seq), reverse=True)

    def candidates(self) -> list[rh.FileCandidate]:
        return [r.candidate() for r in self.files.values()]

    def apply(self, records: Sequence[Record], cwd: str) -> StateChanges:
        """Fold appended records into the state (see the module docstring for the sources)."""
        out = StateChanges()
        now = time.time()
        for record in records:
            entry = record.entry
            stamp = parse_timestamp(entry.timestamp)
            ts = now if stamp is None else stamp
            if entry.type == "assistant":
                for block in entry.blocks:
                    if isinstance(block, ToolUseBlock):
                        self._tool_use(block, ts, cwd, out)
            elif entry.type == "user":
                for block in entry.blocks:
                    if isinstance(block, ToolResultBlock):
                        self._tool_result(block, entry.tool_use_result, out)
            elif entry.type == "attachment" and entry.attachment:
                self._attachment(entry.attachment, ts, cwd, out)
            elif entry.type == FILE_READ_ENTRY:
                self._recorded(record.to_builtins(), ts, cwd, out)
            elif entry.is_microcompact_boundary and entry.microcompact_metadata:
                ids = entry.microcompact_metadata.compacted_tool_ids
                if ids and self.drop_tool_ids(ids):
                    out.changed = True
        return out

    def _tool_use(self, block: ToolUseBlock, ts: float, cwd: str, out: StateChanges) -> None:
        name = block.name
        target = file_path(name, block.input)
        if target is None:
            return
        args = block.input if isinstance(block.input, dict) else {}
        path = rh.normalize_path(target, cwd)
        fields: dict[str, Any] = {"source": name, "tool_use_id": block.id or None}
        tools = vocabulary()
        if name in tools.reads:
            fields["offset"] = _int_or_none(args.get("offset"))
            fields["limit"] = _int_or_none(args.get("limit"))
            out.read.append(path)
        else:
            content = args.get("content")
            if name in tools.rewrites and isinstance(content, str):
                fields["content_hash"] = content_hash(content.encode())
            out.written.append(path)
        self.touch(path, ts, **fields)
        if block.id:
            self._awaiting[block.id] = path
        out.changed = True

    def _tool_result(self, block: ToolResultBlock, result: Any, out: StateChanges) -> None:
        path = self._awaiting.pop(block.tool_use_id, None)
        read = self.files.get(path) if path else None
        if read is None or read.tool_use_id != block.tool_use_id:
            return
        if block.is_error:
            # The call failed: the agent saw nothing of the file.
            del self.files[read.path]
            out.changed = True
            return
        text = result_text(block)
        tools = vocabulary()
        if read.source in tools.reads and text.lstrip().startswith(tools.unchanged_stubs):
            read.stub = True
        file_info = result.get("file") if isinstance(result, dict) else None
        if isinstance(file_info, dict) and isinstance(file_info.get("content"), str):
            read.content_hash = content_hash(file_info["content"].encode())

    def _attachment(self, payload: dict[str, Any], ts: float, cwd: str, out: StateChanges) -> None:
        kind = payload.get("type")
        if kind == "file" and isinstance(payload.get("filename"), str):
            inner = payload.get("content")
            text = inner.get("file", {}).get("content") if isinstance(inner, dict) else None
            self.touch(
                rh.normalize_path(payload["filename"], cwd),
                ts,
                source="attachment",
                content_hash=content_hash(text.encode()) if isinstance(text, str) else None,
            )
            out.changed = True
        elif kind == "nested_memory" and isinstance(payload.get("path"), str):
            inner = payload.get("content")
            text = inner.get("content") if isinstance(inner, dict) else None
            self.touch(
                rh.normalize_path(payload["path"], cwd),
                ts,
                source="nested_memory",
                memory=True,
                content_hash=content_hash(text.encode()) if isinstance(text, str) else None,
            )
            out.changed = True

    def _recorded(self, raw: dict[str, Any], ts: float, cwd: str, out: StateChanges) -> None:
        target = raw.get("path")
        if not isinstance(target, str) or not target:
            return
        path = rh.normalize_path(target, cwd)
        at = raw.get("readAt")
        self.touch(
            path,
            float(at) if isinstance(at, int | float) and not isinstance(at, bool) else ts,
            offset=_int_or_none(raw.get("offset")),
            limit=_int_or_none(raw.get("limit")),
            content_hash=raw.get("contentHash")
            if isinstance(raw.get("contentHash"), str)
            else None,
            source="record",
        )
        out.read.append(path)
        out.changed = True


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def build_file_state(
    records: Sequence[Record], cwd: str, cleared_tool_ids: Iterable[str] = ()
) -> FileState:
    """The read-file state of a context (``Session.rebuild`` calls this)."""
    state = FileState()
    state.apply(records, cwd)
    state.drop_tool_ids(cleared_tool_ids)
    return state
