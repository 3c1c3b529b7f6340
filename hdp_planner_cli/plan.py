"""``hdp-plan solve`` and ``verify``: parse the options, call :mod:`hdp_planner`'s API, render the plan."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hdp_planner.accounting.accountants import get_accountant
from hdp_planner.distributed.trust import TrustModel
from hdp_planner.io.files import write_json_atomic
from hdp_planner.methods.baselines import add_baselines, planned_with_all
from hdp_planner.methods.gdpfed import solve_plan
from hdp_planner.methods.pooled import recalibrated_lambda
from hdp_planner.planfile.cohorts import KEY as HIDDEN_KEY
from hdp_planner.planfile.cohorts import cohort_rows, hidden_to_dict, recommended_cohort, verify_hidden
from hdp_planner.planfile.document import load_plan, plan_to_dict, read_document, verify
from hdp_planner.planfile.trust import recommended, secagg_rows, trust_to_dict, verify_trust
from hdp_planner.planning.plan import METHODS, MethodNoise, Plan, PlanConfig, rdp_sigmas
from hdp_planner.rules.noise import compare_noise
from hdp_planner_cli.budgets import group_budgets, render_grouping
from hdp_planner_cli.console import err, fit_table, labelled, one_line_errors, out, pct
from hdp_planner_cli.options import (
    N_HELP,
    AccountantOpt,
    Bits,
    CliError,
    Clip,
    CohortMultiple,
    Colluders,
    Delta,
    FixedQ,
    HideSample,
    LambdaOpt,
    LocalSteps,
    Lr,
    MaxCohort,
    MinShare,
    ModelDim,
    Participations,
    PfaDim,
    PfaSubspace,
    PfaWindow,
    Q,
    Rounds,
    SavingNoise,
    SavingRounds,
    SigmaModelOpt,
    Sizes,
    Sparsity,
    Survivors,
    WholeNumber,
    build_baselines,
    build_request,
    check_group_count,
)


def _fmt(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}g}"


def describe_baseline(m: MethodNoise, config: PlanConfig) -> str:
    """One line on what a baseline's noise entry does beyond GDPFed's rules."""
    if m.projection is not None:
        pr = m.projection
        return (
            f"group {pr.public + 1} is public; group {pr.projected + 1}'s noisy sum is projected onto the top-{pr.dim} "
            f"subspace ({pr.subspace}) of the public group's last {pr.window} noisy sums; d = {pr.model_dim}"
        )
    if m.schedule is not None:
        first = m.schedule[0]
        if len(m.schedule) == 1:
            return "constant σ (no saving phase)"
        factor = first.noise_multiplier[0] / m.noise_multiplier[0]
        return f"σ × {factor:.3g} in rounds 1-{first.rounds} (saving), then σ_m (spending) to round {config.rounds}"
    clips = m.clips(config.clip)
    return (
        f"one pool of {sum(m.expected_clients):.4g} expected clients, clipped to C_m = "
        f"{', '.join(f'{x:.3g}' for x in clips)}, one noise draw of std {clips[0] * m.noise_multiplier[0]:.4g}"
    )


def render_plan(p: Plan, console: Console) -> None:
    """Print the per-group plan, the Λ comparison of the four methods, and the plan's notes."""
    c, g = p.config, p.groups
    table = Table(
        box=box.SIMPLE_HEAD,
        title=f"GDPFed+ plan: n={c.n}, T={c.rounds}, q={c.q:g}, δ={c.delta:.3g}, C={c.clip:g}, "
        f"accountant={c.accountant}",
    )
    rdp = rdp_sigmas(p)  # PLD plans: how much noise PLD saves over RDP at the same (ε_m, q_m)
    columns = ["group", "ε_m", "|G_m|", "q_m", "r_m", "σ_m", "σ_m²", "k_m/d", "ω_m", "ε\nspent"]
    for col in columns + (["σ_m\nby RDP", "PLD\nsaves"] if rdp else []):
        table.add_column(col, justify="right")
    for i in range(len(g.size)):
        extra = []
        if rdp:
            extra = [_fmt(rdp[i]), f"{100 * (1 - g.noise_multiplier[i] / rdp[i]):.1f}% of σ"]
        table.add_row(
            str(i + 1),
            _fmt(g.epsilon[i]),
            str(g.size[i]),
            pct(g.q[i], 4) + "%",
            _fmt(g.expected_clients[i]),
            _fmt(g.noise_multiplier[i]),
            _fmt(g.sigma2[i]),
            _fmt(g.k_ratio[i]),
            _fmt(g.weight[i]),
            _fmt(g.epsilon_spent[i]),
            *extra,
        )
    console.print(table)
    baseline = p.method("DP-FedAvg")
    base = baseline.lam
    population = "/".join(pct(x) for x in p.population_share) + "%"
    noise = Table(
        box=box.SIMPLE_HEAD,
        title=f"Noise Λ ({c.lambda_convention} convention) and representation (population share {population})",
    )
    columns = ["method", "q_m", "σ_m²", "Λ", "against\nDP-FedAvg", "clients/round\nr_m", "weight share\nα_m"]
    for col in columns:
        noise.add_column(col, justify="right", no_wrap=col == "method")
    for m in p.methods:
        sigma2 = "/".join(
            "→".join(f"{ph.noise_multiplier[i] ** 2:.3g}" for ph in m.schedule or ()) or f"{m.sigma2[i]:.3g}"
            for i in range(len(m.size))
        )
        clients, share = p.representation(m)
        noise.add_row(
            m.name,
            "/".join(pct(q) for q in m.q) + "%",
            sigma2,
            f"{m.lam:.4g}",
            "—" if m is baseline else compare_noise(m.lam, base),
            "/".join(f"{x:.2g}" for x in clients),
            "/".join(pct(a) for a in share) + ("%" if p.meets_min_share(m) else "% ✗"),
        )
    console.print(noise)
    if c.min_share > 0:
        console.print(f"✗: some group's weight share is below {c.min_share:g}·|G_m|/n (--min-share)", highlight=False)
    for m in p.methods[len(METHODS) :]:
        console.print(labelled(f"{m.name}:", "cyan", describe_baseline(m, c)))
    gain = 1 - p.objective / p.uniform_objective
    console.print(
        f"Problem 1 (GDPFed's bound on the training error, σ model {c.sigma_model}): the chosen q_m lower it by "
        f"{100 * gain:.2g}% against q_m = q ({p.objective:.8g} against {p.uniform_objective:.8g}); most of it "
        "does not depend on the q_m",
        highlight=False,
    )
    for note in p.notes:
        console.print(labelled("note:", "yellow", note))


def pld_saving_line(p: Plan) -> str | None:
    """For an RDP plan: how much less exact noise the recommended row would carry calibrated with PLD."""
    acc = get_accountant(p.config.accountant)
    if acc.refines or acc.rule:  # for a plain RDP plan only
        return None
    rec = p.method(p.recommendation.method)
    lam = recalibrated_lambda(p, rec, "pld")
    if lam is None:
        return None
    return (
        f"PLD accountant: {rec.name} would carry Λ = {lam:.4g} instead of {rec.lambda_exact:.4g} "
        f"({100 * (1 - lam / rec.lambda_exact):.1f}% less noise; plan with --accountant pld)"
    )


def render_trust(p: Plan, trust: TrustModel, rows, console: Console) -> None:
    """The plan under secure aggregation: per row and group z_m, ε against each adversary, and the price."""
    k = trust.participations or p.config.rounds
    table = Table(
        box=box.SIMPLE_HEAD,
        title=f"under secure aggregation: b={trust.bits} bits, survivors F={trust.survivors:g}, colluders "
        f"k={trust.colluders}, participations K={k}, d={trust.model_dim}",
    )
    for col in ("method", "group", "ε\nbudget", "σ trusted\nserver", "z\nsecagg", "effective\nσ",
                "ε third\nparties", f"ε server\n(K={k})", "Λ\nsecagg", "price of\ndistrust"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        m = p.method(r.name)
        for i, g in enumerate(r.groups or ()):
            first = i == 0
            table.add_row(
                r.name if first else "", str(i + 1), _fmt(m.epsilon[i]), _fmt(m.noise_multiplier[i]),
                _fmt(g.noise_multiplier), _fmt(g.effective_noise_multiplier), _fmt(g.epsilon_third_parties),
                _fmt(g.epsilon_server), _fmt(r.lambda_secagg) if first else "", f"{r.price:.2f}x" if first else "",
            )  # fmt: skip
    console.print(*fit_table(console, table, keys=2))
    for r in rows:
        if r.groups is None:
            console.print(labelled(f"{r.name}:", "cyan", r.note))


def recommendation_line(p: Plan) -> str:
    """The one closing line of `solve`: the least-noise row meeting --min-share against the planned row."""
    r = p.recommendation
    where = f"rows meeting --min-share {p.config.min_share:g}" if p.config.min_share > 0 else "planned rows"
    if r.method == p.groups.name:
        return f"recommended: {r.method} (the planned row): least exact Λ = {r.lam:.4g} among the {where}"
    return (
        f"recommended: {r.method}: least exact Λ = {r.lam:.4g} among the {where}, "
        f"{r.ratio_to_planned:.2f}x less noise than the planned {p.groups.name}"
    )


@one_line_errors
def solve(
    eps: Annotated[str | None, typer.Option("--eps", help="Privacy budget ε of each group: 0.5,1.5,3.0.")] = None,
    n: Annotated[int | None, typer.Option("--n", help=N_HELP, click_type=WholeNumber())] = None,
    sizes: Sizes = None,
    rounds: Rounds = 50,
    q: Q = 0.02,
    delta: Delta = None,
    clip: Clip = 1.0,
    lr: Lr = 0.1,
    local_steps: LocalSteps = 5,
    sparsity: Sparsity = None,
    fixed_q: FixedQ = None,
    accountant: AccountantOpt = "rdp",
    sigma_model: SigmaModelOpt = "bound",
    lambda_convention: LambdaOpt = "exact",
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
    output: Annotated[str | None, typer.Option("--output", "-o", help="Write the plan to this JSON file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON instead of tables.")] = False,
) -> None:
    """Solve a GDPFed+ plan: per-group q_m (Problem 1), σ_m (exact accountant), k_m, and the Λ table."""
    try:
        trust_model = TrustModel(kind=trust, bits=bits, survivors=survivors, colluders=colluders,  # type: ignore[arg-type]
                                 participations=participations, model_dim=model_dim)  # fmt: skip
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    check_hidden_options(trust_model, hide_sample, max_cohort, cohort_multiple)
    options = (rounds, q, delta, clip, lr, local_steps, sparsity, fixed_q, accountant, sigma_model, lambda_convention)
    options += (min_share, large_delta)
    extra, extra_options = build_baselines(
        methods, model_dim, pfa_dim, pfa_window, pfa_subspace, saving_rounds, saving_noise
    )
    grouped = None
    if budgets is not None:
        if eps is not None or sizes is not None:
            raise CliError("--budgets replaces --eps and --sizes; give one or the other")
        grouped, config, digest = group_budgets(budgets, group_count, grouping, n, options)
        groups = grouped.groups
        check_group_count(config, groups.count)
    elif eps is None or n is None:
        raise CliError("give --eps and --n, or --budgets FILE")
    else:
        groups, config = build_request(eps, n, sizes, *options)
    if "all" in {x.strip().lower() for x in (methods or "").split(",")}:
        extra = planned_with_all(extra, groups.epsilons)  # e.g. PFA needs a public and a projected group
    with err.status(f"solving with the {config.accountant} accountant…"):
        result = add_baselines(solve_plan(groups, config), extra, extra_options)
        problems = verify(result)
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
    if output:
        write_json_atomic(output, doc)
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
    if output:
        out.print(f"plan written to {output}", highlight=False)
    out.print(recommendation_line(result), highlight=False, soft_wrap=True)
    if rows:
        best = recommended(rows, result)
        if best is not None:
            line = (f"recommended under secagg: {best.name}: least Λ = {best.lambda_secagg:.4g} with distributed noise "
                    f"({best.price:.2f}x its Λ with a trusted server)")  # fmt: skip
            out.print(line, highlight=False, soft_wrap=True)
    if hidden:
        best = recommended_cohort(hidden, result)
        line = ("no row can hide who contributes under these caps" if best is None else
                f"recommended with hidden participation: {best.name}: Λ = {best.lambda_cohort:.4g}, "
                f"{best.price:.2f}x its Λ with a trusted server, {best.vectors_per_round} vectors a round, every "
                f"group's ε against the server within its budget")  # fmt: skip
        out.print(line, highlight=False, soft_wrap=True)


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


def render_hidden(p: Plan, rows, doc: dict, console: Console) -> None:
    """Public cohorts, private coins: per row and group the cohort m, coin p, expected contributors r = m·p,
    memberships K, threshold t, z and ε against the server; then the recommended row's frontier of cohort size
    against Λ."""
    table = Table(box=box.SIMPLE_HEAD, title="hiding who contributes: public cohorts, private coins")
    for col in ("method", "group", "ε\nbudget", "cohort\nm", "coin\np", "contri-\nbutors r", "member-\nships K",
                "thresh-\nold t", "z", "ε\nserver", "Λ", "price"):  # fmt: skip
        table.add_column(col, justify="right")
    for name, r in rows:
        if r is None:
            continue
        m = p.method(name)
        for i, g in enumerate(r.groups):
            first = i == 0
            table.add_row(
                name if first else "", str(i + 1), _fmt(m.epsilon[i]), str(g.cohort), f"{g.coin:.3g}",
                f"{g.expected_contributors:.3g}", str(g.memberships), str(g.threshold), _fmt(g.noise_multiplier),
                _fmt(g.epsilon_server),
                _fmt(r.lambda_cohort) if first else "", f"{r.price:.2f}x" if first else "",
            )  # fmt: skip
    console.print(*fit_table(console, table, keys=2))
    if doc["frontier"]:
        frontier = Table(box=box.SIMPLE_HEAD, title=f"{doc['recommendation']}: cohort size against noise")
        for col in ("cohorts at most", "vectors a round", "Λ", "Λ / trusted Λ"):
            frontier.add_column(col, justify="right")
        for f in doc["frontier"]:
            cap = "the group" if f["multiple"] is None else f"{f['multiple']:g}x contributors"
            frontier.add_row(cap, str(f["vectors_per_round"]), _fmt(f["lambda"]), f"{f['price']:.2f}x")
        console.print(*fit_table(console, frontier, keys=1))
    for name, r in rows:
        if r is None:
            console.print(labelled(f"{name}:", "cyan", "no cohort under these caps (or no distributed form)"))


def spent_of_budget(spent: float, budget: float) -> str:
    """ "spent ≤ budget" with as many digits of ``spent`` (4 to 12) as make the comparison true as printed; a spent ε
    above the budget by less than verify's tolerance (a relative 1e-9) reads "= budget (to 9 digits)"."""
    limit = f"{budget:.12g}"
    if spent > budget:
        return f"= {limit} (to 9 digits)"
    text = next(t for t in (f"{spent:.{d}g}" for d in range(4, 18)) if float(t) <= budget)
    return f"{text} ≤ {limit}"


@one_line_errors
def verify_cmd(
    plan_file: Annotated[str, typer.Argument(help="A plan.json written by `hdp-plan solve`.")],
) -> None:
    """Re-derive every group's ε from PLAN_FILE with its accountant; exit 1 naming any group over budget."""
    p = load_plan(plan_file)
    with err.status(f"re-deriving ε with the {p.config.spending_accountant} accountant…"):
        doc = read_document(plan_file)
        problems = verify(p) + verify_trust(p, doc) + verify_hidden(p, doc)
    if problems:
        for msg in problems:
            err.print(f"[bold red]FAIL[/] {escape(msg)}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    g = p.groups
    for m in p.methods:
        spent = ", ".join(spent_of_budget(s, e) for s, e in zip(m.epsilon_spent, m.epsilon))
        out.print(labelled("OK", "green", f"{m.name}: ε spent {spent}"))
    out.print(f"{plan_file}: all {len(g.size)} groups within budget ({p.config.spending_accountant} accountant)")
