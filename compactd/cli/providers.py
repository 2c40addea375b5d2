"""The summarizer a CLI command that compacts uses: ``--online``, ``--provider``, ``--model``
and ``--base-url`` made into ``initializationOptions.summarizer`` (docs/providers.md).

Without any of them the summary is the offline one; ``--online`` alone is the Anthropic API.
The key is read by the daemon from the environment it inherits (``ANTHROPIC_API_KEY``,
``OPENAI_API_KEY``); a local OpenAI-compatible server (``--base-url``) takes none.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

from compactd.core.constants import (
    ENV_API_KEY,
    ENV_AUTH_TOKEN,
    ENV_OPENAI_API_KEY,
    ENV_OPENAI_BASE_URL,
)

PROVIDERS = ("anthropic", "openai", "offline")


def add_summarizer_flags(parser: argparse.ArgumentParser, *, model_flag: str = "--model") -> None:
    """``--online``, ``--provider``, ``model_flag`` (the summarizer's model) and ``--base-url``."""
    parser.add_argument(
        "--online",
        action="store_true",
        help=f"summarize with the Anthropic API ({ENV_API_KEY} from the environment); "
        "default: the offline summary",
    )
    parser.add_argument(
        "--provider",
        choices=PROVIDERS,
        default=None,
        help="who writes the summary: anthropic, openai (any Chat Completions server: OpenAI, "
        f"Ollama, vLLM, llama-server...; {ENV_OPENAI_API_KEY} from the environment) or offline",
    )
    parser.add_argument(
        model_flag,
        dest="summarizer_model",
        default=None,
        help="the summarizer's model (default: the session's for anthropic)",
    )
    parser.add_argument(
        "--base-url", default=None, help="the provider's API URL (e.g. http://localhost:11434/v1)"
    )


@dataclass(frozen=True)
class SummarizerChoice:
    options: dict[str, Any]
    online: bool
    # How the report names it ("the Anthropic API").
    label: str


OFFLINE = SummarizerChoice({"provider": "offline"}, False, "the offline summarizer")


def summarizer_choice(args: argparse.Namespace) -> SummarizerChoice | str:
    """The summarizer the flags ask for, or why it cannot work (a message for the person)."""
    provider = args.provider or ("anthropic" if args.online or args.summarizer_model else None)
    if provider is None and args.base_url:
        return "--base-url needs --provider (anthropic or openai)"
    if provider in (None, "offline"):
        if args.summarizer_model or args.base_url:
            return "--provider offline takes no model or base URL"
        return OFFLINE
    options: dict[str, Any] = {"provider": provider}
    if args.summarizer_model:
        options["model"] = args.summarizer_model
    if args.base_url:
        options["baseUrl"] = args.base_url
    env = os.environ
    if provider == "anthropic":
        if not (env.get(ENV_API_KEY) or env.get(ENV_AUTH_TOKEN)):
            return f"--online needs {ENV_API_KEY} in the environment"
        return SummarizerChoice(options, True, "the Anthropic API")
    url = args.base_url or env.get(ENV_OPENAI_BASE_URL)
    if not (url or env.get(ENV_OPENAI_API_KEY)):
        return f"--provider openai needs {ENV_OPENAI_API_KEY} or --base-url"
    return SummarizerChoice(options, True, f"the Chat Completions API at {url or 'OpenAI'}")
