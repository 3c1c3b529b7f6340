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
from rich.table import Table

from hdp_planner.accounting import calibrate_sigma
from hdp_planner.grouping import Groups
from hdp_planner.inputs import parse_floats, parse_ints
from hdp_planner.plan import METHODS, Plan, PlanConfig, solve_plan
from hdp_planner.planfile import load_plan, plan_to_dict, verify, write_json_atomic

app = typer.Typer(
    name="hdp-plan",
    help="Plan differentially private federated learning with heterogeneous privacy budgets (GDPFed+).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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
            err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
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


def _fmt(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}g}"


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
    noise = Table(box=box.SIMPLE_HEAD, title=f"Noise Λ ({c.lambda_convention} convention; reduction against DP-FedAvg)")
    for col in ("method", "q_m", "σ² per group", "Λ", "reduction"):
        noise.add_column(col, justify="right")
    for name in METHODS:
        m = p.method(name)
        noise.add_row(
            name,
            ", ".join(f"{100 * q:.3g}%" for q in m.q),
            ", ".join(f"{s:.3g}" for s in m.sigma2),
            f"{m.lam:.4g}",
            "—" if name == "DP-FedAvg" else f"{base / m.lam:.2f}x ({100 * (1 - m.lam / base):.1f}% less)",
        )
    console.print(noise)
    gain = 1 - p.objective / p.uniform_objective
    console.print(
        f"Problem 1 objective: {p.objective:.8g} ({gain:.3g} below uniform q's {p.uniform_objective:.8g}; "
        f"its constant μ4·Σω term dominates); σ model: {c.sigma_model}",
        highlight=False,
    )
    for note in p.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)


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
    output: Annotated[str | None, typer.Option("--output", "-o", help="Write the plan to this JSON file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON instead of tables.")] = False,
) -> None:
    """Solve a GDPFed+ plan: per-group q_m (Problem 1), σ_m (exact accountant), k_m, and the Λ table."""
    options = (rounds, q, delta, clip, lr, local_steps, sparsity, fixed_q, accountant, sigma_model, lambda_convention)
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
    with err.status(f"solving with the {config.accountant} accountant…"):
        result = solve_plan(groups, config)
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
    if output:
        out.print(f"plan written to {output}", highlight=False)


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
            err.print(f"[bold red]FAIL[/] {msg}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    g = p.groups
    for name in METHODS:
        m = p.method(name)
        spent = ", ".join(f"{s:.4g}≤{e:g}" for s, e in zip(m.epsilon_spent, m.epsilon))
        out.print(f"[green]OK[/] {name}: ε spent {spent}", highlight=False)
    out.print(f"{plan_file}: all {len(g.size)} groups within budget ({p.config.spending_accountant} accountant)")


from hdp_planner import cli_extra  # noqa: E402
from hdp_planner_train.cli import train as _train  # noqa: E402

app.command("train")(_train)


def main() -> None:
    app()
