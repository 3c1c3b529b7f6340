"""A whole `hdp-plan solve --sigma-model accountant` against ONE reference calibration, each as a process.

Goal (issue 3): the whole solve (Problem 1 with the accountant inside its loop, all four noise rows, start-up
included) takes no longer than one dp-accounting `calibrate_dp_mechanism` (RdpAccountant) run as a process.

    python benchmarks/bench_solve.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

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
    args = parser.parse_args()
    solve = statistics.median(timed(SOLVE) for _ in range(args.repeats))
    ref = statistics.median(timed(REFERENCE) for _ in range(args.repeats))
    print(f"hdp-plan solve --sigma-model accountant (process): {solve:6.2f} s (median of {args.repeats})")
    print(f"one reference calibration (process):               {ref:6.2f} s (median of {args.repeats})")
    print(f"ratio solve / reference: {solve / ref:.2f}  (goal ≤ 1)")


if __name__ == "__main__":
    main()
