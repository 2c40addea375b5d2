"""Numbers and names compactd takes from the reference facts, each defined exactly once.

Every constant carries a comment citing the section of docs/ that says where it comes from
(mostly Claude Code's compaction system). Code imports these names instead of repeating
the numbers; configuration (environment variables, client options) overrides them at run time.
Nothing in this module does work: it only names values.
"""

from __future__ import annotations

from typing import Final

# -- token estimation (docs/thresholds.md#estimate) ---------------------------------------------

# Text is estimated at one token per four characters (docs/thresholds.md#estimate).
CHARS_PER_TOKEN: Final = 4

# An image or a document block is estimated at a flat 2,000 tokens
# (docs/thresholds.md#estimate).
IMAGE_TOKEN_ESTIMATE: Final = 2_000

# A sum of raw estimates is padded by 4/3 and rounded up (docs/thresholds.md#estimate): it is
# rough, so it errs on the side of compacting a little early.
ESTIMATE_PADDING_NUMERATOR: Final = 4
ESTIMATE_PADDING_DENOMINATOR: Final = 3

# The model name Claude Code writes on synthetic (locally generated error) assistant entries;
# their usage is not a real API count and never anchors the token count
# (docs/thresholds.md#missing-usage).
SYNTHETIC_MODEL: Final = "<synthetic>"

# -- windows and thresholds (docs/thresholds.md) ------------------------------------------------

# effectiveWindow = contextWindow - min(maxOutputTokens, 20_000): room reserved for the
# summary the compaction call itself writes (docs/thresholds.md#effective-window).
OUTPUT_RESERVE_CAP: Final = 20_000

# autoCompactThreshold = effectiveWindow - 13_000 (docs/thresholds.md#auto-compact-threshold;
# 200K -> 167_000 and 1M/128K -> 967_000, both observed on Claude Code 2.1.330).
AUTO_COMPACT_BUFFER: Final = 13_000

# Warning and error levels both sit 20_000 below the threshold
# (docs/thresholds.md#warning-and-error-levels; older Claude Code versions measured them from
# the context limit instead).
WARNING_BUFFER: Final = 20_000
ERROR_BUFFER: Final = 20_000

# Blocking limit = effectiveWindow - 3_000 (docs/thresholds.md#blocking-limit).
BLOCKING_BUFFER: Final = 3_000

# -- model limits (docs/thresholds.md#model-limits) ---------------------------------------------

# The model a session gets when its client names none and its transcript names none compactd
# knows (compactd's choice: a current 200K model).
DEFAULT_MODEL: Final = "claude-sonnet-4-5"

# A model not found in the table gets a 200K window and 32K of output. 200K must never be
# assumed for known 1M models (docs/thresholds.md#model-limits), hence the table below; this
# is only the fallback.
DEFAULT_CONTEXT_WINDOW: Final = 200_000
DEFAULT_MAX_OUTPUT_TOKENS: Final = 32_000

# A ``[1m]`` suffix on a model name (e.g. ``claude-sonnet-4-5[1m]``) selects the 1M-token
# window (docs/thresholds.md#model-limits: real sessions exceed 200K on 1M-context models).
ONE_MILLION_SUFFIX: Final = "[1m]"
ONE_MILLION_CONTEXT_WINDOW: Final = 1_000_000

# (family, lowest (major, minor) version the row applies to, context window, max output).
# A model uses the row of its family with the highest version not above its own, so a newer
# point release inherits the limits of the latest row (e.g. Opus 4.7 and Opus 5.x use the
# Opus 4.6 row). Figures and their sources: docs/thresholds.md#model-limits.
MODEL_LIMITS: Final[tuple[tuple[str, tuple[int, int], int, int], ...]] = (
    ("haiku", (3, 0), 200_000, 4_096),
    ("haiku", (3, 5), 200_000, 8_192),
    ("haiku", (4, 5), 200_000, 64_000),
    ("sonnet", (3, 0), 200_000, 4_096),
    ("sonnet", (3, 5), 200_000, 8_192),
    ("sonnet", (3, 7), 200_000, 64_000),
    ("sonnet", (4, 0), 200_000, 64_000),
    ("sonnet", (4, 6), 1_000_000, 128_000),
    ("opus", (3, 0), 200_000, 4_096),
    ("opus", (4, 0), 200_000, 32_000),
    ("opus", (4, 5), 200_000, 64_000),
    ("opus", (4, 6), 1_000_000, 128_000),
)

# -- environment variables Claude Code honours (docs/thresholds.md#environment-variables) -------

# Overrides the model's max output tokens (docs/thresholds.md#environment-variables).
ENV_MAX_OUTPUT_TOKENS: Final = "CLAUDE_CODE_MAX_OUTPUT_TOKENS"
# Overrides the context window used for the threshold computation
# (docs/thresholds.md#auto-compact-threshold); like Claude Code, a value above the model's real
# window has no effect.
ENV_AUTO_COMPACT_WINDOW: Final = "CLAUDE_CODE_AUTO_COMPACT_WINDOW"
# Percentage (0, 100] of the effective window at which to auto-compact; it can only lower the
# threshold (docs/thresholds.md#auto-compact-threshold: 50 -> 490_000 on a 980_000 effective
# window).
ENV_AUTOCOMPACT_PCT_OVERRIDE: Final = "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"
# compactd's own: an absolute auto-compact level in tokens, the lower of it and the share of
# the window applies (docs/thresholds.md#absolute-level); ``initializationOptions.autoCompactTokens``
# sets it for the daemon and session/open's ``autoCompactTokens`` per session.
ENV_AUTO_COMPACT_TOKENS: Final = "COMPACTD_AUTO_COMPACT_TOKENS"
# Replaces the blocking limit (docs/thresholds.md#blocking-limit).
ENV_BLOCKING_LIMIT_OVERRIDE: Final = "CLAUDE_CODE_BLOCKING_LIMIT_OVERRIDE"
# Switches: all compaction, automatic compaction only, microcompact
# (docs/thresholds.md#environment-variables).
ENV_DISABLE_COMPACT: Final = "DISABLE_COMPACT"
ENV_DISABLE_AUTO_COMPACT: Final = "DISABLE_AUTO_COMPACT"
ENV_DISABLE_MICROCOMPACT: Final = "DISABLE_MICROCOMPACT"
# The variables the summarizers read their keys and URLs from (docs/providers.md); named here,
# not in services/summarizers, so the command line can print them without importing an SDK.
ENV_API_KEY: Final = "ANTHROPIC_API_KEY"
ENV_AUTH_TOKEN: Final = "ANTHROPIC_AUTH_TOKEN"
ENV_BASE_URL: Final = "ANTHROPIC_BASE_URL"
ENV_OPENAI_API_KEY: Final = "OPENAI_API_KEY"
ENV_OPENAI_BASE_URL: Final = "OPENAI_BASE_URL"
# Values that switch a boolean environment variable on (compared case-insensitively;
# docs/thresholds.md#environment-variables).
ENV_TRUTHY_VALUES: Final = frozenset({"1", "true", "yes", "on"})

# -- full compaction (docs/compaction.md) -------------------------------------------------------

# Output cap of the plain fallback summarization request (docs/compaction.md#plain-fallback:
# streaming, thinking disabled, max_tokens 20_000); the cache-sharing request uses it too, plus
# the main loop's thinking budget when thinking is on.
COMPACT_MAX_OUTPUT_TOKENS: Final = 20_000

# "Prompt is too long" during compaction is retried at most 3 times, each time without the
# oldest API rounds (docs/compaction.md#prompt-too-long).
COMPACT_MAX_PTL_RETRIES: Final = 3

# A stream that broke after it started, or ended without message_stop, is retried once
# (the SDK retries neither: docs/anthropic-api.md#retries).
SUMMARIZER_STREAM_RETRIES: Final = 1

# Retries of 429 / 5xx / 529 answers before a stream starts, done by the SDK itself (its
# default, docs/anthropic-api.md#retries); ``initializationOptions.summarizer.maxRetries``
# overrides it.
SUMMARIZER_MAX_RETRIES: Final = 2

# Wall-clock limit of one summarization, retries included (compactd's choice: real compactions
# take 73-105 s, docs/compaction.md#keep-alive); ``summarizer.timeoutMs`` overrides it.
SUMMARIZER_TIMEOUT_MS: Final = 300_000

# The Messages API accepts at most 4 cache breakpoints per request
# (docs/anthropic-api.md#prompt-caching).
MAX_CACHE_BREAKPOINTS: Final = 4

# A compact/status keep-alive is sent this often while the model writes the summary: IDE
# sockets time out on long calls (docs/compaction.md#keep-alive, "every 30 s");
# ``initializationOptions.keepAliveIntervalMs`` overrides it.
KEEP_ALIVE_INTERVAL_MS: Final = 30_000

# Default timeout of a hook command, in seconds (Claude Code's hooks settings format puts a
# per-command "timeout" in seconds; 60 is its default; docs/compaction.md#hooks).
HOOK_TIMEOUT_S: Final = 60

# -- rehydration after compaction (docs/rehydration.md) ------------------------------------------

# The most recently read files re-read from disk after a compaction: at most 5 files, each
# capped at 5_000 tokens, 50_000 tokens for all of them (docs/rehydration.md#recent-files).
REHYDRATE_MAX_FILES: Final = 5
REHYDRATE_FILE_TOKENS: Final = 5_000
REHYDRATE_FILES_TOTAL_TOKENS: Final = 50_000

# Invoked skills are re-attached most recent first, 5_000 tokens each, 25_000 in total
# (docs/rehydration.md#skills).
REHYDRATE_SKILL_TOKENS: Final = 5_000
REHYDRATE_SKILLS_TOTAL_TOKENS: Final = 25_000

# Memory file names looked for in each directory from the working directory down to a file the
# agent reads (docs/rehydration.md#nested-memory: "CLAUDE.md and the like"; CLAUDE.local.md is
# the personal, git-ignored variant). ``initializationOptions.memoryFileNames`` overrides the
# list.
DEFAULT_MEMORY_FILE_NAMES: Final = ("CLAUDE.md", "CLAUDE.local.md")

# Which tools read, change or run what (Read, Edit, Bash...) is each agent's own: see
# ``compactd.core.vocabulary`` (docs/agents.md#vocabulary).

# Claude Code keeps its plans and user skills under its configuration directory, which
# ``CLAUDE_CONFIG_DIR`` relocates (default ``~/.claude``; docs/rehydration.md#todo-list-and-plan).
ENV_CLAUDE_CONFIG_DIR: Final = "CLAUDE_CONFIG_DIR"
DEFAULT_CLAUDE_CONFIG_DIR: Final = "~/.claude"


# Headroom an automatic compaction leaves: a mechanism is chosen only when what it leaves is at
# most this share of the auto-compact threshold, else the next stronger one runs in the same
# call, so that the window does not refill within a few turns (compactd's own choice,
# docs/thresholds.md#accounting).
AUTO_COMPACT_HEADROOM: Final = 0.75

# Auto compaction stops after this many consecutive failures until one succeeds
# (docs/compaction.md#circuit-breaker).
MAX_CONSECUTIVE_AUTOCOMPACT_FAILURES: Final = 3
