"""Accuracy with participation hidden from the server, on digits over 3 seeds: GDPFed+ run with public cohorts and
private coins (the exact integer pipeline of secure aggregation, every cohort member training) against GDPFed+ with
a trusted server at the same Λ (the cohort row's expected contributors r_m, its budgets scaled down until its Λ
equals the cohorts'), and with a trusted server at the same budgets and r_m (its own, lower, Λ). Seed s gives every
arm the same data partition and initial model.

    python examples/cohort_accuracy.py [--eps 0.5,1.5,3] [--seeds 3] [--rounds 20] [--cohort-multiple 10] [--record]

The runs use seeded noise (a simulation: the models are not for release).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from statistics import mean, stdev

from hdp_planner import plan
from hdp_planner.distributed.trust import TrustModel
from hdp_planner.planfile.cohorts import cohort_rows, hidden_to_dict
from hdp_planner.planfile.document import plan_to_dict
from hdp_planner.planfile.trust import secagg_rows, trust_to_dict
from hdp_planner.report.results import Result, Table, render_result, write_result
from hdp_planner_train.run.options import DataOptions, LedgerOptions, NoiseOptions, OutputOptions, TrustOptions
from hdp_planner_train.simulator.trainer import TrainConfig, run

N, Q, CLIP, SPARSITY, DIM = 120, 0.1, 1.5, (0.7, 0.8, 0.9), 2410
"""compare's digits setting (GDPFed's shapes on a small data set); d is the digits model's."""
ROW = "GDPFed+"


def cohort_document(eps: tuple[float, ...], rounds: int, multiple: float) -> tuple[dict, float, tuple[float, ...]]:
    """The cohort plan's file (trust object and hidden participation), its Λ with cohorts, and the rates
    q_m = r_m/|G_m| of the cohort row's expected contributors."""
    p = plan(list(eps), n=N, rounds=rounds, q=Q, clip=CLIP, sparsity=SPARSITY)
    trust = TrustModel(kind="secagg", model_dim=DIM)
    hidden = cohort_rows(p, trust, max_cohort=None, max_multiple=multiple)
    doc = plan_to_dict(p) | {"trust": trust_to_dict(p, trust, secagg_rows(p, trust))}
    doc["hidden_participation"] = hidden_to_dict(p, trust, hidden, max_cohort=None, max_multiple=multiple)
    row = doc["hidden_participation"]["rows"][ROW]
    return doc, row["lambda_cohort"], tuple(r / s for r, s in zip(row["expected_contributors"], p.method(ROW).size))


def trusted_at(eps: tuple[float, ...], scale: float, rounds: int, q: tuple[float, ...]):
    """The trusted-server plan at budgets ``scale``·ε with the sampling rates ``q`` (the cohort row's)."""
    return plan([e * scale for e in eps], n=N, rounds=rounds, q=Q, clip=CLIP, sparsity=SPARSITY, fixed_q=q)


def trusted_at_lambda(eps: tuple[float, ...], target: float, rounds: int, q: tuple[float, ...]) -> tuple[dict, float]:
    """The trusted-server plan with rates ``q`` whose budgets, all scaled by one factor s ≤ 1, give Λ = ``target``
    (bisection on log s to 0.5%); its file and s."""
    lo, hi = 0.01, 1.0  # Λ falls as the budgets grow
    while hi / lo > 1.005:
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if trusted_at(eps, mid, rounds, q).method(ROW).lambda_exact > target else (lo, mid)
    return plan_to_dict(trusted_at(eps, hi, rounds, q)), hi


def train(path: Path, seed: int, rounds: int, trust: str) -> dict:
    return run(TrainConfig(plan=str(path), method="gdpfed+", rounds=rounds, seed=seed,
                           data=DataOptions(dataset="digits"), noise=NoiseOptions(kind="seeded"),
                           trust=TrustOptions(kind=trust), ledger=LedgerOptions(url="none"),
                           output=OutputOptions(progress=False, eval_every=rounds)))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eps", default="0.5,1.5,3", help="ε per group")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cohort-multiple", type=float, default=10.0)
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/cohort-accuracy.json")
    args = parser.parse_args()
    eps = tuple(float(e) for e in args.eps.split(","))
    cohort_doc, lam, q = cohort_document(eps, args.rounds, args.cohort_multiple)
    matched_doc, scale = trusted_at_lambda(eps, lam, args.rounds, q)
    same_eps_doc = plan_to_dict(trusted_at(eps, 1.0, args.rounds, q))
    folder = Path(tempfile.mkdtemp(prefix="cohort-accuracy-"))
    arms = (
        ("public cohorts, private coins (secure aggregation)", cohort_doc, "secagg"),
        (f"trusted server, same Λ (budgets × {scale:.3f})", matched_doc, "server"),
        ("trusted server, same budgets", same_eps_doc, "server"),
    )
    rows, accuracy = [], {}
    for i, (name, doc, trust) in enumerate(arms):
        path = folder / f"plan{i}.json"
        path.write_text(json.dumps(doc))
        runs = []
        for seed in range(args.seeds):  # interleaving is not needed: accuracy does not depend on the load
            t0 = time.perf_counter()
            metrics = train(path, seed, args.rounds, trust)
            runs.append((metrics["final_accuracy"], metrics["noise_lambda_planned"], time.perf_counter() - t0))
            print(f"{name}, seed {seed}: {runs[-1][0]:.2f}% in {runs[-1][2]:.0f} s", flush=True)
        acc = [r[0] for r in runs]
        accuracy[name] = acc
        rows.append((name, f"{runs[0][1]:.4g}", " / ".join(f"{a:.2f}" for a in acc),
                     f"{mean(acc):.2f} ± {stdev(acc) if len(acc) > 1 else 0.0:.2f}",
                     f"{mean(r[2] for r in runs):.0f}"))  # fmt: skip
    gaps = [c - t for c, t in zip(accuracy[arms[0][0]], accuracy[arms[1][0]])]  # paired by seed
    hidden = cohort_doc["hidden_participation"]["rows"][ROW]
    result = Result(
        name="cohort-accuracy",
        title="Accuracy with participation hidden from the server: GDPFed+ on digits",
        tables=(
            Table(
                f"ε = {', '.join(f'{e:g}' for e in eps)}, n = {N}, T = {args.rounds}, q = {Q}, C = {CLIP}, k/d = "
                f"{', '.join(map(str, SPARSITY))}, d = {DIM:,}; cohorts ≤ {args.cohort_multiple:g}x the expected "
                f"contributors: m = {hidden['cohort']}, r = {[round(r, 2) for r in hidden['expected_contributors']]}, "
                f"p = {[round(p, 3) for p in hidden['coin']]}, "
                f"K = {hidden['memberships']}; seeds 0..{args.seeds - 1}",
                ("run", "Λ", "accuracy per seed (%)", "mean ± std (%)", "s per run"),
                tuple(rows),
            ),
        ),
        notes=(
            f"cohorts minus the trusted server at the same Λ, paired by seed: {' / '.join(f'{g:+.2f}' for g in gaps)}"
            f" points, mean {mean(gaps):+.2f}",
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
