"""Accuracy with participation hidden from the server, on digits, paired by seed: GDPFed+ run with public cohorts
and private coins (the exact integer pipeline of secure aggregation, every cohort member training) against GDPFed+
with a trusted server at the same Λ (the cohort row's expected contributors r_m, its budgets scaled down until its Λ
equals the cohorts'), and with a trusted server at the same budgets and r_m (its own, lower, Λ). Seed s gives every
arm the same data partition and initial model; the table prints each seed's three accuracies and the paired
difference.

    python examples/cohort_accuracy.py [--eps 4,8,16] [--clients 600] [--rounds 60] [--seeds 10]
        [--cohort-multiple 10] [--record]

The runs use seeded noise (a simulation: the models are not for release).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from statistics import mean, stdev

from hdp_planner import Groups, PlanConfig, plan, save_plan, solve
from hdp_planner.planning.trust import CohortCaps, SecaggParameters
from hdp_planner.report.results import Result, Table, render_result, write_result
from hdp_planner.trust.registry import requested_trust
from hdp_planner_train.run.options import DataOptions, LedgerOptions, NoiseOptions, OutputOptions
from hdp_planner_train.run.progress import progress_bar
from hdp_planner_train.simulator.trainer import TrainConfig, run

Q, CLIP, SPARSITY, DIM = 0.1, 1.5, (0.7, 0.8, 0.9), 2410
"""compare's digits setting (GDPFed's shapes on a small data set); d is the digits model's."""
ROW = "GDPFed+"
ARMS = ("cohorts", "same Λ", "same ε")
"""Public cohorts with private coins; a trusted server at the cohorts' Λ; a trusted server at the same budgets."""


def cohort_plan(eps: tuple[float, ...], n: int, rounds: int, multiple: float):
    """The cohort plan (secure aggregation and hidden participation), its cohort row, and the rates q_m = r_m/|G_m|
    of the row's expected contributors."""
    trust = requested_trust("secagg", SecaggParameters(model_dim=DIM), CohortCaps(max_multiple=multiple))
    p = solve(Groups.from_budgets(eps, n), PlanConfig(n=n, rounds=rounds, q=Q, clip=CLIP, sparsity=SPARSITY),
              trust=trust)  # fmt: skip
    row = p.hidden.row(ROW)
    return p, row, tuple(g.expected_contributors / s for g, s in zip(row.groups, p.method(ROW).size))


def trusted_at(eps: tuple[float, ...], scale: float, n: int, rounds: int, q: tuple[float, ...]):
    """The trusted-server plan at budgets ``scale``·ε with the sampling rates ``q`` (the cohort row's)."""
    return plan([e * scale for e in eps], n=n, rounds=rounds, q=Q, clip=CLIP, sparsity=SPARSITY, fixed_q=q)


def trusted_at_lambda(eps: tuple[float, ...], target: float, n: int, rounds: int, q: tuple):
    """The trusted-server plan with rates ``q`` whose budgets, all scaled by one factor s ≤ 1, give Λ = ``target``
    (bisection on log s to 0.5%); the plan and s."""
    lo, hi = 0.01, 1.0  # Λ falls as the budgets grow
    while hi / lo > 1.005:
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if trusted_at(eps, mid, n, rounds, q).method(ROW).lambda_exact > target else (lo, mid)
    return trusted_at(eps, hi, n, rounds, q), hi


def train(path: Path, seed: int, n: int, rounds: int) -> dict:
    """One seeded run of GDPFed+ under the plan's own trust model."""
    return run(TrainConfig(method="gdpfed+", rounds=rounds, seed=seed, data=DataOptions(dataset="digits", clients=n),
                           noise=NoiseOptions(kind="seeded"), ledger=LedgerOptions(url="none"),
                           output=OutputOptions(progress=False, eval_every=rounds)), path)  # fmt: skip


def spread(values: list[float]) -> str:
    """Mean ± standard deviation (0 for one value)."""
    return f"{mean(values):.2f} ± {stdev(values) if len(values) > 1 else 0.0:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eps", default="4,8,16", help="ε per group")
    parser.add_argument("--clients", type=int, default=600, help="digits clients n")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1")
    parser.add_argument("--cohort-multiple", type=float, default=10.0)
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/cohort-accuracy.json")
    args = parser.parse_args()
    eps, n, rounds = tuple(float(e) for e in args.eps.split(",")), args.clients, args.rounds
    cohorts, hidden, q = cohort_plan(eps, n, rounds, args.cohort_multiple)
    matched, scale = trusted_at_lambda(eps, hidden.lambda_cohort, n, rounds, q)
    folder = Path(tempfile.mkdtemp(prefix="cohort-accuracy-"))
    paths = tuple(folder / f"{arm}.json" for arm in ("cohorts", "same-lambda", "same-eps"))
    for path, p in zip(paths, (cohorts, matched, trusted_at(eps, 1.0, n, rounds, q))):
        save_plan(p, path)
    accuracy: dict[str, list[float]] = {arm: [] for arm in ARMS}
    lambdas: dict[str, float] = {}
    with progress_bar(True) as bar:  # seed by seed: every prefix of the grid is a paired comparison
        task = bar.add_task("", total=args.seeds * len(ARMS))
        for seed in range(args.seeds):
            for arm, path in zip(ARMS, paths):
                bar.update(task, description=f"seed {seed}: {arm}")
                metrics = train(path, seed, n, rounds)
                accuracy[arm].append(metrics["final_accuracy"])
                lambdas[arm] = metrics["noise_lambda_planned"]
                bar.advance(task)
    gaps = [c - t for c, t in zip(accuracy["cohorts"], accuracy["same Λ"])]
    rows = [(str(s), *(f"{accuracy[a][s]:.2f}" for a in ARMS), f"{gaps[s]:+.2f}") for s in range(args.seeds)]
    rows.append(("mean ± std", *(spread(accuracy[a]) for a in ARMS), spread(gaps)))
    result = Result(
        name="cohort-accuracy",
        title="Accuracy with participation hidden from the server: GDPFed+ on digits",
        tables=(
            Table(
                caption=f"ε = {', '.join(f'{e:g}' for e in eps)}, n = {n}, T = {rounds}, q = {Q}, C = {CLIP}, k/d = "
                f"{', '.join(map(str, SPARSITY))}, d = {DIM:,}; cohorts ≤ {args.cohort_multiple:g}x the expected "
                f"contributors: m = {[g.cohort for g in hidden.groups]}, "
                f"r = {[round(g.expected_contributors, 2) for g in hidden.groups]}, "
                f"p = {[round(g.coin, 3) for g in hidden.groups]}, "
                f"K = {[g.memberships for g in hidden.groups]}; Λ = {lambdas['cohorts']:.4g} (cohorts), "
                f"{lambdas['same Λ']:.4g} "
                f"(trusted server, budgets × {scale:.3f}), {lambdas['same ε']:.4g} (trusted server, same budgets); "
                f"accuracy (%) per seed; paired diff.: cohorts minus the trusted server at the same Λ",
                columns=("seed", "cohorts", "server, same Λ", "server, same ε", "paired diff."),
                rows=tuple(rows),
            ),
        ),
        notes=(
            "paired by seed: seed s gives the three runs the same data partition and initial model",
            "every group's ε against the server is its budget with cohorts; with a trusted server the budgets hold "
            "against third parties only",
            "seeded noise (a simulation); the cohort runs draw their coins from the seed too",
        ),
    )
    print(render_result(result))
    if args.record:
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
