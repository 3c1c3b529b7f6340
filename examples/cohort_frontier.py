"""What hiding participation from the server costs on GDPFed's FMNIST Table 2 plan: for cohorts capped at 2, 5,
10, 20 and 50 times each group's expected contributors (and uncapped), the GDPFed+ row's Λ against the trusted
server's (Problem 1's r_m) and against the trusted server given the same freedom (its r_m chosen for the least Λ
alone by the same search, :func:`~hdp_planner.trust.cohort_rows.trusted_least_lambda`), the masked vectors a round
sends, and each group's cohort m, expected contributors r, coin p, memberships K and z, every group at ε against the
server equal to its budget; first at the default rule (every group's weight share at least half its population share,
--min-share 0.5), then as the paper's Problem 1 solves it (--min-share 0, which lets the strictest groups starve).

    python examples/cohort_frontier.py [--bits 20] [--survivors 0.9] [--colluders 0] [--record]
"""

from __future__ import annotations

import argparse
import dataclasses

from hdp_planner import plan
from hdp_planner.planning.config import DEFAULT_MIN_SHARE
from hdp_planner.planning.method_noise import MethodNoise
from hdp_planner.planning.plan import Plan
from hdp_planner.planning.trust import SecaggParameters
from hdp_planner.report.results import Result, Table, render_result, write_result
from hdp_planner.trust.cohort_rows import cohort_frontier, trusted_least_lambda
from hdp_planner.trust.secagg_rows import secagg_row

EPSILONS, N, ROUNDS, CLIP, SPARSITY, DIM = (0.5, 1.5, 3.0), 6000, 50, 1.5, (0.7, 0.8, 0.9), 26010
COLUMNS = ("participation", "vectors a round", "Λ / trusted server's Λ", "Λ / trusted Λ, r for Λ alone",
           "ε against the server", "per group")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, default=20)
    parser.add_argument("--survivors", type=float, default=0.9)
    parser.add_argument("--colluders", type=int, default=0)
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/cohort-frontier.json")
    args = parser.parse_args()
    trust = SecaggParameters(bits=args.bits, survivors=args.survivors, colluders=args.colluders, model_dim=DIM)
    tables = []
    for min_share in (DEFAULT_MIN_SHARE, 0.0):
        p = plan(list(EPSILONS), n=N, rounds=ROUNDS, clip=CLIP, sparsity=SPARSITY, min_share=min_share)
        rule = " (the default)" if min_share == DEFAULT_MIN_SHARE else " (the paper's Problem 1)"
        tables.append(Table(
            caption=f"min share {min_share:g}{rule}: ε = {', '.join(map(str, EPSILONS))}, n = {N:,}, T = {ROUNDS}, "
            f"C = {CLIP}, d = {DIM:,}, b = {args.bits}, F = {args.survivors:g}, k = {args.colluders}, "
            f"δ = {p.config.delta:.3g}",
            columns=COLUMNS, rows=frontier_rows(p, trust),
        ))  # fmt: skip
    result = Result(
        name="cohort-frontier",
        title="Hiding participation from the server: cohort size against noise, FMNIST Table 2 plan (GDPFed+)",
        tables=tuple(tables),
        notes=(
            "first two rows of each table: the trusted server, at Problem 1's expected contributors r_m and at the r_m "
            "chosen for the least Λ alone by the cohorts' search (same moves, same constraints, σ_m calibrated by "
            "the plan's accountant at q_m = r_m/|G_m|); the per-group column gives r_m and the weight share",
            "third row: the server draws the Poisson sample and sees who sends (each client capped at K = 4 "
            "participations), so its ε is far above the budgets",
            "other rows: public cohorts and private coins, every group's ε against the server at its budget; the "
            "expected contributors r_m are chosen again for the least Λ, with the trusted plan's q·n in all and "
            "every weight share at least the min share times the population share",
        ),
    )
    print(render_result(result))
    if args.record:
        print(f"written to {write_result(result)}")


def frontier_rows(p: Plan, trust: SecaggParameters) -> tuple[tuple[str, ...], ...]:
    """The trusted server at Problem 1's r_m and at the r_m of least Λ, the server-sampled row, then the GDPFed+ row
    with cohorts at each cap of the frontier."""
    row = p.method("GDPFed+")
    alone = trusted_least_lambda(row, p)
    visible = secagg_row(row, p.config, dataclasses.replace(trust, participations=4))

    def ratios(lam: float) -> tuple[str, str]:
        return f"{lam / row.lambda_exact:#.3g}x", f"{lam / alone.lambda_exact:#.3g}x"

    rows = [
        (name, f"{sum(m.expected_clients):.0f}", *ratios(m.lambda_exact), "", trusted_groups(m, p))
        for name, m in (("trusted server, Problem 1's r", row), ("trusted server, r for Λ alone", alone))
    ]
    rows.append((
        "sampled by the server (K = 4)", f"{sum(row.expected_clients):.0f}", *ratios(visible.lambda_secagg),
        " / ".join(f"{g.epsilon_server:.2f}" for g in visible.groups), "",
    ))  # fmt: skip
    for multiple, cohort in cohort_frontier(row, p, trust):
        rows.append((
            "uncapped" if multiple is None else f"≤ {multiple:g}x contributors", str(cohort.vectors_per_round),
            *ratios(cohort.lambda_cohort), " / ".join(f"{g.epsilon_server:.2f}" for g in cohort.groups),
            "; ".join(f"m {g.cohort}, r {g.expected_contributors:.3g}, p {g.coin:.3f}, K {g.memberships}, "
                      f"z {g.noise_multiplier:.3g}" for g in cohort.groups),
        ))  # fmt: skip
    return tuple(rows)


def trusted_groups(m: MethodNoise, p: Plan) -> str:
    """Each group's expected clients r and weight share under a trusted server's row."""
    return "; ".join(
        f"r {r:.3g}, share {100 * a:.3g}%" for r, a in zip(m.expected_clients, m.weight_share(p.config.clip))
    )


if __name__ == "__main__":
    main()
