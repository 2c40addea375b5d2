"""The pieces of a Gemini CLI chat record compactd reads: a record's content as parts and the
text the model reads of them, a tool's response as text, a record's tokens as a usage, a path
made absolute against the project folder, what a record says whichever list holds it, and
which of the two formats a file's bytes are (docs/gemini.md#how-compactd-reads-a-chat). Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

import msgspec

__all__ = [
    "absolute",
    "first_object",
    "parts_of",
    "response_text",
    "signature",
    "text_of",
    "text_parts",
    "usage_of",
    "whole_json",
]

_EXIT_CODE: Final = re.compile(r"Exit Code:\s*(-?\d+)")


def parts_of(content: Any) -> list[dict[str, Any]]:
    """A record's content as parts (a plain string is one text part)."""
    if isinstance(content, str):
        return [{"text": content}] if content else []
    if isinstance(content, dict):
        return [content]
    if isinstance(content, list):
        return [p if isinstance(p, dict) else {"text": str(p)} for p in content if p is not None]
    return []


def text_parts(parts: Iterable[dict[str, Any]]) -> list[str]:
    """The text parts the model reads (thoughts left out)."""
    return [p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")]


def text_of(record: dict[str, Any]) -> str:
    return "".join(text_parts(parts_of(record.get("content"))))


def absolute(path: str, folder: str | None) -> str:
    if not folder or path.startswith("/") or not path:
        return path
    return f"{folder.rstrip('/')}/{path.removeprefix('./')}"


def response_text(response: Any) -> tuple[str, bool]:
    """A ``functionResponse.response`` as text, and whether it says the call failed."""
    if isinstance(response, dict):
        if isinstance(response.get("output"), str):
            text = response["output"]
            code = _EXIT_CODE.search(text[-2000:])
            return text, "error" in response or (code is not None and int(code.group(1)) != 0)
        if isinstance(response.get("error"), str):
            return response["error"], True
        if isinstance(response.get("content"), list):  # an MCP tool's result
            texts = [str(p.get("text")) for p in response["content"] if isinstance(p, dict)]
            return "\n".join(texts), response.get("isError") is True
    if isinstance(response, str):
        return response, False
    return msgspec.json.encode(response).decode() if response is not None else "", False


def usage_of(tokens: Any) -> dict[str, int] | None:
    """A record's ``tokens`` as a usage whose total is the record's ``total``."""
    if not isinstance(tokens, dict):
        return None
    n = {k: v for k, v in tokens.items() if isinstance(v, int) and v >= 0}
    prompt, cached = n.get("input", 0), n.get("cached", 0)
    cached = min(cached, prompt)
    output = n.get("output", 0) + n.get("thoughts", 0)
    fresh = prompt - cached + n.get("tool", 0)
    if fresh + cached + output <= 0:
        return None
    return {"input_tokens": fresh, "cache_read_input_tokens": cached, "output_tokens": output}


def signature(record: dict[str, Any]) -> str:
    """What a record says (its type, text and calls), the same whichever list holds it: a
    compression writes the records it keeps again under new ids (docs/gemini.md#compression)."""
    parts = parts_of(record.get("content"))
    names = [
        f"{p['functionCall'].get('name')}:{msgspec.json.encode(p['functionCall'].get('args'))!r}"
        for p in parts
        if isinstance(p.get("functionCall"), dict)
    ]
    answers = [
        str(p["functionResponse"].get("id"))
        for p in parts
        if isinstance(p.get("functionResponse"), dict)
    ]
    for call in record.get("toolCalls") or []:
        if isinstance(call, dict):
            call_sig = f"{call.get('name')}:{msgspec.json.encode(call.get('args'))!r}"
            if call_sig not in names:
                names.append(call_sig)
    return "\x00".join([str(record.get("type")), "".join(text_parts(parts)), *names, *answers])


def first_object(data: bytes) -> dict[str, Any] | None:
    """The first line of ``data`` as a JSON object, when it is a whole one."""
    first = data.lstrip().split(b"\n", 1)[0].strip()
    if not first.startswith(b"{"):
        return None
    try:
        obj = msgspec.json.decode(first)
    except msgspec.DecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def whole_json(data: bytes) -> bool:
    """Whether ``data`` is an older chat (one JSON object holding the list) rather than lines."""
    if not data.lstrip().startswith(b"{"):
        return False
    first = first_object(data)
    return first is None or (isinstance(first.get("messages"), list) and "$set" not in first)
