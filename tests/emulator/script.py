"""Scripted behaviours for the emulator.

A script is a FIFO of ``Reply`` and ``ApiError`` objects; each ``POST
/v1/messages`` that passes authentication and validation takes the next one.
When the queue is empty the emulator's default behaviour applies (a ``Reply()``
unless changed with ``Emulator.set_default``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT",
    "ApiError",
    "Reply",
    "ToolUse",
    "api_error",
    "authentication_error",
    "cut_stream",
    "default_summary",
    "empty_reply",
    "error_from_dict",
    "mid_stream_error",
    "no_message_stop",
    "overloaded",
    "prompt_too_long",
    "rate_limited",
    "reply_from_dict",
    "request_kind",
    "truncated_stream",
    "user_texts",
]


class _Default:
    """Marker: derive the reply text from the request."""

    _instance: _Default | None = None

    def __new__(cls) -> _Default:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Any = _Default()

STATUS_FOR_TYPE = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}

DEFAULT_MESSAGES = {
    "invalid_request_error": "Invalid request",
    "authentication_error": "invalid x-api-key",
    "permission_error": "Your API key does not have permission to use the specified resource.",
    "not_found_error": "Not found",
    "request_too_large": "Request exceeds the maximum allowed number of bytes.",
    "rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit",
    "api_error": "Internal server error",
    "overloaded_error": "Overloaded",
}

FAULTS = (None, "error", "cut", "truncate", "no_message_stop")


@dataclass
class ApiError:
    """An error answered instead of a message (HTTP status >= 400).

    ``retry_after`` (seconds) and ``retry_after_ms`` add the ``retry-after`` /
    ``retry-after-ms`` headers; ``headers`` adds anything else (for example
    ``{"x-should-retry": "false"}``).  With ``prompt_too_long=True`` the message
    is built from the request: "prompt is too long: N tokens > M maximum" where
    N is ``tokens`` (default: the request's estimate) and M is ``maximum``
    (default: the model's context window when N exceeds it, else N minus
    ``over_by`` (default 10% of N, at least 1)).
    """

    type: str = "api_error"
    message: str | None = None
    status: int | None = None
    retry_after: float | None = None
    retry_after_ms: float | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    prompt_too_long: bool = False
    tokens: int | None = None
    maximum: int | None = None
    over_by: int | None = None

    @property
    def http_status(self) -> int:
        return self.status if self.status is not None else STATUS_FOR_TYPE.get(self.type, 500)

    def text(self) -> str:
        return (
            self.message if self.message is not None else DEFAULT_MESSAGES.get(self.type, self.type)
        )


@dataclass
class ToolUse:
    """A tool call the emulated model makes (streamed as input_json_delta chunks)."""

    name: str
    input: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass
class Reply:
    """A successful (HTTP 200) reply.

    Content, in order: a thinking block when ``thinking`` is set (with
    ``signature`` or a derived one), a text block, then the tool_use blocks.
    ``text=DEFAULT`` gives the derived ``<analysis>/<summary>`` text when there
    are no tool calls and no text block when there are; ``text=None`` never adds
    a text block; ``text=""`` adds an empty one.  ``empty=True`` sends no content
    blocks at all.

    Timing: ``delay`` seconds before the response starts, ``chunk_delay``
    seconds between stream events.  ``chunk_chars`` (default: the emulator's)
    sets the size of text/thinking/json deltas.

    Faults (streaming; ``fault_after`` = number of content deltas sent first,
    default 2, capped at the number available):

    * ``"error"``: an ``event: error`` with ``fault_error`` (default
      overloaded_error) and then a clean end of the body.
    * ``"cut"``: the socket is closed abruptly (no terminating chunk).
    * ``"truncate"``: the body ends cleanly, without content_block_stop,
      message_delta or message_stop.
    * ``"no_message_stop"``: everything except the final message_stop.

    For non-streaming requests ``"error"`` answers ``fault_error`` as an HTTP
    error, ``"cut"`` closes the socket halfway through the body, and the other
    two are ignored.

    The output is limited by the request's ``max_tokens`` (text is cut and
    stop_reason becomes "max_tokens"); ``stop_reason`` and ``output_tokens``
    override the computed values.
    """

    text: Any = DEFAULT
    thinking: str | None = None
    signature: str | None = None
    tool_uses: Sequence[ToolUse] = ()
    empty: bool = False
    stop_reason: str | None = None
    output_tokens: int | None = None
    delay: float = 0.0
    chunk_delay: float = 0.0
    chunk_chars: int | None = None
    fault: str | None = None
    fault_after: int = 2
    fault_error: ApiError | None = None

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise ValueError(f"unknown fault {self.fault!r}; expected one of {FAULTS}")
        if isinstance(self.tool_uses, ToolUse):
            self.tool_uses = (self.tool_uses,)


# ----------------------------------------------------------------- helpers


def overloaded(**kw: Any) -> ApiError:
    """529 overloaded_error."""
    return ApiError(type="overloaded_error", **kw)


def api_error(**kw: Any) -> ApiError:
    """500 api_error."""
    return ApiError(type="api_error", **kw)


def rate_limited(
    retry_after: float | None = 0, retry_after_ms: float | None = 10, **kw: Any
) -> ApiError:
    """429 rate_limit_error with ``retry-after`` (seconds) and ``retry-after-ms`` headers.

    The SDK prefers ``retry-after-ms``; a ``retry-after`` of 0 alone makes it
    fall back to its own backoff (about 0.5 s), so the ms header keeps tests fast.
    """
    return ApiError(
        type="rate_limit_error", retry_after=retry_after, retry_after_ms=retry_after_ms, **kw
    )


def authentication_error(message: str = "invalid x-api-key", **kw: Any) -> ApiError:
    """401 authentication_error."""
    return ApiError(type="authentication_error", message=message, **kw)


def prompt_too_long(
    tokens: int | None = None, maximum: int | None = None, over_by: int | None = None
) -> ApiError:
    """400 invalid_request_error "prompt is too long: N tokens > M maximum"."""
    return ApiError(
        type="invalid_request_error",
        prompt_too_long=True,
        tokens=tokens,
        maximum=maximum,
        over_by=over_by,
    )


def mid_stream_error(after: int = 2, error: ApiError | None = None, **kw: Any) -> Reply:
    """A stream that emits ``event: error`` after ``after`` content deltas."""
    return Reply(fault="error", fault_after=after, fault_error=error, **kw)


def cut_stream(after: int = 2, **kw: Any) -> Reply:
    """A stream whose connection is closed abruptly after ``after`` content deltas."""
    return Reply(fault="cut", fault_after=after, **kw)


def truncated_stream(after: int = 2, **kw: Any) -> Reply:
    """A stream that ends cleanly after ``after`` deltas with no message_delta/message_stop."""
    return Reply(fault="truncate", fault_after=after, **kw)


def no_message_stop(**kw: Any) -> Reply:
    """A complete stream minus the final message_stop event."""
    return Reply(fault="no_message_stop", **kw)


def empty_reply(**kw: Any) -> Reply:
    """A reply with no content blocks at all."""
    return Reply(empty=True, **kw)


def error_from_dict(spec: Mapping[str, Any]) -> ApiError:
    return ApiError(**dict(spec))


def reply_from_dict(spec: Mapping[str, Any]) -> Reply | ApiError:
    """Build a script item from JSON (used by the HTTP control endpoint).

    ``{"error": {...ApiError fields...}}`` gives an ApiError; anything else is
    passed to ``Reply`` (``tool_uses`` as a list of ``{"name", "input", "id"}``,
    ``fault_error`` as ApiError fields, a missing ``text`` means DEFAULT).
    """
    spec = dict(spec)
    if "error" in spec:
        return error_from_dict(spec["error"])
    if "tool_uses" in spec:
        spec["tool_uses"] = [ToolUse(**t) for t in spec["tool_uses"]]
    if isinstance(spec.get("fault_error"), Mapping):
        spec["fault_error"] = error_from_dict(spec["fault_error"])
    return Reply(**spec)


# ------------------------------------------------------- derived summary

_TAG_RE = re.compile(r"</?\s*(analysis|summary)\s*>", re.IGNORECASE)


def user_texts(body: Mapping[str, Any]) -> list[str]:
    """Text of each user message (text blocks only; tool results are skipped)."""
    out: list[str] = []
    for message in body.get("messages") or []:
        if not isinstance(message, Mapping) or message.get("role") != "user":
            continue
        content = message.get("content")
        parts: list[str] = []
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for blk in content:
                if isinstance(blk, Mapping) and blk.get("type") == "text":
                    parts.append(str(blk.get("text", "")))
        text = "\n".join(p for p in parts if p)
        if text:
            out.append(text)
    return out


REQUEST_KINDS = ("summary", "main")


def request_kind(body: Mapping[str, Any]) -> str:
    """``"summary"`` for a summarization request, ``"main"`` for anything else.

    A summarization request, in either of compactd's request modes, ends with an instruction
    asking for an ``<analysis>`` block and a ``<summary>`` block (compactd/core/prompts.py); an
    agent's own turn ends with its prompt or its tool results.
    """
    messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
    if not messages or messages[-1].get("role") != "user":
        return "main"
    content = messages[-1].get("content")
    if isinstance(content, list):
        texts = [
            b.get("text") for b in content if isinstance(b, Mapping) and b.get("type") == "text"
        ]
        last = str(texts[-1]) if texts else ""
    else:
        last = str(content or "")
    return "summary" if "<analysis>" in last and "<summary>" in last else "main"


def _snippet(text: str, limit: int) -> str:
    flat = " ".join(_TAG_RE.sub(" ", text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


_QUOTE_RE = re.compile(r'^\s*- "(.*)"\s*$', re.MULTILINE)
_OMITTED_RE = re.compile(r"\((\d+) earlier user messages omitted\)")


def _carried(text: str) -> tuple[list[str], int] | None:
    """The user messages quoted by an earlier summary that ``text`` carries (the opening of a
    conversation continued after a compaction, or a summary being brought up to date), and how
    many it left out; None when ``text`` carries none. A model asked to summarize such a
    conversation keeps what the earlier summary says, so the derived summary does too."""
    _, found, rest = text.partition("All user messages:")
    if not found:
        return None
    section = rest.split("7. Pending Tasks:", 1)[0]
    omitted = _OMITTED_RE.search(section)
    return _QUOTE_RE.findall(section), int(omitted.group(1)) if omitted else 0


def _expand(texts: list[str]) -> tuple[list[str], int]:
    """``texts`` with each earlier summary replaced by the messages it quotes; and how many
    messages those summaries had left out already."""
    out: list[str] = []
    left_out = 0
    for text in texts:
        carried = _carried(text)
        if carried is None:
            out.append(text)
        else:
            out.extend(carried[0])
            left_out += carried[1]
    return out, left_out


def default_summary(
    body: Mapping[str, Any], *, max_quotes: int = 40, quote_chars: int = 300
) -> str:
    """Deterministic ``<analysis>...</analysis>\\n\\n<summary>...</summary>`` text.

    The summary quotes the user messages of the request (whitespace collapsed,
    any analysis/summary tags removed, each cut to ``quote_chars``; only the last
    ``max_quotes`` are listed), so a summary visibly reflects its input. A user message that
    carries an earlier summary (a conversation continued after a compaction) stands for the
    messages that summary quotes, as a real model carries them forward.
    """
    from .tokens import estimate_tokens

    messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
    n_user = sum(1 for m in messages if m.get("role") == "user")
    n_assistant = sum(1 for m in messages if m.get("role") == "assistant")
    texts, left_out = _expand(user_texts(body))
    first = _snippet(texts[0], quote_chars) if texts else "(no user text)"
    last = _snippet(texts[-1], quote_chars) if texts else "(no user text)"
    shown = texts[-max_quotes:] if max_quotes > 0 else []
    omitted = len(texts) - len(shown) + left_out

    lines = [
        "<analysis>",
        f"The conversation has {len(messages)} messages ({n_user} user, {n_assistant} assistant) "
        f"and about {estimate_tokens(body)} input tokens. {len(texts)} user messages contain text.",
        "</analysis>",
        "",
        "<summary>",
        "1. Primary Request and Intent:",
        f"   {first}",
        "",
        "2. Key Technical Concepts:",
        "   - (emulated model: none extracted)",
        "",
        "3. Files and Code Sections:",
        "   - (emulated model: none extracted)",
        "",
        "4. Errors and fixes:",
        "   - (emulated model: none extracted)",
        "",
        "5. Problem Solving:",
        "   - (emulated model: none extracted)",
        "",
        "6. All user messages:",
    ]
    if omitted:
        lines.append(f"   - ({omitted} earlier user messages omitted)")
    lines.extend(f'   - "{_snippet(t, quote_chars)}"' for t in shown)
    if not texts:
        lines.append("   - (none)")
    lines += [
        "",
        "7. Pending Tasks:",
        "   - (emulated model: none extracted)",
        "",
        "8. Current Work:",
        f"   {last}",
        "",
        "9. Optional Next Step:",
        f'   Continue with the latest request: "{last}"',
        "</summary>",
    ]
    return "\n".join(lines)
