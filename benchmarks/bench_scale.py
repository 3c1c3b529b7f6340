"""Planning at scale: per-client budgets for n = 10^7 clients in M = 50 groups against n = 6000, M = 3.

Goal: the large plan (grouping + Problem 1 + calibration of all four methods) takes at most 5x the
time of the small one, with memory beyond the input array flat in n. The reference is the same code on the
paper's setting, measured in the same run. Budgets are drawn from a log-uniform spread with 500 distinct values.
Times are medians of ``--repeats`` cold runs (memoized calibrations cleared); peak memory is traced
(tracemalloc) in one more run of each size.

    python benchmarks/bench_scale.py [--n 10000000] [--groups 50] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from hdp_planner.methods.gdpfed import solve_plan
from hdp_planner.planning.budgets import groups_from_budgets
from hdp_planner.planning.plan import PlanConfig, clear_caches


def budgets(n: int, rng: np.random.Generator) -> np.ndarray:
    levels = np.round(np.exp(rng.uniform(np.log(0.3), np.log(8.0), 500)), 4)
    return rng.choice(levels, size=n)


def run_plan(eps: np.ndarray, groups: int) -> None:
    clear_caches()
    config = PlanConfig(n=len(eps))
    solve_plan(groups_from_budgets(eps, groups, "optimal", config).groups, config)


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
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    small, small_mem = timed_plan(budgets(6000, rng), 3, args.repeats)
    big_eps = budgets(args.n, rng)
    big, big_mem = timed_plan(big_eps, args.groups, args.repeats)
    mid, mid_mem = timed_plan(big_eps[: args.n // 10], args.groups, args.repeats)
    print(f"n = 6000, M = 3:                    {small:6.2f} s, peak {small_mem:7.1f} MiB")
    print(f"n = {args.n // 10:>8}, M = {args.groups}:              {mid:6.2f} s, peak {mid_mem:7.1f} MiB")
    print(f"n = {args.n:>8}, M = {args.groups}:              {big:6.2f} s, peak {big_mem:7.1f} MiB")
    print(f"input array at n = {args.n}: {big_eps.nbytes / 2**20:.1f} MiB")
    print(f"time ratio large / small: {big / small:.2f} (goal ≤ 5)")
    print(f"peak memory ratio n={args.n} / n={args.n // 10}: {big_mem / mid_mem:.2f} (flat in n beyond the input)")


if __name__ == "__main__":
    main()
