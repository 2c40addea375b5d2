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

import msgspec

from compactd.core import rehydrate as rh
from compactd.core.microcompact import parse_timestamp
from compactd.core.tools import file_path, result_text
from compactd.core.vocabulary import vocabulary
from compactd.transcript.entries import FILE_READ_ENTRY
from compactd.transcript.model import Entry, Record, ToolResultBlock, ToolUseBlock


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
    # What the hash is of, until ``digest`` is asked: the text written, or the line's
    # ``toolUseResult`` that holds the content read. Hashed when the state is listed, not
    # for every read of an import, where it was a third of the state's cost.
    hash_of: str | msgspec.Raw | None = None

    def digest(self) -> str | None:
        """The hash of the content the agent last read or wrote, if known."""
        pending = self.hash_of
        if pending is not None:
            self.hash_of = None
            text = pending if isinstance(pending, str) else _file_content(pending)
            if text is not None:
                self.content_hash = content_hash(text.encode())
        return self.content_hash

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
        """Fold appended records into the state (see the module docstring for the sources).

        A whole context comes here when a session is loaded: the entries that name no file
        (most of them) cost a look at their type and blocks, and a timestamp is read only for
        an entry that records something.
        """
        out = StateChanges()
        now = time.time()
        tools = vocabulary()
        file_tools = tools.reads | tools.writes
        awaiting = self._awaiting
        for record in records:
            entry = record.entry
            kind = entry.type
            if kind == "user" and not awaiting:
                continue  # no file tool's result is due: nothing here to read
            if kind == "assistant" or kind == "user":
                message = entry.message
                if message is None or isinstance(message.content, str):
                    continue  # text only: no tool call, no tool result
                if kind == "user":
                    for block in message.content:
                        # Only the result of a file tool's call matters (``_tool_use``).
                        if isinstance(block, ToolResultBlock) and block.tool_use_id in awaiting:
                            self._tool_result(block, entry.tool_use_result, out)
                    continue
                ts: float | None = None
                for block in message.content:
                    if isinstance(block, ToolUseBlock) and block.name in file_tools:
                        args = block.arguments()
                        target = file_path(block.name, args)
                        if target is not None:
                            if ts is None:
                                ts = _stamp(entry, now)
                            self._tool_use(block, args, target, ts, cwd, out)
            elif kind == "attachment" and entry.attachment:
                self._attachment(entry.attachment, _stamp(entry, now), cwd, out)
            elif kind == FILE_READ_ENTRY:
                self._recorded(record.to_builtins(), _stamp(entry, now), cwd, out)
            elif entry.is_microcompact_boundary and entry.microcompact_metadata:
                ids = entry.microcompact_metadata.compacted_tool_ids
                if ids and self.drop_tool_ids(ids):
                    out.changed = True
        return out

    def _tool_use(
        self,
        block: ToolUseBlock,
        args: dict[str, Any],
        target: str,
        ts: float,
        cwd: str,
        out: StateChanges,
    ) -> None:
        """A call of a file tool on ``target`` (``file_path`` of its arguments ``args``)."""
        name = block.name
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
                fields["hash_of"] = content
            out.written.append(path)
        self.touch(path, ts, **fields)
        if block.id:
            self._awaiting[block.id] = path
        out.changed = True

    def _tool_result(self, block: ToolResultBlock, result: msgspec.Raw, out: StateChanges) -> None:
        """The result of a file tool's call; ``result``: the line's ``toolUseResult``."""
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
        if result and read.source in tools.reads:
            # A read's line records the content shown (a write's call holds what it wrote).
            read.hash_of = result  # hashed when asked (``FileRead.digest``)

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


class _FileRead(msgspec.Struct):
    content: str | None = None


class _ToolRun(msgspec.Struct):
    """Of a line's ``toolUseResult``, the file a read tool read (Claude Code records it)."""

    file: _FileRead | None = None


_tool_run = msgspec.json.Decoder(_ToolRun)


def _file_content(result: msgspec.Raw) -> str | None:
    """The content of the file a tool call read, as its line's ``toolUseResult`` records it.

    Only that field is decoded (the rest of the record, often the largest part of the line,
    is passed over); anything of another shape records no content.
    """
    if not result:
        return None
    try:
        run = _tool_run.decode(result)
    except msgspec.ValidationError:
        return None
    return run.file.content if run.file is not None else None


def _stamp(entry: Entry, now: float) -> float:
    """When the entry was written (``now`` when its timestamp says nothing readable)."""
    stamp = parse_timestamp(entry.timestamp)
    return now if stamp is None else stamp


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
