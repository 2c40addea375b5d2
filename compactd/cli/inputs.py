"""What the reports start from: the transcript a person names, the daemon they run it through."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from compactd.core.tokens import known_model

# The model a report assumes when none is named (its window: docs/thresholds.md#model-limits).
DEFAULT_MODEL = "claude-sonnet-4-5"


def daemon_args(data_dir: str) -> list[str]:
    """The command of a throwaway daemon, run with this very Python."""
    return [sys.executable, "-m", "compactd", "serve", "--data-dir", data_dir]


def unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be a transcript, said for a person; None when it may be one."""
    if path.is_dir():
        return "is a directory; give a Claude Code transcript file (.jsonl)"
    if not path.exists():
        return "no such file"
    if path.stat().st_size == 0:
        return "is empty: a transcript has one JSON entry per line"
    return None


def recorded_model(path: Path) -> str | None:
    """The model the transcript's latest response names, when compactd knows its window.

    A report on a session recorded with a 1M-token model should measure it against that
    window, not the default's 200K. Entries are read from the end; API-error entries name
    ``<synthetic>``, which no table knows, and are passed over.
    """
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if b'"assistant"' not in line or b'"model"' not in line:
            continue
        try:
            entry = msgspec.json.decode(line)
        except msgspec.DecodeError:
            continue
        message = entry.get("message") if isinstance(entry, dict) else None
        model = message.get("model") if isinstance(message, dict) else None
        if entry.get("type") == "assistant" and isinstance(model, str) and known_model(model):
            return model
    return None


def choose_model(given: str | None, transcript: Path | None) -> tuple[str, str]:
    """The model a report uses and, for the reader, where it came from."""
    if given:
        return given, "--model"
    recorded = recorded_model(transcript) if transcript is not None else None
    if recorded:
        return recorded, "the transcript's"
    return DEFAULT_MODEL, "the default"
