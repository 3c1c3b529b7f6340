"""``hdp-plan``: the typer app, one command per function of the command modules, and :func:`main`.

The command modules only parse options, call the API and render; those that need torch or flwr import them
inside the command, so ``hdp-plan solve`` runs without either installed.
"""

from __future__ import annotations

from typing import Annotated

import typer

from hdp_planner import __version__
from hdp_planner_cli import budgets, flower, ledger, plan, selection, train
from hdp_planner_cli.command import PlainCommand

app = typer.Typer(
    name="hdp-plan",
    help="Plan differentially private federated learning with heterogeneous privacy budgets (GDPFed+).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text is plain: '[paper]', '[the paper's]' defaults are not rich tags
    suggest_commands=False,  # click already says "Did you mean"; typer would say it a second time
)
COMMANDS = (
    ("solve", plan.solve, "Solve a plan: per-group q_m, σ_m and k_m, every method's noise Λ."),
    ("verify", plan.verify_cmd, "Re-check a plan file: every group's ε within its budget."),
    ("sweep", budgets.sweep, "Re-solve while one parameter varies (CSV, plot)."),
    ("plot", budgets.plot_cmd, "Draw a plan: noise of every row, ε spent, σ against q."),
    ("assign", budgets.assign_cmd, "Assign clients to the plan's groups from their budgets."),
    ("select", selection.select_cmd, "Privacy-aware client selection probabilities (Xu, Zhang, Huang)."),
    ("fedsam-noise", selection.fedsam_noise_cmd, "DP²-FedSAM's client-level σ, exact against Theorem 2."),
    ("train", train.train, "Train a plan's method in the simulator."),
    ("compare", train.compare, "Train several methods over seeds: GDPFed's Table 2."),
    ("flower", flower.flower, "Train a plan's method on Flower's simulation engine."),
)
"""Every command in ``--help`` order: its name, the function that runs it and its line in the command list."""
for _name, _command, _short in COMMANDS:
    app.command(_name, cls=PlainCommand, short_help=_short)(_command)
app.add_typer(ledger.app, name="ledger", help="A privacy ledger: every client's spent and remaining budget.")
app.add_typer(__import__("hdp_planner_cli.deploy").deploy.app, name="deploy", help="Flower's deployment engine.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hdp-plan {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Plan differentially private federated learning with heterogeneous privacy budgets (GDPFed+)."""


def main() -> None:
    app()
