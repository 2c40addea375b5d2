"""Which summarizer compactd's Claude Code plugin uses: one variable, ``COMPACTD_SUMMARIZER``.

Read from the environment Claude Code passes to the plugin's processes (the shell it was
started from, or the ``env`` of Claude Code's settings, which ``compactd claude-code install
--summarizer`` writes). The values (docs/claude-code.md#which-summarizer):

- ``none`` (the default): nothing is prepared; every compaction is Claude Code's own, with
  compactd's rows added to it. Costs nothing beyond Claude Code's own compaction.
- ``offline``: compactd answers every compaction with its offline summary (no model, instant,
  free), the survival ledger and the latest turn.
- ``anthropic``: compactd prepares its summary in the background with the Messages API, with
  the key and address Claude Code itself was started with (``ANTHROPIC_API_KEY`` or
  ``ANTHROPIC_AUTH_TOKEN``, ``ANTHROPIC_BASE_URL``); a subscription login passes no key, and
  then nothing is prepared.
- ``openai``: an OpenAI-compatible server (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``): OpenAI, a
  gateway, or a local model (Ollama, llama-server, vLLM).

``COMPACTD_SUMMARIZER_MODEL`` names the model (default: the session's own for ``anthropic``;
required for ``openai`` unless the server has one). Imports nothing but the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "CHOICES",
    "DEFAULT_CHOICE",
    "ENV_SUMMARIZER",
    "ENV_SUMMARIZER_MODEL",
    "Choice",
    "summarizer_choice",
]

ENV_SUMMARIZER: Final = "COMPACTD_SUMMARIZER"
ENV_SUMMARIZER_MODEL: Final = "COMPACTD_SUMMARIZER_MODEL"
CHOICES: Final = ("none", "offline", "anthropic", "openai")
# compactd's choice: a summary prepared in the background replaces Claude Code's own request,
# but reads the context without Claude Code's prompt cache and may be prepared for a
# compaction that never comes (docs/claude-code.md#which-summarizer): nobody pays for that
# without asking.
DEFAULT_CHOICE: Final = "none"


@dataclass(frozen=True, slots=True)
class Choice:
    """The summarizer in force: its name (one of ``CHOICES``), the daemon's
    ``initializationOptions.summarizer`` for a model (None otherwise), and why a choice made
    cannot be followed (then ``name`` is ``none``)."""

    name: str
    options: dict[str, Any] | None = None
    problem: str | None = None

    @property
    def prepares(self) -> bool:
        """Whether summaries are prepared in the background (a model writes them)."""
        return self.options is not None


def summarizer_choice(env: Mapping[str, str]) -> Choice:
    """The summarizer ``env`` chooses (see the module docstring)."""
    raw = env.get(ENV_SUMMARIZER, "").strip().lower()
    name = raw or DEFAULT_CHOICE
    model = env.get(ENV_SUMMARIZER_MODEL, "").strip() or None
    if name not in CHOICES:
        return Choice(
            "none",
            problem=f"{ENV_SUMMARIZER}={raw!r} is not one of {', '.join(CHOICES)}: "
            "Claude Code compacts, compactd adds to it",
        )
    if name in ("none", "offline"):
        return Choice(name)
    if name == "anthropic":
        if not (env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_AUTH_TOKEN")):
            return Choice(
                "none",
                problem=f"{ENV_SUMMARIZER}=anthropic, but Claude Code passes no ANTHROPIC_API_KEY "
                "or ANTHROPIC_AUTH_TOKEN (a subscription login has none): nothing is prepared",
            )
        options: dict[str, Any] = {"provider": "anthropic", "offlineFallback": False}
        if env.get("ANTHROPIC_BASE_URL"):
            options["baseUrl"] = env["ANTHROPIC_BASE_URL"]
    else:
        if not (env.get("OPENAI_BASE_URL") or env.get("OPENAI_API_KEY")):
            return Choice(
                "none",
                problem=f"{ENV_SUMMARIZER}=openai needs OPENAI_BASE_URL or OPENAI_API_KEY in the "
                "environment Claude Code passes on: nothing is prepared",
            )
        options = {"provider": "openai", "offlineFallback": False}
        if env.get("OPENAI_BASE_URL"):
            options["baseUrl"] = env["OPENAI_BASE_URL"]
    if model:
        options["model"] = model
    return Choice(name, options)
