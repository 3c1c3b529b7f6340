"""The consoles of ``hdp-plan`` and its one-line errors (exit status 2, never a traceback).

What a user typed (file names, paths) is text, never rich markup: the result consoles read no markup at all
(:func:`labelled` styles a line's label), and the error console escapes every message. Every table printed on
them fits the console's width as one table (:func:`fit_table`): compact, then without the columns it marks optional
(named in a line after it), then with its widest cells wrapped; no cell is ever cut to "…".
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hdp_planner.io.files import os_reason
from hdp_planner_cli.options import CliError

F = TypeVar("F", bound=Callable[..., Any])
LOG_WIDTH = 132
"""Width of the result console when it does not print to a terminal (logs, CI): wide enough that tables are whole."""


def optional_columns(table: Table, *headers: str) -> Table:
    """Mark the columns of ``table`` with these headers as the ones :func:`fit_table` may leave out, in this order,
    on a console too narrow for them (what they hold is in the plan file); returns ``table``."""
    table.optional = headers  # type: ignore[attr-defined]
    return table


def fit_table(console: Console, table: Table) -> list[Table | Text]:
    """``table`` as one table no wider than ``console``, never split into blocks that repeat its leading columns:
    drawn compact (one space between columns, none at the edges), then without its optional columns
    (:func:`optional_columns`, each left out only while the table is still too wide, and named in a line after it),
    and only then with its widest cells wrapped. No cell is ever cut to "…"."""
    if _width(console, table) <= console.width:
        return [table]
    kept = list(range(len(table.columns)))
    left_out: list[str] = []
    for header in getattr(table, "optional", ()):
        if _fits(console, table, kept):
            break
        index = next((i for i in kept if table.columns[i].header == header), None)
        if index is not None:
            kept.remove(index)
            left_out.append(str(header).replace("\n", " "))
    fitted = _part(table, kept)
    if not left_out:
        return [fitted, Text("")]
    return [fitted, Text(f"({console.width} columns: {', '.join(left_out)} left out; a wider terminal shows them)"),
            Text("")]  # fmt: skip


def _width(console: Console, table: Table) -> int:
    return console.measure(table, options=console.options.update_width(10_000)).maximum


def _fits(console: Console, table: Table, columns: list[int]) -> bool:
    return _width(console, _part(table, columns)) <= console.width


def _part(table: Table, columns: list[int]) -> Table:
    """The table's ``columns``, compact: one space between columns, none at the edges; a column wider than the
    console wraps (folds where a cell has no space), never ends in "…"."""
    part = Table(
        *(table.columns[i].copy() for i in columns),
        box=table.box,
        title=table.title,
        caption=table.caption,
        show_lines=table.show_lines,
        padding=(0, 1, 0, 0),
        pad_edge=False,
        collapse_padding=True,
        show_edge=False,
    )
    for column in part.columns:
        column.overflow = "fold"
    cells = [list(table.columns[i].cells) for i in columns]
    for r, row in enumerate(table.rows):
        part.add_row(*(c[r] for c in cells), end_section=row.end_section)
    return part


class FittingConsole(Console):
    """A console on which every printed table fits the width (:func:`fit_table`)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        fitted: list[Any] = []
        for obj in objects:
            fitted += fit_table(self, obj) if isinstance(obj, Table) else [obj]
        super().print(*fitted, **kwargs)


def pct(x: float, digits: int = 2) -> str:
    """100·x with ``digits`` significant digits, without the % sign: never in scientific notation ("100", not
    "1e+02") and a non-zero share never shown as "0"."""
    v = 100 * x
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    decimals = max(digits - 1 - math.floor(math.log10(abs(v))), 0)
    text = f"{v:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def labelled(label: str, style: str, text: str) -> Text:
    """A line whose ``label`` is styled and whose ``text`` is printed as it is (no markup)."""
    return Text.assemble((label, style), " ", text)


def whole(console: Console) -> bool:
    """Whether ``console`` prints long lines whole (soft-wrapped): to a log or a pipe, so that each stays one line to
    read and search. A terminal gets them wrapped at spaces to its width, never inside a word or an option name."""
    return not console.is_terminal


out = FittingConsole(emoji=False, markup=False, highlight=False)
err = Console(stderr=True, emoji=False)  # ':b:' in 'a:b:steps' is text, not an emoji
if not out.is_terminal and "COLUMNS" not in os.environ:  # logs and CI: wide enough that the tables are whole
    out.width = max(out.width, LOG_WIDTH)
result_out = Console(emoji=False, markup=False)  # train/compare/flower result lines: whole in logs
result_out.soft_wrap = whole(result_out)


def os_error_line(exc: OSError) -> str:
    """One line for an OSError: the file(s) it names and the reason in words (``[Errno 30]`` never shows)."""
    reason = os_reason(exc)
    names = [str(n) for n in (exc.filename, exc.filename2) if n is not None]
    return f"{' → '.join(names)}: {reason}" if names else reason


OS_ERROR_TEXT = re.compile(r"\[Errno (\d+)\] ([^:]*)(?:: '(.*)')?$")
"""``str()`` of an OSError, as a message passed on as text shows it: ``[Errno 30] Read-only file system: 'out'``."""


def error_line(exc: BaseException | str) -> str:
    """The first line of an error's message; an OSError's (or its text's) as :func:`os_error_line` words it."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return os_error_line(exc)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    found = OS_ERROR_TEXT.match(text)
    return os_error_line(OSError(int(found[1]), found[2], found[3])) if found else text


def print_error(message: str) -> None:
    """``error: MESSAGE`` on stderr, the message as text (:func:`error_line`): one line in a log, wrapped at spaces
    to a terminal's width (:func:`whole`)."""
    err.print(f"[bold red]error:[/] {escape(error_line(message)) if message else 'failed'}", highlight=False,
              soft_wrap=whole(err))  # fmt: skip


def fail(message: str) -> None:
    """:func:`print_error` and exit status 2."""
    print_error(message)
    raise typer.Exit(2)


def one_line_errors(fn: F) -> F:
    """Turn input errors into ``error: …`` on stderr and exit status 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (CliError, ValueError, OSError) as exc:
            fail(error_line(exc))

    return wrapper  # type: ignore[return-value]
