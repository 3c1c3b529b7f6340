"""``hdp-plan solve`` and ``verify``: parse the options, call :mod:`hdp_planner`'s API, render the plan
(:mod:`.plan_render`)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Annotated, Any

import typer
from rich.markup import escape

from hdp_planner.io.overwrite import written
from hdp_planner.methods.baselines import planned_with_all
from hdp_planner.planfile.document import (
    PlanVerificationError,
    load_plan,
    plan_problems,
    plan_to_dict,
    write_plan_document,
)
from hdp_planner.solving import NoSecureForm
from hdp_planner.solving import solve as solve_plan
from hdp_planner_cli.budgets import group_budgets, render_grouping
from hdp_planner_cli.console import err, labelled, one_line_errors, out, whole
from hdp_planner_cli.option_blocks import Opt, option, with_groups
from hdp_planner_cli.options import N_HELP, OVERWRITE_HINT, CliError, Overwrite, PlanFile, WholeNumber
from hdp_planner_cli.plan_options import BASELINES, PLAN, TRUST, check_group_count
from hdp_planner_cli.plan_render import (
    pld_saving_line,
    recommendation_line,
    render_hidden,
    render_plan,
    render_trust,
    spent_of_budget,
    trust_lines,
)

SOLVE_PLAN = PLAN.pick(
    eps=Opt(option("--eps", str | None, "Privacy budget ε of each group: 0.5,1.5,3.0.")),
    n=Opt(option("--n", int | None, N_HELP, click_type=WholeNumber())),
)
"""``solve``'s planning options: ``--eps`` and ``--n`` may give way to ``--budgets``."""


@one_line_errors
@with_groups(plan=SOLVE_PLAN, baselines=BASELINES, trust=TRUST)
def solve(
    *,
    groups: dict[str, Any],
    budgets: Annotated[
        str | None,
        typer.Option("--budgets", help="Per-client budgets: CSV client_id,epsilon or JSON (instead of --eps/--sizes)."),
    ] = None,
    group_count: Annotated[str, typer.Option("--groups", help="Groups M for --budgets: a number, or auto.")] = "auto",
    grouping: Annotated[
        str, typer.Option("--grouping", help="How --budgets are grouped: unique | quantile | optimal (exact DP).")
    ] = "optimal",
    large_delta: Annotated[
        bool,
        typer.Option(
            "--allow-large-delta", help="Accept δ ≥ 1/n (recorded in the plan); refused otherwise.", show_default=False
        ),
    ] = False,
    trusted_fallback: Annotated[
        bool,
        typer.Option(
            "--trusted-fallback",
            help="Under --trust secagg, when no row has a secure form: write the plan for a trusted server (which "
            "sees every sampled client's clipped update) instead of failing.",
        ),
    ] = False,
    output: Annotated[str | None, typer.Option("--output", "-o", help="Write the plan to this JSON file.")] = None,
    overwrite: Overwrite = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON instead of tables.")] = False,
) -> None:
    """Solve a GDPFed+ plan: per-group q_m (Problem 1), σ_m (exact accountant), k_m, and the Λ table."""
    baselines = groups["baselines"]
    trust = groups["trust"].requested(baselines.model_dim)
    request = replace(groups["plan"], large_delta=large_delta)
    names, options = baselines.build()
    grouped = None
    if budgets is not None:
        if request.eps is not None or request.sizes is not None:
            raise CliError("--budgets replaces --eps and --sizes; give one or the other")
        grouped, config, digest = group_budgets(budgets, group_count, grouping, request)
        plan_groups = grouped.groups
        check_group_count(config, plan_groups.count)
    elif request.eps is None or request.n is None:
        raise CliError("give --eps and --n, or --budgets FILE")
    else:
        plan_groups, config = request.build()
    if baselines.every:
        names = planned_with_all(names, plan_groups.epsilons)  # e.g. PFA needs a public and a projected group
    with err.status(f"solving with the {config.accountant} accountant…"):
        try:
            result = solve_plan(plan_groups, config, baselines=names, options=options, trust=trust,
                                grouping=None if grouped is None else (grouped, digest),
                                trusted_fallback=trusted_fallback)  # fmt: skip
        except PlanVerificationError as exc:  # a plan must never under-noise: none is written
            raise CliError(f"internal check failed, no plan written: {exc.problems[0]}") from None
        except NoSecureForm as exc:
            raise CliError(f"no row of this plan has a secure form under --trust secagg: {exc.why}; or pass "
                           "--trusted-fallback to write the plan for a trusted server") from None  # fmt: skip
    doc = plan_to_dict(result)
    replaced = write_plan_document(output, doc, overwrite=overwrite, hint=OVERWRITE_HINT) if output else None
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    if grouped is not None:
        render_grouping(grouped)
    render_plan(result, out)
    if baselines.every:
        saving = pld_saving_line(result)
        if saving:
            out.print(saving, highlight=False)
    render_trust(result, out)
    render_hidden(result, out)
    if output and replaced:
        out.print(written(output, "plan", replaced), highlight=False)
    out.print(recommendation_line(result), highlight=False, soft_wrap=whole(out))
    for line in trust_lines(result):
        out.print(line, highlight=False, soft_wrap=whole(out))


@one_line_errors
def verify_cmd(
    plan_file: PlanFile,
) -> None:
    """Re-derive every group's ε from PLAN_FILE with its accountant; exit 1 naming any group over budget."""
    p = load_plan(plan_file)
    with err.status(f"re-deriving ε with the {p.config.spending_accountant} accountant…"):
        problems = plan_problems(p)
    if problems:
        for msg in problems:
            err.print(f"[bold red]FAIL[/] {escape(msg)}", highlight=False, soft_wrap=whole(err))
        raise typer.Exit(1)
    g = p.groups
    for m in p.methods:
        spent = ", ".join(spent_of_budget(s, e) for s, e in zip(m.epsilon_spent, m.epsilon))
        out.print(labelled("OK", "green", f"{m.name}: ε spent {spent}"))
    out.print(f"{plan_file}: all {len(g.size)} groups within budget ({p.config.spending_accountant} accountant)")
