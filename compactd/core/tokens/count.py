"""The token count of a conversation: the last reported usage plus an estimate of what followed.

The size of a conversation is the usage the API reported for the most recent response, plus a
padded character-based estimate of what was appended after that response started
(docs/thresholds.md#token-count). ``count_tokens`` computes it in full and ``TokenCounter``
incrementally as entries are appended. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from compactd.core import constants as c
from compactd.core.tokens.estimate import estimate_entry_raw, estimate_record_raw, pad
from compactd.protocol import (
    PrefixSource,
)
from compactd.transcript.model import (
    Entry,
    Record,
)


@dataclass(frozen=True, slots=True)
class TokenCount:
    """What the next request carries, in named parts (docs/thresholds.md#accounting).

    ``exact`` is the API usage of the latest response in the context and ``estimated`` what
    came after it; ``saved`` is what microcompact cleared since that usage was reported.
    ``tokens`` is ``exact + estimated - saved`` (never negative).

    The same total in parts: ``fixed_prefix`` (system prompt, tools and whatever else the
    client sends besides the messages), ``attachments`` and ``messages``, less ``saved``.
    While a response's usage anchors the count the prefix is learned from it (its usage minus
    the estimate of the messages it covered); without one (a compaction just rewrote the
    context) the prefix carried from before is part of the estimate.
    """

    tokens: int
    exact: int
    estimated: int
    saved: int = 0
    fixed_prefix: int = 0
    attachments: int = 0
    # Where the prefix figure comes from: "usage" (learned now), "carried" (learned before a
    # compaction, or told by the client) or "none" (nothing known yet).
    prefix_source: PrefixSource = "none"

    @property
    def messages(self) -> int:
        return max(0, self.tokens + self.saved - self.fixed_prefix - self.attachments)


def has_usable_usage(entry: Entry) -> bool:
    """Whether the entry is an assistant response whose API usage can anchor the count."""
    return entry.type == "assistant" and _usable_total(entry) > 0


def _usable_total(entry: Entry) -> int:
    """The usage total of a response (an assistant entry) that can anchor the count, else 0."""
    message = entry.message
    if message is None or entry.is_api_error_message:
        return 0
    usage = message.usage
    if usage is None or message.model == c.SYNTHETIC_MODEL:
        return 0
    return usage.total()


def _usage_total(entry: Entry) -> int:
    message = entry.message
    assert message is not None and message.usage is not None
    return message.usage.total()


# Identifies the API response an assistant entry belongs to: its ``message.id`` when present,
# else the entry's position (an entry without id is a response of its own).
_ResponseKey = str | int


def _response_key(entry: Entry, index: int) -> _ResponseKey | None:
    if entry.type != "assistant":
        return None
    message_id = entry.message_id
    return message_id if message_id else index


def compacted_tokens(prefix: int, raw: int, saved: int = 0) -> int:
    """The count of a context a compaction has just written, before any response measures it.

    The fixed prefix plus the plain (unpadded) estimate of the entries the compaction left (its
    summary, attachments and kept entries), less what a microcompact among them cleared. The
    4/3 padding stays off: it is the reference's margin on a count that leaves the prefix out,
    and on top of a counted prefix it put the after-compaction figure 9-17% above the next
    request (docs/thresholds.md#after-a-compaction). The one function for that figure: the
    status right after a compaction, the boundary's ``postTokens`` and every preview use it.
    """
    return max(0, prefix + raw - saved)


def _make_count(
    exact: int,
    raw_after: int,
    saved: int,
    *,
    prefix: int = 0,
    source: PrefixSource = "none",
    attachment_raw: int = 0,
    anchored: bool = True,
    compacted_raw: int = 0,
) -> TokenCount:
    # ``compacted_raw`` (part of ``raw_after``): what a compaction wrote, counted unpadded.
    if anchored:
        estimated = pad(raw_after)
    else:
        estimated = compacted_tokens(prefix, compacted_raw) + pad(raw_after - compacted_raw)
    tokens = max(0, exact + estimated - saved)
    return TokenCount(
        tokens=tokens,
        exact=exact,
        estimated=estimated,
        saved=saved,
        fixed_prefix=min(prefix, tokens + saved),
        attachments=min(
            attachment_raw if compacted_raw and not anchored else pad(attachment_raw),
            max(0, tokens + saved - prefix),
        ),
        prefix_source=source,
    )


def count_tokens(entries: Sequence[Entry]) -> TokenCount:
    """Full recount of a conversation (the entries after the last compact boundary).

    The anchor is the most recent response with usable usage. One response may be written as
    several entries sharing ``message.id``, with tool results between them, so the estimate
    starts after the response's FIRST entry; the response's own later entries are covered by
    its usage and skipped, the interleaved tool results are not. Split entries repeat the same
    usage: the largest is taken once.
    """
    anchor: _ResponseKey | None = None
    for index in range(len(entries) - 1, -1, -1):
        if has_usable_usage(entries[index]):
            anchor = _response_key(entries[index], index)
            break
    if anchor is None:
        attachment_raw = sum(estimate_entry_raw(e) for e in entries if e.type == "attachment")
        return _make_count(
            0,
            sum(estimate_entry_raw(e) for e in entries),
            0,
            attachment_raw=attachment_raw,
            anchored=False,
        )

    exact = 0
    raw_after = 0
    seen_first = False
    for index, entry in enumerate(entries):
        same_response = _response_key(entry, index) == anchor
        if same_response:
            if has_usable_usage(entry):
                exact = max(exact, _usage_total(entry))
            seen_first = True
            continue
        if seen_first:
            raw_after += estimate_entry_raw(entry)
    attachment_raw = sum(estimate_entry_raw(e) for e in entries if e.type == "attachment")
    # The prefix rule (the largest figure any usage implies) is the counter's; not repeated.
    prefix = TokenCounter(entries).learned_prefix or 0
    return _make_count(
        exact, raw_after, 0, prefix=prefix, source="usage", attachment_raw=attachment_raw
    )


# ``TokenCounter.add_records`` leaves estimates for later from runs of records this long (a
# handful of appended entries are estimated as they come, as ``add`` does).
_LAZY_MIN: Final = 256


# What ``TokenCounter`` logs for a count again in full, each under its name: the run of records
# (and savings) ``add_records`` took, then runs of entries as ``add_all`` took them, savings
# (``apply_saving``) and ``settle`` calls.
_Logged = tuple[str, Any]


def _usable_record(item: Record | int) -> bool:
    return isinstance(item, Record) and has_usable_usage(item.entry)


def _last_usable(counted: Sequence[Record | int]) -> int:
    """Where the last record whose entry reports usage that can anchor the count is, or -1."""
    for at in range(len(counted) - 1, -1, -1):
        if _usable_record(counted[at]):
            return at
    return -1


class TokenCounter:
    """Keeps ``count_tokens`` of a growing entry list up to date in time proportional to appends.

    It keeps a running sum of raw estimates and, per response, the running sum just after its
    first entry, the estimate of its later entries and its largest usage. The count anchored at
    any response is then a subtraction, so a response whose first entry arrived long ago (or
    earlier in the same batch) can become the anchor without rescanning.
    """

    __slots__ = (
        "_anchor",
        "_attachment_raw",
        "_compacted_raw",
        "_cumulative_raw",
        "_early",
        "_first_key",
        "_first_cumulative",
        "_later_own_raw",
        "_log",
        "_max_usage",
        "_saved",
        "_seen",
        "carried_prefix",
        "known_prefix",
    )

    def __init__(
        self, entries: Iterable[Entry] = (), carried_prefix: int = 0, known_prefix: int = 0
    ) -> None:
        # The fixed prefix learned before this context (before a compaction, or recorded in
        # its boundary): it stays the context's figure, usage or not (``fixed_prefix``).
        self.carried_prefix = carried_prefix
        # What the client says every request carries (the estimate of its cacheSafeParams):
        # the prefix is never taken to be smaller.
        self.known_prefix = known_prefix
        self._first_key: _ResponseKey | None = None
        self._compacted_raw = 0
        self._attachment_raw = 0
        self._seen = 0
        self._cumulative_raw = 0
        self._first_cumulative: dict[_ResponseKey, int] = {}
        self._later_own_raw: dict[_ResponseKey, int] = {}
        self._max_usage: dict[_ResponseKey, int] = {}
        self._anchor: _ResponseKey | None = None
        self._saved = 0
        # After ``add_records`` left estimates for later: the response ids seen before its
        # anchor began, and all that was counted since, to count again in full (``_recount``).
        self._early: set[str] = set()
        self._log: list[_Logged] | None = None
        self.extend(entries)

    def _clear(self) -> None:
        self._first_key = None
        self._compacted_raw = 0
        self._attachment_raw = 0
        self._seen = 0
        self._cumulative_raw = 0
        self._first_cumulative.clear()
        self._later_own_raw.clear()
        self._max_usage.clear()
        self._anchor = None
        self._saved = 0
        self._early = set()
        self._log = None

    def extend(self, entries: Iterable[Entry]) -> None:
        """Account for entries appended after the ones already seen."""
        self.add_all((entry, estimate_entry_raw(entry)) for entry in entries)

    def add(self, entry: Entry, raw: int) -> None:
        """Account for one appended entry whose unpadded estimate is ``raw``."""
        self.add_all(((entry, raw),))

    def add_all(self, counted: Iterable[tuple[Entry, int]]) -> None:
        """Account for appended entries, each with its unpadded estimate, in order.

        One loop over local copies of the counter's fields (a whole context is counted this way
        when a session loads), written back at the end.
        """
        if self._log is not None:
            counted = list(counted)
            self._log.append(("entries", counted))
        self._count(counted)

    def _count(self, counted: Iterable[tuple[Entry, int]]) -> None:
        index = self._seen
        cumulative = self._cumulative_raw
        attachment_raw = self._attachment_raw
        first_cumulative = self._first_cumulative
        later_own_raw = self._later_own_raw
        max_usage = self._max_usage
        for entry, raw in counted:
            cumulative += raw
            kind = entry.type
            if kind != "assistant":
                if kind == "attachment":
                    attachment_raw += raw
                index += 1
                continue
            message = entry.message
            key: _ResponseKey = (message.id if message is not None else None) or index
            index += 1
            usage = _usable_total(entry)
            if key not in first_cumulative:
                # An id-less entry without usage can never anchor nor recur: nothing to keep.
                if isinstance(key, int) and not usage:
                    continue
                first_cumulative[key] = cumulative
                later_own_raw[key] = 0
            else:
                later_own_raw[key] += raw
            if usage:
                if usage > max_usage.get(key, 0):
                    max_usage[key] = usage
                if key != self._anchor:
                    if key in self._early:  # a response from before the anchor goes on
                        self._recount()
                        return
                    # A new response's usage already reflects any clearing done before it.
                    self._anchor = key
                    self._saved = 0
                if self._first_key is None:
                    self._first_key = key
        self._seen = index
        self._cumulative_raw = cumulative
        self._attachment_raw = attachment_raw

    def add_records(self, counted: Sequence[Record | int]) -> None:
        """Account for records in order, each entry with its estimate (``estimate_record_raw``),
        and, where an int stands among them, for a microcompact's saving of that many tokens
        (``apply_saving``): estimating only the entries the count can depend on.

        Once a response reports usage, the count is its usage plus what came after the response
        began, and the fixed prefix is learned from the first response of the context
        (``learned_prefix``): the entries between the first response and the first entry of the
        last one reach the count only through the attachments' total and the first response's
        own later entries. So a whole context counted at once (a load) is counted in time
        proportional to what follows its last response: the entries before are only looked at,
        and their estimates are left to whoever asks for them (a record keeps its estimate once
        made). Should a response from before the last one go on later (an entry with its id
        reporting usage: Claude Code does not write that), everything is counted again in full
        (``_recount``). Either way the count is the one ``add`` would have made
        (docs/thresholds.md#counting-a-whole-context).
        """
        if len(counted) < _LAZY_MIN or self._seen or self._log is not None:
            self._add_plainly(counted)
            return
        last = _last_usable(counted)
        if last < 0:
            self._add_plainly(counted)
            return
        # Up to the first response that reports usage, all of it: the prefix is learned there.
        head = next(i for i in range(last + 1) if _usable_record(counted[i])) + 1
        self._add_plainly(counted[:head])
        anchor_record = counted[last]
        assert isinstance(anchor_record, Record)
        # The anchor's id; an entry without one is a response of its own, begun at ``last``.
        anchor = anchor_record.entry.message_id or None
        if anchor is not None and anchor in self._first_cumulative:
            self._add_plainly(counted[head:])  # the anchor began before: all of it counts
            return
        first = self._first_key
        early = {k for k in self._first_cumulative if isinstance(k, str)}
        index: int = self._seen
        at = head
        while at < last:  # to the anchor's first entry, at ``last`` at the latest
            record = counted[at]
            if isinstance(record, int):  # a saving: the anchor's usage resets it anyway
                at += 1
                continue
            kind = record.kind
            if kind == "assistant":
                entry = record.entry
                key = entry.message_id
                if key:
                    if key == anchor:
                        break
                    early.add(key)
                    if key == first:  # the first response's own later entry
                        raw = estimate_record_raw(record)
                        self._cumulative_raw += raw
                        self._later_own_raw[key] += raw
                        usage = _usable_total(entry)
                        if usage > self._max_usage.get(key, 0):
                            self._max_usage[key] = usage
            elif kind == "attachment":
                raw = estimate_record_raw(record)
                self._cumulative_raw += raw
                self._attachment_raw += raw
            index += 1
            at += 1
        self._seen = index
        self._early = early
        self._log = [("records", list(counted))]  # all of it: ``_recount`` starts there
        self._add_plainly(counted[at:], logged=True)

    def _add_plainly(self, counted: Sequence[Record | int], *, logged: bool = False) -> None:
        """``add_records`` with every estimate made now. ``logged``: ``counted`` is in the log
        already (the end of the run ``add_records`` was given), so it is not logged again, and
        once everything was counted again in full nothing of it is left to count."""
        run: list[tuple[Entry, int]] = []
        for item in counted:
            if isinstance(item, Record):
                run.append((item.entry, estimate_record_raw(item)))
                continue
            if logged:
                self._count(run)
                if self._log is None:
                    return
                self._save(item)
            else:
                self.add_all(run)
                self.apply_saving(item)
            run = []
        if logged:
            self._count(run)
        else:
            self.add_all(run)

    def _recount(self) -> None:
        """Count everything logged since ``add_records`` again, every estimate made."""
        log = self._log
        assert log is not None
        self._clear()  # and stop logging
        for kind, item in log:
            if kind == "settled":
                self.settle()
            elif kind == "saving":
                self.apply_saving(item)
            elif kind == "entries":
                self._count(item)
            else:
                self._add_plainly(item)

    def settle(self) -> None:
        """Mark everything counted so far as what a compaction wrote: until a response reports
        usage it counts unpadded (``compacted_tokens``); what is appended later is padded."""
        if self._log is not None:
            self._log.append(("settled", None))
        # (After ``add_records`` left estimates for later this figure is short of them; it only
        # counts while no response reports usage, and one does then.)
        self._compacted_raw = self._cumulative_raw

    def reset(self, entries: Iterable[Entry] = ()) -> None:
        """Forget everything and recount ``entries`` (after a compaction rewrote the context)."""
        self._clear()
        self.extend(entries)

    def apply_saving(self, tokens: int) -> None:
        """Subtract tokens cleared by microcompact until the next response reports usage."""
        if tokens > 0:
            if self._log is not None:
                self._log.append(("saving", tokens))
            self._save(tokens)

    def _save(self, tokens: int) -> None:
        if tokens > 0:
            self._saved += tokens

    def _implied_prefix(self, key: _ResponseKey) -> int:
        """What the response's usage says the prefix is: its usage less the padded estimate of
        the messages it covered (everything before it, and itself)."""
        covered = self._first_cumulative[key] + self._later_own_raw[key]
        return max(0, self._max_usage[key] - pad(covered))

    @property
    def learned_prefix(self) -> int | None:
        """The fixed prefix learned from the usage in this context, or None without any.

        Each response's usage implies a figure, and each carries the estimate's error on the
        messages it covered: the first response of the context covers the fewest, so its figure
        is the one kept. (The largest figure, kept before, came from a response covering tens of
        thousands of tokens of tool calls whose framing the estimate leaves out; carried across
        a compaction, it counted those messages' framing in a request that no longer had them.)
        Never less than what the client says it sends (``known_prefix``)
        (docs/thresholds.md#accounting).
        """
        if self._first_key is None:
            return None
        return max(self._implied_prefix(self._first_key), self.known_prefix)

    @property
    def fixed_prefix(self) -> int:
        """The best figure of the fixed prefix now: the one carried from before a compaction
        when there is one, else learned from usage. The carried figure came from the first
        response of an earlier context, which covered fewer messages than this context's first
        (a compaction's summary and what follows), so it holds less of the estimate's error
        (docs/thresholds.md#accounting)."""
        if self.carried_prefix:
            return max(self.carried_prefix, self.known_prefix)
        learned = self.learned_prefix
        return self.known_prefix if learned is None else learned

    @property
    def current(self) -> TokenCount:
        anchor = self._anchor
        if anchor is None:
            prefix = self.fixed_prefix
            return _make_count(
                0,
                self._cumulative_raw,
                self._saved,
                prefix=prefix,
                source="carried" if prefix else "none",
                attachment_raw=self._attachment_raw,
                anchored=False,
                compacted_raw=self._compacted_raw,
            )
        raw_after = (
            self._cumulative_raw - self._first_cumulative[anchor] - self._later_own_raw[anchor]
        )
        prefix = self.fixed_prefix
        return _make_count(
            self._max_usage[anchor],
            raw_after,
            self._saved,
            prefix=prefix,
            source="carried" if self.carried_prefix else "usage",
            attachment_raw=self._attachment_raw,
        )
