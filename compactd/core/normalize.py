"""The API view of a transcript: the Messages API ``messages`` list a session stands for.

A transcript is not an API request. It holds bookkeeping entries (progress, system notes,
boundaries, summaries of other sessions, queue operations, ...), error entries that Claude Code
made up locally, attachments that must be rendered as user content, and single model responses
written as several assistant entries (one per content block) with their tool results in
between. ``to_api_messages`` turns the current context of a session into a list the API
accepts: it starts with a user message, roles alternate, every ``tool_result`` follows the
assistant message holding its ``tool_use`` and tool results come first in their message.
Options apply the rewrites that compaction and microcompact need: placeholders for cleared
tool results, text markers for images and documents, and dropping the skill listing.

Pure: no I/O. The output is plain JSON-able dicts; unchanged blocks are the ones
``Record.api_blocks`` caches, shared between calls, so callers copy a block before changing it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from compactd.core.constants import SYNTHETIC_MODEL
from compactd.core.view import context_records, main_thread
from compactd.transcript.model import Record

__all__ = [
    "CLEARED_TOOL_RESULT_PLACEHOLDER",
    "DOCUMENT_MARKER",
    "IMAGE_MARKER",
    "SILENT_ATTACHMENTS",
    "rendered_blocks",
    "LEADING_USER_PLACEHOLDER",
    "ApiView",
    "api_view",
    "attachment_blocks",
    "is_synthetic_error",
    "to_api_messages",
]

# What a cleared tool result's content becomes. The wording is the one Claude Code uses
# (docs/microcompact.md#placeholders): keeping it means a transcript cleared by either tool
# reads the same.
CLEARED_TOOL_RESULT_PLACEHOLDER: Final = "[Old tool result content cleared]"

# Text that stands in for an image or a document when media are stripped before summarizing
# (docs/microcompact.md#placeholders, docs/compaction.md#input).
IMAGE_MARKER: Final = "[image]"
DOCUMENT_MARKER: Final = "[document]"

# The API requires the first message to come from the user. When the view would start with
# an assistant message (e.g. a hand-built session), this short user turn goes first.
LEADING_USER_PLACEHOLDER: Final = "[earlier conversation not shown]"


# Attachment kinds that render to nothing when a line carries no ``rendered`` copy: they record
# client state (a copy of the system prompt, hook bookkeeping) rather than model input. Seen in
# Claude Code 2.1.269 to 2.1.332 transcripts (2.1.332 writes a ``prompt_snapshot`` of the whole
# system prompt whenever it changes); the token estimate counts them as nothing too.
SILENT_ATTACHMENTS: Final = frozenset({"prompt_snapshot", "session_context", "hook_success"})

_SKILL_LISTING: Final = "skill_listing"

_THINKING_KINDS: Final = frozenset({"thinking", "redacted_thinking"})


@dataclass(slots=True)
class ApiView:
    """Normalized messages plus, for each message, the uuids of the entries it came from."""

    messages: list[dict[str, Any]]
    sources: list[list[str]]


def to_api_messages(
    records: Sequence[Record],
    *,
    cleared_tool_ids: frozenset[str] = frozenset(),
    strip_media: bool = False,
    drop_skill_listing: bool = False,
    placeholder: str = CLEARED_TOOL_RESULT_PLACEHOLDER,
) -> list[dict[str, Any]]:
    """The Messages API ``messages`` for a session (see ``api_view`` for the rules)."""
    return api_view(
        records,
        cleared_tool_ids=cleared_tool_ids,
        strip_media=strip_media,
        drop_skill_listing=drop_skill_listing,
        placeholder=placeholder,
    ).messages


def api_view(
    records: Sequence[Record],
    *,
    cleared_tool_ids: frozenset[str] = frozenset(),
    strip_media: bool = False,
    drop_skill_listing: bool = False,
    placeholder: str = CLEARED_TOOL_RESULT_PLACEHOLDER,
) -> ApiView:
    """Normalize a session's records into API messages, remembering where each came from.

    ``records`` may be a whole transcript or an already computed ``context_records`` view
    (slicing at the last boundary is idempotent). The rules:

    - only user, assistant and attachment entries count; sidechain entries of an inline
      sub-agent are dropped, and so are assistant entries Claude Code synthesized for API
      errors (``isApiErrorMessage`` or model ``<synthetic>``);
    - attachments become user text (their ``rendered`` copy when the line has one);
      ``drop_skill_listing`` drops the skill listing;
    - consecutive user content is merged into one message, tool results first;
    - assistant entries of one response (same ``message.id``) are merged into one message even
      when tool results were written between them; those results follow the whole message;
    - a tool result whose id is in ``cleared_tool_ids`` gets ``placeholder`` as content;
      ``strip_media`` turns images and documents (also inside tool results) into markers;
    - a tool result without its tool use in the message before is dropped, and so is a tool
      use without a result in the message after (unless it is in the final message, where
      the result is still to come); empty text blocks and empty messages go away;
    - trailing assistant messages made only of thinking are dropped;
    - the list starts with a user message and roles alternate.
    """
    opts = _Options(cleared_tool_ids, strip_media, drop_skill_listing, placeholder)
    view = main_thread(context_records(records))
    msgs = _merge(_items(view, opts))
    msgs = _repair(msgs)
    return ApiView(
        messages=[{"role": m.role, "content": m.blocks} for m in msgs],
        sources=[m.sources for m in msgs],
    )


def is_synthetic_error(record: Record) -> bool:
    """True for an assistant entry Claude Code wrote itself to report a failed API call."""
    entry = record.entry
    if entry.is_api_error_message is True:
        return True
    return entry.message is not None and entry.message.model == SYNTHETIC_MODEL


def attachment_blocks(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The content blocks an attachment line stands for in the API view.

    Claude Code 2.1.2xx+ stores what it sent as ``rendered``: a list of ``{content: ...}``
    parts (a string or a list of blocks each) or, in redacted captures, one string. Lines
    without it fall back to a compact text rendering of the attachment payload, except kinds
    known to render to nothing.
    """
    rendered = raw.get("rendered")
    if rendered is not None:
        return rendered_blocks(rendered)
    payload = raw.get("attachment")
    if not isinstance(payload, dict):
        return []
    kind = payload.get("type")
    if kind in SILENT_ATTACHMENTS:
        return []
    return [_text(_render_payload(payload))]


# -- internals -----------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class _Options:
    cleared_tool_ids: frozenset[str]
    strip_media: bool
    drop_skill_listing: bool
    placeholder: str


@dataclass(slots=True)
class _Item:
    """One transcript entry's contribution: a role, blocks and the response it belongs to."""

    role: str
    blocks: list[dict[str, Any]]
    message_id: str | None
    uuid: str | None


@dataclass(slots=True)
class _Msg:
    role: str
    blocks: list[dict[str, Any]]
    message_id: str | None = None
    sources: list[str] = field(default_factory=list)


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _items(view: Iterable[Record], opts: _Options) -> list[_Item]:
    items: list[_Item] = []
    for record in view:
        entry = record.entry
        if entry.type == "attachment":
            payload = entry.attachment
            kind = payload.get("type") if payload is not None else None
            if opts.drop_skill_listing and kind == _SKILL_LISTING:
                continue
            blocks = _clean_blocks(attachment_blocks(record.to_builtins()), opts)
            if blocks:
                items.append(_Item("user", blocks, None, entry.uuid))
            continue
        if entry.type not in ("user", "assistant"):
            continue
        if entry.type == "assistant" and is_synthetic_error(record):
            continue
        if entry.message is not None:
            message_id = entry.message.id
            blocks = record.api_blocks()
        else:
            # A degraded line (its typed view did not validate): use the raw message.
            message_id, blocks = _raw_message(record)
        blocks = _clean_blocks(blocks, opts)
        if blocks:
            items.append(_Item(entry.type, blocks, message_id, entry.uuid))
    return items


def _raw_message(record: Record) -> tuple[str | None, list[dict[str, Any]]]:
    message = record.to_builtins().get("message")
    if not isinstance(message, dict):
        return None, []
    mid = message.get("id")
    content = message.get("content")
    if isinstance(content, str):
        return (mid if isinstance(mid, str) else None), [_text(content)]
    if isinstance(content, list):
        blocks = [
            dict(b) for b in content if isinstance(b, dict) and isinstance(b.get("type"), str)
        ]
        return (mid if isinstance(mid, str) else None), blocks
    return None, []


def _clean_blocks(blocks: list[dict[str, Any]], opts: _Options) -> list[dict[str, Any]]:
    """Apply per-block rewrites; drops blocks that would be rejected as empty."""
    out: list[dict[str, Any]] = []
    for block in blocks:
        cleaned = _clean_block(block, opts)
        if cleaned is not None:
            out.append(cleaned)
    return out


def _clean_block(block: dict[str, Any], opts: _Options) -> dict[str, Any] | None:
    kind = block.get("type")
    # Cache breakpoints are placed by whoever builds the request, never inherited from the
    # transcript: stale markers would exceed the API's limit of four.
    if "cache_control" in block:
        block = {k: v for k, v in block.items() if k != "cache_control"}
    if kind == "text":
        text = block.get("text")
        return block if isinstance(text, str) and text.strip() else None
    if kind in ("image", "document") and opts.strip_media:
        return _text(IMAGE_MARKER if kind == "image" else DOCUMENT_MARKER)
    if kind == "tool_result":
        if block.get("tool_use_id") in opts.cleared_tool_ids:
            return {**block, "content": opts.placeholder}
        content = block.get("content")
        if isinstance(content, list):
            inner = _clean_blocks([b for b in content if isinstance(b, dict)], opts)
            return {**block, "content": inner}
    return block


def rendered_blocks(rendered: Any) -> list[dict[str, Any]]:
    """The content blocks of an attachment's ``rendered`` copy (a string, or parts each holding
    a string or a list of blocks)."""
    if isinstance(rendered, str):
        return [_text(rendered)] if rendered else []
    if not isinstance(rendered, list):
        return []
    out: list[dict[str, Any]] = []
    for part in rendered:
        content = part.get("content") if isinstance(part, dict) else part
        if isinstance(content, str):
            if content:
                out.append(_text(content))
        elif isinstance(content, list):
            for block in content:
                if isinstance(block, str):
                    out.append(_text(block))
                elif isinstance(block, dict) and isinstance(block.get("type"), str):
                    out.append(dict(block))
    return out


def _render_payload(payload: dict[str, Any]) -> str:
    """A compact, deterministic text form of an attachment without a rendered copy."""
    kind = payload.get("type", "attachment")
    body: str | None = None
    for key in ("content", "text", "prompt", "stdout"):
        value = payload.get(key)
        if isinstance(value, str) and value:
            body = value
            break
    if body is None:
        rest = {k: v for k, v in payload.items() if k != "type"}
        body = json.dumps(rest, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return system_reminder(f"Attachment ({kind}):\n{body}")


def system_reminder(text: str) -> str:
    """``text`` as Claude Code marks context the harness adds, not the user's words."""
    return f"{SYSTEM_REMINDER_OPEN}\n{text}\n{SYSTEM_REMINDER_CLOSE}"


SYSTEM_REMINDER_OPEN = "<system-reminder>"
SYSTEM_REMINDER_CLOSE = "</system-reminder>"


def _merge(items: list[_Item]) -> list[_Msg]:
    """Merge items into alternating messages; a response's entries become one message."""
    msgs: list[_Msg] = []
    last_assistant: _Msg | None = None
    for item in items:
        if item.role == "assistant":
            # Only user content (typically the tool results of this very response) can lie
            # between ``last_assistant`` and here, so appending keeps that content after the
            # whole response, which is the order the API requires.
            if (
                item.message_id is not None
                and last_assistant is not None
                and last_assistant.message_id == item.message_id
            ):
                last_assistant.blocks.extend(item.blocks)
                _add_source(last_assistant, item.uuid)
                continue
            if msgs and msgs[-1].role == "assistant":
                # Two different responses in a row (the user turn between them was dropped):
                # the API wants alternation, so they become one message.
                msgs[-1].blocks.extend(item.blocks)
                msgs[-1].message_id = item.message_id
                _add_source(msgs[-1], item.uuid)
                last_assistant = msgs[-1]
                continue
            last_assistant = _Msg("assistant", list(item.blocks), item.message_id)
            _add_source(last_assistant, item.uuid)
            msgs.append(last_assistant)
        else:
            if msgs and msgs[-1].role == "user":
                msgs[-1].blocks.extend(item.blocks)
            else:
                msgs.append(_Msg("user", list(item.blocks)))
            _add_source(msgs[-1], item.uuid)
    return msgs


def _add_source(msg: _Msg, uuid: str | None) -> None:
    if uuid is not None:
        msg.sources.append(uuid)


def _repair(msgs: list[_Msg]) -> list[_Msg]:
    """Enforce the API's structural rules until nothing changes."""
    while True:
        before = [(m.role, len(m.blocks)) for m in msgs]
        msgs = _pair_tools(msgs)
        msgs = [m for m in msgs if m.blocks]
        while msgs and msgs[-1].role == "assistant" and _thinking_only(msgs[-1]):
            msgs.pop()
        msgs = _coalesce(msgs)
        if [(m.role, len(m.blocks)) for m in msgs] == before:
            break
    for m in msgs:
        if m.role == "user":
            _tool_results_first(m)
    if msgs and msgs[0].role == "assistant":
        msgs.insert(0, _Msg("user", [_text(LEADING_USER_PLACEHOLDER)]))
    return msgs


def _thinking_only(msg: _Msg) -> bool:
    return all(b.get("type") in _THINKING_KINDS for b in msg.blocks)


def _coalesce(msgs: list[_Msg]) -> list[_Msg]:
    out: list[_Msg] = []
    for m in msgs:
        if out and out[-1].role == m.role:
            out[-1].blocks.extend(m.blocks)
            out[-1].sources.extend(m.sources)
        else:
            out.append(m)
    return out


def _tool_results_first(msg: _Msg) -> None:
    results = [b for b in msg.blocks if b.get("type") == "tool_result"]
    if results and len(results) != len(msg.blocks):
        msg.blocks = results + [b for b in msg.blocks if b.get("type") != "tool_result"]


def _pair_tools(msgs: list[_Msg]) -> list[_Msg]:
    """Keep tool uses and tool results only in matched pairs of adjacent messages."""
    seen_uses: set[str] = set()
    last = len(msgs) - 1
    kept_uses: set[str] = set()
    for i, m in enumerate(msgs):
        if m.role == "assistant":
            answered = _result_ids(msgs[i + 1]) if i < last and msgs[i + 1].role == "user" else None
            blocks: list[dict[str, Any]] = []
            kept_uses = set()
            for b in m.blocks:
                if b.get("type") == "tool_use":
                    tid = b.get("id")
                    if not isinstance(tid, str) or tid in seen_uses:
                        continue
                    if i != last and (answered is None or tid not in answered):
                        continue
                    seen_uses.add(tid)
                    kept_uses.add(tid)
                blocks.append(b)
            m.blocks = blocks
        else:
            prior = kept_uses if i > 0 and msgs[i - 1].role == "assistant" else set()
            done: set[str] = set()
            blocks = []
            for b in m.blocks:
                if b.get("type") == "tool_result":
                    tid = b.get("tool_use_id")
                    if not isinstance(tid, str) or tid not in prior or tid in done:
                        continue
                    done.add(tid)
                blocks.append(b)
            m.blocks = blocks
            kept_uses = set()
    return msgs


def _result_ids(msg: _Msg) -> set[str]:
    return {
        tid
        for b in msg.blocks
        if b.get("type") == "tool_result" and isinstance(tid := b.get("tool_use_id"), str)
    }
