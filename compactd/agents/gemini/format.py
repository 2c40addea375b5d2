"""Gemini CLI's chats read as compactd's records (docs/gemini.md#how-compactd-reads-a-chat).

Gemini CLI 0.61.0 writes a chat as JSON lines (``session-*.jsonl``) of four kinds: a metadata
line, records with an ``id`` (the last line with an id wins: a ``gemini`` record is written
again as its tool calls come), ``{"$set": {...}}`` updates, where ``$set.messages`` replaces the
whole list of records, and ``{"$rewindTo": id}``. Versions before 0.39 wrote one pretty-printed
JSON object (``session-*.json``) with the list in ``messages``, rewritten whole on every change.
The reader takes both, told apart by the content (docs/gemini.md#chat-files, #older-format), and
turns them into compactd's records, in the shape of ``compactd/transcript``, appended in the
order the file says things happened:

- a ``user`` record: the person's words as a user record (the ``displayContent`` when the CLI
  kept it, else the text less the ``<hook_context>`` parts hooks added, which become a meta
  record), the ``<session_context>`` the CLI opens every chat with as a meta record, and each
  ``functionResponse`` part as a tool result;
- a ``gemini`` record: its text and tool calls as an assistant record whose ``message.id`` is
  the record's, with its ``tokens`` as the usage (``input`` less ``cached`` plus ``tool`` as
  input, ``cached`` as cache reads, ``output`` plus ``thoughts`` as output: the usage's total is
  the record's ``total``); written again, only what it gained (its tool calls, their results)
  is added, under the same ``message.id``;
- a tool result comes once, by its call's id, however many times the file holds it (in the
  call's ``result``, as a ``user`` record, again in every list a resume writes back);
- a ``$set.messages`` whose second record is a ``user`` record opening with ``<state_snapshot>``
  (not read before) is a compression: a ``compact_boundary`` whose summary is the snapshot,
  then the CLI's acknowledgement; the records the list keeps after them are the boundary's
  preserved segment (docs/compaction.md), so what the compression dropped is every earlier
  record it does not keep. Any other list (a resume writing the history back, outputs masked)
  adds only the records not read before;
- in an older ``.json`` chat, an ``info`` record "Context compressed from N% to M%." (written by
  the interactive CLI) is a compaction whose snapshot the file never held.

Metadata lines, other ``$set`` keys, the UI's ``info``/``error``/``warning`` records and
``$rewindTo`` give no record (a rewound record stays in compactd's copy; the next response's
usage measures what the model sees). Paths in tool calls are made absolute against the project
folder the session context names. Every record's uuid comes from the Gemini ids it was read
from, so reading the same file again gives the same records. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from compactd.agents.gemini.parts import (
    absolute,
    parts_of,
    response_text,
    signature,
    text_of,
    text_parts,
    usage_of,
    whole_json,
)
from compactd.transcript.model import COMPACT_BOUNDARY, ParseReport, Record, record_from_dict

__all__ = [
    "ACKNOWLEDGEMENT",
    "COMPRESSION_SHARE",
    "GEMINI",
    "GeminiFormat",
    "GeminiStream",
    "SNAPSHOT_OPEN",
    "is_snapshot",
    "window_of",
]

# How the CLI opens what it writes in the user's role (docs/gemini.md#requests, #compression,
# #beforeagent-and-sessionstart).
SNAPSHOT_OPEN: Final = "<state_snapshot>"
SESSION_CONTEXT_OPEN: Final = "<session_context>"
ACKNOWLEDGEMENT: Final = "Got it. Thanks for the additional context!"
_HOOK_CONTEXT: Final = re.compile(r"<hook_context>.*?</hook_context>\s*", re.DOTALL)
# The interactive CLI's note of a compression (docs/gemini.md#older-format).
_COMPRESSED_NOTE: Final = re.compile(r"^\s*Context compressed from")
# The project folder a session context names (0.61.0), or an older version's wording.
_WORKSPACE: Final = re.compile(
    r"Workspace Directories:\**\s*\n\s*-\s*(\S[^\n]*)|working in the directory:\s*(\S[^\n]*)"
)
# The CLI's windows (tokenLimit in 0.61.0) and its default compression threshold
# (docs/gemini.md#compression).
WINDOW: Final = 1_048_576
GEMMA_4_WINDOW: Final = 256_000
COMPRESSION_SHARE: Final = 0.5
_RECORD_TYPES: Final = frozenset({"user", "gemini", "info", "error", "warning"})
# A tool call whose status is one of these failed (the others: "success").
_FAILED: Final = frozenset({"error", "cancelled"})


def window_of(model: str | None) -> int:
    """The window Gemini CLI measures ``model``'s context against."""
    return GEMMA_4_WINDOW if model and model.startswith("gemma-4") else WINDOW


def is_snapshot(text: str) -> bool:
    """Whether a user text is a compression's snapshot."""
    return text.lstrip().startswith(SNAPSHOT_OPEN)


@dataclass(slots=True)
class _Read:
    """What was taken in of one Gemini record: its records' uuids, text, calls, usage."""

    uuids: list[str] = field(default_factory=list)
    text: str = ""
    calls: set[str] = field(default_factory=set)
    usage: bool = False
    chunks: int = 0
    #: what the record says, to know it again under another id (``signature``)
    signature: str = ""


@dataclass(slots=True)
class GeminiStream:
    """Reads one chat, in chunks (whole lines, or the whole of an older ``.json`` chat),
    keeping what later lines need: the records read, the current list, the snapshots seen."""

    session_id: str | None = None
    cwd: str | None = None
    model: str | None = None
    #: None until the first chunk says whether the chat is lines or one object
    whole_json: bool | None = None
    seen: dict[str, _Read] = field(default_factory=dict)
    #: tool results taken in, by call id (their record's uuid)
    results: dict[str, str] = field(default_factory=dict)
    calls: set[str] = field(default_factory=set)
    snapshots: set[str] = field(default_factory=set)
    #: the ids of the CLI's current list of records
    current: list[str] = field(default_factory=list)
    #: the position of each record given out, by uuid
    order: dict[str, int] = field(default_factory=dict)
    last_tokens: int | None = None
    #: a snapshot compression was read since the person's latest words
    compressed_since_prompt: bool = False
    lines: int = 0
    _pending: bytearray = field(default_factory=bytearray)

    # -- chunks -----------------------------------------------------------------------------

    def feed(self, data: bytes, report: ParseReport | None = None) -> list[Record]:
        """The records of ``data``: the chat's next whole lines, or (older chats) its bytes
        so far, read once they hold the whole object."""
        if self.whole_json is None:
            if not data.strip():
                return []
            self.whole_json = whole_json(data)
        if not self.whole_json:
            return self.records(data.split(b"\n"), report)
        self._pending += data
        try:
            obj = msgspec.json.decode(bytes(self._pending))
        except msgspec.DecodeError:
            return []  # being written (rewritten whole): read when it is whole
        self._pending.clear()
        return self._older(obj, report if report is not None else ParseReport())

    def records(self, lines: Iterable[bytes], report: ParseReport | None = None) -> list[Record]:
        rep = report if report is not None else ParseReport()
        out: list[Record] = []
        for raw in lines:
            line = raw.strip()
            if not line:
                continue
            rep.lines += 1
            self.lines += 1
            try:
                obj = msgspec.json.decode(line)
            except msgspec.DecodeError as exc:
                _skip(rep, f"invalid JSON: {exc}")
                continue
            if not isinstance(obj, dict):
                _skip(rep, "a chat line must be a JSON object")
                continue
            found = self._line(obj, rep)
            if found:
                rep.entries += 1
                out.extend(found)
        return out

    def _older(self, obj: Any, rep: ParseReport) -> list[Record]:
        if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list):
            _skip(rep, "an older Gemini CLI chat is one JSON object with its messages")
            return []
        self._meta(obj)
        out: list[Record] = []
        for message in obj["messages"]:
            rep.lines += 1
            self.lines += 1
            if not isinstance(message, dict) or not isinstance(message.get("id"), str):
                _skip(rep, "a chat message must be an object with an id")
                continue
            found = self._record(message, rep)
            if found:
                rep.entries += 1
                out.extend(found)
        return out

    def _line(self, obj: dict[str, Any], rep: ParseReport) -> list[Record]:
        if isinstance(obj.get("$rewindTo"), str):
            ident = obj["$rewindTo"]
            if ident in self.current:
                del self.current[self.current.index(ident) :]
            return []
        update = obj.get("$set")
        if isinstance(update, dict):
            if isinstance(update.get("sessionId"), str):
                self.session_id = update["sessionId"]
            messages = update.get("messages")
            return self._replace(messages, rep) if isinstance(messages, list) else []
        if isinstance(obj.get("id"), str):
            if obj["id"] not in self.seen:
                self.current.append(obj["id"])
            return self._record(obj, rep)
        if isinstance(obj.get("sessionId"), str) and "projectHash" in obj:
            self._meta(obj)
            return []
        return _skip(rep, "a Gemini CLI chat line of no known kind")

    def _meta(self, obj: dict[str, Any]) -> None:
        if isinstance(obj.get("sessionId"), str):
            self.session_id = obj["sessionId"]
        folders = obj.get("directories")
        if self.cwd is None and isinstance(folders, list) and folders:
            if isinstance(folders[0], str):
                self.cwd = folders[0]

    # -- records ------------------------------------------------------------------------------

    def _record(self, obj: dict[str, Any], rep: ParseReport) -> list[Record]:
        kind = obj.get("type")
        if kind == "user":
            return self._user(obj)
        if kind == "gemini":
            return self._gemini(obj)
        if kind == "info" and _COMPRESSED_NOTE.match(text_of(obj)):
            return self._noted_compression(obj)
        if kind in _RECORD_TYPES:
            return []  # the interactive UI's messages: the model never saw them
        return _skip(rep, f"a chat record of unknown type {str(kind)[:40]!r}")

    def _make(self, kind: str, uuid: str, stamp: Any, **fields: Any) -> Record:
        obj: dict[str, Any] = {"type": kind, "uuid": uuid}
        if isinstance(stamp, str):
            obj["timestamp"] = stamp
        if self.session_id:
            obj["sessionId"] = self.session_id
        if self.cwd:
            obj["cwd"] = self.cwd
        obj.update(fields)
        self.order[uuid] = len(self.order)
        return record_from_dict(obj)

    def _user(self, obj: dict[str, Any]) -> list[Record]:
        ident, stamp = obj["id"], obj.get("timestamp")
        parts = parts_of(obj.get("content"))
        texts = text_parts(parts)
        out: list[Record] = []
        read = self.seen.get(ident)
        if texts and read is None:
            read = self.seen[ident] = _Read(signature=signature(obj))
            out += self._words(obj, ident, stamp, texts, read)
        elif read is None:
            read = self.seen[ident] = _Read(signature=signature(obj))
        for part in parts:
            response = part.get("functionResponse")
            if isinstance(response, dict):
                out += self._result(response, stamp, read)
        return out

    def _words(
        self, obj: dict[str, Any], ident: str, stamp: Any, texts: list[str], read: _Read
    ) -> list[Record]:
        joined = "".join(texts)
        if joined.lstrip().startswith((SESSION_CONTEXT_OPEN, SNAPSHOT_OPEN)):
            if self.cwd is None and joined.lstrip().startswith(SESSION_CONTEXT_OPEN):
                found = _WORKSPACE.search(joined)
                if found:
                    self.cwd = (found.group(1) or found.group(2)).strip()
            uuid = f"gemini-{ident}"
            read.uuids.append(uuid)
            message = {"role": "user", "content": joined}
            return [self._make("user", uuid, stamp, isMeta=True, message=message)]
        contexts = [m.group(0).strip() for t in texts for m in _HOOK_CONTEXT.finditer(t)]
        shown = text_parts(parts_of(obj.get("displayContent")))
        words = "".join(_HOOK_CONTEXT.sub("", t) for t in (shown or texts))
        out: list[Record] = []
        if words.strip():
            uuid = f"gemini-{ident}"
            read.uuids.append(uuid)
            out.append(self._make("user", uuid, stamp, message={"role": "user", "content": words}))
            self.compressed_since_prompt = False
        if contexts:
            uuid = f"gemini-{ident}-context"
            read.uuids.append(uuid)
            message = {"role": "user", "content": "\n".join(contexts)}
            out.append(self._make("user", uuid, stamp, isMeta=True, message=message))
        return out

    def _result(
        self, response: dict[str, Any], stamp: Any, read: _Read, failed: bool = False
    ) -> list[Record]:
        call_id = response.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"{response.get('name') or 'tool'}-{len(self.results)}"
        if call_id in self.results:
            read.uuids.append(self.results[call_id])
            return []
        text, error = response_text(response.get("response"))
        uuid = f"gemini-result-{call_id}"
        self.results[call_id] = uuid
        read.uuids.append(uuid)
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": text}
        if error or failed:
            block["is_error"] = True
        return [self._make("user", uuid, stamp, message={"role": "user", "content": [block]})]

    def _gemini(self, obj: dict[str, Any]) -> list[Record]:
        ident, stamp = obj["id"], obj.get("timestamp")
        if isinstance(obj.get("model"), str) and obj["model"]:
            self.model = obj["model"]
        parts = parts_of(obj.get("content"))
        text = "".join(text_parts(parts))
        calls: list[tuple[str, str, dict[str, Any], Any, Any]] = []
        listed = [c for c in obj.get("toolCalls") or [] if isinstance(c, dict)]
        for call, given in [(c, c) for c in listed] + [
            (p["functionCall"], None) for p in parts if isinstance(p.get("functionCall"), dict)
        ]:
            name, cid, args = call.get("name"), call.get("id"), call.get("args")
            if not isinstance(name, str):
                continue
            cid = cid if isinstance(cid, str) and cid else f"{ident}-{len(calls)}"
            if given is None and any(c[0] == cid for c in calls):
                continue  # a call the record also lists in toolCalls
            result = given.get("result") if given is not None else None
            status = given.get("status") if given is not None else None
            calls.append((cid, name, args if isinstance(args, dict) else {}, result, status))
        read = self.seen.setdefault(ident, _Read())
        read.signature = signature(obj)
        blocks: list[dict[str, Any]] = []
        if text and text != read.text:
            added = text[len(read.text) :] if read.text and text.startswith(read.text) else text
            blocks.append({"type": "text", "text": added})
            read.text = text
        for cid, name, args, _, _ in calls:
            if cid in read.calls or cid in self.calls:
                continue
            read.calls.add(cid)
            self.calls.add(cid)
            blocks.append({"type": "tool_use", "id": cid, "name": name, "input": self._args(args)})
        usage = None if read.usage else usage_of(obj.get("tokens"))
        out: list[Record] = []
        if blocks or usage is not None:
            uuid = f"gemini-{ident}" if read.chunks == 0 else f"gemini-{ident}.{read.chunks}"
            read.chunks += 1
            read.uuids.append(uuid)
            message: dict[str, Any] = {"role": "assistant", "id": f"gemini-{ident}"}
            message["content"] = blocks
            if self.model:
                message["model"] = self.model
            if usage is not None:
                message["usage"] = usage
                read.usage = True
                self.last_tokens = sum(usage.values())
            out.append(self._make("assistant", uuid, stamp, message=message))
        for cid, _, _, result, status in calls:
            for part in parts_of(result):
                response = part.get("functionResponse")
                if isinstance(response, dict):
                    response = response if response.get("id") else {**response, "id": cid}
                    out += self._result(response, stamp, read, failed=status in _FAILED)
        return out

    def _args(self, args: dict[str, Any]) -> dict[str, Any]:
        """A call's arguments, its paths absolute against the project folder."""
        out = dict(args)
        if "file_path" not in out and isinstance(out.get("absolute_path"), str):
            out["file_path"] = out["absolute_path"]
        for key in ("file_path", "dir_path"):
            if isinstance(out.get(key), str):
                out[key] = absolute(out[key], self.cwd)
        return out

    # -- compressions -------------------------------------------------------------------------

    def _replace(self, messages: list[Any], rep: ParseReport) -> list[Record]:
        items = [m for m in messages if isinstance(m, dict) and isinstance(m.get("id"), str)]
        snapshot = items[1] if len(items) > 1 else None
        if (
            snapshot is None
            or snapshot.get("type") != "user"
            or not is_snapshot(text_of(snapshot))
            or snapshot["id"] in self.snapshots
        ):
            out: list[Record] = []
            for item in items:
                if item["id"] not in self.seen or item.get("type") == "gemini":
                    out += self._record(item, rep)
            self.current = [m["id"] for m in items]
            return out
        return self._compression(items, snapshot)

    def _compression(self, items: list[dict[str, Any]], snapshot: dict[str, Any]) -> list[Record]:
        ident, stamp = snapshot["id"], snapshot.get("timestamp")
        self.snapshots.add(ident)
        ack = items[2] if len(items) > 2 and items[2].get("type") == "gemini" else None
        kept = items[3:] if ack is not None else items[2:]
        self._known_again(kept)
        positions = [
            self.order[u]
            for item in kept
            for u in (self.seen[item["id"]].uuids if item["id"] in self.seen else [])
            if u in self.order
        ]
        summary_uuid = f"gemini-{ident}"
        ack_uuid = f"gemini-{ack['id']}" if ack is not None else None
        segment = None
        if positions:
            by_position = {n: u for u, n in self.order.items()}
            segment = {
                "headUuid": by_position[min(positions)],
                "anchorUuid": ack_uuid or summary_uuid,
                "tailUuid": by_position[max(positions)],
            }
        out = self._compaction(ident, stamp, text_of(snapshot), segment)
        self.seen[ident] = _Read(uuids=[summary_uuid])
        if ack is not None and ack_uuid is not None:
            message: dict[str, Any] = {
                "role": "assistant", "id": ack_uuid,
                "content": [{"type": "text", "text": text_of(ack) or ACKNOWLEDGEMENT}],
            }  # fmt: skip
            if self.model:
                message["model"] = self.model
            out.append(self._make("assistant", ack_uuid, ack.get("timestamp"), message=message))
            self.seen[ack["id"]] = _Read(uuids=[ack_uuid], text=text_of(ack))
        for item in kept:  # kept records not read before (none in the CLI's own files)
            if item["id"] not in self.seen:
                out += self._record(item, ParseReport())
        self.current = [m["id"] for m in items]
        return out

    def _compaction(
        self, ident: str, stamp: Any, summary: str, segment: dict[str, str] | None = None
    ) -> list[Record]:
        """A compaction's boundary and its summary (the records it keeps: ``segment``)."""
        meta: dict[str, Any] = {"trigger": "auto"}
        if self.last_tokens is not None:
            meta["preTokens"] = self.last_tokens
        if segment is not None:
            meta["preservedSegment"] = segment
        self.last_tokens = None
        self.compressed_since_prompt = True
        boundary = {"subtype": COMPACT_BOUNDARY, "content": "Conversation compressed"}
        message = {"role": "user", "content": summary}
        return [
            self._make("system", f"gemini-compression-{ident}", stamp, level="info",
                       compactMetadata=meta, **boundary),
            self._make("user", f"gemini-{ident}", stamp, isCompactSummary=True,
                       isVisibleInTranscriptOnly=True, message=message),
        ]  # fmt: skip

    def _known_again(self, kept: list[dict[str, Any]]) -> None:
        """Take the kept records a compression wrote under new ids as the records of the
        current list that say the same (the latest first), so that none is read twice."""
        free = [i for i in self.current if i in self.seen]
        for item in reversed(kept):
            if item["id"] in self.seen:
                continue
            wanted = signature(item)
            for n in range(len(free) - 1, -1, -1):
                if self.seen[free[n]].signature == wanted:
                    self.seen[item["id"]] = self.seen[free.pop(n)]
                    break

    def _noted_compression(self, obj: dict[str, Any]) -> list[Record]:
        """An older chat's note of a compression: a compaction whose snapshot it never held.
        In lines, a note that follows a compression already read is that one."""
        ident, stamp = obj["id"], obj.get("timestamp")
        if ident in self.seen or self.compressed_since_prompt:
            return []
        self.seen[ident] = _Read(uuids=[f"gemini-{ident}"])
        note = text_of(obj).strip()
        summary = (
            f"[Gemini CLI compressed the conversation here ({note}). This chat was written by "
            "a version before 0.39, which kept no copy of its snapshot: everything before this "
            "point is in compactd's recall]"
        )
        return self._compaction(ident, stamp, summary)


def _skip(rep: ParseReport, why: str) -> list[Record]:
    rep.skipped += 1
    if rep.first_error is None:
        rep.first_error = f"line {rep.lines}: {why}"
    return []


# -- the format ------------------------------------------------------------------------------------

# The first bytes of an older chat: an object whose first key is the session's id.
_OLDER_HEAD: Final = re.compile(rb'^\s*\{\s*"sessionId"\s*:\s*"[^"]*"\s*,\s*"projectHash"\s*:')


def _claims_line(obj: dict[str, Any]) -> bool:
    if "uuid" in obj or "message" in obj or "payload" in obj:
        return False  # Claude Code's or Codex's lines
    if isinstance(obj.get("sessionId"), str) and isinstance(obj.get("projectHash"), str):
        return True
    if isinstance(obj.get("$set"), dict) or isinstance(obj.get("$rewindTo"), str):
        return True
    return isinstance(obj.get("id"), str) and obj.get("type") in _RECORD_TYPES


class GeminiFormat:
    """Gemini CLI's chats, JSON lines or an older JSON object (``compactd.port.AgentFormat``)."""

    name: Final = "Gemini CLI"
    native: Final = False
    # A compression is a ``$set.messages`` that a resume writes again (the snapshot first in
    # every later list): no mark in a line tells it from those, so a short process reads a
    # chat's end whole (services/agent_tail.py) and the reader tells them apart. Matches nothing.
    compaction_marks: Final = re.compile(rb"(?!)")
    boundary_mark: Final = re.compile(rb"(?!)")

    def claims(self, head: bytes) -> bool:
        """An older chat's opening, or complete lines that are Gemini CLI's: a metadata line,
        a ``$set`` or ``$rewindTo``, or a record with an ``id`` and a type the CLI writes."""
        if _OLDER_HEAD.match(head):
            return True
        lines = head.split(b"\n")[:-1]
        for raw in lines[:8]:
            if not raw.strip():
                continue
            try:
                obj = msgspec.json.decode(raw)
            except msgspec.DecodeError:
                return False
            return isinstance(obj, dict) and _claims_line(obj)
        return False

    def stream(self) -> GeminiStream:
        return GeminiStream()

    def records(self, lines: Iterable[bytes], report: ParseReport | None = None) -> list[Record]:
        """The records of a chat's lines (an older chat's lines are one object: read whole)."""
        return GeminiStream().feed(b"\n".join(lines), report)

    def recognizes(self, records: Iterable[Record]) -> bool:
        return any((r.uuid or "").startswith("gemini-") for r in records)

    def transcript(self, data: bytes, report: ParseReport | None = None) -> bytes:
        return b"".join(r.raw + b"\n" for r in GeminiStream().feed(data, report))

    def complete(self, data: bytes) -> int:
        """An older chat whole once it is one whole object (else nothing yet: it is being
        rewritten); lines up to the last newline (a last line without one is being written)."""
        if whole_json(data):
            try:
                msgspec.json.decode(data)
            except msgspec.DecodeError:
                return 0
            return len(data)
        return data.rfind(b"\n") + 1

    def recorded_limits(self, data: bytes) -> tuple[str | None, int | None, int | None] | None:
        """The model of the chat's latest answer, the window Gemini CLI gives it, and the size
        at which the CLI compresses by default (half of it; ``model.compressionThreshold`` in
        the user's settings, which the chat does not record, may change it)."""
        model = None
        if whole_json(data):
            try:
                obj = msgspec.json.decode(data)
            except msgspec.DecodeError:
                obj = None
            messages = obj.get("messages") if isinstance(obj, dict) else None
            for m in reversed(messages if isinstance(messages, list) else []):
                if isinstance(m, dict) and m.get("type") == "gemini" and m.get("model"):
                    model = str(m["model"])
                    break
        else:
            for raw in reversed(data.splitlines()):
                if b'"gemini"' not in raw or b'"model"' not in raw or raw.startswith(b'{"$set'):
                    continue
                try:
                    obj = msgspec.json.decode(raw)
                except msgspec.DecodeError:
                    continue
                if isinstance(obj, dict) and obj.get("type") == "gemini":
                    if isinstance(obj.get("model"), str) and obj["model"]:
                        model = obj["model"]
                        break
        window = window_of(model)
        return model, window, int(window * COMPRESSION_SHARE)


GEMINI: Final = GeminiFormat()
