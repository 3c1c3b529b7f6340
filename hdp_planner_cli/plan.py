"""``hdp-plan solve`` and ``verify``: parse the options, call :mod:`hdp_planner`'s API, render the plan
(:mod:`.plan_render`)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Annotated, Any

import typer
from rich.markup import escape

from hdp_planner.distributed.trust import TrustModel
from hdp_planner.io.overwrite import written
from hdp_planner.methods.baselines import add_baselines, planned_with_all
from hdp_planner.methods.gdpfed import solve_plan
from hdp_planner.planfile.cohorts import KEY as HIDDEN_KEY
from hdp_planner.planfile.cohorts import cohort_rows, hidden_to_dict, recommended_cohort, verify_hidden
from hdp_planner.planfile.document import load_plan, plan_problems, plan_to_dict, read_document, write_plan_document
from hdp_planner.planfile.trust import recommended, secagg_rows, trust_to_dict, verify_trust
from hdp_planner_cli.budgets import group_budgets, render_grouping
from hdp_planner_cli.console import err, labelled, one_line_errors, out, whole
from hdp_planner_cli.option_blocks import Opt, option, with_groups
from hdp_planner_cli.options import (
    N_HELP,
    OVERWRITE_HINT,
    Bits,
    CliError,
    CohortMultiple,
    Colluders,
    HideSample,
    MaxCohort,
    MinShare,
    ModelDim,
    Overwrite,
    Participations,
    PfaDim,
    PfaSubspace,
    PfaWindow,
    PlanFile,
    SavingNoise,
    SavingRounds,
    Survivors,
    WholeNumber,
    build_baselines,
)
from hdp_planner_cli.plan_options import PLAN, check_group_count
from hdp_planner_cli.plan_render import (
    pld_saving_line,
    recommendation_line,
    render_hidden,
    render_plan,
    render_trust,
    spent_of_budget,
)

SOLVE_PLAN = PLAN.pick(
    eps=Opt(option("--eps", str | None, "Privacy budget ε of each group: 0.5,1.5,3.0.")),
    n=Opt(option("--n", int | None, N_HELP, click_type=WholeNumber())),
)
"""``solve``'s planning options: ``--eps`` and ``--n`` may give way to ``--budgets``."""


@one_line_errors
@with_groups(plan=SOLVE_PLAN)
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
    methods: Annotated[
        str | None,
        typer.Option(
            "--methods",
            help="Also plan baselines: pfa,idp-fedavg-sample,idp-fedavg-scale,time-adaptive,hdp-pooled, or all "
            "(every client-level row; PFA when --model-dim is given).",
        ),
    ] = None,
    model_dim: ModelDim = None,
    pfa_dim: PfaDim = 1,
    pfa_window: PfaWindow = 10,
    pfa_subspace: PfaSubspace = "lanczos",
    saving_rounds: SavingRounds = None,
    saving_noise: SavingNoise = 2.0,
    min_share: MinShare = 0.0,
    large_delta: Annotated[
        bool,
        typer.Option(
            "--allow-large-delta", help="Accept δ ≥ 1/n (recorded in the plan); refused otherwise.", show_default=False
        ),
    ] = False,
    trust: Annotated[
        str,
        typer.Option(
            "--trust",
            help="Who sees individual updates: server (trusted with them) or secagg (secure aggregation with "
            "distributed discrete Gaussian noise; needs --model-dim).",
        ),
    ] = "server",
    bits: Bits = 20,
    survivors: Survivors = 0.9,
    colluders: Colluders = 0,
    participations: Participations = None,
    hide_sample: HideSample = False,
    max_cohort: MaxCohort = None,
    cohort_multiple: CohortMultiple = None,
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
    try:
        trust_model = TrustModel(kind=trust, bits=bits, survivors=survivors, colluders=colluders,  # type: ignore[arg-type]
                                 participations=participations, model_dim=model_dim)  # fmt: skip
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    check_hidden_options(trust_model, hide_sample, max_cohort, cohort_multiple)
    request = replace(groups["plan"], min_share=min_share, large_delta=large_delta)
    extra, extra_options = build_baselines(
        methods=methods, model_dim=model_dim, pfa_dim=pfa_dim, pfa_window=pfa_window, pfa_subspace=pfa_subspace,
        saving_rounds=saving_rounds, saving_noise=saving_noise,
    )  # fmt: skip
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
    if "all" in {x.strip().lower() for x in (methods or "").split(",")}:
        extra = planned_with_all(extra, plan_groups.epsilons)  # e.g. PFA needs a public and a projected group
    with err.status(f"solving with the {config.accountant} accountant…"):
        result = add_baselines(solve_plan(plan_groups, config), extra, extra_options)
        problems = plan_problems(result)
    if problems:  # a plan must never under-noise: refuse to write one the accountant rejects
        raise CliError(f"internal check failed, no plan written: {problems[0]}")
    doc = plan_to_dict(result)
    if grouped is not None:
        doc["grouping"] = {**grouped.to_dict(), "budgets_sha256": digest}
    rows = ()
    if trust_model.kind == "secagg":
        with err.status("calibrating distributed noise for secure aggregation…"):
            rows = secagg_rows(result, trust_model)
        doc["trust"] = trust_to_dict(result, trust_model, rows)
        problems = verify_trust(result, doc)
        if problems:
            raise CliError(f"internal check failed, no plan written: {problems[0]}")
    hidden = ()
    if hide_sample:
        with err.status("planning cohorts that hide who contributes…"):
            hidden = cohort_rows(result, trust_model, max_cohort=max_cohort, max_multiple=cohort_multiple)
            doc[HIDDEN_KEY] = hidden_to_dict(result, trust_model, hidden, max_cohort=max_cohort,
                                             max_multiple=cohort_multiple)  # fmt: skip
            problems = verify_hidden(result, doc)
        if problems:
            raise CliError(f"internal check failed, no plan written: {problems[0]}")
    fallback = None
    if rows and recommended(rows, result) is None and not (hidden and recommended_cohort(hidden, result)):
        fallback = no_secure_form(rows, result, trusted_fallback)
        doc.pop("trust", None)  # what is written is a plan for a trusted server (or nothing)
        doc.pop(HIDDEN_KEY, None)
        hidden = ()
    replaced = write_plan_document(output, doc, overwrite=overwrite, hint=OVERWRITE_HINT) if output else None
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    if grouped is not None:
        render_grouping(grouped)
    render_plan(result, out)
    if methods is not None and "all" in {x.strip().lower() for x in methods.split(",")}:
        saving = pld_saving_line(result)
        if saving:
            out.print(saving, highlight=False)
    if rows:
        render_trust(result, trust_model, rows, out)
    if hidden:
        render_hidden(result, hidden, doc[HIDDEN_KEY], out)
    if output and replaced:
        out.print(written(output, "plan", replaced), highlight=False)
    out.print(recommendation_line(result), highlight=False, soft_wrap=whole(out))
    if rows:
        best = recommended(rows, result)
        if best is not None:
            line = (f"recommended under secagg: {best.name}: least Λ = {best.lambda_secagg:.4g} with distributed noise "
                    f"({best.price:.2f}x its Λ with a trusted server)")  # fmt: skip
            out.print(line, highlight=False, soft_wrap=whole(out))
    if fallback:
        out.print(fallback, highlight=False, soft_wrap=whole(out))
    if hidden:
        best = recommended_cohort(hidden, result)
        line = ("no row can hide who contributes under these caps" if best is None else
                f"recommended with hidden participation: {best.name}: Λ = {best.lambda_cohort:.4g}, "
                f"{best.price:.2f}x its Λ with a trusted server, {best.vectors_per_round} vectors a round, every "
                f"group's ε against the server within its budget")  # fmt: skip
        out.print(line, highlight=False, soft_wrap=whole(out))


def no_secure_form(rows, plan, allowed: bool) -> str:
    """The last line of a ``--trust secagg`` plan none of whose rows has a secure form (the recommended row's
    reason); without ``--trusted-fallback`` a one-line error (exit 2, nothing written)."""
    first = next((r for r in rows if r.name == plan.recommendation.method), rows[0])
    why = f"{first.name} is {first.note or 'not planned under secagg'}"
    if not allowed:
        raise CliError(f"no row of this plan has a secure form under --trust secagg: {why}; or pass "
                       "--trusted-fallback to write the plan for a trusted server")  # fmt: skip
    return (f"no row has a secure form under --trust secagg ({why}): the plan is written for a trusted server "
            "(--trusted-fallback), which sees every sampled client's clipped update")  # fmt: skip


def check_hidden_options(trust: TrustModel, hide: bool, max_cohort: int | None, multiple: float | None) -> None:
    """--hide-sample needs --trust secagg; its caps need --hide-sample and must leave a cohort of two."""
    if (max_cohort is not None or multiple is not None) and not hide:
        raise CliError("--max-cohort and --cohort-multiple need --hide-sample")
    if hide and trust.kind != "secagg":
        raise CliError("--hide-sample needs --trust secagg (cohorts send masked vectors through secure aggregation)")
    if max_cohort is not None and max_cohort < 2:
        raise CliError(f"--max-cohort must be at least 2 (secure aggregation needs two clients), got {max_cohort}")
    if multiple is not None and not multiple >= 1:
        raise CliError(f"--cohort-multiple must be at least 1 (a cohort holds its contributors), got {multiple:g}")


@one_line_errors
def verify_cmd(
    plan_file: PlanFile,
) -> None:
    """Re-derive every group's ε from PLAN_FILE with its accountant; exit 1 naming any group over budget."""
    p = load_plan(plan_file)
    with err.status(f"re-deriving ε with the {p.config.spending_accountant} accountant…"):
        doc = read_document(plan_file)
        problems = plan_problems(p) + verify_trust(p, doc) + verify_hidden(p, doc)
    if problems:
        for msg in problems:
            err.print(f"[bold red]FAIL[/] {escape(msg)}", highlight=False, soft_wrap=whole(err))
        raise typer.Exit(1)
    g = p.groups
    for m in p.methods:
        spent = ", ".join(spent_of_budget(s, e) for s, e in zip(m.epsilon_spent, m.epsilon))
        out.print(labelled("OK", "green", f"{m.name}: ε spent {spent}"))
    out.print(f"{plan_file}: all {len(g.size)} groups within budget ({p.config.spending_accountant} accountant)")
