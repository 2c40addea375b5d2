"""The summary request a compaction sends: the context as the main loop sends it, then the
instruction (docs/compaction.md#cache-sharing).

``summary_request`` shares the main loop's cached prefix; a preparation in the background sends
the same (docs/background.md). ``catch_up_request`` asks for a prepared summary to be brought up
to date over what arrived after its snapshot (docs/background.md#bound). Pure: builds requests,
sends nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from compactd import protocol as p
from compactd.core.normalize import to_api_messages
from compactd.core.prompts import compact_prompt
from compactd.engine.plan import CompactionPlan, continuation
from compactd.services.summarizer import SummaryRequest
from compactd.transcript.model import Record, record_from_dict

__all__ = [
    "catch_up_request",
    "has_exchange",
    "not_enough_messages",
    "sum_usage",
    "summary_request",
]


def has_exchange(messages: Sequence[dict[str, Any]]) -> bool:
    roles = {m.get("role") for m in messages}
    return "user" in roles and "assistant" in roles


def not_enough_messages() -> p.CompactdError:
    return p.CompactdError(
        p.ErrorCode.NOT_ENOUGH_MESSAGES,
        "not enough messages to compact: the context needs at least one user message and "
        "one assistant response since the last compaction",
    )


def summary_request(
    plan: CompactionPlan,
    instructions: Sequence[str],
    messages: list[dict[str, Any]] | None = None,
) -> SummaryRequest:
    """The cache-sharing summary request of ``plan``: the conversation exactly as the main loop
    sends it (session/messages), so it reads the main loop's cached prefix, then the summary
    instruction. A preparation in the background sends the same (docs/background.md).
    ``messages``: the conversation when already built (it takes a while on a long context)."""
    shown, cleared = plan.shown, plan.cleared
    return _request(
        plan,
        instructions,
        lambda **kw: to_api_messages(shown, cleared_tool_ids=cleared, **kw),
        messages,
    )


def _request(
    plan: CompactionPlan,
    instructions: Sequence[str],
    build: Callable[..., list[dict[str, Any]]],
    messages: list[dict[str, Any]] | None = None,
) -> SummaryRequest:
    snap = plan.snapshot
    return SummaryRequest(
        messages=messages if messages is not None else build(),
        instruction=compact_prompt(
            plan.spec.kind, list(instructions), target_words=plan.view.target_words
        ),
        model=snap.meta.model,
        cache_safe=snap.meta.cache_safe_params,
        session_id=snap.session_id,
        plain=lambda: build(strip_media=True, drop_skill_listing=True),
    )


def catch_up_request(
    old: CompactionPlan, fresh: CompactionPlan, summary: str
) -> SummaryRequest | None:
    """The request that brings what arrived after ``old``'s snapshot into ``summary`` (its
    summary): that summary as the conversation's opening, then the entries after the snapshot,
    for ``fresh``'s context (docs/background.md#bound). None when ``fresh``'s context does not
    continue ``old``'s or holds no exchange. CPU: run it in a worker thread."""
    head = len(old.snapshot.context)
    ctx = fresh.snapshot.context
    if len(ctx) <= head or any(a is not b for a, b in zip(old.snapshot.context, ctx, strict=False)):
        return None
    tail = list(ctx[head:])
    text = continuation(old.snapshot.transcript_path, old.spec, summary, tail)
    lead = record_from_dict({"type": "user", "message": {"role": "user", "content": text}})
    shown: list[Record] = [lead, *tail]
    cleared = fresh.cleared

    def build(**kw: Any) -> list[dict[str, Any]]:
        return to_api_messages(shown, cleared_tool_ids=cleared, **kw)

    messages = build()
    return _request(fresh, [], build, messages) if has_exchange(messages) else None


def sum_usage(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """Both requests' usage, added up key by key (numbers only)."""
    if a is None or b is None:
        return b or a
    keys = {k for k in (*a, *b) if isinstance(a.get(k, 0), int) and isinstance(b.get(k, 0), int)}
    return {k: int(a.get(k) or 0) + int(b.get(k) or 0) for k in keys}
