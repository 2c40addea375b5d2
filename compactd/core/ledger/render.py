"""Rendering the ledger's parts within a budget, at several levels of detail.

Each part (messages, carried messages, commands, files, harness messages) is a ``Part``: its
renderings from the most to the least detailed. ``fit_parts`` lowers the largest parts until
the whole fits its room: long messages keep their head and tail around a recall pointer, older
commands are grouped by program, paths by directory, and at last only the most recent items are
named and the others counted (docs/compaction.md#survival-ledger). Pure: no I/O.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Final

from compactd.core.ledger.commands import COMMAND_KEY_CHARS, clip_command
from compactd.core.ledger.model import CommandRun, FileTouch, Message, failure_text
from compactd.core.ledger.text import clip, clip_head_tail, flatten
from compactd.core.recall import pointer

Lines = list[str]


@dataclass(frozen=True, slots=True)
class Rendered:
    """A part at one level of detail: its lines, and how many of its items it names one by one
    (the first ones in the part's order; the others are only counted, behind recall/search)."""

    lines: Lines
    shown: int
    chars: int = 0  # messages: the most characters of each shown as written

    @property
    def size(self) -> int:
        return sum(len(line) + 1 for line in self.lines)


@dataclass(frozen=True, slots=True)
class Part:
    """Something a rendering shows, at levels from the most detailed to the least.

    ``weight``: how readily it gives up detail when the whole does not fit (the user's words
    give it up last). ``excerpt``: what it shows is an excerpt of the conversation (error
    lines, the last message), not items the ledger must carry: it gives it up before any part
    leaves an item unnamed.
    """

    levels: Sequence[Callable[[], Rendered]]
    weight: float = 1.0
    excerpt: bool = False


def fit_parts(parts: Mapping[str, Part], room: int) -> dict[str, Rendered]:
    """Each part at a level such that together they fit in ``room`` characters if they can.

    All start at their most detailed level; while the whole is too large, the part that is the
    largest for its weight moves one level down, unless that level names fewer of its items
    (a message, a command, a path only counted): then an excerpt part that can still give up
    something does so first, then a part as ready to give up detail that can do so without
    leaving an item unnamed (docs/compaction.md#survival-ledger).
    """
    at = dict.fromkeys(parts, 0)
    cache: dict[tuple[str, int], Rendered] = {}

    def rendered(key: str, level: int) -> Rendered:
        got = cache.get((key, level))
        if got is None:
            got = cache[(key, level)] = parts[key].levels[level]()
        return got

    def current(key: str) -> Rendered:
        return rendered(key, at[key])

    def drops_items(key: str) -> bool:
        return not parts[key].excerpt and rendered(key, at[key] + 1).shown < current(key).shown

    def largest(keys: list[str]) -> str:
        return max(keys, key=lambda k: current(k).size * parts[k].weight)

    total = sum(current(key).size for key in parts)
    while total > room:
        movable = [key for key in parts if at[key] + 1 < len(parts[key].levels)]
        if not movable:
            break
        key = largest(movable)
        if drops_items(key):
            weight = parts[key].weight
            excerpts = [k for k in movable if parts[k].excerpt]
            # Detail given up by a part that gives it up as readily: a path's changes, a
            # command's outcome (never the user's words, which give it up last).
            detail = [k for k in movable if parts[k].weight >= weight and not drops_items(k)]
            key = largest(excerpts or detail or [key])
        total -= current(key).size
        at[key] += 1
        total += current(key).size
    return {key: current(key) for key in parts}


def fit_text(
    parts: Mapping[str, Part],
    render: Callable[[Mapping[str, Rendered]], str],
    limit: int | None,
) -> tuple[str, dict[str, Rendered]]:
    """``render`` of ``parts`` fitted so that the text is at most ``limit`` characters when it
    can be (the text around the parts is measured with the parts empty, then corrected)."""
    if limit is None:
        chosen = {key: part.levels[0]() for key, part in parts.items()}
        return render(chosen), chosen
    frame = len(render({key: Rendered([], 0) for key in parts}))
    room = limit - frame
    chosen = fit_parts(parts, room)
    text = render(chosen)
    if len(text) > limit:
        chosen = fit_parts(parts, room - (len(text) - limit))
        text = render(chosen)
    return text, chosen


# The levels of detail. Messages: as written up to this many characters (a longer one keeps its
# head and tail around its pointer), then only the most recent ones. Commands: the latest few
# one per line with their outcome, older ones grouped by program, then all of them grouped by
# program and cut to the characters they are known by (``COMMAND_KEY_CHARS``), then only the
# most recent ones named. compactd's own choices.
MESSAGE_CHARS: Final = (2_000, 1_600, 1_200, 800, 480, 320, 240, 160, 120, 96, 80)
ONE_LINE_CHARS: Final = (120, 90, 72)
CARRIED_CHARS: Final = (240, 160, 120, 100, 80, 64)
_SMALL_COUNTS: Final = (25, 15, 10, 5, 2)


def _counts(total: int) -> list[int]:
    """How many of a part's ``total`` items its shortest levels name, most first: nine tenths,
    eight tenths, ... of them (the room left unused between two levels is at most a tenth of
    the part), then a few."""
    tenths = {total * k // 10 for k in range(9, 0, -1)}
    few = {n for n in _SMALL_COUNTS if n < total // 10}
    return sorted((n for n in tenths | few if 0 < n < total), reverse=True)


# (listed one per line, their characters, characters of a grouped one, characters of an error)
_COMMAND_WIDTHS: Final = (
    (60, 240, 120, 200),
    (30, 160, 96, 140),
    (20, 120, 80, 100),
    (12, 100, 72, 80),
    (6, 80, 64, 60),
    (3, 64, 56, 0),
    (0, 0, COMMAND_KEY_CHARS, 0),
)


def message_lines(label: str, message: Message, chars: int) -> Lines:
    """A message after ``label``: on the same line when it is one line, else as the block of
    lines it was written as; a long one keeps its head and tail around a recall pointer."""
    text, _ = clip_head_tail(message.text, chars, message.uuid)
    lines = text.splitlines()
    if len(lines) == 1:
        return [f"   {label} {lines[0]}"]
    return [f"   {label}", *lines]


MessageLines = Callable[[int, Message, int], Lines]


def message_part(
    messages: Sequence[Message], lines_of: MessageLines, older: Callable[[int], str]
) -> Part:
    """The person's messages (chronological): all of them at decreasing lengths, then each on
    one line cut between words (recall/search finds the whole by any of its words), then only
    the most recent ones, the older ones counted by ``older(n)``. ``lines_of(i, message,
    chars)`` renders the ``i``-th (from 1)."""

    def shown(first: int, chars: int, width: int) -> Lines:
        out: Lines = []
        for i, m in enumerate(messages[first:], first + 1):
            if width:
                m = Message(clip(m.text, width), m.uuid, m.harness, m.carried, m.chars)
            out.extend(lines_of(i, m, chars))
        return out

    def full(chars: int, width: int = 0) -> Rendered:
        return Rendered(shown(0, chars, width), len(messages), width or chars)

    def recent(n: int) -> Rendered:
        skipped = len(messages) - n
        width = ONE_LINE_CHARS[-1]
        return Rendered([older(skipped), *shown(skipped, width, width)], n, width)

    levels: list[Callable[[], Rendered]] = [partial(full, chars) for chars in MESSAGE_CHARS]
    levels += [partial(full, MESSAGE_CHARS[-1], width) for width in ONE_LINE_CHARS]
    levels += [partial(recent, n) for n in _counts(len(messages))]
    return Part(levels, weight=0.2)


def carried_line(message: Message, chars: int, pointers: bool) -> str:
    """A message from an earlier compaction, on one line; shortened ones name their pointer."""
    text = clip(message.text, chars)
    shortened = message.chars > len(message.text) or text != flatten(message.text)
    where = f" ({pointer(message.uuid)})" if shortened and pointers else ""
    return f"   - {text}{where}"


def carried_part(messages: Sequence[Message], dropped: int = 0) -> Part:
    """Messages from earlier compactions (chronological), shortened; older ones counted."""

    def note(n: int) -> Lines:
        return [f"   - {n} messages before these (recall/search finds them)"] if n else []

    def level(chars: int, n: int) -> Rendered:
        shown = messages[len(messages) - n :] if n else []
        out = note(dropped + len(messages) - n)
        out += [carried_line(m, chars, chars >= CARRIED_CHARS[1]) for m in shown]
        return Rendered(out, n, chars)

    levels = [partial(level, chars, len(messages)) for chars in CARRIED_CHARS]
    levels += [partial(level, CARRIED_CHARS[-1], n) for n in _counts(len(messages))]
    levels.append(partial(level, 0, 0))
    return Part(levels)


def _status(run: CommandRun, chars: int) -> str:
    times = f" ×{run.runs}" if run.runs > 1 else ""
    if run.ok is None:
        return "(no result recorded)" if not run.carried else ""
    if run.ok:
        failed = f", failed {run.failures} of {run.runs} runs" if run.failures else ""
        return f"ok{times}{failed}"
    what = clip(failure_text(run), chars) if chars else ""
    if not what and run.exit_code is not None:
        what = f"exit {run.exit_code}"
    return f"FAILED{times}: {what}" if what else f"FAILED{times}"


def _failed(run: CommandRun) -> str:
    return " ✗" if run.ok is False else ""


def _shared_start(texts: Sequence[str]) -> str | None:
    """The start ``texts`` share, ended between words when that still holds the characters a
    command is known by, and shorter than each of them; None when it is shorter than those."""
    start = os.path.commonprefix(list(texts))
    word = start[: start.rfind(" ") + 1]
    for candidate in (word, start):
        if len(candidate) >= COMMAND_KEY_CHARS and all(len(t) > len(candidate) for t in texts):
            return candidate
    return None


def _group_text(group: Sequence[CommandRun], width: int) -> str:
    """A program's commands, each cut to ``width``; commands that share the characters they are
    known by (``cd <project> && ...``, cut to the same text) are written once with that start
    and then what tells each apart."""
    by_key: dict[str, list[CommandRun]] = {}
    for run in group:
        by_key.setdefault(flatten(run.command)[:COMMAND_KEY_CHARS], []).append(run)
    shown: list[str] = []
    for runs in by_key.values():
        texts = [flatten(r.command) for r in runs]
        start = _shared_start(texts) if len(runs) > 1 else None
        if start is None:
            shown.extend(f"`{clip_command(r.command, width)}`{_failed(r)}" for r in runs)
            continue
        ends = " · ".join(
            f"`…{clip(t[len(start) :], width)}`{_failed(r)}"
            for r, t in zip(runs, texts, strict=True)
        )
        shown.append(f"`{start.rstrip()}…` ×{len(runs)} ({ends})")
    return " · ".join(shown)


def _commands(
    runs: Sequence[CommandRun], widths: tuple[int, int, int, int], named: int
) -> Rendered:
    listed_n, listed_chars, grouped_chars, outcome_chars = widths
    listed = runs[:listed_n]
    grouped = runs[len(listed) : named]
    counted = runs[max(named, len(listed)) :]
    lines: Lines = []
    for run in listed:
        status = _status(run, outcome_chars)
        shown = f"   - `{clip_command(run.command, listed_chars)}`"
        lines.append(shown + (f" {status}" if status else ""))
    groups: dict[str, list[CommandRun]] = {}
    for run in grouped:
        groups.setdefault(run.program, []).append(run)
    if groups:
        lines.append(
            f"   {'Older commands' if listed else 'Commands'} by program, most recent first "
            "(✗ = failed):"
        )
        for program, group in groups.items():
            lines.append(f"   - {program} ({len(group)}): {_group_text(group, grouped_chars)}")
    if counted:
        by_program = Counter(r.program for r in counted)
        counts = ", ".join(f"{program} ×{n}" for program, n in by_program.items())
        lines.append(
            f"   - {len(counted)} {'older ' if listed or grouped else ''}commands: {counts} "
            "(recall/search finds each by its text)"
        )
    return Rendered(lines, len(listed) + len(grouped))


def command_part(runs: Sequence[CommandRun]) -> Part:
    """Shell commands, most recent first: the latest with their outcome, older ones grouped by
    program, then only the most recent ones named and the rest counted."""
    levels = [partial(_commands, runs, widths, len(runs)) for widths in _COMMAND_WIDTHS]
    tight = _COMMAND_WIDTHS[-1]
    levels += [partial(_commands, runs, tight, n) for n in _counts(len(runs))]
    levels.append(partial(_commands, runs, (0, 0, 0, 0), 0))
    return Part(levels)


def command_lines(runs: Sequence[CommandRun]) -> Lines:
    """Shell commands at the most detailed level."""
    return _commands(runs, _COMMAND_WIDTHS[0], len(runs)).lines


def _directory_groups(files: Sequence[FileTouch]) -> Lines:
    groups: dict[str, list[str]] = {}
    for f in files:
        shown = f.shown.rstrip("/") or f.shown
        head, name = os.path.split(shown)
        groups.setdefault(head, []).append(name or shown)
    return [
        (f"{head}/: " if head else "") + ", ".join(dict.fromkeys(names))
        for head, names in groups.items()
    ]


def _changed(f: FileTouch) -> str:
    counts = []
    if f.writes:
        counts.append(f"written ({f.written_lines} lines)" if f.written_lines else "written")
    if f.edits:
        counts.append(f"{f.edits} edit{'s' if f.edits > 1 else ''}")
    what = ", ".join(counts) if not f.carried else ""
    if f.edits and f.last_edit:
        what += f"; latest: {f.last_edit}"
    return f"   - {f.shown}" + (f": {what}" if what else "")


def _files(files: Sequence[FileTouch], full: bool, named: int) -> Rendered:
    shown, counted = files[:named], files[named:]
    changed = [f for f in shown if f.changed]
    others = [f for f in shown if not f.changed]
    lines: Lines = []
    if changed:
        if full:
            lines.append("   Changed:")
            lines.extend(_changed(f) for f in changed)
        else:
            lines.append("   Changed: " + " · ".join(_directory_groups(changed)))
    if others:
        if full:
            lines.append("   Read or searched:")
            lines.extend(f"   - {group}" for group in _directory_groups(others))
        else:
            lines.append("   Read or searched: " + " · ".join(_directory_groups(others)))
    if counted:
        n_changed = sum(1 for f in counted if f.changed)
        lines.append(
            f"   - {len(counted)} {'more ' if shown else ''}paths ({n_changed} changed; "
            "recall/search finds them by name)"
        )
    return Rendered(lines, len(shown))


def file_part(files: Sequence[FileTouch]) -> Part:
    """Paths, most recent first: the changed ones with what changed and the others by
    directory, then all by directory, then only the most recent ones named."""
    levels = [partial(_files, files, True, len(files)), partial(_files, files, False, len(files))]
    levels += [partial(_files, files, False, n) for n in _counts(len(files))]
    levels.append(partial(_files, files, False, 0))
    return Part(levels)


def file_lines(files: Sequence[FileTouch]) -> Lines:
    """Paths at the most detailed level."""
    return _files(files, True, len(files)).lines


def harness_part(messages: Sequence[Message]) -> Part:
    """Harness messages, one line each (repeats counted once), or only counted by kind."""
    items = [m for m in messages if m.harness is not None]

    def listed() -> Rendered:
        counted = Counter(f"{m.harness}: {m.text}" for m in items)
        lines = [f"   - {line}" + (f" (×{n})" if n > 1 else "") for line, n in counted.items()]
        return Rendered(lines, len(items))

    def kinds() -> Rendered:
        by_kind = Counter(m.harness for m in items)
        line = "   - " + ", ".join(f"{kind} ×{n}" for kind, n in by_kind.items())
        return Rendered([line] if items else [], 0)

    return Part([listed, kinds], weight=1.5)
