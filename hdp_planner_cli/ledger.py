"""``hdp-plan ledger show|check``: every client's spent and remaining budget in a privacy ledger, and the ledger's
hash chain checked."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from hdp_planner.ledger.runs import default_ledger, plan_clients, round_costs
from hdp_planner.ledger.store import Ledger, LedgerError
from hdp_planner.planfile.document import load_plan
from hdp_planner_cli.command import PlainCommand
from hdp_planner_cli.console import one_line_errors, out, whole
from hdp_planner_cli.options import GroupsFile, PlanFile

LedgerOpt = Annotated[
    str | None,
    typer.Option(
        "--ledger", help="The ledger: an SQLAlchemy URL or an SQLite file [$HDP_PLANNER_LEDGER, else the user's]."
    ),
]
FederationOpt = Annotated[
    str | None,
    typer.Option("--federation", help="List only the runs that recorded this federation name [all]."),
]
HeadOpt = Annotated[
    str | None,
    typer.Option("--head", help="A head digest printed by an earlier check: it must still be in the chain."),
]

app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None)


@contextmanager
def _ledger_errors() -> Iterator[None]:
    """A ledger that is missing, unreadable or broken: one line (``one_line_errors``), never a traceback."""
    try:
        yield
    except LedgerError as exc:
        raise ValueError(str(exc)) from None


def _open(ledger: str | None) -> Ledger:
    return Ledger(ledger or default_ledger(), create=False)


def _plan_clients(plan_file: str, groups: str | None):
    p = load_plan(plan_file)
    membership, budgets = plan_clients(p, p.groups, groups)
    return p, membership, budgets


@app.command("show", cls=PlainCommand)
@one_line_errors
def show(
    plan_file: PlanFile,
    federation: FederationOpt = None,
    ledger: LedgerOpt = None,
    groups: GroupsFile = None,
    as_json: Annotated[bool, typer.Option("--json", help="Every client as JSON.")] = False,
) -> None:
    """Each plan group's clients: ε spent over their lifetime (every run in the ledger, under any federation name)
    and remaining."""
    p, membership, budgets = _plan_clients(plan_file, groups)
    with _ledger_errors():
        book = _open(ledger)
        state = book.state()
    rows = state.spending(budgets)
    if as_json:
        doc = [{"client_id": s.client_id, "epsilon_budget": s.epsilon_budget, "delta": s.delta,
                "epsilon_spent": s.epsilon_spent, "epsilon_remaining": s.remaining,
                "released_rounds": s.released_rounds, "reserved_rounds": s.reserved_rounds} for s in rows]  # fmt: skip
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        return
    runs = [r for r in state.runs.values() if federation is None or r.federation == federation]
    title = f"{book.target}: {len(runs)} run(s){f' of {federation}' if federation else ''}"
    table = Table(box=box.SIMPLE_HEAD, title=title)
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
        out.print(f"run {r.run_id} ({r.federation}): {r.label}, {len(r.rounds)} rounds planned, "
                  f"{len(r.released)} released, {r.status}", highlight=False, markup=False)  # fmt: skip


@app.command("check", cls=PlainCommand)
@one_line_errors
def check(
    plan_file: Annotated[
        str | None, typer.Argument(help="A plan.json: also check that another run of it fits every budget.")
    ] = None,
    ledger: LedgerOpt = None,
    head: HeadOpt = None,
    groups: GroupsFile = None,
    rounds: Annotated[int | None, typer.Option("--rounds", help="Rounds of the next run [the plan's T].")] = None,
) -> None:
    """Exit 1 if the ledger's hash chain is broken (an event deleted or edited, a pinned --head no longer in it, or
    the head this machine recorded at its last write no longer in it: a removed tail, a recomputed chain, an older
    copy put back), if any client is over budget, or, with a plan, if one would be after one more run of the plan's
    GDPFed+ row as it executes (under a plan that trusts secure aggregation, its distributed discrete Gaussian
    rounds). Prints the head digest to pin or publish."""
    if rounds is not None and rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {rounds}")
    if head is not None and not re.fullmatch(r"[0-9a-f]{64}", head):
        raise ValueError(
            f"--head must be a SHA-256 digest (64 hexadecimal digits) as `ledger check` prints, got {head!r}"
        )
    plan = _plan_clients(plan_file, groups) if plan_file else None
    with _ledger_errors():
        book = _open(ledger)
        report = book.check_chain(head)
        if report.problem is not None:
            broken = f"FAIL the hash chain of {book.target} is broken: {report.problem}"
            out.print(broken, highlight=False, markup=False, soft_wrap=whole(out))
            raise typer.Exit(1)
        copied = " (it began as a copy of an unchained ledger)" if report.migrated else ""
        chain = f"chain: {report.events} events unbroken{copied}; head {report.head}"
        out.print(chain, highlight=False, soft_wrap=whole(out))
        anchored = (f"holds event {report.recorded.events}, the head recorded in {report.anchor}"
                    if report.recorded else f"no head recorded on this machine ({report.anchor})")  # fmt: skip
        out.print(f"anchor: {anchored}", highlight=False, markup=False, soft_wrap=whole(out))
        rows = book.state().spending()
        over = [s for s in rows if s.epsilon_spent > s.epsilon_budget * (1 + 1e-9)]
        cannot = []
        if plan is not None:
            p, membership, budgets = plan
            costs = round_costs(p, p.groups.name, start=0, rounds=rounds or p.config.rounds)
            cannot = book.would_exceed(
                membership=membership, budgets_of=budgets, delta=p.config.delta, planned=costs, simulated=groups is None
            )
    if over:
        out.print(f"FAIL {len(over)} client(s) over their lifetime budget, e.g. {over[0].client_id}", highlight=False)
    if cannot:
        out.print(f"{len(cannot)} client(s) cannot take part in another run of {plan_file}", highlight=False)
    if over or cannot:
        raise typer.Exit(1)
    fits = f", and another run of {plan_file} fits" if plan is not None else ""
    out.print(f"OK: {len(rows)} clients within budget{fits}", highlight=False)
