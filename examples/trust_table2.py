"""ε against each adversary for every row of GDPFed's FMNIST Table 2 plan under secure aggregation, recorded for the
documentation: the plan solved with ``--methods all --trust secagg``, then each group's ε against the server after
1, 5 and T participations from the z that ``solve`` calibrated.

    python examples/trust_table2.py [--bits 20] [--survivors 0.9] [--colluders 0] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from hdp_planner.distributed.accounting import epsilon_server, tau
from hdp_planner.distributed.encoding import padded_dimension
from hdp_planner.distributed.rounds import MIN_SHARE_SIGMA2
from hdp_planner.report.results import Result, Table, render_result, write_result

ROOT = Path(__file__).resolve().parents[1]
PLAN = ("--eps", "0.5,1.5,3.0", "--n", "6000", "--rounds", "50", "--q", "0.02", "--clip", "1.5", "--local-steps", "5",
        "--sparsity", "0.7,0.8,0.9", "--methods", "all", "--model-dim", "26010")  # fmt: skip
PARTICIPATIONS = (1, 5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, default=20)
    parser.add_argument("--survivors", type=float, default=0.9)
    parser.add_argument("--colluders", type=int, default=0)
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/trust_table2.json")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [sys.executable, "-m", "hdp_planner", "solve", *PLAN, "--trust", "secagg", "--bits", str(args.bits),
               "--survivors", str(args.survivors), "--colluders", str(args.colluders), "--json"]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(done.stderr.strip())
    doc = json.loads(done.stdout)
    trust, rounds, delta = doc["trust"], doc["config"]["rounds"], doc["config"]["delta"]
    d = padded_dimension(trust["model_dim"])
    ks = (*PARTICIPATIONS, rounds)
    rows = []
    for name, entry in trust["rows"].items():
        method = doc["noise"][name]
        if entry is None:
            rows.append((name, "—", "", "", "", "", *("" for _ in ks), "not planned under secagg"))
            continue
        for i, (eps, size, z) in enumerate(zip(method["epsilon"], method["size"], entry["noise_multiplier"])):
            tau_d = tau(MIN_SHARE_SIGMA2, honest=size) * d
            z_s = entry["server_noise_multiplier"][i]
            server = [epsilon_server(noise_multiplier=z_s, participations=k, delta=delta, tau_d=tau_d) for k in ks]
            rows.append((
                name if i == 0 else "", str(i + 1), f"{eps:g}", f"{method['noise_multiplier'][i]:.4g}", f"{z:.4g}",
                f"{entry['effective_noise_multiplier'][i]:.4g}", *(f"{e:.3g}" for e in server),
                f"{entry['price_of_distrust']:.2f}x" if i == 0 else "",
            ))  # fmt: skip
    columns = ("row", "group", "ε third parties (budget)", "σ, trusted server", "z, secagg", "effective σ",
               *(f"ε server, K = {k}" for k in ks), "price of distrust (Λ secagg / Λ server)")  # fmt: skip
    result = Result(
        name="trust_table2",
        title="ε against each adversary under secure aggregation: the FMNIST Table 2 plan",
        tables=(
            Table(
                caption=f"b = {args.bits} bits, survivors F = {args.survivors:g}, colluders k = {args.colluders}, "
                f"d = {trust['model_dim']:,}, δ = {delta:.3g}, min share {doc['config']['min_share']:g} (the default)",
                columns=columns,
                rows=tuple(rows),
            ),
        ),
        notes=(
            f"recommended under secagg: {trust['recommendation']}",
            "ε against the server with up to k colluders: ⌈(t − k)/M⌉ honest shares of the smallest share of any group "
            "(a malicious server may mix the M groups in one run); third parties see the law's N shares",
        ),
    )
    print(render_result(result))
    if args.record:
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
