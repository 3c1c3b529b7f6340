"""``hdp-plan``: the typer app, one command per function of the command modules, and :func:`main`.

A command's module is imported when that command runs (or its help is asked for), not before: ``--version`` and
``--help`` import no command module, ``solve`` neither the ledger (SQLAlchemy) nor torch or flwr. Those that need
torch or flwr import them inside the command, so ``hdp-plan solve`` runs without either installed.
"""

from __future__ import annotations

import importlib
import re
import signal
import sys
import threading
from typing import Annotated

import click
import typer
from typer.core import TyperGroup

from hdp_planner_cli.command import PlainCommand

COMMANDS = (
    ("solve", "plan:solve", "Solve a plan: per-group q_m, σ_m and k_m, every method's noise Λ."),
    ("verify", "plan:verify_cmd", "Re-check a plan file: every group's ε within its budget."),
    ("sweep", "budgets:sweep", "Re-solve while one parameter varies (CSV, plot)."),
    ("plot", "budgets:plot_cmd", "Draw a plan: noise of every row, ε spent, σ against q."),
    ("assign", "budgets:assign_cmd", "Assign clients to the plan's groups from their budgets."),
    ("select", "selection:select_cmd", "Privacy-aware client selection probabilities (Xu, Zhang, Huang)."),
    ("fedsam-noise", "selection:fedsam_noise_cmd", "DP²-FedSAM's client-level σ, exact against Theorem 2."),
    ("train", "train:train", "Train a plan's method in the simulator."),
    ("compare", "train:compare", "Train several methods over seeds: GDPFed's Table 2."),
    ("flower", "flower:flower", "Train a plan's method on Flower's simulation engine."),
    ("ledger", "ledger:app", "A privacy ledger: every client's spent and remaining budget."),
    ("deploy", "deploy:app", "Run a plan on Flower's deployment engine (SuperLink, SuperNodes, TLS)."),
)
"""Every command in ``--help`` order: its name, ``module:function`` in :mod:`hdp_planner_cli` (``ledger``, ``deploy``:
typer apps of subcommands) and its line in the command list."""


def load_command(name: str, target: str, short: str) -> click.Command:
    """The click command ``name``, built from ``target`` (``module:attribute`` in this package) on first use."""
    module, _, attribute = target.partition(":")
    obj = getattr(importlib.import_module(f"hdp_planner_cli.{module}"), attribute)
    if isinstance(obj, typer.Typer):  # a group of subcommands
        group = typer.main.get_group(obj)  # a group even with one subcommand (deploy local)
        group.name, group.help, group.short_help = name, short, short
        return group
    single = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    single.command(name, cls=PlainCommand, short_help=short)(obj)
    return typer.main.get_command(single)


class LazyGroup(TyperGroup):
    """The root group: lists :data:`COMMANDS` from the table and imports a command's module only to run it."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, *_ in COMMANDS]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            entry = next((c for c in COMMANDS if c[0] == cmd_name), None)
            if entry is None:
                return None
            self.commands[cmd_name] = load_command(*entry)
        return self.commands[cmd_name]

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:  # "Did you mean": among every command, loaded or not
            raise click.exceptions.NoSuchCommand(
                exc.command_name, possibilities=self.list_commands(ctx), ctx=ctx
            ) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, short) for name, _, short in COMMANDS])

    def invoke(self, ctx: click.Context):
        """Run the command; SIGTERM stops it as Ctrl-C does (each command ends its runs, processes and temporary
        folders the same way), and an interrupt no command reported ends in one line, exit status 130."""
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
                signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            from hdp_planner_cli.console import print_error

            print_error("interrupted")
            raise click.exceptions.Exit(130) from None

    def main(self, *args, standalone_mode: bool = True, **kwargs):  # type: ignore[override]
        """Click's own usage errors (a value that is not a number, an unknown or missing option) in the commands'
        one-line style: ``error: --n: '1.5' is not a whole number (see hdp-plan solve --help)``, exit status 2."""
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            status = super().main(*args, standalone_mode=False, **kwargs)  # a command's Exit: its status
        except click.UsageError as exc:
            from hdp_planner_cli.console import print_error

            print_error(usage_error_line(exc))
            sys.exit(2)
        except click.Abort:
            sys.exit(1)
        sys.exit(status if isinstance(status, int) else 0)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def usage_error_line(exc: click.UsageError) -> str:
    """One line for a usage error: the option and what is wrong with its value, and where the help is."""
    message = exc.format_message().strip().splitlines()[0].rstrip(".").replace(". (", " (")
    found = re.match(r"Invalid value for (.+?): (.*)$", message)
    if found:
        message = f"{found[1].replace(chr(39), '')}: {found[2]}"
    message = message[:1].lower() + message[1:]
    command = exc.ctx.command_path if exc.ctx is not None else "hdp-plan"
    return f"{message} (see {command} --help)"


app = typer.Typer(
    name="hdp-plan",
    cls=LazyGroup,
    help="Plan differentially private federated learning with heterogeneous privacy budgets (GDPFed+).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text is plain: '[paper]', '[the paper's]' defaults are not rich tags
    suggest_commands=False,  # click already says "Did you mean"; typer would say it a second time
)


def version() -> str:
    """The installed distribution's version, without importing :mod:`hdp_planner` (a source tree: its own)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("hdp-planner")
    except PackageNotFoundError:
        from hdp_planner import __version__

        return __version__


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hdp-plan {version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Plan differentially private federated learning with heterogeneous privacy budgets (GDPFed+)."""


def main() -> None:
    """Run ``hdp-plan``; an OSError no command caught ends in one line naming the file and the reason, status 2."""
    try:
        app()
    except OSError as exc:
        from hdp_planner_cli.console import error_line, print_error

        print_error(error_line(exc))
        sys.exit(2)
