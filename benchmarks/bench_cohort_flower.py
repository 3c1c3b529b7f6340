"""A hidden-participation run end to end on Flower's simulation engine: seconds per round of a cohort of m members.

`hdp-plan solve --hide-sample` plans one group of n = 2m clients on digits whose cohort is m members (coin p =
0.1, so about m/10 contributors), and `hdp-plan flower --trust secagg --sparse-graph --diagnostics` runs it on Ray:
every member trains, flips its private coin, adds its noise share and sends one masked vector through the group's
SecAgg+ over the sparse neighbour graph, and the server tops up, decodes and updates the model. The run's
``metrics.json`` gives each round's seconds; the script prints them with the load average. Usage::

    python benchmarks/bench_cohort_flower.py [--cohort 200] [--rounds 3] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from hdp_planner.report.results import Result, Table, write_result

DIGITS_DIM = 2410
"""Parameters of the digits model the run trains."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cohort", type=int, default=200, help="cohort size m (the group holds 2m clients)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/bench_cohort_flower.json")
    args = parser.parse_args()
    m, n = args.cohort, 2 * args.cohort
    env = {**os.environ, "MPLBACKEND": "Agg"}
    with tempfile.TemporaryDirectory() as tmp:
        env["XDG_DATA_HOME"] = str(Path(tmp) / "data")  # fresh node state: every member within its cap
        plan, out = Path(tmp) / "plan.json", Path(tmp) / "run"
        cli = [sys.executable, "-m", "hdp_planner_cli"]
        solve = [*cli, "solve", "--eps", "2", "--n", str(n), "--rounds", str(max(args.rounds, 5)), "--q", "0.05",
                 "--clip", "1.0", "--methods", "gdpfed+", "--trust", "secagg", "--model-dim", str(DIGITS_DIM),
                 "--hide-sample", "--max-cohort", str(m), "--cohort-multiple", "10", "-o", str(plan)]  # fmt: skip
        subprocess.run(solve, check=True, env=env, stdout=subprocess.DEVNULL)
        row = json.loads(plan.read_text())["hidden_participation"]["rows"]["GDPFed+"]
        if row["cohort"] != [m]:
            sys.exit(f"the plan's cohort is {row['cohort']}, not [{m}]")
        load_before = os.getloadavg()
        print(f"load average before: {load_before}", flush=True)
        run = [*cli, "flower", str(plan), "--dataset", "digits", "--clients", str(n), "--rounds",
               str(args.rounds), "--trust", "secagg", "--sparse-graph", "--diagnostics", "--ledger", "none",
               "--out", str(out)]  # fmt: skip
        subprocess.run(run, check=True, env=env)
        metrics = json.loads((out / "metrics.json").read_text())
    load = os.getloadavg()
    seconds = metrics["round_seconds"]
    med, low = statistics.median(seconds), min(seconds)
    print(f"cohort of {m}: rounds {', '.join(f'{s:.1f}' for s in seconds)} s (median {med:.1f}, min {low:.1f})")
    print(f"load average after: {load}")
    cells = (
        str(m),
        f"{row['coin'][0]:.3g}",
        f"{metrics['joined_per_round_mean'][0]:.0f}",
        ", ".join(f"{s:.1f}" for s in seconds),
        f"{med:.1f}",
        f"{low:.1f}",
        f"{metrics['final_accuracy']:.1f}%",
    )
    result = Result(
        name="bench_cohort_flower",
        title="A hidden-participation run on Flower's simulation engine: seconds per cohort round",
        tables=(
            Table(
                caption=f"digits, one group of {n} clients, GDPFed+ with --hide-sample; hdp-plan flower --trust secagg "
                f"--sparse-graph, {args.rounds} rounds; load average {load_before[0]:.1f} before, {load[0]:.1f} after",
                columns=("cohort m", "coin p", "members joined", "round seconds", "median (s)", "min (s)", "accuracy"),
                rows=(cells,),
            ),
        ),
        notes=(
            "every member trains (5 local steps), flips its coin from the OS CSPRNG and sends one masked vector; "
            "the first round includes every node's reading and verifying of the plan",
            f"SecAgg+: {metrics['secagg']['masks']}",
            "2 cores shared with other work: times scale with the load average",
        ),
    )
    if args.record:
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
