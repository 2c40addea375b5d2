"""Gemini CLI's settings as compactd reads them: JSON with comments, the user's file and the
project's (docs/gemini.md#settings).

Gemini CLI reads ``~/.gemini/settings.json`` and the project's ``.gemini/settings.json`` (the
project's wins, key by key), both JSON in which ``//`` and ``/* */`` comments are allowed.
compactd reads from them only what its hooks measure against (the compression threshold).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from compactd.agents.gemini.services.sessions import gemini_dir
from compactd.services.safe_io import read_regular

__all__ = ["compression_threshold", "read_settings", "without_comments"]

# The most a settings file may hold for a hook to read it (they are a few KB).
_SETTINGS_MAX: Final = 1024 * 1024


def without_comments(text: str) -> tuple[str, int | None]:
    """``text`` with its ``//`` and ``/* */`` comments blanked (strings left alone), and the
    line of the first comment (None: there is none)."""
    out: list[str] = []
    i, first, n = 0, None, len(text)
    in_string = False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif text.startswith(("//", "/*"), i):
            first = first or text.count("\n", 0, i) + 1
            if text.startswith("//", i):
                end = text.find("\n", i)
                end = n if end < 0 else end
            else:
                end = text.find("*/", i + 2)
                end = n if end < 0 else end + 2
            out.append("".join(c if c == "\n" else " " for c in text[i:end]))
            i = end
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out), first


def read_settings(path: Path) -> dict[str, Any]:
    """The settings in ``path`` (comments allowed), or {} when it cannot be read."""
    try:
        text = read_regular(path, _SETTINGS_MAX).decode("utf-8")
        data = json.loads(without_comments(text)[0])
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _threshold(settings: dict[str, Any]) -> float | None:
    model = settings.get("model")
    value = model.get("compressionThreshold") if isinstance(model, dict) else None
    if value is None:  # versions before 0.3: chatCompression.contextPercentageThreshold
        older = settings.get("chatCompression")
        value = older.get("contextPercentageThreshold") if isinstance(older, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        return None
    return float(value)


def compression_threshold(cwd: str | None) -> float | None:
    """``model.compressionThreshold`` as Gemini CLI reads it for a project (None: not set)."""
    found = _threshold(read_settings(gemini_dir() / "settings.json"))
    if cwd:
        found = _threshold(read_settings(Path(cwd) / ".gemini" / "settings.json")) or found
    return found
