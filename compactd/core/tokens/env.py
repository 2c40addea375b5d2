"""Reading the environment variables that change limits, thresholds and mechanisms.

The daemon hands the core its environment as a mapping (the core reads no process state).
A malformed or out-of-range value is ignored, as if unset (docs/thresholds.md).
``flags`` says which compaction mechanisms the environment leaves on: ``DISABLE_COMPACT`` turns
them all off. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from compactd.core import constants as c

NO_ENV: Final[Mapping[str, str]] = MappingProxyType({})


def env_positive_int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        return None
    return number if number > 0 else None


def env_percent(env: Mapping[str, str], name: str) -> float | None:
    value = env.get(name)
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    if not math.isfinite(number) or not 0 < number <= 100:
        return None
    return number


def _truthy(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in c.ENV_TRUTHY_VALUES


@dataclass(frozen=True, slots=True)
class CompactFlags:
    compaction_enabled: bool
    auto_compact_enabled: bool
    microcompact_enabled: bool


def flags(env: Mapping[str, str] = NO_ENV) -> CompactFlags:
    """Which compaction mechanisms the environment leaves on. ``DISABLE_COMPACT`` turns off all."""
    compaction = not _truthy(env, c.ENV_DISABLE_COMPACT)
    return CompactFlags(
        compaction_enabled=compaction,
        auto_compact_enabled=compaction and not _truthy(env, c.ENV_DISABLE_AUTO_COMPACT),
        microcompact_enabled=compaction and not _truthy(env, c.ENV_DISABLE_MICROCOMPACT),
    )
