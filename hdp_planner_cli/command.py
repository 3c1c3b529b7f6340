"""The click command class of every ``hdp-plan`` command: plain help with named metavars and readable defaults,
wrapped at spaces only."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click
import click._textwrap as click_textwrap
from typer.core import TyperCommand

LIST_METAVARS = {"eps": "E1,E2,…", "sizes": "N1,N2,…", "sparsity": "K1,K2,…", "fixed_q": "Q1,Q2,…"}
"""Metavars of the comma-separated per-group options; every other option shows its own name."""


class _WholeWords(click_textwrap.TextWrapper):
    """Help text wrapped at spaces only: ``--data-dir`` or ``idp-fedavg-scale`` is never split at a hyphen, and a
    word longer than the line stays whole."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, break_on_hyphens=False, break_long_words=False, **kwargs)


@contextmanager
def whole_words() -> Iterator[None]:
    """Click's help formatting wraps with :class:`_WholeWords` meanwhile."""
    wrapper = click_textwrap.TextWrapper
    click_textwrap.TextWrapper = _WholeWords  # type: ignore[misc]  # what click.formatting.wrap_text imports
    try:
        yield
    finally:
        click_textwrap.TextWrapper = wrapper  # type: ignore[misc]


class PlainCommand(TyperCommand):
    """A command whose plain help names each option's value (``--clip CLIP``, not ``TEXT``) and shows defaults as
    ``[default: 1.0]`` (typer escapes the bracket for rich even when rich markup is off; the generated
    command-line reference reads the same help records)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, click.Option) and not param.is_flag and param.name and param.metavar is None:
                param.metavar = LIST_METAVARS.get(param.name, param.name.upper())
            param.get_help_record = _unescaped(param.get_help_record)  # type: ignore[method-assign]

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with whole_words():
            super().format_help(ctx, formatter)


def _unescaped(help_record):
    def record(ctx: click.Context):
        rv = help_record(ctx)
        return None if rv is None else (rv[0], rv[1].replace("\\[", "["))

    return record
