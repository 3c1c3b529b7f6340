"""``hdp-plan ledger show|check``: every client's spent and remaining budget in a privacy ledger."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from hdp_planner.ledger.runs import default_ledger, plan_clients, round_costs
from hdp_planner.ledger.store import Ledger
from hdp_planner.planfile.document import load_plan, read_document
from hdp_planner_cli.command import PlainCommand
from hdp_planner_cli.console import one_line_errors, out
from hdp_planner_cli.options import GroupsFile

LedgerOpt = Annotated[
    str | None,
    typer.Option(
        "--ledger", help="The ledger: an SQLAlchemy URL or an SQLite file [$HDP_PLANNER_LEDGER, else the user's]."
    ),
]
FederationOpt = Annotated[
    str,
    typer.Option("--federation", help="Whose clients: the name their runs recorded [simulation]."),
]
PlanArg = Annotated[str, typer.Argument(help="A plan.json written by `hdp-plan solve`.")]

app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None)


def _spending(plan_file: str, ledger: str | None, federation: str, groups: str | None):
    p = load_plan(plan_file)
    membership, budgets = plan_clients(p, p.groups.name, read_document(plan_file), groups)
    book = Ledger(ledger or default_ledger())
    return p, membership, budgets, book, book.spending(federation, budgets)


@app.command("show", cls=PlainCommand)
@one_line_errors
def show(
    plan_file: PlanArg,
    federation: FederationOpt = "simulation",
    ledger: LedgerOpt = None,
    groups: GroupsFile = None,
    as_json: Annotated[bool, typer.Option("--json", help="Every client as JSON.")] = False,
) -> None:
    """Each plan group's clients: ε spent (composed over every run in the ledger) and remaining."""
    p, membership, _, book, rows = _spending(plan_file, ledger, federation, groups)
    if as_json:
        doc = [{"client_id": s.client_id, "epsilon_budget": s.epsilon_budget, "delta": s.delta,
                "epsilon_spent": s.epsilon_spent, "epsilon_remaining": s.remaining,
                "released_rounds": s.released_rounds, "reserved_rounds": s.reserved_rounds} for s in rows]  # fmt: skip
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        return
    runs = book.runs(federation)
    table = Table(box=box.SIMPLE_HEAD, title=f"{federation} in {book.target}: {len(runs)} run(s)")
    for col in ("group", "ε budget", "clients", "ε spent (max)", "remaining (min)", "rounds released", "reserved"):
        table.add_column(col, justify="right")
    for m, eps in enumerate(p.groups.epsilon):
        members = [s for s in rows if membership.get(s.client_id) == m]
        if not members:
            continue
        table.add_row(str(m + 1), f"{eps:g}", str(len(members)), f"{max(s.epsilon_spent for s in members):.4g}",
                      f"{min(s.remaining for s in members):.4g}", str(max(s.released_rounds for s in members)),
                      str(max(s.reserved_rounds for s in members)))  # fmt: skip
    out.print(table)
    for r in runs:
        out.print(
            f"run {r['run_id']}: {r['label']}, {r['planned_rounds']} rounds planned, {r['status']}", highlight=False
        )


@app.command("check", cls=PlainCommand)
@one_line_errors
def check(
    plan_file: PlanArg,
    federation: FederationOpt = "simulation",
    ledger: LedgerOpt = None,
    groups: GroupsFile = None,
    rounds: Annotated[int | None, typer.Option("--rounds", help="Rounds of the next run [the plan's T].")] = None,
) -> None:
    """Exit 1 if any client is over budget, or would be after one more run of the plan's GDPFed+ row."""
    p, membership, budgets, book, rows = _spending(plan_file, ledger, federation, groups)
    over = [s for s in rows if s.epsilon_spent > s.epsilon_budget * (1 + 1e-9)]
    costs = round_costs(p, p.groups.name, start=0, rounds=rounds or p.config.rounds)
    cannot = book.would_exceed(federation=federation, membership=membership, budgets_of=budgets,
                               delta=p.config.delta, planned=costs)  # fmt: skip
    if over:
        out.print(f"FAIL {len(over)} client(s) over their lifetime budget, e.g. {over[0].client_id}", highlight=False)
    if cannot:
        out.print(f"{len(cannot)} client(s) cannot take part in another run of {plan_file}", highlight=False)
    if over or cannot:
        raise typer.Exit(1)
    out.print(f"OK: {len(rows)} clients within budget, and another run of {plan_file} fits", highlight=False)
