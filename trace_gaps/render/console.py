"""The terminal a text report is drawn for: its width, whether it takes colour, and how
tables and bullet lines fit into it (nothing cut, no row wider than the terminal)."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from io import StringIO

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table as RichTable
from rich.text import Text

from trace_gaps.figures.declaration import RIGHT
from trace_gaps.output import escape_control_characters
from trace_gaps.report.tables import Table

# Text written to a file or a pipe, COLUMNS unset: the same bytes whatever the terminal.
STABLE_WIDTH = 160
MAX_NAME = 48
# The fewest columns a folded name keeps (print_table): a table that would squeeze its
# names narrower continues below instead.
NAME_FLOOR = 20
UNBOUNDED = 1_000_000


@dataclass(frozen=True, slots=True)
class Terminal:
    """Where text goes: its width in columns, and whether it is drawn in colour."""

    width: int = STABLE_WIDTH
    color: bool = False


# A file, a pipe, a test: stable width, no colour.
NOT_A_TERMINAL = Terminal()


def elide(text: str, limit: int = MAX_NAME) -> str:
    """Shorten a long name in the middle: 'void gemm<...>...kernel'."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    keep = (limit - 1) // 2
    return text[:keep] + "…" + text[-(limit - 1 - keep) :]


def fit_lines(text: str, width: int) -> str:
    """Plain text whose lines are at most width columns: a longer line wraps at its spaces,
    its continuation indented under the line's own indent plus four (a word longer than the
    line folds). Nothing is cut."""
    fitted = []
    for line in text.split("\n"):
        if len(line) <= width:
            fitted.append(line)
            continue
        indent = " " * min(len(line) - len(line.lstrip(" ")) + 4, width // 2)
        fitted += textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False)
    return "\n".join(fitted)


def plain(text: str) -> Text:
    """A user string (kernel or range name) as literal text: no markup, no emoji, one line,
    control characters written out (`\\u001b`): in colour the text is written as drawn."""
    return Text(escape_control_characters(re.sub(r"[\r\n\v\f\x85\u2028\u2029]", " ", text)))


def new_console(buffer: StringIO, terminal: Terminal) -> Console:
    """A console that draws into buffer at the terminal's width, in colour or none."""
    return Console(
        file=buffer,
        width=terminal.width,
        color_system="standard" if terminal.color else None,
        force_terminal=terminal.color,
        highlight=False,
        soft_wrap=False,
    )


def print_item(console: Console, text: str, *, bullet: str = "  - ") -> None:
    """A bullet line, wrapped at word boundaries under its own first word: never cut (a
    word longer than the line folds)."""
    indent = len(bullet)
    lines = plain(text).wrap(console, max(console.width - indent, 1), overflow="fold")
    for number, line in enumerate(lines):
        line.rstrip()
        console.print(Text(bullet if number == 0 else " " * indent) + line)


def print_table(console: Console, table: Table) -> None:
    """The table within the console's width. When its one-line headers do not fit, headers
    wrap at their spaces; when that is not enough either, the table continues below: its
    further columns in tables of their own that repeat its leading key columns (`#`,
    `stage`). Where the names alone make it too wide (each keeping NAME_FLOOR columns would
    fit), they fold within their columns instead, and a table a column or two too wide loses
    the padding at its edges: a continued ledger pushed it off a 40-line screen. No number or
    header word is cut, a name folds only in a column of its own; a long name is shortened in
    the middle only where the width leaves no room."""
    everything = list(range(len(table.columns)))
    measured = _measure(console, table, everything).maximum
    if measured <= console.width:
        # The room left over goes to long names (kernels): whole where the width allows.
        limit = MAX_NAME + console.width - measured
        _print_titled(console, table.title, _rich_table(table, everything, limit=limit))
        return
    # Then the names folded, and then no padding at the table's two edges (a column too wide).
    for pad_edge in (True, False):
        if _folded_width(table) - (0 if pad_edge else 2) <= console.width:
            folded = _rich_table(table, everything, compact=True, fold_names=True)
            folded.pad_edge = pad_edge
            _print_titled(console, table.title, folded)
            return
    keys = _key_columns(table, console.width // 2)
    parts: list[list[int]] = []
    for column in everything[len(keys) :]:
        if parts and _fits(console, table, [*keys, *parts[-1], column], keys):
            parts[-1].append(column)
        else:
            parts.append([column])
    for number, part in enumerate(parts or [[]]):
        title = table.title if number == 0 else "(continued)"
        _print_titled(console, title, _rich_table(table, [*keys, *part], compact=True, keys=keys))


def _print_titled(console: Console, title: str, rich: RichTable) -> None:
    """The title on lines of the console's width (a narrow table does not wrap it to its own
    width), then the table."""
    console.print(plain(title), style="table.title")
    console.print(rich)


def _key_columns(table: Table, budget: int) -> list[int]:
    """The first column and the left-aligned (name) columns right after it, as many as fit in
    budget columns (a kernel's name leaves no room to repeat its stage and kind)."""
    keys = [0]
    used = _column_width(table, 0)
    while len(keys) < len(table.columns) and table.align[len(keys)] != RIGHT:
        used += _column_width(table, len(keys))
        if used > budget:
            break
        keys.append(len(keys))
    return keys


def _column_width(table: Table, column: int) -> int:
    """A column's width drawn compact, its borders and padding included."""
    cells = [elide(row[column]) for row in table.rows]
    return max([*map(len, cells), *map(len, table.columns[column].split()), 1]) + 3


def _folded_width(table: Table) -> int:
    """The table's width drawn compact with each name column folded to NAME_FLOOR columns
    (or its longest header word), its numbers whole."""
    widths = [
        _column_width(table, column)
        if table.align[column] == RIGHT
        else min(_column_width(table, column), NAME_FLOOR + 3)
        for column in range(len(table.columns))
    ]
    words = [max(map(len, header.split()), default=0) + 3 for header in table.columns]
    return 1 + sum(max(pair) for pair in zip(widths, words, strict=True))


def _fits(console: Console, table: Table, columns: list[int], keys: list[int]) -> bool:
    measured = _measure(console, table, columns, compact=True, keys=keys)
    return measured.minimum <= console.width


def _measure(
    console: Console,
    table: Table,
    columns: list[int],
    *,
    compact: bool = False,
    keys: list[int] | None = None,
) -> Measurement:
    """The table's width unbounded: rich clamps a measure to the width it is given."""
    unbounded = console.options.update_width(UNBOUNDED)
    drawn = _rich_table(table, columns, compact=compact, keys=keys or [0])
    return console.measure(drawn, options=unbounded)


def _rich_table(
    table: Table,
    columns: list[int],
    *,
    compact: bool = False,
    limit: int = MAX_NAME,
    keys: list[int] | None = None,
    fold_names: bool = False,
) -> RichTable:
    """The columns as a rich table; compact: each header wraps at its spaces, each column of
    numbers (and the key names) as wide as its longest cell or header word, other names wrap
    (fold_names: the key names too, each keeping NAME_FLOOR columns).
    A column of numbers is never narrower than its longest cell, nor any column than a
    header word (rich squeezes the names instead); names longer than limit are
    shortened in the middle. keys: the key columns, repeated in each part."""
    keys = keys or [0]
    rich = RichTable(show_lines=False)
    for column in columns:
        header = table.columns[column]
        right = table.align[column] == RIGHT
        cells = [elide(row[column], limit) for row in table.rows]
        word = max(map(len, header.split()), default=0)
        width = max([*map(len, cells), word])
        fixed = compact and (right or (column in keys and not fold_names))
        floor = min(width, NAME_FLOOR) if fold_names else 0
        rich.add_column(
            plain(header),
            justify="right" if right else "left",
            width=width if fixed else None,
            # Never narrower than its numbers (or a header word): rich squeezes names instead.
            min_width=width if right else max(word, floor),
            overflow="fold" if compact else "ellipsis",
        )
    for row in table.rows:
        rich.add_row(*(plain(elide(row[column], limit)) for column in columns))
    return rich
