"""Summarizers: the providers that write summaries and the chain the engine calls
(docs/providers.md). ``Summarizer`` is the chain; the rest is what requests and outcomes are
made of."""

from __future__ import annotations

from compactd.services.summarizers.anthropic import ENV_API_KEY, ENV_AUTH_TOKEN, ENV_BASE_URL
from compactd.services.summarizers.base import (
    Mode,
    SummarizerError,
    SummaryOutcome,
    SummaryRequest,
    plain_messages,
    with_instruction,
)
from compactd.services.summarizers.chain import Summarizer
from compactd.services.summarizers.openai_chat import ENV_OPENAI_API_KEY, ENV_OPENAI_BASE_URL

__all__ = [
    "ENV_API_KEY",
    "ENV_AUTH_TOKEN",
    "ENV_BASE_URL",
    "ENV_OPENAI_API_KEY",
    "ENV_OPENAI_BASE_URL",
    "Mode",
    "Summarizer",
    "SummarizerError",
    "SummaryOutcome",
    "SummaryRequest",
    "plain_messages",
    "with_instruction",
]
