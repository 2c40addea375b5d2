"""What the CLI writes to a terminal, through ``rich``, and how it degrades.

Output is rich (colour, box-drawn tables, a live progress bar) only on a terminal. Piped into a
file or another program, with ``--plain``, with ``NO_COLOR`` set (https://no-color.org) or on a
``TERM=dumb`` terminal, it is plain text: no escape sequences, no box characters, a progress line
every tenth of the way instead of a bar rewritten in place. ``--json`` bypasses all of it.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any

import msgspec
from compactd_client import protocol as p
from rich import box
from rich.console import Console, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from compactd.core.outbound import redact

# A gauge's width in characters (the bar only, without its figures).
GAUGE_WIDTH = 20


def wants_plain(plain_flag: bool, stream: IO[str], env: dict[str, str] | None = None) -> bool:
    """Plain text unless ``stream`` is a terminal that may show colour and nobody asked for less."""
    env = dict(os.environ) if env is None else env
    if plain_flag or env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return True
    return not stream.isatty()


class Terminal:
    """The CLI's one way to write: a ``rich`` console set up for rich or plain output."""

    def __init__(self, *, plain: bool = False, stream: IO[str] | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.plain = wants_plain(plain, self.stream)
        if self.plain:
            self.console = Console(
                file=self.stream,
                color_system=None,
                no_color=True,
                force_terminal=False,
                force_interactive=False,
                highlight=False,
                emoji=False,
                markup=False,
            )
        else:
            self.console = Console(file=self.stream, highlight=False, emoji=False, markup=False)

    def say(self, text: str | Text = "", style: str | None = None) -> None:
        """One line of prose, never wrapped (a pipe keeps it whole; a terminal folds it)."""
        line = text if isinstance(text, Text) else Text(redact(text))
        if style and not self.plain:
            line.stylize(style)
        self.console.print(line, soft_wrap=True)

    def show(self, renderable: RenderableType) -> None:
        # A line of text is never folded by rich (see say); tables and grids fit the width.
        self.console.print(renderable, soft_wrap=isinstance(renderable, Text))

    def table(self, *columns: str, text_columns: int = 1) -> Table:
        """A table of ``text_columns`` text columns, then right-aligned figures."""
        table = Table(
            box=None if self.plain else box.SIMPLE,
            show_edge=False,
            pad_edge=False,
            header_style="" if self.plain else "bold",
        )
        for i, name in enumerate(columns):
            text = i < text_columns
            table.add_column(name, justify="left" if text else "right", no_wrap=not text)
        return table

    def total(self, table: Table, *cells: str) -> None:
        """The table's last line, set apart from its rows: the total they add up to."""
        table.show_footer = True
        for column, cell in zip(table.columns, cells, strict=True):
            column.footer = cell
        if not self.plain:
            table.footer_style = "bold"

    def style(self, style: str) -> str:
        """``style`` on a terminal, nothing in plain text."""
        return "" if self.plain else style

    def error(self, message: str) -> None:
        """``compactd: <message>`` on stderr, where errors go whatever stdout is."""
        sys.stderr.write(f"compactd: {redact(message)}\n")
        sys.stderr.flush()

    def json(self, value: Any) -> None:
        """One JSON document on its own line, exactly as msgspec encodes it (no wrapping)."""
        self.stream.write(redact(msgspec.json.encode(value).decode()) + "\n")
        self.stream.flush()


def level_style(status: p.TokenStatus) -> str:
    """The colour of a status: green, yellow past the warning level, red past auto-compact."""
    if status.is_above_auto_compact_threshold or status.is_above_error_threshold:
        return "red"
    if status.is_above_warning_threshold:
        return "yellow"
    return "green"


def gauge_limit(status: p.TokenStatus) -> int:
    """What a gauge measures against: the auto-compact threshold, or the window without it."""
    return status.auto_compact_threshold if status.auto_compact_enabled else status.effective_window


def gauge(
    term: Terminal,
    status: p.TokenStatus,
    *,
    before: str = "",
    after: str = "",
    width: int = GAUGE_WIDTH,
) -> RenderableType:
    """``before [#####.....] 21,562 / 167,000 tokens (13%)after``: the next request against its
    limit, as rich's progress bar in the status's colour, or in ASCII in plain text."""
    limit = gauge_limit(status)
    share = f"{status.tokens / limit:.0%}" if limit > 0 else "-"
    figures = f"{status.tokens:,} / {limit:,} tokens ({share}){after}"
    if term.plain:
        frac = min(1.0, status.tokens / limit) if limit > 0 else 0.0
        filled = round(frac * width)
        return Text(f"{before}[{'#' * filled}{'.' * (width - filled)}] {figures}")
    colour = level_style(status)
    bar = ProgressBar(
        total=max(1, limit),
        completed=min(status.tokens, max(1, limit)),
        width=width,
        complete_style=colour,
        finished_style=colour,
    )
    row = Table.grid(padding=(0, 1))
    cells: list[RenderableType] = [Text(before.rstrip())] if before.strip() else []
    row.add_row(*cells, bar, Text(figures))
    return row
