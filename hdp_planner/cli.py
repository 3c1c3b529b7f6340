"""``hdp-plan``: a thin command-line layer over :mod:`hdp_planner`'s API."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hdp_planner.accounting import calibrate_sigma
from hdp_planner.baselines import BaselineOptions, add_baselines, baseline_names
from hdp_planner.files import write_json_atomic
from hdp_planner.grouping import Groups
from hdp_planner.inputs import parse_floats, parse_ints
from hdp_planner.noise import compare_noise
from hdp_planner.plan import METHODS, MethodNoise, Plan, PlanConfig, solve_plan
from hdp_planner.planfile import load_plan, plan_to_dict, verify
from hdp_planner.pooled import recalibrated_lambda

app = typer.Typer(
    name="hdp-plan",
    help="Plan differentially private federated learning with heterogeneous privacy budgets (GDPFed+).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text is plain: '[paper]', '[the paper's]' defaults are not rich tags
)
out = Console()
err = Console(stderr=True)
if not out.is_terminal:  # logs and CI: wide enough that the tables never wrap
    out.width = max(out.width, 132)

F = TypeVar("F", bound=Callable[..., Any])


class CliError(Exception):
    """An error the user can fix: printed as one line, exit status 2."""


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


# Options of `solve`, defined once and shared by every command that plans (names are a contract).
Eps = Annotated[str, typer.Option("--eps", help="Privacy budget ε of each group, comma-separated: 0.5,1.5,3.0.")]
N = Annotated[int, typer.Option("--n", help="Total number of clients n.")]
Sizes = Annotated[str | None, typer.Option("--sizes", help="Clients per group, comma-separated [even split of n].")]
Rounds = Annotated[int, typer.Option("--rounds", "-T", help="Training rounds T.")]
Q = Annotated[float, typer.Option("--q", help="Global expected participation ratio q (Σ r_m = qn).")]
Delta = Annotated[float | None, typer.Option("--delta", help="δ of (ε, δ)-DP [1/n^1.1].", show_default=False)]
Clip = Annotated[float, typer.Option("--clip", "-C", help="Clipping threshold C of client updates.")]
Lr = Annotated[float, typer.Option("--lr", help="Local learning rate η (enters μ4, μ5 and k_m).")]
LocalSteps = Annotated[int, typer.Option("--local-steps", help="Local SGD steps τ per round.")]
Sparsity = Annotated[
    str | None, typer.Option("--sparsity", help="Fixed k_m/d per group, e.g. 0.7,0.8,0.9 [Remark 3's closed form].")
]
FixedQ = Annotated[
    str | None, typer.Option("--fixed-q", help="Evaluate these per-group q_m instead of solving Problem 1.")
]
AccountantOpt = Annotated[
    str, typer.Option("--accountant", help="Calibration of the final σ_m: rdp | pld | closed-form (Theorem 1).")
]
SigmaModelOpt = Annotated[
    str,
    typer.Option(
        "--sigma-model",
        help="σ_m(q_m) in Problem 1: bound (Theorem 1, as Table 1) | accountant (RDP σ, Algorithm 1's noise).",
    ),
]
LambdaOpt = Annotated[
    str,
    typer.Option(
        "--lambda-convention",
        help="Λ: exact (per-coordinate noise of the applied update) | paper (Table 5's convention).",
    ),
]
# Options of the baselines (GDPFed Section 2, B.2), shared by `solve` and `compare`.
ModelDim = Annotated[
    int | None, typer.Option("--model-dim", help="Parameters d of the model (PFA keeps k/d of the projected noise).")
]
PfaDim = Annotated[int, typer.Option("--pfa-dim", help="PFA: dimension k of the public subspace.")]
PfaWindow = Annotated[int, typer.Option("--pfa-window", help="PFA: latest public noisy sums spanning the subspace.")]
PfaSubspace = Annotated[str, typer.Option("--pfa-subspace", help="PFA: top-k subspace by lanczos | randomized SVD.")]
SavingRounds = Annotated[
    int | None,
    typer.Option("--saving-rounds", help="Time-adaptive: rounds that save budget [T/2].", show_default=False),
]
SavingNoise = Annotated[float, typer.Option("--saving-noise", help="Time-adaptive: σ multiplier while saving.")]
MinShare = Annotated[
    float,
    typer.Option(
        "--min-share",
        help="F in [0, 1]: every group's weight share α_m ≥ F·|G_m|/n (1 = proportional) for HDP-Pooled and "
        "Problem 1 (GDPFed-op/+); the recommendation only considers rows that meet it.",
    ),
]


def build_config(
    n: int,
    rounds: int,
    q: float,
    delta: float | None,
    clip: float,
    lr: float,
    local_steps: int,
    sparsity: str | None,
    fixed_q: str | None,
    accountant: str,
    sigma_model: str,
    lambda_convention: str,
    min_share: float = 0.0,
) -> PlanConfig:
    """Validate the configuration options of `solve` into the API's PlanConfig."""
    return PlanConfig(
        n=n,
        rounds=rounds,
        q=q,
        delta=delta,
        clip=clip,
        lr=lr,
        local_steps=local_steps,
        accountant=accountant,  # type: ignore[arg-type]
        sigma_model=sigma_model,  # type: ignore[arg-type]
        lambda_convention=lambda_convention,  # type: ignore[arg-type]
        sparsity=parse_floats(sparsity, "--sparsity"),
        fixed_q=parse_floats(fixed_q, "--fixed-q"),
        min_share=min_share,
    )


def check_group_count(config: PlanConfig, count: int) -> None:
    """Per-group options must give one value per group."""
    for name, values in (("--sparsity", config.sparsity), ("--fixed-q", config.fixed_q)):
        if values is not None and len(values) != count:
            raise CliError(f"{name} has {len(values)} values for {count} groups")


def build_request(eps: str, n: int, sizes: str | None, *config_options: Any) -> tuple[Groups, PlanConfig]:
    """Validate the options of `solve` (``config_options`` as :func:`build_config` takes them after n)."""
    groups = Groups.from_budgets(parse_floats(eps, "--eps") or (), n, parse_ints(sizes, "--sizes"))
    config = build_config(n, *config_options)
    check_group_count(config, groups.count)
    return groups, config


def build_baselines(
    methods: str | None,
    model_dim: int | None,
    pfa_dim: int,
    pfa_window: int,
    pfa_subspace: str,
    saving_rounds: int | None,
    saving_noise: float,
) -> tuple[tuple[str, ...], BaselineOptions]:
    """Validate ``--methods`` and the baselines' options (before anything is solved)."""
    names = baseline_names(methods.split(","), model_dim) if methods else ()
    if "PFA" in names and model_dim is None:
        raise CliError("pfa needs --model-dim: the model's parameter count d (fmnist's CNN: 26010)")
    options = BaselineOptions(pfa_dim, pfa_window, pfa_subspace, model_dim, saving_rounds, saving_noise)
    return names, options


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
    pld = c.accountant == "pld"
    columns = ["group", "ε_m", "|G_m|", "q_m", "r_m", "σ_m", "σ_m²", "k_m/d", "ω_m", "ε spent"]
    for col in columns + (["σ_m by RDP", "PLD saves"] if pld else []):
        table.add_column(col, justify="right")
    for i in range(len(g.size)):
        extra = []
        if pld:  # how much noise the tighter PLD accountant saves over RDP at the same (ε_m, q_m)
            rdp_sigma = calibrate_sigma(g.epsilon[i], c.delta, g.q[i], c.rounds, "rdp")
            extra = [_fmt(rdp_sigma), f"{100 * (1 - g.noise_multiplier[i] / rdp_sigma):.1f}% of σ"]
        table.add_row(
            str(i + 1),
            _fmt(g.epsilon[i]),
            str(g.size[i]),
            f"{100 * g.q[i]:.3f}%",
            _fmt(g.expected_clients[i]),
            _fmt(g.noise_multiplier[i]),
            _fmt(g.sigma2[i]),
            _fmt(g.k_ratio[i]),
            _fmt(g.weight[i]),
            _fmt(g.epsilon_spent[i]),
            *extra,
        )
    console.print(table)
    base = p.method("DP-FedAvg").lam
    population = "/".join(f"{100 * x:.2g}" for x in p.population_share) + "%"
    noise = Table(
        box=box.SIMPLE_HEAD,
        title=f"Noise Λ ({c.lambda_convention} convention) and representation (population share {population})",
    )
    columns = ["method", "q_m", "σ_m²", "Λ", "against DP-FedAvg", "clients/round r_m", "weight share α_m"]
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
            "/".join(f"{100 * q:.2g}" for q in m.q) + "%",
            sigma2,
            f"{m.lam:.4g}",
            "—" if m.name == "DP-FedAvg" else compare_noise(m.lam, base),
            "/".join(f"{x:.2g}" for x in clients),
            "/".join(f"{100 * a:.2g}" for a in share) + ("%" if p.meets_min_share(m) else "% ✗"),
        )
    console.print(noise)
    if c.min_share > 0:
        console.print(f"✗: some group's weight share is below {c.min_share:g}·|G_m|/n (--min-share)", highlight=False)
    for m in p.methods[len(METHODS) :]:
        console.print(f"[cyan]{m.name}:[/] {describe_baseline(m, c)}", highlight=False)
    gain = 1 - p.objective / p.uniform_objective
    console.print(
        f"Problem 1 objective: {p.objective:.8g} ({gain:.3g} below uniform q's {p.uniform_objective:.8g}; "
        f"its constant μ4·Σω term dominates); σ model: {c.sigma_model}",
        highlight=False,
    )
    for note in p.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)


def pld_saving_line(p: Plan) -> str | None:
    """For an RDP plan: how much less exact noise the recommended row would carry calibrated with PLD."""
    if p.config.accountant != "rdp":
        return None
    rec = p.method(p.recommendation.method)
    lam = recalibrated_lambda(p, rec, "pld")
    if lam is None:
        return None
    return (
        f"PLD accountant: {rec.name} would carry Λ = {lam:.4g} instead of {rec.lambda_exact:.4g} "
        f"({100 * (1 - lam / rec.lambda_exact):.1f}% less noise; plan with --accountant pld)"
    )


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


@app.command()
@one_line_errors
def solve(
    eps: Annotated[str | None, typer.Option("--eps", help="Privacy budget ε of each group: 0.5,1.5,3.0.")] = None,
    n: Annotated[int | None, typer.Option("--n", help="Total number of clients n.")] = None,
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
    output: Annotated[str | None, typer.Option("--output", "-o", help="Write the plan to this JSON file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON instead of tables.")] = False,
) -> None:
    """Solve a GDPFed+ plan: per-group q_m (Problem 1), σ_m (exact accountant), k_m, and the Λ table."""
    options = (rounds, q, delta, clip, lr, local_steps, sparsity, fixed_q, accountant, sigma_model, lambda_convention)
    options += (min_share,)
    extra, extra_options = build_baselines(
        methods, model_dim, pfa_dim, pfa_window, pfa_subspace, saving_rounds, saving_noise
    )
    grouped = None
    if budgets is not None:
        if eps is not None or sizes is not None:
            raise CliError("--budgets replaces --eps and --sizes; give one or the other")
        grouped, config = cli_extra.group_budgets(budgets, group_count, grouping, n, options)
        groups = grouped.groups
        check_group_count(config, groups.count)
    elif eps is None or n is None:
        raise CliError("give --eps and --n, or --budgets FILE")
    else:
        groups, config = build_request(eps, n, sizes, *options)
    if "all" in {x.strip().lower() for x in (methods or "").split(",")} and len(set(groups.epsilons)) < 2:
        extra = tuple(name for name in extra if name != "PFA")  # PFA needs a public and a projected group
    with err.status(f"solving with the {config.accountant} accountant…"):
        result = add_baselines(solve_plan(groups, config), extra, extra_options)
        problems = verify(result)
    if problems:  # a plan must never under-noise: refuse to write one the accountant rejects
        raise CliError(f"internal check failed, no plan written: {problems[0]}")
    doc = plan_to_dict(result)
    if grouped is not None:
        doc["grouping"] = grouped.to_dict()
    if output:
        write_json_atomic(output, doc)
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    if grouped is not None:
        cli_extra.render_grouping(grouped)
    render_plan(result, out)
    if methods is not None and "all" in {x.strip().lower() for x in methods.split(",")}:
        saving = pld_saving_line(result)
        if saving:
            out.print(saving, highlight=False)
    if output:
        out.print(f"plan written to {output}", highlight=False)
    out.print(recommendation_line(result), highlight=False, soft_wrap=True)


@app.command("verify")
@one_line_errors
def verify_cmd(
    plan_file: Annotated[str, typer.Argument(help="A plan.json written by `hdp-plan solve`.")],
) -> None:
    """Re-derive every group's ε from PLAN_FILE with its accountant; exit 1 naming any group over budget."""
    p = load_plan(plan_file)
    with err.status(f"re-deriving ε with the {p.config.spending_accountant} accountant…"):
        problems = verify(p)
    if problems:
        for msg in problems:
            err.print(f"[bold red]FAIL[/] {escape(msg)}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    g = p.groups
    for m in p.methods:
        spent = ", ".join(f"{s:.4g}≤{e:g}" for s, e in zip(m.epsilon_spent, m.epsilon))
        out.print(f"[green]OK[/] {m.name}: ε spent {spent}", highlight=False)
    out.print(f"{plan_file}: all {len(g.size)} groups within budget ({p.config.spending_accountant} accountant)")


from hdp_planner import cli_extra, cli_select  # noqa: E402, F401  (cli_select registers select, fedsam-noise)
from hdp_planner_flower.cli import flower as _flower  # noqa: E402  (imports flwr only when the command runs)
from hdp_planner_train.cli import compare as _compare  # noqa: E402
from hdp_planner_train.cli import train as _train  # noqa: E402

app.command("train")(_train)
app.command("compare")(_compare)
app.command("flower")(_flower)


def main() -> None:
    app()
