"""A whole `hdp-plan solve --sigma-model accountant` against ONE reference calibration, each as a process.

Goal: the whole solve (Problem 1 with the accountant inside its loop, all four noise rows, start-up
included) takes no longer than one dp-accounting `calibrate_dp_mechanism` (RdpAccountant) run as a process.

    python benchmarks/bench_solve.py [--repeats 3] [--record]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from hdp_planner.report.results import Result, Table, write_result

SOLVE = [sys.executable, "-m", "hdp_planner", "solve", "--eps", "0.5,1.5,3.0", "--n", "6000",
         "--sigma-model", "accountant"]  # fmt: skip
REFERENCE = [
    sys.executable,
    "-c",
    "import logging; logging.disable(logging.WARNING)\n"
    "import dp_accounting as dpa\n"
    "from dp_accounting.rdp import RdpAccountant\n"
    "ev = lambda s: dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.02, dpa.GaussianDpEvent(s)), 50)\n"
    "print(dpa.calibrate_dp_mechanism(RdpAccountant, ev, 0.5, 6000 ** -1.1))",
]


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/bench_solve.json")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    solve, ref = [], []
    for _ in range(args.repeats):  # interleaved, so that load changes hit both alike
        solve.append(timed(SOLVE))
        ref.append(timed(REFERENCE))
    rows = []
    for label, times in (("hdp-plan solve --sigma-model accountant", solve), ("one dp-accounting calibration", ref)):
        med, low = statistics.median(times), min(times)
        rows.append((label, f"{med:.2f}", f"{low:.2f}"))
        print(f"{label + ' (process):':<50} median {med:6.2f} s, min {low:6.2f} s ({args.repeats} runs)")
    ratio = statistics.median(solve) / statistics.median(ref)
    print(f"ratio solve / reference (medians): {ratio:.2f}  (goal ≤ 1)")
    result = Result(
        name="bench_solve",
        title="A whole solve against one reference calibration, each as a process",
        tables=(Table("seconds per process", ("process", "median (s)", "min (s)"), tuple(rows)),),
        notes=(f"ratio of medians solve / reference: {ratio:.2f} (goal ≤ 1)",),
    )
    if args.record:
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
