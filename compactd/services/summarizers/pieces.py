"""A summary in pieces: a conversation that does not fit the summarizer's window, summarized
part by part, each request carrying the summary of the parts before it, none above the window
(docs/providers.md#pieces). The plan is ``core/pieces.py``'s; this module sends the requests.

A context-length error on a piece means the window is smaller than believed: the window the
error names (or three quarters of the one used) replaces it and the rest of the conversation is
planned again, at most ``COMPACT_MAX_PTL_RETRIES`` times.
"""

from __future__ import annotations

import time
from typing import Any, Final

from compactd.core import constants as c
from compactd.core.pieces import (
    piece_budget,
    piece_frame,
    piece_prompt,
    plan_pieces,
    render_rounds,
)
from compactd.core.prompts import PLAIN_SYSTEM_PROMPT, format_summary
from compactd.services.summarizers.base import (
    ContextTooLong,
    Note,
    Provider,
    ProviderFailed,
    SummaryOutcome,
    SummaryRequest,
    plain_messages,
)

__all__ = ["shrink", "summarize_in_pieces"]

# When a context-length error names no window, the next plan assumes this share of the
# window the failed request was planned for (compactd's own choice).
_SHRINK_NUM: Final = 3
_SHRINK_DEN: Final = 4


def shrink(window: int, named: int | None) -> int:
    """The window to plan with after a context-length error on a request planned for
    ``window``: the one the error names when it is smaller, else three quarters."""
    if named is not None and 0 < named < window:
        return named
    return window * _SHRINK_NUM // _SHRINK_DEN


def _add(total: dict[str, Any], usage: dict[str, Any]) -> None:
    for key, value in usage.items():
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = int(total.get(key, 0)) + value


async def summarize_in_pieces(
    provider: Provider,
    request: SummaryRequest,
    model: str,
    window: int,
    note: Note,
) -> tuple[SummaryOutcome, int]:
    """The summary of ``request`` written in pieces that fit ``window``; with the number of
    requests the final summary took."""
    source = request.plain() if request.plain is not None else request.messages
    remaining = render_rounds(plain_messages(source))
    started = time.perf_counter()
    usage: dict[str, Any] = {}
    earlier: str | None = None
    retries = 0
    requests = 0
    stop_reason: str | None = None
    last = ""
    while remaining:
        budget = piece_budget(window, PLAIN_SYSTEM_PROMPT + request.instruction + piece_frame(99))
        if budget is None:
            raise ProviderFailed(f"a {window:,}-token window is too small to summarize with")
        pieces = plan_pieces(remaining, budget.piece_chars)
        note(f"summarizing in {len(pieces)} pieces to fit a {window:,}-token window")
        done = 0
        try:
            for piece in pieces:
                index = requests + 1
                total = requests + len(pieces) - done
                text = piece_prompt(piece, index, total, earlier, request.instruction)
                reply = await provider.write(
                    model,
                    PLAIN_SYSTEM_PROMPT,
                    [{"role": "user", "content": [{"type": "text", "text": text}]}],
                    budget.output_tokens,
                )
                if not reply.text.strip():
                    raise ProviderFailed("the model returned no summary text", api_failure=False)
                _add(usage, reply.usage)
                requests += 1
                done += 1
                last, stop_reason = reply.text, reply.stop_reason
                earlier = format_summary(reply.text)
        except ContextTooLong as exc:
            retries += 1
            if retries > c.COMPACT_MAX_PTL_RETRIES:
                raise ProviderFailed(
                    f"the pieces still did not fit after {retries - 1} smaller plans ({exc})",
                    api_failure=True,
                ) from exc
            window = shrink(window, exc.window)
            note(f"a piece did not fit ({exc}); planning the rest for {window:,} tokens")
        remaining = pieces[done:] if done < len(pieces) else []
    outcome = SummaryOutcome(
        text=last,
        mode="pieces",
        model=model,
        usage=usage or None,
        stop_reason=stop_reason,
        attempts=requests,
        ptl_retries=retries,
        api_seconds=time.perf_counter() - started,
    )
    return outcome, requests
