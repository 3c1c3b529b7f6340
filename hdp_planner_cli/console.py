"""The consoles of ``hdp-plan`` and its one-line errors (exit status 2, never a traceback)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from hdp_planner_cli.options import CliError

out = Console(emoji=False)
err = Console(stderr=True, emoji=False)  # ':b:' in 'a:b:steps' is text, not an emoji
if not out.is_terminal:  # logs and CI: wide enough that the tables never wrap
    out.width = max(out.width, 132)

F = TypeVar("F", bound=Callable[..., Any])


def one_line_errors(fn: F) -> F:
    """Turn input errors into ``error: …`` on stderr and exit status 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (CliError, ValueError, OSError) as exc:
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


result_out = Console(soft_wrap=True, emoji=False)  # train/compare/flower result lines are never broken (logs, pipes)


def fail(message: str) -> None:
    err.print(
        f"[bold red]error:[/] {escape(message.splitlines()[0]) if message else 'failed'}",
        highlight=False,
        soft_wrap=True,
    )
    raise typer.Exit(2)
