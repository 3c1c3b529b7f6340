"""`hdp-plan --version` and whole `hdp-plan solve` runs against ONE reference calibration, each as a process.

Goals: `--version` under 0.3 s on an idle machine; a whole solve (start-up, Problem 1, all four noise rows) no
longer than one dp-accounting `calibrate_dp_mechanism` (RdpAccountant) run as a process, also with the
accountant inside Problem 1's loop (`--sigma-model accountant`).

    python benchmarks/bench_solve.py [--repeats 5] [--record]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from hdp_planner.report.results import Result, Table, write_result

CLI = [sys.executable, "-m", "hdp_planner_cli"]  # what the `hdp-plan` script runs
SOLVE = [*CLI, "solve", "--eps", "0.5,1.5,3.0", "--n", "6000"]
REFERENCE = [
    sys.executable,
    "-c",
    "import logging; logging.disable(logging.WARNING)\n"
    "import dp_accounting as dpa\n"
    "from dp_accounting.rdp import RdpAccountant\n"
    "ev = lambda s: dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.02, dpa.GaussianDpEvent(s)), 50)\n"
    "print(dpa.calibrate_dp_mechanism(RdpAccountant, ev, 0.5, 6000 ** -1.1))",
]
PROCESSES = (
    ("hdp-plan --version", [*CLI, "--version"]),
    ("hdp-plan solve --eps 0.5,1.5,3.0 --n 6000", SOLVE),
    ("… --sigma-model accountant", [*SOLVE, "--sigma-model", "accountant"]),
    ("one dp-accounting calibration", REFERENCE),
)


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/bench_solve.json")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    times: dict[str, list[float]] = {label: [] for label, _ in PROCESSES}
    for _ in range(args.repeats):  # interleaved, so that load changes hit every process alike
        for label, cmd in PROCESSES:
            times[label].append(timed(cmd))
    print(f"load average after: {os.getloadavg()}")
    rows = []
    reference = statistics.median(times[PROCESSES[-1][0]])
    for label, values in times.items():
        med, low = statistics.median(values), min(values)
        rows.append((label, f"{med:.2f}", f"{low:.2f}", f"{med / reference:.2f}"))
        print(f"{label + ':':<45} median {med:6.2f} s, min {low:6.2f} s, {med / reference:.2f} x reference")
    solve = [statistics.median(times[label]) / reference for label, _ in PROCESSES[1:3]]
    result = Result(
        name="bench_solve",
        title="Start-up and a whole solve against one reference calibration, each as a process",
        tables=(
            Table(
                caption=f"seconds per process ({args.repeats} interleaved runs)",
                columns=("process", "median (s)", "min (s)", "median / reference"),
                rows=tuple(rows),
            ),
        ),
        notes=(
            f"solve / reference (medians): {solve[0]:.2f}, with --sigma-model accountant {solve[1]:.2f} (goal ≤ 1)",
            "--version goal: under 0.3 s on an idle machine (the load average is recorded with the run)",
        ),
    )
    if args.record:
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
