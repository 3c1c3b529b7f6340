"""`hdp-plan solve --budgets FILE` for 10^6 and 10^7 per-client budgets in a CSV file, as a process: time and peak
memory.

Goal: 10^7 clients in under 10 s and 300 MB on an idle machine. The CSV files (ids ``client-<k>`` in random
order, 500 distinct budgets drawn log-uniformly in [0.3, 8]) are written to a temporary folder, never to the
repository. With ``--check`` the plan's recorded budgets digest is compared with the row-by-row reader's
(``load_budgets`` and ``budgets_digest``) for the 10^6 file.

    python benchmarks/bench_budgets.py [--sizes 1000000,10000000] [--repeats 3] [--check] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from hdp_planner.report.results import Result, Table, write_result


def write_budgets(path: Path, n: int, rng: np.random.Generator) -> None:
    levels = np.round(np.exp(rng.uniform(np.log(0.3), np.log(8.0), 500)), 4)
    eps, ids = rng.choice(levels, size=n), rng.permutation(n)
    with path.open("w") as fh:
        fh.write("client_id,epsilon\n")
        for a in range(0, n, 1 << 20):
            fh.write(
                "".join(
                    f"client-{i},{e!r}\n"
                    for i, e in zip(ids[a : a + (1 << 20)].tolist(), eps[a : a + (1 << 20)].tolist())
                )
            )


def solve(budgets: Path, plan: Path) -> tuple[float, float]:
    """Seconds and peak resident MiB of one `hdp-plan solve --budgets` process."""
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "hdp_planner_cli", "solve", "--budgets", str(budgets), "-o", str(plan)]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)  # this process's own peak, not the largest of all children
    process.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if process.returncode != 0:
        raise SystemExit(f"hdp-plan solve --budgets {budgets} failed (status {process.returncode})")
    return seconds, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--check", action="store_true", help="compare the 10^6 digest with the row-by-row reader's")
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/bench_budgets.json")
    parser.add_argument("--write", nargs=2, metavar=("PATH", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        write_budgets(Path(args.write[0]), int(args.write[1]), np.random.default_rng(int(args.write[1])))
        return
    sizes = [int(float(x)) for x in args.sizes.split(",")]
    rows, notes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for n in sizes:  # in a child: a process's peak memory counts its parent's at the fork
            files[n] = Path(tmp) / f"budgets-{n}.csv"
            subprocess.run([sys.executable, __file__, "--write", str(files[n]), str(n)], check=True)
        print(f"load average before: {os.getloadavg()}")
        runs: dict[int, list[tuple[float, float]]] = {n: [] for n in sizes}
        for _ in range(args.repeats):  # interleaved, so that load changes hit every size alike
            for n in sizes:
                runs[n].append(solve(files[n], Path(tmp) / "plan.json"))
        load = os.getloadavg()
        print(f"load average after: {load}")
        for n in sizes:
            seconds, peaks = [s for s, _ in runs[n]], [m for _, m in runs[n]]
            med, low, peak = statistics.median(seconds), min(seconds), max(peaks)
            size = files[n].stat().st_size / 2**20
            rows.append((f"{n:,}", f"{size:.0f}", f"{med:.1f}", f"{low:.1f}", f"{peak:.0f}"))
            print(f"n = {n:>10,}: median {med:5.1f} s, min {low:5.1f} s, peak {peak:4.0f} MiB ({size:.0f} MiB of CSV)")
        if args.check and 10**6 in files:  # last: the row-by-row reader's memory would count in later peaks
            from hdp_planner.planning.budgets import budgets_digest, load_budgets

            solve(files[10**6], Path(tmp) / "plan.json")
            recorded = json.loads((Path(tmp) / "plan.json").read_text())["grouping"]["budgets_sha256"]
            same = recorded == budgets_digest(*load_budgets(files[10**6]))
            notes.append(f"10^6 digest {'equals' if same else 'DIFFERS FROM'} the row-by-row reader's")
            print(notes[-1])
    notes.append(f"load average after the runs: {load[0]:.2f} (2 cores shared: times scale with the load)")
    notes.append("goal for 10^7: under 10 s and 300 MB on an idle machine")
    result = Result(
        name="bench_budgets",
        title="hdp-plan solve --budgets FILE.csv as a process: time and peak memory",
        tables=(
            Table(
                caption=f"per process ({args.repeats} interleaved runs; peak: the largest resident set)",
                columns=("clients", "CSV (MiB)", "median (s)", "min (s)", "peak (MiB)"),
                rows=tuple(rows),
            ),
        ),
        notes=tuple(notes),
    )
    if args.record:
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
