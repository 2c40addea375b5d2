"""Model limits: a model's context window and output limit, and a session's resolved limits.

The window and output limit come from the model's name (new- and old-style names, the 1M-context
variant), then the client's values and ``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` override them
(docs/thresholds.md). ``recorded_model`` finds the model a transcript last used. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from compactd.core import constants as c
from compactd.core.tokens.env import NO_ENV, env_positive_int
from compactd.transcript.model import (
    Entry,
)


@dataclass(frozen=True, slots=True)
class Limits:
    context_window: int
    max_output_tokens: int
    # The absolute auto-compact level, when one is set (docs/thresholds.md#absolute-level).
    auto_compact_tokens: int | None = None


# "claude-sonnet-4-5-20250929", "claude-opus-4-1@20250805", "us.anthropic.claude-opus-5-5-v1":
# family, major, optional 1-2 digit minor (a dated suffix has 8 digits and is not a minor).
_NEW_STYLE_NAME: Final = re.compile(r"claude-(opus|sonnet|haiku)-(\d+)(?:[-.](\d{1,2}))?(?!\d)")
# "claude-3-7-sonnet-20250219", "claude-3-opus-20240229": version first, family after.
_OLD_STYLE_NAME: Final = re.compile(r"claude-(\d+)(?:[-.](\d{1,2}))?-(opus|sonnet|haiku)")


def _parse_model(name: str) -> tuple[str, tuple[int, int]] | None:
    match = _NEW_STYLE_NAME.search(name)
    if match is not None:
        return match.group(1), (int(match.group(2)), int(match.group(3) or 0))
    match = _OLD_STYLE_NAME.search(name)
    if match is not None:
        return match.group(3), (int(match.group(1)), int(match.group(2) or 0))
    return None


def recorded_model(newest_first: Iterable[Entry]) -> str | None:
    """The model the latest response names among ``newest_first`` (entries, newest first),
    when its window is known: a session recorded with a 1M-token model must not be measured
    against the default's 200K. API-error entries name ``<synthetic>`` and are passed over."""
    for entry in newest_first:
        message = entry.message if entry.type == "assistant" else None
        model = message.model if message is not None else None
        if model and known_model(model):
            return model
    return None


def known_model(model: str) -> bool:
    """Whether ``model`` names a Claude model the limits table knows (else defaults apply)."""
    return _parse_model(model.strip().lower().replace(c.ONE_MILLION_SUFFIX, "")) is not None


def model_limits(model: str) -> Limits:
    """The table limits of a model name (dated and provider-prefixed names included).

    A ``[1m]`` suffix selects the 1M-token window; unknown models get the defaults.
    """
    name = model.strip().lower()
    one_million = c.ONE_MILLION_SUFFIX in name
    name = name.replace(c.ONE_MILLION_SUFFIX, "")
    window, max_output = c.DEFAULT_CONTEXT_WINDOW, c.DEFAULT_MAX_OUTPUT_TOKENS
    parsed = _parse_model(name)
    if parsed is not None:
        family, version = parsed
        best: tuple[int, int] | None = None
        for row_family, since, row_window, row_output in c.MODEL_LIMITS:
            if row_family == family and since <= version and (best is None or since > best):
                best = since
                window, max_output = row_window, row_output
    if one_million:
        window = c.ONE_MILLION_CONTEXT_WINDOW
    return Limits(context_window=window, max_output_tokens=max_output)


def resolve_limits(
    model: str,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    env: Mapping[str, str] = NO_ENV,
    auto_compact_tokens: int | None = None,
) -> Limits:
    """A session's limits: client values win, then ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``, then the
    model table. The absolute auto-compact level: the session's, else
    ``COMPACTD_AUTO_COMPACT_TOKENS`` (which ``initializationOptions.autoCompactTokens`` sets)."""
    table = model_limits(model)
    window = context_window if context_window and context_window > 0 else table.context_window
    if max_output_tokens and max_output_tokens > 0:
        max_output = max_output_tokens
    else:
        env_output = env_positive_int(env, c.ENV_MAX_OUTPUT_TOKENS)
        max_output = env_output if env_output is not None else table.max_output_tokens
    level = auto_compact_tokens if auto_compact_tokens and auto_compact_tokens > 0 else None
    if level is None:
        level = env_positive_int(env, c.ENV_AUTO_COMPACT_TOKENS)
    return Limits(context_window=window, max_output_tokens=max_output, auto_compact_tokens=level)
