"""The consoles of ``hdp-plan`` and its one-line errors (exit status 2, never a traceback).

What a user typed (file names, paths) is text, never rich markup: the result consoles read no markup at all
(:func:`labelled` styles a line's label), and the error console escapes every message. Every table printed on
them fits the console's width (:func:`fit_table`): columns that do not fit move to a next table that repeats the
leading key columns, so no cell is ever cut to "…".
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


def fit_table(console: Console, table: Table, keys: int = 1) -> list[Table]:
    """``table`` as tables no wider than ``console``: the first ``keys`` columns (what a row is about) lead each, the
    other columns follow in order, as many as fit. The title leads the first part, the caption ends the last."""
    if _width(console, table) <= console.width or len(table.columns) <= keys + 1:
        return [table]
    parts: list[list[int]] = [[]]
    for i in range(keys, len(table.columns)):
        if parts[-1] and not _fits(console, table, [*range(keys), *parts[-1], i]):
            parts.append([])
        parts[-1].append(i)
    rest = list(range(keys, len(table.columns)))
    size = -(-len(rest) // len(parts))
    even = [rest[j : j + size] for j in range(0, len(rest), size)]  # as many parts, of even column counts
    if len(even) == len(parts) and all(_fits(console, table, [*range(keys), *part]) for part in even):
        parts = even
    return [
        _part(table, [*range(keys), *part], title=j == 0, caption=j == len(parts) - 1) for j, part in enumerate(parts)
    ]


def _width(console: Console, table: Table) -> int:
    return console.measure(table, options=console.options.update_width(10_000)).maximum


def _fits(console: Console, table: Table, columns: list[int]) -> bool:
    return _width(console, _part(table, columns)) <= console.width


def _part(table: Table, columns: list[int], *, title: bool = True, caption: bool = True) -> Table:
    part = Table(
        *(table.columns[i].copy() for i in columns),
        box=table.box,
        title=table.title if title else None,
        caption=table.caption if caption else None,
        show_lines=table.show_lines,
        padding=table.padding,
        pad_edge=table.pad_edge,
    )
    for column in part.columns:
        column.overflow = "fold"  # a column wider than the console folds, never ends in "…"
    cells = [list(table.columns[i].cells) for i in columns]
    for r, row in enumerate(table.rows):
        part.add_row(*(c[r] for c in cells), end_section=row.end_section)
    return part


class FittingConsole(Console):
    """A console on which every printed table fits the width (:func:`fit_table`, the first column as key)."""

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


out = FittingConsole(emoji=False, markup=False, highlight=False)
err = Console(stderr=True, emoji=False)  # ':b:' in 'a:b:steps' is text, not an emoji
if not out.is_terminal and "COLUMNS" not in os.environ:  # logs and CI: wide enough that the tables are whole
    out.width = max(out.width, LOG_WIDTH)
result_out = Console(soft_wrap=True, emoji=False, markup=False)  # train/compare/flower result lines are never broken


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
    """``error: MESSAGE`` on stderr, one line, the message as text (:func:`error_line`)."""
    err.print(f"[bold red]error:[/] {escape(error_line(message)) if message else 'failed'}", highlight=False,
              soft_wrap=True)  # fmt: skip


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
