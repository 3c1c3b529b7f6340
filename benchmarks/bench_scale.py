"""Planning at scale: per-client budgets for n = 10^7 clients in M = 50 groups against n = 6000, M = 3.

Goal: the large plan (grouping + Problem 1 + calibration of all four methods) takes at most 5x the
time of the small one, with memory beyond the input array flat in n. The reference is the same code on the
paper's setting, measured in the same run. Budgets are drawn from a log-uniform spread with 500 distinct values.
Times are medians of ``--repeats`` cold runs (memoized calibrations cleared); peak memory is traced
(tracemalloc) in one more run of each size.

    python benchmarks/bench_scale.py [--n 10000000] [--groups 50] [--repeats 5] [--record]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from hdp_planner.methods.gdpfed import solve_plan
from hdp_planner.planning.budgets import groups_from_budgets
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.rows import clear_caches
from hdp_planner.report.results import Result, Table, write_result


def budgets(n: int, rng: np.random.Generator) -> np.ndarray:
    levels = np.round(np.exp(rng.uniform(np.log(0.3), np.log(8.0), 500)), 4)
    return rng.choice(levels, size=n)


def run_plan(eps: np.ndarray, groups: int) -> None:
    clear_caches()
    config = PlanConfig(n=len(eps))
    solve_plan(groups_from_budgets(eps, groups=groups, method="optimal", config=config).groups, config)


def timed_plan(eps: np.ndarray, groups: int, repeats: int) -> tuple[float, float]:
    """Median seconds (untraced runs) and peak traced MiB (a separate run: tracing slows numpy down)."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        run_plan(eps, groups)
        seconds.append(time.perf_counter() - start)
    tracemalloc.start()
    run_plan(eps, groups)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return float(np.median(seconds)), peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/bench_scale.json")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    small, small_mem = timed_plan(budgets(6000, rng), 3, args.repeats)
    big_eps = budgets(args.n, rng)
    big, big_mem = timed_plan(big_eps, args.groups, args.repeats)
    mid, mid_mem = timed_plan(big_eps[: args.n // 10], args.groups, args.repeats)
    rows = (
        ("6000", "3", f"{small:.2f}", f"{small_mem:.1f}"),
        (str(args.n // 10), str(args.groups), f"{mid:.2f}", f"{mid_mem:.1f}"),
        (str(args.n), str(args.groups), f"{big:.2f}", f"{big_mem:.1f}"),
    )
    for n, m, sec, mem in rows:
        print(f"n = {n:>8}, M = {m:>2}: {sec:>6} s (median of {args.repeats}), peak {mem:>7} MiB")
    notes = (
        f"input array at n = {args.n}: {big_eps.nbytes / 2**20:.1f} MiB",
        f"time ratio large / small: {big / small:.2f} (goal ≤ 5)",
        f"peak memory ratio n={args.n} / n={args.n // 10}: {big_mem / mid_mem:.2f} (flat in n beyond the input)",
    )
    print("\n".join(notes))
    if args.record:
        table = Table(
            caption="planning time and traced peak memory", columns=("n", "M", "median s", "peak MiB"), rows=rows
        )
        result = Result(name="bench_scale", title="Planning for 10^7 per-client budgets", tables=(table,), notes=notes)
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
