"""Noise shares per second: our exact discrete Gaussian sampler against opendp's, same σ, same dimension, interleaved.

A share is one client's integer noise vector of dimension d (d = 26,010: the small CNN; d = 1,663,370: the paper's
CNN). Ours: :func:`hdp_planner.distributed.sampler.discrete_gaussian` on ``os.urandom``. opendp: ``make_gaussian``
on ``vector_domain(atom_domain(T="i64"))``, its exact discrete Gaussian (Canonne-Kamath-Steinke in big rationals,
CTR-DRBG randomness). Both sample N_Z(0, σ²) with σ = ``--sigma`` integer units. Goal: ≥ 3x opendp's throughput.

    python benchmarks/bench_sampler.py [--repeats 3] [--sigma 1000] [--record]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import opendp.prelude as dp

from hdp_planner.distributed.randomness import SecureBits
from hdp_planner.distributed.sampler import discrete_gaussian
from hdp_planner.report.results import Result, Table, write_result

DIMENSIONS = (26_010, 1_663_370)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sigma", type=int, default=1000, help="σ of the discrete Gaussian, integer units [1000]")
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/bench_sampler.json")
    args = parser.parse_args()
    dp.enable_features("contrib")
    bits = SecureBits()
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    rows, notes = [], []
    for d in DIMENSIONS:
        gaussian = dp.m.make_gaussian(
            dp.vector_domain(dp.atom_domain(T="i64"), size=d), dp.l2_distance(T="i64"), scale=float(args.sigma)
        )
        zeros = [0] * d
        samplers = {
            "ours": lambda d=d: discrete_gaussian(bits, sigma2=args.sigma**2, size=d),
            "opendp": lambda g=gaussian, z=zeros: g(z),
        }
        times: dict[str, list[float]] = {name: [] for name in samplers}
        for _ in range(args.repeats):  # interleaved
            for name, sample in samplers.items():
                t0 = time.perf_counter()
                sample()
                times[name].append(time.perf_counter() - t0)
        ratio = statistics.median(times["opendp"]) / statistics.median(times["ours"])
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"d = {d:>9,}  {name:<6} median {med:7.3f} s ({1 / med:8.2f} shares/s), min {min(ts):.3f} s")
            rows.append((f"{d:,}", name, f"{med:.3f}", f"{min(ts):.3f}", f"{1 / med:.2f}"))
        notes.append(f"d = {d:,}: ours is {ratio:.1f}x opendp's throughput (medians; goal ≥ 3x)")
        print(notes[-1])
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.record:
        result = Result(
            name="bench_sampler",
            title="Exact discrete Gaussian noise shares: ours against opendp",
            tables=(
                Table(
                    caption=f"σ = {args.sigma} integer units, {args.repeats} interleaved repeats, one process",
                    columns=("d", "sampler", "median (s/share)", "min (s/share)", "shares/s"),
                    rows=tuple(rows),
                ),
            ),
            notes=tuple(notes),
        )
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
