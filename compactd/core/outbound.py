"""Text on its way out of compactd: secrets taken out, echoes of the caller's input bounded.

Whatever compactd says (answers, errors, warnings, logs, CLI output, hook output) may carry
text it did not write: an upstream's error body (proxies and OpenAI-compatible servers repeat
the key they were sent), a query or a path the caller sent. Two rules hold for all of it
(docs/secrets.md):

- **Secrets are redacted.** The keys compactd was given (``remember_secret``: the summarizer's
  ``apiKey`` options, the key variables of its environment) are replaced wherever they appear,
  and so is anything shaped like a key (``sk-...``, ``sk-ant-...``, ``AIza...``, the value after
  ``Bearer``, ``x-api-key:`` or ``api_key=``), whichever program wrote it.
- **Echoes are bounded.** A text that repeats the caller's input quotes at most ``ECHO_CHARS``
  of it (``echo``); a text an upstream wrote is cut to ``UPSTREAM_CHARS`` (``upstream``).

The known secrets are the process's: one registry, filled once at start-up (the daemon from its
``initializationOptions`` and environment, the CLI and the MCP server from their environment).
Pure apart from that registry: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Final

__all__ = [
    "ECHO_CHARS",
    "ERROR_CHARS",
    "MIN_SECRET_CHARS",
    "REDACTED",
    "UPSTREAM_CHARS",
    "bounded",
    "echo",
    "forget_secrets",
    "redact",
    "redact_bytes",
    "remember_secret",
    "secrets_from_env",
    "upstream",
]

#: What a secret is replaced by.
REDACTED: Final = "[redacted]"
#: A configured value shorter than this is not treated as a secret: replacing a short word
#: everywhere would mangle unrelated text, and no provider issues keys that short.
MIN_SECRET_CHARS: Final = 8
#: The most of the caller's input an answer or an error quotes back (compactd's choice: enough
#: to recognise a query or a path, far below any answer's bound).
ECHO_CHARS: Final = 200
#: The most of an upstream's error text passed on (a proxy may answer with a whole HTML page).
UPSTREAM_CHARS: Final = 600
#: The most an error message says, whatever it quotes (the daemon's, an MCP tool's).
ERROR_CHARS: Final = 2_000

# Environment variables whose values are secrets: these names, and any name ending in one of
# the suffixes (OPENAI_API_KEY, GEMINI_API_KEY, a gateway's FOO_AUTH_TOKEN, ...).
_SECRET_VARIABLES: Final = frozenset({"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"})
_SECRET_SUFFIXES: Final = ("_API_KEY", "_AUTH_TOKEN", "_ACCESS_TOKEN", "_SECRET_KEY", "_APIKEY")

# Shapes of keys, whoever wrote them. Each pattern's group 1, when it has one, is a prefix that
# stays (the word that announced the key); the rest of the match is replaced.
_TOKEN: Final = r"[A-Za-z0-9._~+/=-]"
_SHAPES: Final = re.compile(
    "|".join(
        (
            # Anthropic (sk-ant-...), OpenAI (sk-..., sk-proj-...) and their look-alikes.
            r"\bsk-[A-Za-z0-9_-]{16,}",
            # Google API keys (Gemini).
            r"\bAIza[0-9A-Za-z_-]{30,}",
            # GitHub, Slack and AWS access keys.
            r"\bgh[pousr]_[A-Za-z0-9]{30,}",
            r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
            r"\bAKIA[0-9A-Z]{16}\b",
            # Whatever follows the words that announce a credential.
            rf"((?i:\bbearer|\bbasic)\s+){_TOKEN}{{8,}}",
            rf"((?i:x-api-key|x-goog-api-key|api[_-]?key|access[_-]?token|auth[_-]?token|"
            rf"secret[_-]?key|password)[\"']?\s*[:=]\s*[\"']?){_TOKEN}{{8,}}",
        )
    )
)

_known: set[str] = set()
# The known secrets, longest first (a key that contains another is replaced whole), and the
# pattern that finds them all at once; rebuilt when the set changes.
_known_pattern: re.Pattern[str] | None = None


def remember_secret(value: str | None) -> None:
    """Redact ``value`` from every text from now on (ignored when short or empty)."""
    global _known_pattern
    if value is None:
        return
    value = value.strip()
    if len(value) < MIN_SECRET_CHARS or value in _known:
        return
    _known.add(value)
    ordered = sorted(_known, key=len, reverse=True)
    _known_pattern = re.compile("|".join(re.escape(s) for s in ordered))


def forget_secrets() -> None:
    """Drop every remembered secret (tests; a process keeps its secrets for its lifetime)."""
    global _known_pattern
    _known.clear()
    _known_pattern = None


def secrets_from_env(env: Mapping[str, str]) -> list[str]:
    """The values of the environment's key variables (see ``_SECRET_SUFFIXES``)."""
    return [
        value
        for name, value in env.items()
        if value and (name in _SECRET_VARIABLES or name.upper().endswith(_SECRET_SUFFIXES))
    ]


def _shape(match: re.Match[str]) -> str:
    return (match.group(1) or match.group(2) or "") + REDACTED


def redact(text: str) -> str:
    """``text`` with the known secrets and anything shaped like a key replaced."""
    if _known_pattern is not None:
        text = _known_pattern.sub(REDACTED, text)
    return _SHAPES.sub(_shape, text)


def redact_bytes(data: bytes) -> bytes:
    """``data`` with the known secrets replaced (not the shapes: for whole protocol frames,
    whose contents are the caller's own). A secret is also found JSON-escaped."""
    if not _known:
        return data
    for secret in _known:
        raw = secret.encode("utf-8", "surrogatepass")
        if raw in data:
            data = data.replace(raw, REDACTED.encode())
        escaped = _json_escaped(secret)
        if escaped != raw and escaped in data:
            data = data.replace(escaped, REDACTED.encode())
    return data


def _json_escaped(secret: str) -> bytes:
    return json.dumps(secret)[1:-1].encode()


def echo(text: str, limit: int = ECHO_CHARS, *, quote: bool = True) -> str:
    """The caller's ``text`` quoted back (``repr`` unless not ``quote``): at most ``limit``
    characters of it, with its length when cut, redacted."""
    shown = text if len(text) <= limit else text[:limit]
    shown = redact(repr(shown) if quote else shown)
    return shown if len(text) <= limit else f"{shown}… ({len(text):,} characters)"


def upstream(text: str, limit: int = UPSTREAM_CHARS) -> str:
    """What an upstream wrote (an error body), on one line, at most ``limit`` characters,
    redacted."""
    flat = " ".join(redact(text).split())
    if len(flat) <= limit:
        return flat
    return f"{flat[:limit]}… ({len(flat):,} characters)"


def bounded(text: str, limit: int = ERROR_CHARS) -> str:
    """``text`` redacted and cut to ``limit`` characters (its length said when cut)."""
    text = redact(text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"
