"""``hdp-plan sweep``, ``plot`` and ``assign``, and the per-client-budget part of ``solve``.

Registered on the app by :mod:`hdp_planner_cli.app`. Matplotlib is imported only by the commands that draw.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hdp_planner.io.overwrite import write_results, written
from hdp_planner.planfile.document import load_plan
from hdp_planner.planning.budgets import (
    GROUPINGS,
    BudgetError,
    Grouping,
    assign_to_groups,
    budgets_digest,
    groups_from_histogram,
    load_budget_columns,
    load_budgets,
    parse_group_count,
)
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.plan import METHODS
from hdp_planner.report.sweep import parse_range, parse_values, sweep_plan
from hdp_planner_cli.console import err, one_line_errors, optional_columns, out, pct
from hdp_planner_cli.option_blocks import with_groups
from hdp_planner_cli.options import OVERWRITE_HINT, CliError, Overwrite, PlanFile
from hdp_planner_cli.plan_options import PLAN, PlanRequest


def _progress() -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,  # logs and pipes get the result lines only
    )


# --------------------------------------------------------------------------------------------- sweep


@one_line_errors
@with_groups(plan=PLAN)
def sweep(
    *,
    groups: dict[str, Any],
    vary: Annotated[
        str, typer.Option("--vary", help="What varies: a group number (1-based, its ε) or rounds | q | clip.")
    ] = "1",
    values: Annotated[str | None, typer.Option("--values", help="Values of the varied parameter: v1,v2,...")] = None,
    range_: Annotated[
        str | None, typer.Option("--range", help="Evenly spaced values a:b:steps (instead of --values).")
    ] = None,
    csv_path: Annotated[str | None, typer.Option("--csv", help="Write the sweep as CSV to this file.")] = None,
    plot: Annotated[
        str | None, typer.Option("--plot", help="Draw q_m against the varied value (.png/.svg/.pdf).")
    ] = None,
    overwrite: Overwrite = False,
) -> None:
    """Re-solve the plan while one parameter varies (GDPFed Figure 2: optimal q_m against ε_1)."""
    from hdp_planner.report.sweep import parse_vary

    plan_groups, config = groups["plan"].build()
    if (values is None) == (range_ is None):
        raise CliError("give exactly one of --values v1,v2,... or --range a:b:steps")
    points = parse_values(values) if values is not None else parse_range(range_ or "")
    varied = parse_vary(vary, plan_groups)
    if plot:
        from hdp_planner.report.plots import check_figure_path

        check_figure_path(plot)
    if csv_path:
        parent = Path(csv_path).parent
        if str(parent) and not parent.is_dir():
            raise CliError(f"cannot write {csv_path}: directory {parent} does not exist")
    with _progress() as bar:
        task = bar.add_task(f"solving {len(points)} plans", total=len(points))
        result = sweep_plan(plan_groups, config, varied, points, progress=lambda i: bar.update(task, completed=i))
    table = Table(box=box.SIMPLE_HEAD, title=f"Sweep of {varied.text}: GDPFed+ q_m and σ_m², Λ per method")
    table.add_column(varied.name, justify="right")
    for m in range(result.count):
        table.add_column(f"q_{m + 1}", justify="right")
    for m in range(result.count):
        table.add_column(f"σ²_{m + 1}", justify="right")
    for name in METHODS:
        table.add_column(f"Λ\n{name}", justify="right")
    optional_columns(table, *(f"σ²_{m + 1}" for m in range(result.count)))  # in the CSV (--csv)
    for v, qs, s2, lam in zip(result.values, result.q, result.sigma2, result.lam):
        table.add_row(f"{v:g}", *(f"{pct(x, 4)}%" for x in qs), *(f"{x:.4g}" for x in s2), *(f"{x:.4g}" for x in lam))
    files: dict[str, bytes] = {}
    if csv_path:
        files[csv_path] = result.to_csv().encode()
    if plot:
        from hdp_planner.report.plots import figure_format, sweep_figure

        files[plot] = sweep_figure(result, figure_format(plot))
    hows = write_results(files, overwrite=overwrite, what="result", hint=OVERWRITE_HINT)  # both checked first
    out.print(table)
    for path, what in ((csv_path, "sweep"), (plot, "figure")):
        if path:
            out.print(written(path, what, hows[path]), highlight=False)


# --------------------------------------------------------------------------------------------- plot


@one_line_errors
def plot_cmd(
    plan_file: PlanFile,
    out_dir: Annotated[str, typer.Option("--out", help="Directory for the figures (created if missing).")] = "plots",
    fmt: Annotated[str, typer.Option("--format", help="png | svg | pdf.")] = "png",
    overwrite: Overwrite = False,
) -> None:
    """Draw a plan: Table 5's comparison, ε spent against rounds, and σ against q per group."""
    from hdp_planner.report.plots import FORMATS, plot_plan

    if fmt not in FORMATS:
        raise CliError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    p = load_plan(plan_file)
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise CliError(f"--out {out_dir} exists and is not a directory")
    with _progress() as bar:
        task = bar.add_task("drawing", total=3)
        hows = plot_plan(p, out_dir, fmt, progress=lambda name: bar.update(task, advance=0, description=name),
                         overwrite=overwrite, hint=OVERWRITE_HINT)  # fmt: skip
        bar.update(task, completed=3)
    for path, how in hows.items():
        out.print(written(path, "figure", how), highlight=False)


# --------------------------------------------------------------------------------------------- budgets


def render_grouping(g: Grouping, console: Console = out) -> None:
    """Print the groups of a budgets file with their unused budget."""
    table = Table(box=box.SIMPLE_HEAD, title=f"Groups from client budgets ({g.method}, M = {g.count})")
    for col in ("group", "ε_m (min budget)", "max budget", "clients", "unused budget Σ(ε_i − ε_m)"):
        table.add_column(col, justify="right")
    for m in range(g.count):
        table.add_row(
            str(m + 1),
            f"{g.groups.epsilons[m]:g}",
            f"{g.max_budget[m]:g}",
            str(g.groups.sizes[m]),
            f"{g.unused[m]:.6g}",
        )
    console.print(table)
    console.print(
        f"unused budget overall: {g.total_unused:.6g} (ε summed over {g.groups.n} clients); "
        f"closed-form noise term μ5/(R²H) = {g.noise_term:.6g}",
        highlight=False,
    )


def group_budgets(
    budgets: str, group_count: str, grouping: str, request: PlanRequest
) -> tuple[Grouping, PlanConfig, str]:
    """``solve --budgets FILE``: read the clients' budgets and group them under ``request``'s configuration (its
    ``eps`` and ``sizes`` aside), with the budgets' digest. Raises CliError/ValueError on bad input."""
    if grouping not in GROUPINGS:
        raise CliError(f"--grouping must be one of {', '.join(GROUPINGS)}, got {grouping!r}")
    count = parse_group_count(group_count)
    columns = load_budget_columns(budgets)
    file_delta = None if columns.delta is None else float(columns.delta.min())
    if request.n is not None and request.n != len(columns):
        raise CliError(f"--n {request.n} but {budgets} lists {len(columns)} clients")
    config = request.config(len(columns))
    if file_delta is not None and config.delta > file_delta:
        if request.delta is not None:
            raise CliError(f"--delta {config.delta:g} exceeds the smallest client delta in {budgets} ({file_delta:g})")
        config = dataclasses.replace(config, delta=file_delta)  # the default δ = 1/n^1.1, lowered to every client's
    grouped = groups_from_histogram(columns.values, columns.counts, groups=count, method=grouping, config=config)
    return grouped, config, columns.digest()


@one_line_errors
def assign_cmd(
    plan_file: PlanFile,
    budgets: Annotated[str, typer.Argument(help="Client budgets: CSV client_id,epsilon or JSON.")],
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write client_id,epsilon,group,group_epsilon CSV here.")
    ] = None,
    overwrite: Overwrite = False,
) -> None:
    """Assign each client to the plan group whose ε is the largest ≤ its budget; print the unused budget."""
    p = load_plan(plan_file)
    if output:
        parent = Path(output).parent
        if str(parent) and not parent.is_dir():
            raise CliError(f"cannot write {output}: directory {parent} does not exist")
    ids, budget = load_budgets(budgets)
    digest = p.budgets_sha256
    if digest is not None and budgets_digest(ids, budget) != digest:
        raise CliError(f"{budgets} holds other budgets than those {plan_file} was made from (digest mismatch): "
                       "assign the plan's own budgets, or re-plan with hdp-plan solve --budgets")  # fmt: skip
    g = p.groups
    a = assign_to_groups(budget, group_epsilons=g.epsilon, ids=ids)
    if output:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(("client_id", "epsilon", "group", "group_epsilon"))
        for cid, e, grp, ge in zip(ids, budget.tolist(), (a.group + 1).tolist(), a.group_epsilon.tolist()):
            writer.writerow((cid, repr(e), grp, repr(ge)))
        how = write_results({output: buf.getvalue().encode()}, overwrite=overwrite, what="assignment",
                            hint=OVERWRITE_HINT)[output]  # fmt: skip
    table = Table(box=box.SIMPLE_HEAD, title=f"Clients of {budgets} in the groups of {plan_file}")
    for col in ("group", "ε_m", "clients assigned", "planned |G_m|", "unused budget Σ(ε_i − ε_m)"):
        table.add_column(col, justify="right")
    for m in range(len(g.size)):
        table.add_row(str(m + 1), f"{g.epsilon[m]:g}", str(a.counts[m]), str(g.size[m]), f"{a.unused[m]:.6g}")
    out.print(table)
    out.print(f"unused budget overall: {a.total_unused:.6g} over {len(ids)} clients", highlight=False)
    if tuple(a.counts) != tuple(g.size):
        err.print(
            "[yellow]warning:[/] the assigned group sizes differ from the plan's |G_m|; "
            "re-plan with `hdp-plan solve --budgets` for sampling ratios that match",
            highlight=False,
        )
    if output:
        out.print(written(output, "assignment", how), highlight=False)


__all__ = ["BudgetError", "assign_cmd", "group_budgets", "plot_cmd", "render_grouping", "sweep"]
