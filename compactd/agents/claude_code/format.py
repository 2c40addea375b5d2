"""The lines of a compaction written as a new Claude Code session, for ``claude --resume``.

compactd's own transcript lines are built in ``entries``; this module builds the other kind of
file compactd writes: a Claude Code session of its own (``<newSessionId>.jsonl`` beside the
original) that starts where Claude Code's own compactions leave a session. The lines are those
Claude Code 2.1.330 writes for a compaction (docs/claude-code.md#the-lines): a
``compact_boundary`` that names the preserved segment, the ``isCompactSummary`` user line, the
attachments rendered as user content, then the last assistant turn kept verbatim, so the file
never ends on the summary. Every line carries the new session id and the session fields the
source carried (version, branch, entrypoint, slug, cwd); kept lines get new uuids, chained.
Pure: the caller reads the source and writes the lines.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from compactd.transcript.entries import COMPACTION_CONTENT, new_uuid
from compactd.transcript.model import (
    COMPACT_BOUNDARY,
    ParseReport,
    Record,
    parse_lines,
    transcript_timestamp,
)
from compactd.transcript.reading import parse_buffer
from compactd.transcript.summaries import (
    HOOK_ROW_SOURCE,
    is_hook_summary,
    mark_hook_summaries,
    marked_summary,
)

__all__ = [
    "CLAUDE_CODE",
    "HOOK_ROW_SOURCE",
    "ClaudeCodeFormat",
    "SESSION_FIELDS",
    "SourceFacts",
    "is_hook_summary",
    "mark_hook_summaries",
    "resume_command",
    "resume_lines",
    "mark_hook_summary_lines",
    "source_facts",
]

# The per-session fields Claude Code 2.1.330 stamps on every line it writes (seen in
# tests/data/transcripts/claude-code-2.1.330__*.jsonl); copied from the source's latest line
# that has each, so the new session reads as the same agent, project and branch.
SESSION_FIELDS: Final = ("userType", "entrypoint", "cwd", "version", "gitBranch", "slug")

# Fields of a kept line that name other lines by uuid: renamed with the line they point to.
_UUID_REFERENCES: Final = ("parentUuid", "logicalParentUuid", "sourceToolAssistantUUID")

# compactd's own bookkeeping fields: they mean nothing to Claude Code.
_COMPACTD_PREFIX: Final = "compactd"


@dataclass(frozen=True, slots=True)
class SourceFacts:
    """What the new session takes from the Claude Code transcript it continues."""

    path: str
    session_id: str | None
    # The session fields (``SESSION_FIELDS``) as the source's latest lines carry them.
    fields: dict[str, Any] = field(default_factory=dict)
    # The prompt the last human message answered to (Claude Code tags a turn's lines with it).
    prompt_id: str | None = None
    # The last line with a uuid: the boundary's logical parent.
    last_uuid: str | None = None
    # Whether any assistant response is there to keep (nothing can be resumed without one).
    has_assistant: bool = False

    @property
    def cwd(self) -> str | None:
        cwd = self.fields.get("cwd")
        return cwd if isinstance(cwd, str) and cwd else None


def source_facts(path: str, lines: Iterable[dict[str, Any]]) -> SourceFacts:
    """The session id, session fields, prompt id and last uuid of a Claude Code transcript."""
    session_id: str | None = None
    fields: dict[str, Any] = {}
    prompt_id: str | None = None
    last_uuid: str | None = None
    has_assistant = False
    for line in lines:
        sid = line.get("sessionId")
        if isinstance(sid, str) and sid:
            session_id = sid
        for name in SESSION_FIELDS:
            if name in line and line[name] is not None:
                fields[name] = line[name]
        if line.get("type") == "user" and isinstance(line.get("promptId"), str):
            prompt_id = line["promptId"]
        uid = line.get("uuid")
        if isinstance(uid, str) and uid:
            last_uuid = uid
        has_assistant = has_assistant or line.get("type") == "assistant"
    return SourceFacts(
        path=path,
        session_id=session_id,
        fields=fields,
        prompt_id=prompt_id,
        last_uuid=last_uuid,
        has_assistant=has_assistant,
    )


def _stamped(line: dict[str, Any], facts: SourceFacts, session_id: str) -> dict[str, Any]:
    """``line`` with the source's session fields and the new session id (last, as Claude Code
    orders them)."""
    out = {k: v for k, v in line.items() if not k.startswith(_COMPACTD_PREFIX)}
    for name in ("isSidechain",):
        out.setdefault(name, False)
    out.update(facts.fields)
    out["sessionId"] = session_id
    return out


def _attachment(att: dict[str, Any]) -> dict[str, Any]:
    """An attachment line as Claude Code writes its own: text it renders goes to the model as
    user content (``renderedRole: "user"``); without the role Claude Code sends it in a
    system-role message after the prompt (docs/claude-code.md#attachments)."""
    out = {k: v for k, v in att.items() if k not in ("uuid", "parentUuid")}
    out["type"] = "attachment"
    if out.get("rendered"):
        out["renderedRole"] = "user"
    return out


def resume_lines(
    facts: SourceFacts,
    *,
    session_id: str,
    continuation: str,
    metadata: dict[str, Any],
    attachments: Sequence[dict[str, Any]],
    kept: Sequence[dict[str, Any]],
    at: float | None = None,
) -> list[dict[str, Any]]:
    """The lines of a new Claude Code session that resumes ``facts``' session compacted.

    ``continuation``: the summary's user message. ``metadata``: the boundary's
    ``compactMetadata`` figures (``trigger``, ``preTokens``, ``postTokens``...; the preserved
    segment is added here). ``attachments``: attachment lines to restore after the summary.
    ``kept``: the source's lines kept verbatim after them (the last assistant turn), in order.
    Order: boundary, summary, attachments, kept lines, each parented on the one before.
    """
    stamp = transcript_timestamp(at)
    boundary_uuid, summary_uuid = new_uuid(), new_uuid()
    renamed = {line["uuid"]: new_uuid() for line in kept if isinstance(line.get("uuid"), str)}

    out: list[dict[str, Any]] = []
    summary: dict[str, Any] = {
        "parentUuid": boundary_uuid,
        "type": "user",
        "message": {"role": "user", "content": continuation},
        "isVisibleInTranscriptOnly": True,
        "isCompactSummary": True,
        "uuid": summary_uuid,
        "timestamp": stamp,
    }
    if facts.prompt_id:
        summary["promptId"] = facts.prompt_id
    parent = summary_uuid
    rest: list[dict[str, Any]] = []
    kept_uuids: list[str] = []
    for original in kept:
        line = dict(original)
        old_parent = line.get("parentUuid")
        for name in _UUID_REFERENCES:
            ref = line.get(name)
            if isinstance(ref, str) and ref in renamed:
                line[name] = renamed[ref]
        # The first kept line, and any whose parent was not kept, hang off the line before.
        if not (isinstance(old_parent, str) and old_parent in renamed):
            line["parentUuid"] = parent
        if isinstance(original.get("uuid"), str):
            line["uuid"] = renamed[original["uuid"]]
            kept_uuids.append(line["uuid"])
            parent = line["uuid"]
        rest.append(line)
    for att in attachments:
        line = {**_attachment(att), "uuid": new_uuid(), "parentUuid": parent, "timestamp": stamp}
        parent = line["uuid"]
        rest.append(line)

    meta = dict(metadata)
    if kept_uuids:
        # As Claude Code records the messages it keeps after its summary: head and tail of the
        # kept run and the summary they follow (its loader relinks them there).
        meta["preservedSegment"] = {
            "headUuid": kept_uuids[0],
            "anchorUuid": summary_uuid,
            "tailUuid": kept_uuids[-1],
        }
        meta["preservedMessages"] = {
            "anchorUuid": summary_uuid,
            "uuids": kept_uuids,
            "allUuids": kept_uuids,
        }
    boundary: dict[str, Any] = {
        "parentUuid": None,
        "logicalParentUuid": facts.last_uuid,
        "type": "system",
        "subtype": COMPACT_BOUNDARY,
        "content": COMPACTION_CONTENT,
        "isMeta": False,
        "timestamp": stamp,
        "uuid": boundary_uuid,
        "level": "info",
        "compactMetadata": meta,
    }
    out.append(boundary)
    out.append(summary)
    out.extend(rest)
    return [_stamped(line, facts, session_id) for line in out]


def resume_command(session_id: str, cwd: str | None, *, here: str | None = None) -> str:
    """The shell command that resumes the session: Claude Code looks a session up in the project
    folder of the directory it starts in, so it runs from the session's cwd."""
    command = f"claude --resume {shlex.quote(session_id)}"
    if cwd and cwd != here:
        return f"cd {shlex.quote(cwd)} && {command}"
    return command


# -- compactions a plugin hook answered -----------------------------------------------------------

# A hook's row in a raw line, found without decoding the line (the quotes are JSON's own).
_HOOK_ROW: Final = re.compile(rb'"rowSource"\s*:\s*"hook"')


def mark_hook_summary_lines(data: bytes, before: Iterable[str] = ()) -> bytes:
    """``data`` (whole lines) with ``"isCompactSummary": true`` added to each line that is the
    summary of a compaction a plugin hook answered, parented on a boundary among ``data`` or
    ``before`` (the uuids of boundaries read before ``data``): the form compactd's own copy of
    an imported or followed transcript keeps it in, and the form every reader of lines takes it
    in (docs/claude-code.md#what-the-transcript-keeps). Every other line is kept byte for byte;
    without such a line, ``data`` itself comes back."""
    # A plain search first: most transcripts hold no row of a hook at all, and it reads a
    # megabyte in microseconds where the pattern takes a fraction of a millisecond.
    if b'"rowSource"' not in data or not _HOOK_ROW.search(data):
        return data
    lines = data.split(b"\n")
    boundaries = set(before)
    for i, line in enumerate(lines):
        if b"compact_boundary" not in line and not _HOOK_ROW.search(line):
            continue  # neither a boundary nor a hook's row: nothing to read in it
        try:
            (record,) = parse_lines([line])
        except ValueError:
            continue  # a line that does not parse is kept as it is (and skipped by readers)
        entry = record.entry
        if entry.is_compact_boundary and entry.uuid:
            boundaries.add(entry.uuid)
        elif is_hook_summary(entry, boundaries):
            lines[i] = marked_summary(record).raw
    return b"\n".join(lines)


_ENCODER: Final = msgspec.json.Encoder()


class ClaudeCodeStream:
    """A Claude Code file read chunk after chunk (``compactd.port.RecordStream``): each line
    stands alone but for a hook-answered compaction's summary, known by the boundary line
    before it, which may have ended the chunk before; the last boundary read is kept for it."""

    def __init__(self) -> None:
        self._boundary: str | None = None

    def feed(self, data: bytes, report: ParseReport | None = None) -> list[Record]:
        before = (self._boundary,) if self._boundary else ()
        records = [r for _, r in parse_buffer(mark_hook_summary_lines(data, before), report)]
        for record in reversed(records):
            if record.entry.is_compact_boundary and record.entry.uuid:
                self._boundary = record.entry.uuid
                break
        return records


# -- reading a running Claude Code session --------------------------------------------------------


class ClaudeCodeFormat:
    """Claude Code's JSONL transcript, as the port reads an agent's session
    (``compactd.port.AgentFormat``). Its lines are compactd's own: read as they are."""

    name: Final = "Claude Code"
    native: Final = True
    # A compaction's lines: the boundary and its summary (docs/claude-code.md#the-lines). The
    # quotes are JSON's own, so the same words inside a string (escaped quotes) never match.
    compaction_marks: Final = re.compile(
        rb'"subtype"\s*:\s*"compact_boundary"|"isCompactSummary"\s*:\s*true'
    )
    boundary_mark: Final = re.compile(rb'"subtype"\s*:\s*"compact_boundary"')

    def claims(self, head: bytes) -> bool:
        """Whether the complete lines among a file's first bytes are Claude Code's."""
        return self.recognizes(self.records(head.split(b"\n")[:-1]))

    def records(self, lines: Iterable[bytes], report: ParseReport | None = None) -> list[Record]:
        records = list(parse_lines(lines, report))
        mark_hook_summaries(records)
        return records

    def transcript(self, data: bytes, report: ParseReport | None = None) -> bytes:
        """The file's lines as they are (the store counts the lines it cannot read), but for
        the summary of a compaction a plugin hook answered, which gets ``isCompactSummary``
        (``mark_hook_summary_lines``)."""
        return mark_hook_summary_lines(data)

    def stream(self) -> ClaudeCodeStream:
        return ClaudeCodeStream()

    def complete(self, data: bytes) -> int:
        return data.rfind(b"\n") + 1  # a last line without its newline is being written

    def recorded_limits(self, data: bytes) -> tuple[str | None, int | None, int | None] | None:
        return None  # Claude's model names say their window (docs/thresholds.md#model-limits)

    def recognizes(self, records: Iterable[Record]) -> bool:
        """Whether the lines are Claude Code's: messages and system lines with uuids."""
        return any(r.entry.type in _CLAUDE_CODE_KINDS and r.entry.uuid is not None for r in records)


_CLAUDE_CODE_KINDS: Final = frozenset({"user", "assistant", "system", "attachment"})
CLAUDE_CODE: Final = ClaudeCodeFormat()
