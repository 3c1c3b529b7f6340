"""``hdp-plan``: the typer app, one command per function of the command modules, and :func:`main`.

The command modules only parse options, call the API and render; those that need torch or flwr import them
inside the command, so ``hdp-plan solve`` runs without either installed.
"""

from __future__ import annotations

import typer

from hdp_planner_cli import budgets, flower, plan, selection, train

app = typer.Typer(
    name="hdp-plan",
    help="Plan differentially private federated learning with heterogeneous privacy budgets (GDPFed+).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text is plain: '[paper]', '[the paper's]' defaults are not rich tags
)
COMMANDS = (
    ("solve", plan.solve),
    ("verify", plan.verify_cmd),
    ("sweep", budgets.sweep),
    ("plot", budgets.plot_cmd),
    ("assign", budgets.assign_cmd),
    ("select", selection.select_cmd),
    ("fedsam-noise", selection.fedsam_noise_cmd),
    ("train", train.train),
    ("compare", train.compare),
    ("flower", flower.flower),
)
"""Every command in ``--help`` order: its name and the function that runs it."""
for _name, _command in COMMANDS:
    app.command(_name)(_command)


def main() -> None:
    app()
