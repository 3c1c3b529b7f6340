"""``hdp-plan select`` (privacy-aware client selection, Xu, Zhang and Huang) and ``hdp-plan fedsam-noise``
(DP²-FedSAM's client-level σ, exact against closed form).

Registered on the app by :mod:`hdp_planner_cli.app`. cvxpy is imported
when Problem 1 is solved and matplotlib when a figure is drawn, never at start-up.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich import box
from rich.table import Table

from hdp_planner.io.files import json_text
from hdp_planner.io.inputs import parse_floats
from hdp_planner.io.overwrite import write_results, written
from hdp_planner.methods import fedsam
from hdp_planner.methods.selection import (
    ACCOUNTANTS,
    COUNT_RULE,
    PRIVACY_MODEL,
    SELECTION_FAILURE,
    ClientNoise,
    SelectionProblem,
    SelectionSolution,
    client_noise,
    config_dict,
    read_clients,
    solve_selection,
)
from hdp_planner_cli.console import err, one_line_errors, out
from hdp_planner_cli.options import OVERWRITE_HINT, CliError, Overwrite

SCHEMA = "hdp-plan-select/1"
OUTPUT_FORMATS = (".csv", ".json")
SHOWN_ROWS = 10
"""With more than 4·SHOWN_ROWS clients the table shows the SHOWN_ROWS highest and lowest p."""
KKT_WARNING = 1e-4


def _g(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}g}"


def _check_output(path: str) -> None:
    if Path(path).suffix.lower() not in OUTPUT_FORMATS:
        raise CliError(f"--output {path}: the file name must end in .csv or .json")
    parent = Path(path).parent
    if str(parent) and not parent.is_dir():
        raise CliError(f"cannot write {path}: directory {parent} does not exist")


def client_rows(ids: list[str], sol: SelectionSolution, noise: ClientNoise) -> list[dict[str, Any]]:
    """One record per client: inputs, p^u, p, T_k and the noise the accountant choice computed."""
    pr = sol.problem
    columns: dict[str, Any] = {
        "client_id": ids,
        "epsilon": pr.epsilon,
        "num_samples": pr.num_samples,
        "sample_rate": pr.rates.tolist(),
        "p_unbiased": pr.unbiased.tolist(),
        "p": sol.p,
        "selections": noise.selections,
    }
    if noise.report.paper:
        columns["noise_multiplier_paper"] = noise.multiplier_paper
        columns["sigma_paper"] = noise.sigma("paper").tolist()
    if noise.report.exact:
        columns["noise_multiplier_exact"] = noise.multiplier_exact
        columns["sigma_exact"] = noise.sigma("exact").tolist()
    if noise.report.paper and noise.report.exact:
        columns["epsilon_spent_paper"] = noise.epsilon_of_paper
    return [dict(zip(columns, values)) for values in zip(*columns.values())]


def selection_document(ids: list[str], sol: SelectionSolution, noise: ClientNoise, accountant: str) -> dict:
    """The JSON output of ``select``."""
    pr = sol.problem
    return {
        "schema": SCHEMA,
        "method": "privacy-aware client selection (Xu, Zhang and Huang, Problem 1)",
        "privacy_model": PRIVACY_MODEL,
        "public": "each client's data size |M_k| (as in Xu, Zhang and Huang) and its budget ε_k's group",
        "selections_rule": COUNT_RULE.format(beta=SELECTION_FAILURE),
        "selections_failure_probability": SELECTION_FAILURE,
        "config": {**config_dict(pr), "accountant": accountant},
        "objective": sol.objective,
        "unbiased_objective": sol.unbiased_objective,
        "selection_gap": sol.selection_gap,
        "kkt_residual": sol.kkt_residual,
        "unbiased_threshold_eta": pr.unbiased_threshold if math.isfinite(pr.unbiased_threshold) else None,
        "dp_term": noise.dp_term,
        "unbiased_dp_term": pr.unbiased_dp_term,
        "clients": client_rows(ids, sol, noise),
    }


def _csv_text(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(rows[0].keys())
    for row in rows:
        writer.writerow(repr(v) if isinstance(v, float) else v for v in row.values())
    return buf.getvalue()


def selection_figure(problem: SelectionProblem, p: tuple[float, ...], fmt: str) -> bytes:
    """Fig. 3 (selection paper), as a ``fmt`` file's bytes: each client at (dataset size, ε), coloured by its
    selection probability; Problem 1's p beside the unbiased p^u on one colour scale (red: rarely, blue: often
    selected)."""
    from hdp_planner.report.plots import figure_bytes, pyplot

    plt = pyplot()
    sizes, eps = np.asarray(problem.num_samples), np.asarray(problem.epsilon)
    panels = (
        (np.asarray(p), f"privacy-aware (Problem 1, η = {problem.eta:g})"),
        (problem.unbiased, r"unbiased ($p_k \propto |\mathcal{M}_k|$)"),
    )
    lo, hi = min(v.min() for v, _ in panels), max(v.max() for v, _ in panels)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True, constrained_layout=True)
    try:
        for ax, (values, title) in zip(axes, panels):
            points = ax.scatter(
                sizes, eps, c=values, cmap="viridis", vmin=lo, vmax=hi, s=22, edgecolors="#333333", linewidths=0.3
            )
            ax.set_xlabel(r"dataset size $|\mathcal{M}_k|$")
            ax.set_title(title)
        axes[0].set_ylabel(r"privacy budget $\varepsilon_k$")
        if eps.max() / eps.min() > 20:
            axes[0].set_yscale("log")
        fig.colorbar(points, ax=list(axes), label=r"selection probability $p_k$")
        return figure_bytes(fig, fmt)
    finally:
        plt.close(fig)


def render_selection(ids: list[str], sol: SelectionSolution, noise: ClientNoise, console: Any = out) -> None:
    """The per-client table (all clients, or the highest and lowest p) and the summary lines."""
    pr = sol.problem
    p, pu = np.asarray(sol.p), pr.unbiased
    paper, exact = noise.report.paper, noise.report.exact
    table = Table(
        box=box.SIMPLE_HEAD,
        title=f"Privacy-aware selection (Problem 1): {pr.count} clients, η={pr.eta:g}, K={pr.clients_per_round}, "
        f"T^g={pr.rounds}, T^l={pr.local_steps}, δ={pr.delta:g}, C={pr.clip:g}",
    )
    columns = ["client", "ε_k", "|M_k|", "r_k", "p^u_k", "p_k", "p/p^u", "T_k"]
    columns += ["σ_k paper"] if paper else []
    columns += ["σ_k exact"] if exact else []
    columns += ["paper/exact", "ε of paper σ"] if paper and exact else []
    for col in columns:
        table.add_column(col, justify="right")
    order = np.argsort(-p, kind="stable")
    shown = list(order) if pr.count <= 4 * SHOWN_ROWS else [*order[:SHOWN_ROWS], -1, *order[-SHOWN_ROWS:]]
    s_paper = noise.sigma("paper") if paper else None
    s_exact = noise.sigma("exact") if exact else None
    spent = noise.epsilon_of_paper
    for k in shown:
        if k == -1:
            table.add_row("…", *[""] * (len(columns) - 1))
            continue
        row = [ids[k], _g(pr.epsilon[k]), str(pr.num_samples[k]), _g(pr.rates[k]), _g(pu[k]), _g(p[k])]
        row += [f"{p[k] / pu[k]:.3f}", str(noise.selections[k])]
        row += [_g(s_paper[k])] if s_paper is not None else []
        row += [_g(s_exact[k])] if s_exact is not None else []
        if s_paper is not None and s_exact is not None and spent is not None:
            row += [f"{s_paper[k] / s_exact[k]:.2f}x", _g(spent[k])]
        table.add_row(*row)
    console.print(table)
    ratio = p / pu
    console.print(
        f"p from {p.min():.4g} to {p.max():.4g} (p/p^u from {ratio.min():.3g} to {ratio.max():.3g}); "
        f"‖p − p^u‖₁ = {sol.selection_gap:.4g}; objective {sol.objective:.6g} (unbiased p^u: "
        f"{sol.unbiased_objective:.6g}); KKT residual {sol.kkt_residual:.1e}; p = p^u is optimal for "
        f"η ≤ η* = {pr.unbiased_threshold:.4g}",
        highlight=False,
    )
    console.print(COUNT_RULE.format(beta=SELECTION_FAILURE), highlight=False)
    console.print(
        "|M_k| (each client's data size) is treated as public, as in Xu, Zhang and Huang: p^u, r_k and σ_k "
        "depend on it",
        highlight=False,
    )
    unbiased_term = pr.unbiased_dp_term
    console.print(
        f"DP term Σp_k²V_k: {noise.dp_term:.4g} (unbiased: {unbiased_term:.4g}, "
        f"{unbiased_term / noise.dp_term:.3g}x this)",
        highlight=False,
    )
    if s_paper is not None and s_exact is not None and spent is not None:
        r = s_paper / s_exact
        share = np.asarray(spent) / np.asarray(pr.epsilon)
        console.print(
            f"σ paper / σ exact: median {np.median(r):.3g}x (from {r.min():.3g}x to {r.max():.3g}x); the paper's σ "
            f"spends {100 * share.min():.3g}-{100 * share.max():.3g}% of each budget by the exact accountant",
            highlight=False,
        )
    console.print(f"privacy model: {PRIVACY_MODEL}", highlight=False)
    if sol.kkt_residual > KKT_WARNING:
        err.print(
            f"[yellow]warning:[/] KKT residual {sol.kkt_residual:.1e}: the solver is inaccurate at this η",
            highlight=False,
        )


@one_line_errors
def select_cmd(
    clients: Annotated[str, typer.Argument(help="CSV with columns client_id, epsilon, num_samples.")],
    eta: Annotated[float, typer.Option("--eta", help="Problem 1's weight η of the DP term Σ p_k² V_k.")] = 1e5,
    delta: Annotated[float, typer.Option("--delta", help="δ of every client's (ε_k, δ)-DP.")] = 1e-5,
    sample_rate: Annotated[
        float | None,
        typer.Option(
            "--sample-rate", help="Example sampling rate r of every local step (Fig. 3) [0.1].", show_default=False
        ),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option("--batch-size", help="Batch size B instead: r_k = min(1, B/|M_k|) (Tables III-IV: 128)."),
    ] = None,
    clients_per_round: Annotated[
        int, typer.Option("--clients-per-round", "-K", help="N^select, drawn with replacement.")
    ] = 10,
    rounds: Annotated[int, typer.Option("--rounds", "-T", help="Global rounds T^g.")] = 100,
    local_steps: Annotated[int, typer.Option("--local-steps", help="Local DP-SGD steps T^l per selection.")] = 5,
    clip: Annotated[float, typer.Option("--clip", "-C", help="Per-example clipping bound C.")] = 1.0,
    accountant: Annotated[
        str, typer.Option("--accountant", help="σ_k by paper (eqs. 6-7) | exact (RDP) | both.")
    ] = "both",
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write per-client p and σ to this .csv or .json file.")
    ] = None,
    plot: Annotated[
        str | None, typer.Option("--plot", help="Scatter like Fig. 3 of the paper (.png/.svg/.pdf).")
    ] = None,
    overwrite: Overwrite = False,
) -> None:
    """Privacy-aware client selection: Problem 1's probabilities p (cvxpy) and each client's σ_k,
    calibrated for a high-probability bound T_k on its draws with replacement. Each client's data size |M_k| is
    treated as public, as in the selection paper."""
    if accountant not in ACCOUNTANTS:
        raise CliError(f"--accountant must be one of {', '.join(ACCOUNTANTS)}, got {accountant!r}")
    if sample_rate is not None and batch_size is not None:
        raise CliError("give --sample-rate or --batch-size, not both")
    if output:
        _check_output(output)
    if plot:
        from hdp_planner.report.plots import check_figure_path, figure_format

        check_figure_path(plot)
    ids, eps, sizes = read_clients(clients)
    if not delta < 1 / min(sizes):  # example-level DP: δ ≥ 1/|M_k| admits publishing one of client k's examples
        raise CliError(f"--delta {delta:g} is not below 1/|M_k| = {1 / min(sizes):.3g} of the client with the fewest "
                       f"examples ({min(sizes)})")  # fmt: skip
    problem = SelectionProblem(
        epsilon=eps,
        num_samples=sizes,
        delta=delta,
        batch_size=batch_size,
        clients_per_round=clients_per_round,
        rounds=rounds,
        local_steps=local_steps,
        clip=clip,
        eta=eta,
        **({} if sample_rate is None else {"sample_rate": sample_rate}),
    )
    with err.status("solving Problem 1 and calibrating σ_k…"):
        sol = solve_selection(problem)
        noise = client_noise(problem, sol.p, accountant)  # type: ignore[arg-type]
    files: dict[str, bytes] = {}
    if output:
        as_json = Path(output).suffix.lower() == ".json"
        text = json_text(selection_document(ids, sol, noise, accountant)) if as_json else None
        files[output] = (text or _csv_text(client_rows(ids, sol, noise))).encode()
    if plot:
        files[plot] = selection_figure(problem, sol.p, figure_format(plot))
    hows = write_results(files, overwrite=overwrite, what="result", hint=OVERWRITE_HINT)  # every file checked first
    render_selection(ids, sol, noise)
    for path, what in ((output, "probabilities"), (plot, "figure")):
        if path:
            out.print(written(path, what, hows[path]), highlight=False)


@one_line_errors
def fedsam_noise_cmd(
    eps: Annotated[str | None, typer.Option("--eps", help="Budgets ε, comma-separated [the paper's settings].")] = None,
    clients: Annotated[int | None, typer.Option("--clients", help="Clients N, for δ = 1/N (with --eps).")] = None,
    delta: Annotated[float | None, typer.Option("--delta", help="δ instead of 1/N (with --eps).")] = None,
    sample_rate: Annotated[float, typer.Option("--sample-rate", help="Client sampling rate r.")] = fedsam.PAPER_RATE,
    rounds: Annotated[int, typer.Option("--rounds", "-T", help="Rounds T.")] = fedsam.PAPER_ROUNDS,
) -> None:
    """DP²-FedSAM: client-level σ by the exact RDP accountant against Theorem 2's closed form."""
    if eps is None:
        if clients is not None or delta is not None:
            raise CliError("--clients and --delta go with --eps; without --eps the paper's settings are shown")
        rows = [(s.name, s.clients, s.epsilon, s.delta) for s in fedsam.PAPER_SETTINGS]
    else:
        if (clients is None) == (delta is None):
            raise CliError("with --eps give exactly one of --clients N (δ = 1/N) or --delta")
        if clients is not None and clients < 1:
            raise CliError(f"--clients must be a positive integer, got {clients}")
        d = delta if delta is not None else 1.0 / clients  # type: ignore[operator]
        rows = [("", clients, e, d) for e in parse_floats(eps, "--eps") or ()]
    table = Table(
        box=box.SIMPLE_HEAD,
        title=f"DP²-FedSAM noise multiplier σ (client-level DP, r={sample_rate:g}, T={rounds}): exact vs Theorem 2",
    )
    for col in ("setting", "N", "ε", "δ", "σ exact", "σ Thm 2", "σ ratio", "σ² ratio", "ε of Thm 2 σ"):
        table.add_column(col, justify="right")
    table.add_column("Thm 2's conditions", justify="left", no_wrap=True)
    for name, n, e, d in rows:
        r = fedsam.fedsam_noise(e, delta=d, sample_rate=sample_rate, rounds=rounds)
        unmet = r.unmet_conditions
        table.add_row(
            name,
            "" if n is None else str(n),
            _g(e),
            _g(d),
            _g(r.exact_sigma),
            _g(r.closed_form_sigma),
            f"{r.ratio:.2f}x",
            f"{r.ratio**2:.2f}x",
            _g(r.closed_form_epsilon),
            "hold" if not unmet else "fail: " + "; ".join(unmet),
        )
    out.print(table)
    out.print(f"{fedsam.ORDER_CONDITION}: α = 1 + 2 log(1/δ)/ε ≤ 1 + (2/3)σ² log(1/(rα(1+σ²)))", highlight=False)
    out.print(f"privacy model: {fedsam.PRIVACY_MODEL}", highlight=False)


__all__ = ["client_rows", "fedsam_noise_cmd", "render_selection", "select_cmd", "selection_figure"]
