"""Fitting the attachments into the room the view budget leaves: the files' and skills' budgets
shrink first, then whole kinds give way.

Pure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

from compactd.core.rehydrate.budget import Budgets
from compactd.core.rehydrate.plan import RehydrationInputs, payload_tokens, plan_attachments
from compactd.core.rehydrate.render import DELTAS
from compactd.core.tokens import estimate_text_tokens

__all__ = [
    "fit_attachments",
]

# Kinds that shrink when the attachments do not fit the room the view budget leaves, each with
# the budget that bounds it; then the kinds that give way, least needed first. The todo list
# and the plan-mode reminder always stay (the summary points to the former).
_SHRINKING: Final = (("file", "files_total_tokens"), ("invoked_skills", "skills_total_tokens"))
_GIVING_WAY: Final = (
    "compact_file_reference",
    "invoked_skills",
    *DELTAS,
    "skill_listing",
    "task_status",
    "plan_file_reference",
)
_FIT_ROUNDS: Final = 3


def _text_tokens(payload: dict[str, Any]) -> int:
    """Tokens of the text a payload's own budget counts (file content, skill instructions)."""
    if payload.get("type") == "file":
        return estimate_text_tokens(payload["content"]["file"]["content"])
    if payload.get("type") == "invoked_skills":
        return sum(estimate_text_tokens(s.get("content", "")) for s in payload["skills"])
    return 0


def fit_attachments(
    inputs: RehydrationInputs, limit: int | None, budgets: Budgets | None = None
) -> list[dict[str, Any]]:
    """``plan_attachments`` within ``limit`` raw tokens (None: the caps alone).

    When the plan does not fit, the files' total budget, then the skills', shrink to what is
    left for them (a file that no longer fits becomes a reference); what still does not fit
    gives way by kind (``_GIVING_WAY``), the last of a kind first.
    """
    b = budgets or Budgets()
    out = plan_attachments(inputs, b)
    if limit is None:
        return out
    for kind, budget_field in _SHRINKING:
        for _ in range(_FIT_ROUNDS):
            sizes = [payload_tokens(x) for x in out]
            over = sum(sizes) - limit
            if over <= 0:
                return out
            json_tokens = sum(n for x, n in zip(out, sizes, strict=True) if x["type"] == kind)
            text_tokens = sum(_text_tokens(x) for x in out if x["type"] == kind)
            if not json_tokens or not text_tokens:
                break
            keep = max(0, json_tokens - over) * text_tokens // json_tokens
            b = replace(b, **{budget_field: min(getattr(b, budget_field), keep)})
            out = plan_attachments(inputs, b)
    sizes = [payload_tokens(x) for x in out]
    over = sum(sizes) - limit
    for kind in _GIVING_WAY:
        for i in range(len(out) - 1, -1, -1):
            if over <= 0:
                return out
            if out[i].get("type") == kind:
                over -= sizes.pop(i)
                out.pop(i)
    return out
