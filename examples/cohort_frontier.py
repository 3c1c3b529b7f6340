"""What hiding participation from the server costs on GDPFed's FMNIST Table 2 plan: for cohorts capped at 2, 5,
10, 20 and 50 times each group's expected contributors (and uncapped), the GDPFed+ row's Λ against the trusted
server's, the masked vectors a round sends, and each group's cohort m, coin p, memberships K and z, every group
at ε against the server equal to its budget.

    python examples/cohort_frontier.py [--bits 20] [--survivors 0.9] [--colluders 0] [--record]
"""

from __future__ import annotations

import argparse

from hdp_planner import plan
from hdp_planner.distributed.cohorts import cohort_frontier
from hdp_planner.distributed.trust import TrustModel, secagg_row
from hdp_planner.report.results import Result, Table, render_result, write_result

EPSILONS, N, ROUNDS, CLIP, SPARSITY, DIM = (0.5, 1.5, 3.0), 6000, 50, 1.5, (0.7, 0.8, 0.9), 26010
COLUMNS = ("participation", "vectors a round", "Λ / trusted server's Λ", "ε against the server", "per group")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, default=20)
    parser.add_argument("--survivors", type=float, default=0.9)
    parser.add_argument("--colluders", type=int, default=0)
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/cohort-frontier.json")
    args = parser.parse_args()
    p = plan(list(EPSILONS), n=N, rounds=ROUNDS, clip=CLIP, sparsity=SPARSITY)
    row = p.method("GDPFed+")
    trust = TrustModel(kind="secagg", bits=args.bits, survivors=args.survivors, colluders=args.colluders,
                       model_dim=DIM)  # fmt: skip
    visible = secagg_row(row, p, TrustModel(kind="secagg", bits=args.bits, survivors=args.survivors,
                                            colluders=args.colluders, model_dim=DIM, participations=4))  # fmt: skip
    rows = [(
        "sampled by the server (K = 4)", f"{sum(q * s for q, s in zip(row.q, row.size)):.0f}",
        f"{visible.price:.2f}x", " / ".join(f"{g.epsilon_server:.2f}" for g in visible.groups), "",
    )]  # fmt: skip
    for multiple, cohort in cohort_frontier(row, p, trust):
        rows.append((
            "uncapped" if multiple is None else f"≤ {multiple:g}x contributors", str(cohort.vectors_per_round),
            f"{cohort.price:.2f}x", " / ".join(f"{g.epsilon_server:.2f}" for g in cohort.groups),
            "; ".join(f"m {g.cohort}, p {g.coin:.3f}, K {g.memberships}, z {g.noise_multiplier:.3g}"
                      for g in cohort.groups),
        ))  # fmt: skip
    result = Result(
        name="cohort-frontier",
        title="Hiding participation from the server: cohort size against noise, FMNIST Table 2 plan (GDPFed+)",
        tables=(
            Table(
                f"ε = {', '.join(map(str, EPSILONS))}, n = {N:,}, T = {ROUNDS}, C = {CLIP}, d = {DIM:,}, "
                f"b = {args.bits}, F = {args.survivors:g}, k = {args.colluders}, δ = {p.config.delta:.3g}",
                COLUMNS,
                tuple(rows),
            ),
        ),
        notes=(
            "first row: the server draws the Poisson sample and sees who sends (each client capped at K = 4 "
            "participations), so its ε is far above the budgets",
            "other rows: public cohorts and private coins, every group's ε against the server at its budget; each "
            "group keeps the trusted plan's expected contributors r_m = q_m·|G_m|",
        ),
    )
    print(render_result(result))
    if args.record:
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
