"""The names the engine and the CLI import from the summarizer, kept at this path; the
summarizers themselves live in ``compactd.services.summarizers`` (docs/providers.md)."""

from __future__ import annotations

from compactd.services.summarizers import *  # noqa: F403
from compactd.services.summarizers import __all__ as __all__
