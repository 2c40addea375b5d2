"""Codex CLI's rollouts read as compactd's records (docs/codex.md#how-compactd-reads-a-rollout).

A rollout is one JSON object a line, ``{"timestamp", "type", "payload"}`` (``ordinal`` too in
recent versions), possibly zstd-compressed whole (``.jsonl.zst``). The reader turns each line
into zero or more of compactd's records, in the shape of ``compactd/transcript``:

- ``response_item`` messages: the user's as user records (harness text such as the
  ``<environment_context>`` and every developer message, hooks' context included, as meta user
  records), the model's as assistant records; ``function_call``, ``custom_tool_call`` and
  ``local_shell_call`` as tool uses, their outputs as tool results (an exit code other than 0
  makes an error); reasoning and other items the model saw only as opaque data are passed over;
- ``token_usage_record`` (recent) or ``event_msg`` ``token_count`` (older) as an assistant
  record with no content that carries the response's usage, where the count anchors;
- ``compacted`` as a compaction: a ``compact_boundary`` and a summary whose text is what the
  model sees afterwards (every user message Codex kept, word for word, then its summary, or a
  note that a remote compaction's summary is encrypted);
- lines that repeat items (``event_msg`` ``user_message``, ``item_completed``...) or hold
  settings (``session_meta``, ``turn_context``, ``world_state``) give no record; a line of a
  type no Codex version is known to write is passed over and counted in the report.

Tool calls are written in Codex's vocabulary (``vocabulary``): every command a ``command``
string; ``apply_patch`` (its own tool, or a heredoc in a command) one tool use per file it
changes; a command that only reads files (``cat``, ``sed -n``, ``head``...) also names each
file it read, as a ``shell_read`` use. Every record's uuid comes from the line it was read
from, so reading the same lines again gives the same records.

A reader keeps what it learns across the chunks of one file (``CodexStream``): the model a
turn runs, whether usage comes as ``token_usage_record`` lines, and the user's messages, from
which an old ``compacted`` line without ``replacement_history`` is completed as Codex rebuilt
it. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
import zstandard

from compactd.agents.codex.calls import (
    APPLY_PATCH,
    LOCAL_SHELL,
    command_of,
    patch_files,
    patch_uses,
    read_files,
    run_uses,
)
from compactd.transcript.model import (
    COMPACT_BOUNDARY,
    ParseReport,
    Record,
    record_from_dict,
)

__all__ = [
    "CODEX",
    "CodexFormat",
    "CodexStream",
    "MAX_DECOMPRESSED_BYTES",
    "SUMMARY_PREFIX",
    "ZSTD_MAGIC",
    "decompress",
    "patch_files",
    "read_files",
]

# Codex compacts at this share of the window unless configured otherwise (docs/codex.md#the-compaction).
AUTO_COMPACT_SHARE: Final = 0.9
# The first bytes of a zstd frame (RFC 8878): a rollout Codex compressed whole.
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
# The most a compressed rollout is inflated to (compactd's bound, the import's own limit).
MAX_DECOMPRESSED_BYTES: Final = 512 * 1024 * 1024
# The line types Codex writes (docs/codex.md#rollouts and #format-variants-in-public-rollouts).
LINE_TYPES: Final = frozenset(
    {
        "session_meta",
        "response_item",
        "event_msg",
        "turn_context",
        "compacted",
        "world_state",
        "token_usage_record",
    }
)
# ``response_item`` items the model saw that carry no words to keep (encrypted reasoning, a
# snapshot of the work tree, a search's opaque result) or that are read elsewhere.
_PASSED_ITEMS: Final = frozenset(
    {"reasoning", "ghost_snapshot", "compaction", "compaction_summary", "other"}
)
# How Codex 0.171.0 opens the summary in the history it keeps (docs/codex.md#the-compaction).
SUMMARY_PREFIX: Final = "Another language model started to solve this problem"
_SUMMARY_MARK: Final = "use the information in this summary to assist with your own analysis:\n"
# User-role text that Codex's harness writes, not the person: the environment, the project's
# instructions, a turn the person interrupted. Kept as meta lines (counted, never the user's).
_HARNESS_OPENINGS: Final = (
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions",
    "<turn_aborted>",
    "<user_shell_command>",
    "<skills_instructions>",
    "<permissions instructions>",
)
# The command names Codex runs commands through (docs/codex.md#format-variants-in-public-rollouts).
RUN_TOOLS: Final = frozenset({"exec_command", "shell", "shell_command", "container.exec"})
_EXIT_CODE: Final = re.compile(r"(?:Process exited with code|Exit code:)\s*(-?\d+)")


def decompress(data: bytes, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """A zstd-compressed rollout's bytes (every frame), at most ``limit`` of them."""
    out: list[bytes] = []
    size = 0
    rest = data
    while rest.startswith(ZSTD_MAGIC) and size < limit:
        obj = zstandard.ZstdDecompressor().decompressobj()
        chunk = obj.decompress(rest)
        out.append(chunk[: limit - size])
        size += len(chunk)
        rest = obj.unused_data
    return b"".join(out)


def _text_of(content: Any) -> str:
    """The text of a Responses API content list (or a plain string)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif kind in ("input_image", "image"):
            parts.append("[image]")
        elif kind in ("input_file",):
            parts.append(f"[file {part.get('filename') or ''}]".replace(" ]", "]"))
    return "\n".join(parts)


def _harness(text: str) -> bool:
    return text.lstrip().startswith(_HARNESS_OPENINGS)


def _is_summary(text: str) -> bool:
    return text.startswith(SUMMARY_PREFIX)


def summary_text(message: str) -> str:
    """Codex's summary without the words it puts before it."""
    if _is_summary(message) and _SUMMARY_MARK in message:
        return message.split(_SUMMARY_MARK, 1)[1]
    return message


# -- the stream ------------------------------------------------------------------------------------


def _hash(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()[:24]


@dataclass(slots=True)
class CodexStream:
    """Reads one rollout's lines, in chunks, keeping what later lines need."""

    model: str | None = None
    cwd: str | None = None
    session_id: str | None = None
    # Whether the usage comes in ``token_usage_record`` lines (then ``token_count`` repeats it).
    usage_records: bool = False
    # The latest usage read (a compaction's figure before it).
    last_tokens: int | None = None
    # The user's messages so far, as an old compaction rebuilt its history from them.
    user_messages: list[str] = field(default_factory=list)
    lines: int = 0

    def feed(self, data: bytes, report: ParseReport | None = None) -> list[Record]:
        """The records of ``data`` (whole lines of the rollout, or a compressed rollout)."""
        if data.startswith(ZSTD_MAGIC):
            data = decompress(data)
        return self.records(data.split(b"\n"), report)

    def records(self, lines: Iterable[bytes], report: ParseReport | None = None) -> list[Record]:
        rep = report if report is not None else ParseReport()
        out: list[Record] = []
        for raw in lines:
            line = raw.strip()
            if not line:
                continue
            rep.lines += 1
            self.lines += 1
            found = self._line(line, rep)
            if found:
                rep.entries += 1
                out.extend(found)
        return out

    def _line(self, line: bytes, rep: ParseReport) -> list[Record]:
        try:
            obj = msgspec.json.decode(line)
        except msgspec.DecodeError as exc:
            return self._skip(rep, f"invalid JSON: {exc}")
        if not isinstance(obj, dict):
            return self._skip(rep, "a rollout line must be a JSON object")
        kind, payload = obj.get("type"), obj.get("payload")
        if kind not in LINE_TYPES or not isinstance(payload, dict):
            if kind in LINE_TYPES or isinstance(kind, str):
                return self._skip(rep, f"a Codex line of unknown type {str(kind)[:40]!r}")
            return self._skip(rep, "not a Codex rollout line")
        stamp = obj.get("timestamp") if isinstance(obj.get("timestamp"), str) else None
        key = _hash(line)
        if kind == "response_item":
            return self._item(payload, stamp, key, rep)
        if kind == "token_usage_record":
            self.usage_records = True
            return self._usage(payload.get("usage"), stamp, key)
        if kind == "event_msg":
            if payload.get("type") == "token_count" and not (
                self.usage_records or "ordinal" in obj
            ):
                info = payload.get("info")
                usage = info.get("last_token_usage") if isinstance(info, dict) else None
                return self._usage(usage, stamp, key)
            return []
        if kind == "compacted":
            return self._compacted(payload, stamp, key)
        if kind == "session_meta":
            nested = payload.get("meta")
            meta: dict[str, Any] = nested if isinstance(nested, dict) else payload
            if isinstance(meta.get("id"), str):
                self.session_id = meta["id"]
            if isinstance(meta.get("cwd"), str):
                self.cwd = meta["cwd"]
        elif kind == "turn_context":
            if isinstance(payload.get("model"), str):
                self.model = payload["model"]
            if isinstance(payload.get("cwd"), str):
                self.cwd = payload["cwd"]
        return []

    @staticmethod
    def _skip(rep: ParseReport, why: str) -> list[Record]:
        rep.skipped += 1
        if rep.first_error is None:
            rep.first_error = f"line {rep.lines}: {why}"
        return []

    # -- records -----------------------------------------------------------------------------

    def _record(self, kind: str, uuid: str, stamp: str | None, **fields: Any) -> Record:
        obj: dict[str, Any] = {"type": kind, "uuid": uuid}
        if stamp:
            obj["timestamp"] = stamp
        if self.session_id:
            obj["sessionId"] = self.session_id
        if self.cwd:
            obj["cwd"] = self.cwd
        obj.update(fields)
        return record_from_dict(obj)

    def _assistant(self, uuid: str, stamp: str | None, content: list[dict[str, Any]]) -> Record:
        message: dict[str, Any] = {"role": "assistant", "content": content, "id": uuid}
        if self.model:
            message["model"] = self.model
        return self._record("assistant", uuid, stamp, message=message)

    def _usage(self, usage: Any, stamp: str | None, key: str) -> list[Record]:
        """The usage of a response, as an assistant record with no content."""
        if not isinstance(usage, dict):
            return []
        numbers = {k: v for k, v in usage.items() if isinstance(v, int) and v >= 0}
        prompt = numbers.get("input_tokens", 0)
        cached = min(numbers.get("cached_input_tokens", 0), prompt)
        output = numbers.get("output_tokens", 0)
        if prompt + output <= 0:
            return []  # a zeroed count (right after a compaction): nothing to anchor on
        self.last_tokens = prompt + output
        uuid = f"codex-usage-{key}"
        message: dict[str, Any] = {
            "role": "assistant",
            "id": uuid,
            "content": [],
            "usage": {
                "input_tokens": prompt - cached,
                "cache_read_input_tokens": cached,
                "output_tokens": output,
            },
        }
        if self.model:
            message["model"] = self.model
        return [self._record("assistant", uuid, stamp, message=message)]

    def _item(
        self, item: dict[str, Any], stamp: str | None, key: str, rep: ParseReport
    ) -> list[Record]:
        kind = item.get("type", "message")
        ident = item.get("id") if isinstance(item.get("id"), str) else None
        uuid = f"codex-{ident}" if ident else f"codex-{key}"
        if kind == "message":
            return self._message(item, uuid, stamp)
        if kind in ("function_call", "custom_tool_call", "local_shell_call"):
            return [self._call(item, uuid, stamp)]
        if kind in (
            "function_call_output", "custom_tool_call_output", "local_shell_call_output",
            "mcp_tool_call_output", "tool_search_output",
        ):  # fmt: skip
            return self._output(item, uuid, stamp)
        if kind in ("web_search_call", "tool_search_call", "image_generation_call"):
            return [self._other_call(item, uuid, stamp)]
        if kind in _PASSED_ITEMS:
            return []
        return self._skip(rep, f"a Codex item of unknown type {str(kind)[:40]!r}")

    def _message(self, item: dict[str, Any], uuid: str, stamp: str | None) -> list[Record]:
        role = item.get("role")
        text = _text_of(item.get("content"))
        if not text.strip():
            return []
        if role == "assistant":
            return [self._assistant(uuid, stamp, [{"type": "text", "text": text}])]
        if role == "user" and not _harness(text) and not _is_summary(text):
            self.user_messages.append(text)
            return [self._record("user", uuid, stamp, message={"role": "user", "content": text})]
        # Developer and system messages, harness text: the model sees them, the person did not
        # write them (hooks' context, permissions, the environment).
        return [
            self._record(
                "user", uuid, stamp, isMeta=True, message={"role": "user", "content": text}
            )
        ]

    def _call(self, item: dict[str, Any], uuid: str, stamp: str | None) -> Record:
        kind = item.get("type")
        call_id = str(item.get("call_id") or item.get("id") or uuid)
        name = str(item.get("name") or "")
        args: dict[str, Any] = {}
        if kind == "local_shell_call":
            found = item.get("action")
            action: dict[str, Any] = found if isinstance(found, dict) else {}
            name, args = LOCAL_SHELL, {"command": command_of(action.get("command")) or ""}
            if isinstance(action.get("working_directory"), str):
                args["workdir"] = action["working_directory"]
        elif kind == "custom_tool_call":
            given = item.get("input")
            patch = given if isinstance(given, str) else ""
            if name == APPLY_PATCH:
                return self._assistant(uuid, stamp, patch_uses(call_id, patch, self.cwd))
            args = {"input": patch}
        else:
            raw = item.get("arguments")
            try:
                decoded = msgspec.json.decode(raw) if isinstance(raw, str) and raw else {}
            except msgspec.DecodeError:
                decoded = {"arguments": raw}
            args = decoded if isinstance(decoded, dict) else {"arguments": decoded}
            namespace = item.get("namespace")
            if isinstance(namespace, str) and namespace:
                name = f"{namespace}__{name}" if not name.startswith(namespace) else name
            elif name in RUN_TOOLS or name == APPLY_PATCH:
                return self._assistant(uuid, stamp, run_uses(call_id, name, args, self.cwd))
        use = {"type": "tool_use", "id": call_id, "name": name or "tool", "input": args}
        blocks = [use]
        if name == LOCAL_SHELL:
            blocks = run_uses(call_id, name, args, self.cwd)
        return self._assistant(uuid, stamp, blocks)

    def _other_call(self, item: dict[str, Any], uuid: str, stamp: str | None) -> Record:
        kind = str(item.get("type"))
        args = {k: v for k, v in item.items() if k not in ("type", "id", "status", "call_id")}
        call_id = str(item.get("call_id") or item.get("id") or uuid)
        use = {"type": "tool_use", "id": call_id, "name": kind.removesuffix("_call"), "input": args}
        return self._assistant(uuid, stamp, [use])

    def _output(self, item: dict[str, Any], uuid: str, stamp: str | None) -> list[Record]:
        call_id = item.get("call_id") or item.get("id")
        if not isinstance(call_id, str):
            return []
        text, failed = _output_text(item.get("output", item.get("tools")))
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": text}
        if failed:
            result["is_error"] = True
        return [self._record("user", uuid, stamp, message={"role": "user", "content": [result]})]

    def _compacted(self, payload: dict[str, Any], stamp: str | None, key: str) -> list[Record]:
        said = payload.get("message")
        message = said if isinstance(said, str) else ""
        history = payload.get("replacement_history")
        kept: list[str] = []
        encrypted = False
        if isinstance(history, list):
            for item in history:
                if not isinstance(item, dict):
                    continue
                if item.get("type") in ("compaction", "compaction_summary"):
                    encrypted = True
                    continue
                if item.get("type", "message") != "message" or item.get("role") != "user":
                    continue
                text = _text_of(item.get("content"))
                if text.strip() and not _harness(text) and not _is_summary(text):
                    kept.append(text)
        else:
            # Older versions kept no history in the line: Codex rebuilt it from the user's
            # messages before it (docs/codex.md#format-variants-in-public-rollouts).
            kept = list(self.user_messages)
        summary = summary_text(message).strip()
        parts = [*kept]
        if summary:
            parts.append(summary)
        elif encrypted or not message:
            parts.append(
                "[Codex's summary of this compaction is encrypted (a remote compaction): the "
                "user's messages above are what it kept readable]"
            )
        usage = payload.get("latest_token_usage_record")
        window = payload.get("window_number")
        meta: dict[str, Any] = {"trigger": "auto"}
        if self.last_tokens is not None:
            meta["preTokens"] = self.last_tokens
        if isinstance(usage, dict) and isinstance(usage.get("response_id"), str):
            meta["codexResponseId"] = usage["response_id"]
        if isinstance(window, int):
            meta["codexWindow"] = window
        boundary = self._record(
            "system",
            f"codex-compaction-{key}",
            stamp,
            subtype=COMPACT_BOUNDARY,
            content="Conversation compacted",
            level="info",
            compactMetadata=meta,
        )
        content = [{"type": "text", "text": part} for part in parts]
        summary_record = self._record(
            "user",
            f"codex-summary-{key}",
            stamp,
            isCompactSummary=True,
            isVisibleInTranscriptOnly=True,
            message={"role": "user", "content": content},
        )
        self.user_messages = list(kept)
        self.last_tokens = None
        return [boundary, summary_record]


def _output_text(output: Any) -> tuple[str, bool]:
    """A tool output as text, and whether it failed (an exit code other than 0, or
    ``success: false``)."""
    failed = False
    if isinstance(output, str) and output.startswith("{") and '"output"' in output:
        try:
            decoded = msgspec.json.decode(output)
        except msgspec.DecodeError:
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get("output"), str):
            meta = decoded.get("metadata")
            code = meta.get("exit_code") if isinstance(meta, dict) else None
            return decoded["output"], isinstance(code, int) and code != 0
    if isinstance(output, dict):
        failed = output.get("success") is False
        output = output.get("content", output.get("output", ""))
    text = output if isinstance(output, str) else _text_of(output)
    code = _EXIT_CODE.search(text[:2000])
    if code is not None and int(code.group(1)) != 0:
        failed = True
    return text, failed


# -- the format -------------------------------------------------------------------------------------


def _first_line(head: bytes) -> Iterator[dict[str, Any]]:
    for raw in head.split(b"\n")[:-1][:8]:
        if raw.strip():
            try:
                obj = msgspec.json.decode(raw)
            except msgspec.DecodeError:
                continue
            if isinstance(obj, dict):
                yield obj


class CodexFormat:
    """Codex CLI's rollout JSONL (``compactd.port.AgentFormat``)."""

    name: Final = "Codex"
    native: Final = False
    # A compaction is one line (docs/codex.md#the-compaction); JSON's own quotes, so the same
    # words inside a string do not match.
    compaction_marks: Final = re.compile(rb'"type"\s*:\s*"compacted"')
    boundary_mark: Final = re.compile(rb'"type"\s*:\s*"compacted"')

    def claims(self, head: bytes) -> bool:
        """A compressed rollout, or complete lines that are Codex's: ``timestamp``, ``type``
        (one Codex writes) and an object ``payload``, and no uuid."""
        if head.startswith(ZSTD_MAGIC):
            return True
        for obj in _first_line(head):
            return (
                obj.get("type") in LINE_TYPES
                and isinstance(obj.get("payload"), dict)
                and "timestamp" in obj
                and "uuid" not in obj
            )
        return False

    def stream(self) -> CodexStream:
        return CodexStream()

    def records(self, lines: Iterable[bytes], report: ParseReport | None = None) -> list[Record]:
        return CodexStream().records(lines, report)

    def recognizes(self, records: Iterable[Record]) -> bool:
        return any((r.uuid or "").startswith("codex-") for r in records)

    def transcript(self, data: bytes, report: ParseReport | None = None) -> bytes:
        records = CodexStream().feed(data, report)
        return b"".join(r.raw + b"\n" for r in records)

    def complete(self, data: bytes) -> int:
        """How much of ``data`` can be read now: a compressed rollout whole (written at once),
        else up to its last newline (a last line without one is being written)."""
        if data.startswith(ZSTD_MAGIC):
            return len(data)
        return data.rfind(b"\n") + 1

    def recorded_limits(self, data: bytes) -> tuple[str | None, int | None, int | None] | None:
        """The model of the rollout's latest turn, the window Codex reported for it and the
        size at which Codex compacts by default (90% of it; ``model_auto_compact_token_limit``
        in the user's config, which the rollout does not record, may lower it)."""
        if data.startswith(ZSTD_MAGIC):
            data = decompress(data)
        model = window = None
        for raw in reversed(data.splitlines()):
            if model is None and b'"turn_context"' in raw:
                model = _field(raw, "model")
            if window is None and b'"model_context_window"' in raw:
                window = _window(raw)
            if model is not None and window is not None:
                break
        if model is None and window is None:
            return None
        auto = int(window * AUTO_COMPACT_SHARE) if window else None
        return model, window, auto


def _field(raw: bytes, name: str) -> str | None:
    try:
        line = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    payload = line.get("payload") if isinstance(line, dict) else None
    value = payload.get(name) if isinstance(payload, dict) else None
    return value if isinstance(value, str) and value else None


def _window(raw: bytes) -> int | None:
    try:
        line = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    payload = line.get("payload") if isinstance(line, dict) else None
    if not isinstance(payload, dict):
        return None
    info = payload.get("info")
    for holder in (payload, info if isinstance(info, dict) else {}):
        window = holder.get("model_context_window")
        if isinstance(window, int) and window > 0:
            return window
    return None


CODEX: Final = CodexFormat()
