"""The view budget: how much the whole view after a compaction may count.

A summary, whoever writes it, shares one budget with what the survival ledger adds and the
rehydration attachments (docs/compaction.md#survival-ledger). ``view_budget`` derives it from
the session's effective window; ``ViewBudget`` converts it to the characters a summary, the
model's request and the attachments may take. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from compactd.core import constants as c

# The whole view a compaction leaves (summary, what the ledger restores, attachments) stays
# within this share of the effective window, in tokens/status terms (compactd's own choice: a
# tenth of the window leaves the agent most of it to work in before the next threshold).
VIEW_BUDGET_SHARE: Final = 0.10
# A floor, so that a tiny window still leaves room for the request and the pointers.
VIEW_BUDGET_MIN_TOKENS: Final = 1_000
# The part of the view budget a model is asked to keep its summary within; what the ledger adds
# and the attachments share the rest. compactd's own choice.
SUMMARY_SHARE: Final = 0.6
# The part kept for the attachments whatever the summary and the ledger need: the user's words
# come before files the agent can read again, but the todo list and the plan must still fit.
ATTACHMENTS_MIN_SHARE: Final = 0.1


@dataclass(frozen=True, slots=True)
class ViewBudget:
    """The most the view after a compaction may count, in ``tokens/status`` tokens."""

    tokens: int

    @property
    def raw_tokens(self) -> int:
        """The budget in the estimator's plain tokens: the status counts what a compaction
        leaves without the 4/3 padding (``tokens.compacted_tokens``,
        docs/thresholds.md#after-a-compaction), so the two are the same figure."""
        return self.tokens

    @property
    def chars(self) -> int:
        return self.raw_tokens * c.CHARS_PER_TOKEN

    @property
    def summary_chars(self) -> int:
        """The most the summary and what the ledger adds may take, in characters."""
        return int(self.chars * (1 - ATTACHMENTS_MIN_SHARE))

    @property
    def model_chars(self) -> int:
        """What a model is asked to keep its own summary within, in characters."""
        return int(self.chars * SUMMARY_SHARE)


def view_budget(effective_window: int) -> ViewBudget:
    """The view budget of a session whose effective window is ``effective_window``."""
    return ViewBudget(max(VIEW_BUDGET_MIN_TOKENS, int(effective_window * VIEW_BUDGET_SHARE)))
