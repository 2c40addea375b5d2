"""The wire contract of compactd protocol v1: every method name, once, with its Structs.

Server, clients, tests and the generated ``protocol/schema.json`` / ``protocol/compactd.d.ts``
all import from here. Fields are snake_case in Python and camelCase on the wire. Params reject
unknown fields so that a typo in a client is an error, not a silently ignored option; results
and notifications are open so that clients can be older than the daemon.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

PROTOCOL_VERSION = "1"

# -- method names (each wire string appears here and nowhere else) ------------------------------

SESSION_OPEN = "session/open"
SESSION_APPEND = "session/append"
SESSION_MESSAGES = "session/messages"
SESSION_LIST = "session/list"
SESSION_CLOSE = "session/close"
SESSION_STATS = "session/stats"
TOKENS_STATUS = "tokens/status"
TOKENS_BREAKDOWN = "tokens/breakdown"
TOKENS_HISTORY = "tokens/history"
COMPACT_MICRO = "compact/micro"
COMPACT_FULL = "compact/full"
COMPACT_PARTIAL = "compact/partial"
COMPACT_AUTO = "compact/auto"
COMPACT_PREVIEW = "compact/preview"
COMPACT_UNDO = "compact/undo"
RECALL_SEARCH = "recall/search"
ATTACHMENTS_REHYDRATE = "attachments/rehydrate"
ATTACHMENTS_PENDING = "attachments/pending"
FILESTATE_RECORD = "fileState/record"
FILESTATE_LIST = "fileState/list"
CACHE_BEFORE_REQUEST = "cache/beforeRequest"
CACHE_AFTER_RESPONSE = "cache/afterResponse"
SESSION_MEMORY_GET = "sessionMemory/get"
SESSION_MEMORY_EXTRACT = "sessionMemory/extract"
CLAUDE_CODE_COMPACT = "claudeCode/compact"

# server -> client notifications
NOTIFY_COMPACT_STATUS = "compact/status"
NOTIFY_TOKENS_THRESHOLD = "tokens/threshold"
NOTIFY_MEMORY_CHANGED = "memory/changed"
NOTIFY_CACHE_BREAK = "cache/break"
NOTIFY_SESSION_FOLLOWED = "session/followed"


# -- stable error codes (JSON-RPC ``error.data.code``) --------------------------------------------


class ErrorCode:
    INVALID_PARAMS = "invalidParams"
    PARSE_ERROR = "parseError"
    INVALID_REQUEST = "invalidRequest"
    METHOD_NOT_FOUND = "methodNotFound"
    FRAME_TOO_LARGE = "frameTooLarge"
    SESSION_NOT_FOUND = "sessionNotFound"
    SESSION_EXISTS = "sessionExists"
    SESSION_BUSY = "sessionBusy"
    TRANSCRIPT_UNREADABLE = "transcriptUnreadable"
    NOT_ENOUGH_MESSAGES = "notEnoughMessages"
    CONTEXT_TOO_LARGE = "contextTooLargeToCompact"
    SUMMARY_FAILED = "summaryFailed"
    COMPACTION_DISABLED = "compactionDisabled"
    CIRCUIT_OPEN = "circuitOpen"
    CANCELLED = "cancelled"
    COMPACTION_INEFFECTIVE = "compactionIneffective"
    PIVOT_NOT_FOUND = "pivotNotFound"
    PATH_OUTSIDE_ROOTS = "pathOutsideRoots"
    NOTHING_TO_UNDO = "nothingToUndo"
    INTERNAL = "internalError"
    SERVER_NOT_INITIALIZED = "serverNotInitialized"
    SHUTTING_DOWN = "shuttingDown"
    FIXED_PREFIX_TOO_LARGE = "fixedPrefixTooLarge"
    # Another process (another daemon on the same data dir) owns the session
    # (docs/durability.md#ownership); data: sessionId, holderPid, holderHost, since.
    SESSION_LOCKED = "sessionLocked"
    # The session was opened with ``readOnly: true`` and the request would write.
    SESSION_READ_ONLY = "sessionReadOnly"
    # The session follows a transcript another program writes (docs/follow.md#writes): only
    # reads answer, since a line written into compactd's copy would never reach that program.
    SESSION_FOLLOWED = "sessionFollowed"


# JSON-RPC ``error.code`` numbers of the codes JSON-RPC 2.0 (and LSP, for
# ServerNotInitialized) define; every other code is sent as ``APPLICATION_ERROR``. Clients should
# switch on ``data.code`` instead.
JSONRPC_NUMBERS: dict[str, int] = {
    ErrorCode.INVALID_PARAMS: -32602,
    ErrorCode.PARSE_ERROR: -32700,
    ErrorCode.INVALID_REQUEST: -32600,
    ErrorCode.FRAME_TOO_LARGE: -32600,  # an over-long frame is an invalid request
    ErrorCode.METHOD_NOT_FOUND: -32601,
    ErrorCode.CANCELLED: -32800,
    ErrorCode.INTERNAL: -32603,
    ErrorCode.SERVER_NOT_INITIALIZED: -32002,
    ErrorCode.SHUTTING_DOWN: -32600,  # LSP: a request after shutdown is an invalid request
}
APPLICATION_ERROR = -32000


def jsonrpc_number(code: str) -> int:
    """The JSON-RPC ``error.code`` sent with a compactd error code."""
    return JSONRPC_NUMBERS.get(code, APPLICATION_ERROR)


# Deepest nesting of arrays and objects accepted in a request's params. Real transcript
# entries nest about ten levels; what is deeper is refused (invalidParams) before anything
# walks it recursively (conversion, token estimates, re-encoding). compactd's own bound.
MAX_PARAMS_DEPTH = 128


class CompactdError(Exception):
    """An error a handler reports to the client with a stable ``data.code``."""

    def __init__(self, code: str, message: str, **data: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


# -- shared pieces ------------------------------------------------------------------------------

# Bounds of the numbers a client sends (compactd's own): wider than any real value, narrow
# enough that nothing computed from them overflows (a date, a file offset, a token sum).
MAX_TIMESTAMP = 253_402_300_799.0  # 9999-12-31T23:59:59Z, the last second a date can hold
MAX_TOKENS = 1 << 31
MAX_COUNT = 1 << 40
Seconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_TIMESTAMP)]
TokenCount = Annotated[int, msgspec.Meta(le=MAX_TOKENS)]
PositiveTokens = Annotated[int, msgspec.Meta(ge=1, le=MAX_TOKENS)]
Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)]


class _Params(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    pass


class NoParams(_Params, kw_only=True):
    """Methods that take no params (an empty object or none at all)."""


class _Wire(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    pass


class SessionParams(_Params, kw_only=True):
    session_id: str


AgentKind = Literal["main", "subagent"]
Trigger = Literal["manual", "auto"]
Mechanism = Literal["micro", "sessionMemory", "full", "partial"]
# What compact/preview names: a mechanism, or "none" when compact/auto would do nothing.
PreviewMechanism = Literal["none", "micro", "sessionMemory", "full", "partial"]
# Why compact/auto does what it does (and compact/preview says it would), one stable code per
# branch of the decision: the four ways of doing nothing, then why a mechanism was chosen.
DecisionReason = Literal[
    "compactionDisabled",
    "autoCompactDisabled",
    "compacting",
    "circuitOpen",
    "belowThreshold",
    "microcompactEnough",
    "sessionMemoryFits",
    "sessionMemoryTooLarge",
    "noSessionMemory",
    "fixedPrefixTooLarge",
    "microcompactTooSmall",
    # A summary is being prepared in the background and the count is below the blocking
    # limit: the agent goes on (docs/background.md#applying).
    "summaryPreparing",
]
Phase = Literal[
    "started",
    "preCompactHooks",
    "summarizing",
    "keepAlive",
    "rehydrating",
    "sessionStartHooks",
    "completed",
    "failed",
    "cancelled",
    # A background preparation (``background: true``, docs/background.md#visible).
    "preparing",
    "prepared",
]


class CacheSafeParams(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """The main loop's cache key inputs; a summarization request reuses them to share the cache."""

    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    thinking: dict[str, Any] | None = None
    betas: list[str] | None = None
    metadata: dict[str, Any] | None = None


SummarizerProvider = Literal["anthropic", "openai", "offline"]


class SummarizerOptions(msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=True):
    """Who writes the summaries (docs/providers.md).

    ``provider``: "anthropic" (the Messages API, the default), "openai" (the Chat Completions
    API: OpenAI, OpenRouter, Ollama, vLLM, llama-server, LM Studio...) or "offline" (no model).
    ``apiKey`` or ``apiKeyEnv`` (the name of an environment variable holding the key);
    ``model``: the summarizer's model, independent of the session's (a cheaper one is a
    setting); ``contextWindow``: the tokens that model accepts (known models have a default):
    a conversation larger than that is summarized in pieces. ``fallback``: summarizers tried in
    order when the one before fails. ``offline`` is the legacy spelling of provider "offline".
    """

    provider: SummarizerProvider | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    base_url: str | None = None
    model: str | None = None
    context_window: Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)] | None = None
    timeout_ms: Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)] | None = None
    max_retries: Annotated[int, msgspec.Meta(ge=0, le=100)] | None = None
    offline: bool | None = None
    # When every summarizer keeps failing (errors, timeouts), summarize offline instead of
    # failing. Default true; a summary the model returned empty still fails.
    offline_fallback: bool | None = None
    fallback: list[SummarizerOptions] | None = None


class MicrocompactOptions(msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=True):
    """Overrides of microcompact's numbers (docs/microcompact.md); an unset field keeps its default.

    ``cacheEdits: true`` says the client sends ``cache_edits`` blocks, which makes "cached" the
    default strategy while the prompt cache is warm. ``apiTriggerTokens`` and
    ``apiClearToolInputs`` shape the ``context_management`` edits of API-native sessions.
    """

    clearable_tools: list[str] | None = None
    keep_recent: Annotated[int, msgspec.Meta(ge=0)] | None = None
    protected_tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None
    min_savings: Annotated[int, msgspec.Meta(ge=0)] | None = None
    idle_minutes: Annotated[float, msgspec.Meta(gt=0)] | None = None
    idle_keep_recent: Annotated[int, msgspec.Meta(ge=0)] | None = None
    cached_trigger: Annotated[int, msgspec.Meta(ge=1)] | None = None
    cached_keep_recent: Annotated[int, msgspec.Meta(ge=0)] | None = None
    cache_edits: bool | None = None
    api_trigger_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    api_clear_tool_inputs: bool | None = None


class SessionMemoryOptions(
    msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=True
):
    """Session memory (docs/session-memory.md): a notes file per session kept up to date in the
    background and used by ``compact/auto`` as a summary that needs no model call.

    Off unless ``enabled`` is true (an extraction is a model request the user pays for).
    ``minInitTokens``: no notes before the context holds that many tokens (default 10,000);
    ``minTokenGrowth``: growth since the last extraction (default 5,000); ``minToolCalls``:
    tool calls since then, unless the last turn made none (default 3).
    """

    enabled: bool | None = None
    min_init_tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None
    min_token_growth: Annotated[int, msgspec.Meta(ge=0)] | None = None
    min_tool_calls: Annotated[int, msgspec.Meta(ge=0)] | None = None


class BackgroundCompactionOptions(
    msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=True
):
    """Zero-wait compaction: a summary prepared in the background from a snapshot
    before the auto-compact threshold, applied at once when the threshold comes.

    docs/background.md. ``enabled`` (default true; false: compaction behaves as without it);
    ``startAt``: the fraction of the auto-compact threshold at which a preparation starts
    (default 0.8); ``idleMinutes``: idle time after which a session above half its threshold
    prepares (default 55, before a one-hour prompt cache expires); ``applyWhenIdle``: also apply
    the prepared summary while idle (default false); ``refresh``: at the threshold, summarize
    again up to then in the background when that keeps far fewer entries verbatim (default
    true; docs/background.md#refreshing).
    """

    enabled: bool | None = None
    start_at: Annotated[float, msgspec.Meta(gt=0, le=1)] | None = None
    idle_minutes: Annotated[float, msgspec.Meta(gt=0)] | None = None
    apply_when_idle: bool | None = None
    refresh: bool | None = None


class InitializationOptions(
    msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=True
):
    data_dir: str | None = None
    workspace_roots: list[str] | None = None
    keep_alive_interval_ms: Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)] | None = None
    summarizer: SummarizerOptions | None = None
    hooks_settings_path: str | None = None
    env: dict[str, str] | None = None
    max_frame_bytes: Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)] | None = None
    memory_file_names: list[str] | None = None
    microcompact: MicrocompactOptions | None = None
    session_memory: SessionMemoryOptions | None = None
    background_compaction: BackgroundCompactionOptions | None = None
    # An absolute auto-compact level in tokens for every session (docs/thresholds.md#absolute-level):
    # the threshold is the lower of it and the share of the window; session/open overrides it.
    auto_compact_tokens: PositiveTokens | None = None


# -- session ------------------------------------------------------------------------------------


PrefixSource = Literal["usage", "carried", "none"]
AutoCompactSource = Literal["window", "tokens", "env"]
PreparationPhase = Literal["preparing", "ready"]


class PreparationState(_Wire, kw_only=True):
    """A background preparation of a session (docs/background.md#visible): ``preparing`` while
    the model writes, ``ready`` when its summary waits to be applied; ``entriesCovered``: the
    entries of the context it summarizes (up to its snapshot); ``refreshing``: a ready summary
    is being summarized again up to a later entry (docs/background.md#refreshing)."""

    state: PreparationPhase
    entries_covered: int
    refreshing: bool = False


class TokenStatus(_Wire, kw_only=True):
    """The size of the next request and where the session stands against its limits.

    ``tokens`` = ``exactTokens`` + ``estimatedTokens`` - ``clearedTokens``, and also
    ``fixedPrefixTokens`` + ``messageTokens`` + ``attachmentTokens`` - ``clearedTokens``
    (docs/thresholds.md#accounting).
    """

    tokens: int
    exact_tokens: int
    estimated_tokens: int
    context_window: int
    max_output_tokens: int
    effective_window: int
    auto_compact_threshold: int
    warning_threshold: int
    error_threshold: int
    blocking_limit: int
    percent_left: int
    is_above_warning_threshold: bool
    is_above_error_threshold: bool
    is_above_auto_compact_threshold: bool
    is_at_blocking_limit: bool
    auto_compact_enabled: bool
    compaction_enabled: bool
    circuit_open: bool
    consecutive_failures: int = 0
    # The parts of ``tokens``: what every request carries besides the messages (system
    # prompt, tools), the messages, the attachments, and what microcompact cleared since the
    # last usage. ``fixedPrefixSource``: "usage" (learned from the latest response), "carried"
    # (learned before a compaction, or estimated from cacheSafeParams), "none".
    fixed_prefix_tokens: int = 0
    fixed_prefix_source: PrefixSource = "none"
    message_tokens: int = 0
    attachment_tokens: int = 0
    cleared_tokens: int = 0
    # A summary prepared in the background, when one is running or ready
    # (docs/background.md#visible).
    preparation: PreparationState | None = None
    # Which level sets ``autoCompactThreshold`` (docs/thresholds.md#absolute-level): "window" (the
    # share of the window), "tokens" (the absolute level, autoCompactTokens) or "env" (an
    # environment override of the percentage or the window).
    auto_compact_source: AutoCompactSource = "window"


class OpenParams(_Params, kw_only=True):
    session_id: str | None = None
    cwd: str
    # The model whose window applies. Omitted: the model the imported transcript's latest
    # response names (when its window is known), else the session's own, else
    # ``DEFAULT_MODEL`` (docs/thresholds.md#model-limits).
    model: str | None = None
    context_window: TokenCount | None = None
    max_output_tokens: TokenCount | None = None
    agent_kind: AgentKind | None = None
    transcript_path: str | None = None
    cache_safe_params: CacheSafeParams | None = None
    api_context_management: bool | None = None
    # Follow the transcript at ``transcriptPath`` as the agent appends to it (docs/follow.md).
    # Omitted on a reopen: keep following if the session was followed.
    follow: bool | None = None
    # Open without owning: no lock taken, no byte written; only ``READ_ONLY_METHODS`` answer
    # (docs/durability.md#ownership). The view is the transcript as it was at this open.
    read_only: bool = False
    # This session's absolute auto-compact level (docs/thresholds.md#absolute-level); overrides
    # initializationOptions.autoCompactTokens. Omitted on a reopen: keep the stored one.
    auto_compact_tokens: PositiveTokens | None = None


class HolderInfo(_Wire, kw_only=True):
    """The process that owns a session: its pid, host and since when (ISO 8601, UTC)."""

    pid: int | None = None
    host: str | None = None
    since: str | None = None


class OpenResult(_Wire, kw_only=True):
    session_id: str
    transcript_path: str
    entry_count: int
    status: TokenStatus
    # The model whose window the status is measured against (given, or found as OpenParams says).
    model: str | None = None
    skipped_lines: int = 0
    imported_from: str | None = None
    # True when the session was opened read-only (this daemon does not own it).
    read_only: bool = False
    # For a read-only open: the process that owns the session, if one does.
    held_by: HolderInfo | None = None
    # Whether the daemon now follows ``importedFrom`` as it grows (docs/follow.md).
    following: bool = False


class AppendParams(_Params, kw_only=True):
    session_id: str
    entries: list[dict[str, Any]]


class AppendResult(_Wire, kw_only=True):
    appended: int
    status: TokenStatus
    # Entries whose uuid the session already had (e.g. a retried append): not written again.
    skipped_duplicates: int = 0


class MessagesResult(_Wire, kw_only=True):
    messages: list[dict[str, Any]]
    boundary_uuid: str | None = None
    cache_edits: list[dict[str, Any]] | None = None
    context_management: dict[str, Any] | None = None
    betas: list[str] | None = None


class SessionInfo(_Wire, kw_only=True):
    session_id: str
    transcript_path: str
    cwd: str
    model: str
    agent_kind: AgentKind
    open: bool
    # Known only for a loaded session; absent for one the daemon has not loaded (counting it
    # would mean reading its whole transcript).
    entry_count: int | None = None
    tokens: int | None = None
    # Open here read-only (``open`` is then true too).
    read_only: bool = False
    # Another process owns the session (found by a probe that takes no lock).
    held_by: HolderInfo | None = None
    # Whether the daemon follows the transcript the session was imported from (docs/follow.md).
    following: bool = False


class ListResult(_Wire, kw_only=True):
    sessions: list[SessionInfo]


class CloseResult(_Wire, kw_only=True):
    closed: bool


# -- tokens -------------------------------------------------------------------------------------


class BreakdownCategory(_Wire, kw_only=True):
    name: str
    tokens: int
    percent: float
    count: int = 0


class DuplicateRead(_Wire, kw_only=True):
    path: str
    reads: int
    wasted_tokens: int


class BreakdownResult(_Wire, kw_only=True):
    total_tokens: int
    categories: list[BreakdownCategory]
    tool_requests: list[BreakdownCategory]
    tool_results: list[BreakdownCategory]
    attachments: list[BreakdownCategory]
    duplicate_reads: list[DuplicateRead]
    duplicate_read_tokens: int


ThresholdLevel = Literal["warning", "error", "autoCompact", "blocking"]


class ThresholdNotification(_Wire, kw_only=True):
    session_id: str
    level: ThresholdLevel
    tokens: int
    threshold: int
    status: TokenStatus


class FollowedNotification(_Wire, kw_only=True):
    """``session/followed``: lines the agent appended to a followed transcript were taken in."""

    session_id: str
    # Entries added to the session (lines it already held are not counted).
    appended: int
    # The transcript was replaced, truncated or rewritten and was read again from its start.
    reread: bool = False
    entry_count: int
    status: TokenStatus


# -- compaction ---------------------------------------------------------------------------------


class MicroParams(_Params, kw_only=True):
    session_id: str
    strategy: Literal["count", "time", "cached"] | None = None


class MicroResult(_Wire, kw_only=True):
    strategy: str
    cleared_tool_ids: list[str]
    tokens_saved: int
    pre_tokens: int
    post_tokens: int
    boundary: dict[str, Any] | None = None
    cache_edits: list[dict[str, Any]] | None = None
    reason: str | None = None
    # Files whose latest Read / Edit / Write result was cleared: they leave the read-file state.
    cleared_read_paths: list[str] | None = None


class FullParams(_Params, kw_only=True):
    session_id: str
    custom_instructions: str | None = None


class PartialParams(_Params, kw_only=True):
    session_id: str
    pivot_uuid: str
    direction: Literal["from", "upTo"]
    custom_instructions: str | None = None


class AutoParams(_Params, kw_only=True):
    session_id: str
    force: bool | None = None
    # The size of what the client is about to send (a new prompt, tool results not appended
    # yet): counted with the session's tokens in the decision (docs/thresholds.md#pending-tokens).
    pending_tokens: Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)] | None = None


class PreviewParams(_Params, kw_only=True):
    session_id: str
    mechanism: Literal["micro", "full", "partial", "auto"] | None = None
    pivot_uuid: str | None = None
    direction: Literal["from", "upTo"] | None = None
    # With mechanism "auto": preview compact/auto with ``force``.
    force: bool | None = None
    # With mechanism "auto": as compact/auto's ``pendingTokens``.
    pending_tokens: Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)] | None = None


class HookResult(_Wire, kw_only=True):
    event: str
    command: str
    exit_code: int | None
    ok: bool
    stdout: str = ""
    stderr: str = ""
    duration_ms: int = 0
    timed_out: bool = False


class PartialInfo(_Wire, kw_only=True):
    """Where a ``compact/partial`` cut: the pivot asked for and the one used.

    ``moved`` is ``back`` / ``forward`` when the asked pivot would have split a response or a
    tool call from its result and the cut moved to the nearest safe entry; ``pivotUuid`` is the
    entry the cut starts at (the first kept entry for ``upTo``, the first summarized for
    ``from``).
    """

    direction: Literal["from", "upTo"]
    requested_pivot_uuid: str
    pivot_uuid: str | None
    moved: Literal["none", "back", "forward"]
    summarized_entries: int
    kept_entries: int


class PassedOver(_Wire, kw_only=True):
    """A summarizer of the chain that did not write the summary, and why."""

    provider: SummarizerProvider
    model: str | None = None
    reason: str


class SummarizerReport(_Wire, kw_only=True):
    """Which summarizer wrote a summary (docs/providers.md#fallback): its provider and model,
    the requests it took (``pieces``: more than one when the conversation did not fit its
    window), and the summarizers tried before it."""

    provider: SummarizerProvider
    model: str | None = None
    pieces: int = 0
    passed_over: list[PassedOver] = msgspec.field(default_factory=list)


class ProviderUsage(_Wire, kw_only=True):
    """What one summarizer spent on a session since the daemon loaded it."""

    provider: SummarizerProvider
    model: str | None = None
    requests: int = 0
    failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0


class CompactResult(_Wire, kw_only=True):
    compaction_id: str
    boundary: dict[str, Any]
    summary: dict[str, Any]
    kept_entries: list[dict[str, Any]]
    attachments: list[dict[str, Any]]
    hook_results: list[HookResult]
    pre_compact_tokens: int
    post_compact_tokens: int
    duration_ms: int
    usage: dict[str, Any] | None = None
    summarizer: str | None = None
    restored_from_ledger: list[str] | None = None
    # Things the client should show the user: an offline fallback, a fixed prefix (system
    # prompt + tools + summary) still above the auto-compact threshold, a cut-short summary.
    warnings: list[str] | None = None
    # compact/partial only: where the cut was made.
    partial: PartialInfo | None = None
    # The summary was prepared in the background before it was needed (docs/background.md):
    # no model call was made for it now.
    prepared: bool = False
    # Which summarizer wrote the summary and why the others were passed over.
    summarized_by: SummarizerReport | None = None


class AutoResult(_Wire, kw_only=True):
    was_compacted: bool
    mechanism: Mechanism | None = None
    result: CompactResult | None = None
    micro: MicroResult | None = None
    # Why nothing was compacted, in words (the decision's, or the failure's).
    reason: str | None = None
    # The branch of the decision taken; compact/preview reports the same code.
    reason_code: DecisionReason | None = None
    status: TokenStatus | None = None
    # With ``summaryPreparing``: tokens left before the blocking limit.
    tokens_left: int | None = None


class PreviewResult(_Wire, kw_only=True):
    mechanism: PreviewMechanism
    would_compact: bool
    pre_tokens: int
    # For a summary written by the model, an upper bound (the summary's budget).
    estimated_post_tokens: int
    entries_summarized: int
    entries_kept: int
    reason: str | None = None
    # With mechanism "auto" asked: the code compact/auto would report.
    reason_code: DecisionReason | None = None


class UndoResult(_Wire, kw_only=True):
    undone_compaction_id: str
    boundary: dict[str, Any]
    status: TokenStatus


class StatusNotification(_Wire, kw_only=True):
    session_id: str
    compaction_id: str
    phase: Phase
    trigger: Trigger
    elapsed_ms: int
    message: str | None = None
    # A preparation in the background, not a compaction the agent waits for.
    background: bool = False


# -- recall -------------------------------------------------------------------------------------


class RecallParams(_Params, kw_only=True):
    session_id: str
    query: str | None = None
    uuids: list[str] | None = None
    limit: Count | None = None


class RecallRevision(_Wire, kw_only=True):
    """A later entry that changed what a hit was about (docs/recall.md#revisions)."""

    uuid: str
    role: str
    timestamp: str | None
    reason: str
    snippet: str


class RecallHit(_Wire, kw_only=True):
    uuid: str
    type: str
    timestamp: str | None
    compacted: bool
    snippet: str
    entry: dict[str, Any] | None = None
    # Who said it: user, assistant, tool, summary or system (a search's hits only).
    role: str | None = None
    # Which stage of the search found it: all words, prefixes, substring, some words.
    match: str | None = None
    revisions: list[RecallRevision] | None = None


class RecallResult(_Wire, kw_only=True):
    hits: list[RecallHit]
    # Entries the search matched, the hits returned included (a search only).
    total: int | None = None


# -- attachments and file state -----------------------------------------------------------------


class AttachmentsResult(_Wire, kw_only=True):
    attachments: list[dict[str, Any]]


class RehydrationExtras(msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=True):
    """What only the client knows, for rehydration (``attachments/rehydrate`` ``extras``).

    ``announcements`` are attachment payloads re-injected as they are, e.g. the client's
    current ``{"type": "deferred_tools_delta", ...}``, ``agent_listing_delta`` or
    ``mcp_instructions_delta``; each needs a string ``type``. The listings the transcript holds
    are not re-injected: the main loop announces them again after a compaction. ``planFilePath`` / ``planMode`` override what the transcript says about
    the plan. The daemon remembers the last extras of a session (until it restarts) and uses
    them for the rehydration after ``compact/full`` and ``compact/partial`` too.
    """

    plan_file_path: str | None = None
    plan_mode: bool | None = None
    announcements: list[dict[str, Any]] | None = None


class RehydrateParams(_Params, kw_only=True):
    session_id: str
    extras: RehydrationExtras | None = None


class FileRecordParams(_Params, kw_only=True):
    session_id: str
    path: str
    offset: Count | None = None
    limit: Count | None = None
    timestamp: Seconds | None = None
    content: str | None = None


class FileStateEntry(_Wire, kw_only=True):
    path: str
    timestamp: float
    offset: int | None = None
    limit: int | None = None
    content_hash: str | None = None
    source: str | None = None
    # Whether a change of this file on disk is being watched for right now.
    watched: bool | None = None


class FileStateResult(_Wire, kw_only=True):
    files: list[FileStateEntry]


class MemoryChangedNotification(_Wire, kw_only=True):
    session_id: str
    path: str
    change: Literal["modified", "added", "deleted"]


# -- cache break detection ----------------------------------------------------------------------


class CacheBeforeParams(_Params, kw_only=True):
    session_id: str
    query_source: str | None = None
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    model: str | None = None
    betas: list[str] | None = None
    thinking: dict[str, Any] | None = None
    effort: str | None = None
    cache_control: list[dict[str, Any]] | None = None
    # The cache_edits deletions sent with this request (pinned ones included); a deletion not
    # seen before explains the drop in cache reads that follows, so it is not flagged.
    cache_edits: list[dict[str, Any]] | None = None
    timestamp: Seconds | None = None


class CacheAfterParams(_Params, kw_only=True):
    session_id: str
    query_source: str | None = None
    usage: dict[str, Any]
    timestamp: Seconds | None = None


class CacheBreak(_Wire, kw_only=True):
    session_id: str
    query_source: str
    previous_cache_read: int
    cache_read: int
    dropped_tokens: int
    reasons: list[str]
    explanation: str
    # Machine-readable kinds of the reasons, in order: model, systemPrompt, tools,
    # cacheControl, betas, thinking, effort, ttlExpiry, serverSide.
    causes: list[str] | None = None
    idle_seconds: float | None = None
    timestamp: float | None = None


class CacheAck(_Wire, kw_only=True):
    recorded: bool
    cache_break: CacheBreak | None = None
    # True when this response started a new baseline because a compaction or a cache
    # deletion happened since the previous response of the same query source.
    baseline_reset: bool = False


class CompactionStat(_Wire, kw_only=True):
    compaction_id: str
    trigger: str
    mechanism: str
    pre_tokens: int
    post_tokens: int
    duration_ms: int
    entries_summarized: int
    dropped_tokens: int
    recompaction: bool
    turns_since_previous: int | None = None
    timestamp: str | None = None
    thrash: bool = False
    refill_contributors: list[str] | None = None
    # Set when the transcript's boundary has no postTokens and the figure was estimated.
    post_tokens_estimated: bool = False
    # User prompts after the compaction before the context passed the auto-compact threshold.
    refill_turns: int | None = None
    boundary_uuid: str | None = None
    # A later compact/undo cancelled this compaction (undo entries themselves are not listed).
    undone: bool = False
    # What the agent waited for it (``durationMs`` is the model's time); a summary prepared in
    # the background (docs/background.md) makes it much shorter.
    wait_ms: int | None = None
    prepared: bool = False


class StatsResult(_Wire, kw_only=True):
    compactions: list[CompactionStat]
    microcompact_tokens_saved: int
    microcompactions: int
    cache_breaks: list[CacheBreak]
    # Background preparations (docs/background.md#visible) of the session since the daemon
    # loaded it: tokens spent on summaries never applied, and preparations that failed.
    preparation_tokens_unused: int = 0
    preparation_failures: int = 0
    # The summarizers' requests and tokens for this session, per provider and model, since the
    # daemon loaded it (docs/providers.md#usage).
    summarizer_usage: list[ProviderUsage] = msgspec.field(default_factory=list)


# -- session memory -----------------------------------------------------------------------------


class SessionMemoryResult(_Wire, kw_only=True):
    path: str
    content: str
    tokens: int
    last_extracted_at: str | None = None
    extracting: bool = False


# -- token history ------------------------------------------------------------------------------


class HistoryPoint(_Wire, kw_only=True):
    """The context size one API response reported: its usage (input, cache and output tokens)."""

    # Position of the response's last line in the session's transcript (0-based).
    entry_index: int
    timestamp: str | None = None
    tokens: int


class HistoryCompaction(_Wire, kw_only=True):
    """A compaction in the history: where its boundary sits and the size before and after."""

    entry_index: int
    timestamp: str | None = None
    compaction_id: str
    trigger: str
    mechanism: str
    pre_tokens: int
    post_tokens: int
    # A later compact/undo cancelled it.
    undone: bool = False


class HistoryResult(_Wire, kw_only=True):
    """``tokens/history``: the session's size over time (docs/thresholds.md#history)."""

    points: list[HistoryPoint]
    compactions: list[HistoryCompaction]
    # Lines in the transcript: the x axis runs from 0 to this.
    entry_count: int


# -- Claude Code round trip ---------------------------------------------------------------------


class ClaudeCodeCompactParams(_Params, kw_only=True):
    """Compact a Claude Code transcript into a new Claude Code session beside it
    (docs/claude-code.md#compact-and-resume). ``transcriptPath``: absolute. ``online``: the
    summary from the model (needs the daemon's key); offline by default."""

    transcript_path: str
    custom_instructions: str | None = None
    online: bool | None = None


class ClaudeCodeCompactResult(_Wire, kw_only=True):
    # The new Claude Code session: its id, its file (beside the original) and the shell
    # command that resumes it (``cd <cwd> && claude --resume <id>``).
    new_session_id: str
    new_transcript_path: str
    resume_command: str
    cwd: str | None
    # The session it continues: the original file, never changed.
    original_session_id: str | None
    original_transcript_path: str
    # compactd's own session the transcript was imported into and compacted.
    session_id: str
    pre_tokens: int
    post_tokens: int
    # Human messages of the compacted part, and how many of them the summary quotes.
    user_messages: int
    user_messages_kept: int
    summarized_entries: int
    # Lines of the last assistant turn kept verbatim after the summary.
    kept_entries: int
    attachments: int
    summarizer: str | None = None
    warnings: list[str] | None = None


# -- the method table ---------------------------------------------------------------------------

# method -> (params type, result type). ``None`` params means only ``sessionId`` is required.
REQUESTS: dict[str, tuple[type[msgspec.Struct], type[msgspec.Struct]]] = {
    SESSION_OPEN: (OpenParams, OpenResult),
    SESSION_APPEND: (AppendParams, AppendResult),
    SESSION_MESSAGES: (SessionParams, MessagesResult),
    SESSION_LIST: (NoParams, ListResult),
    SESSION_CLOSE: (SessionParams, CloseResult),
    SESSION_STATS: (SessionParams, StatsResult),
    TOKENS_STATUS: (SessionParams, TokenStatus),
    TOKENS_BREAKDOWN: (SessionParams, BreakdownResult),
    TOKENS_HISTORY: (SessionParams, HistoryResult),
    COMPACT_MICRO: (MicroParams, MicroResult),
    COMPACT_FULL: (FullParams, CompactResult),
    COMPACT_PARTIAL: (PartialParams, CompactResult),
    COMPACT_AUTO: (AutoParams, AutoResult),
    COMPACT_PREVIEW: (PreviewParams, PreviewResult),
    COMPACT_UNDO: (SessionParams, UndoResult),
    RECALL_SEARCH: (RecallParams, RecallResult),
    ATTACHMENTS_REHYDRATE: (RehydrateParams, AttachmentsResult),
    ATTACHMENTS_PENDING: (SessionParams, AttachmentsResult),
    FILESTATE_RECORD: (FileRecordParams, FileStateResult),
    FILESTATE_LIST: (SessionParams, FileStateResult),
    CACHE_BEFORE_REQUEST: (CacheBeforeParams, CacheAck),
    CACHE_AFTER_RESPONSE: (CacheAfterParams, CacheAck),
    SESSION_MEMORY_GET: (SessionParams, SessionMemoryResult),
    SESSION_MEMORY_EXTRACT: (SessionParams, SessionMemoryResult),
    CLAUDE_CODE_COMPACT: (ClaudeCodeCompactParams, ClaudeCodeCompactResult),
}

# What a session opened with ``readOnly: true`` answers: methods that change neither its files
# nor its state. Any other request on it is refused with ``sessionReadOnly``
# (docs/durability.md#ownership).
READ_ONLY_METHODS: frozenset[str] = frozenset(
    {
        SESSION_OPEN,
        SESSION_MESSAGES,
        SESSION_LIST,
        SESSION_CLOSE,
        SESSION_STATS,
        TOKENS_STATUS,
        TOKENS_BREAKDOWN,
        TOKENS_HISTORY,
        COMPACT_PREVIEW,
        RECALL_SEARCH,
        FILESTATE_LIST,
        SESSION_MEMORY_GET,
    }
)

NOTIFICATIONS: dict[str, type[msgspec.Struct]] = {
    NOTIFY_COMPACT_STATUS: StatusNotification,
    NOTIFY_TOKENS_THRESHOLD: ThresholdNotification,
    NOTIFY_MEMORY_CHANGED: MemoryChangedNotification,
    NOTIFY_CACHE_BREAK: CacheBreak,
    NOTIFY_SESSION_FOLLOWED: FollowedNotification,
}
