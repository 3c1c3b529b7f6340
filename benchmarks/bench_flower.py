"""A plan on Flower against our simulator, side by side: accuracy and wall time per round, same plan and seeds.

For each (method, seed), interleaved, runs ``hdp-plan train`` (our simulator, ``--engine`` vectorized by default)
and ``hdp-plan flower`` (Flower's simulation engine on Ray, one virtual node per client) as subprocesses, prints
the load average before each run, and reports final accuracy, the median and minimum round time (each runtime's
own per-round clock: sampling, local training, aggregation; Flower's also its message passing) and the whole
process's wall time (Flower's includes Ray's start-up and the enrolment of n nodes). Usage::

    PYTHONPATH=. nice -n 10 python benchmarks/bench_flower.py [--seeds 0,1,2] [--methods gdpfed+,dp-fedavg]
        [--dataset fmnist] [--rounds 50] [--out runs/bench_flower] [--record]

The default plan is GDPFed's FMNIST Table 2 setting (ε = 0.5, 1.5, 3; n = 6000; T = 50; q = 0.02; C = 1.5; τ = 5;
k/d = 0.7, 0.8, 0.9); ``--n`` and ``--dataset digits`` make a quick check.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from hdp_planner.report.results import Result, Table, markdown_table, write_result

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd: list[str], out: Path, resume: bool) -> dict:
    metrics = out / "metrics.json"
    if resume and metrics.is_file():
        return json.loads(metrics.read_text())
    print(f"  load average {os.getloadavg()[0]:.2f}: {' '.join(cmd[3:7])} …", flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    data = json.loads(metrics.read_text())
    data["wall_seconds"] = wall
    metrics.write_text(json.dumps(data, indent=1))
    return data


def _wall(metrics: dict) -> str:
    return f"{metrics['wall_seconds']:.0f}" if metrics.get("wall_seconds") is not None else "—"


def _lam(metrics: dict) -> str:
    measured = metrics.get("noise_lambda_measured")
    return "—" if measured is None else f"{measured:.5g} / {metrics['noise_lambda_planned']:.5g}"


def _spent(metrics: dict) -> str:
    return ", ".join(f"{e['epsilon_spent']:.3g} / {e['epsilon_budget']:g}" for e in metrics["epsilon_spent"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="gdpfed+,dp-fedavg")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--dataset", default="fmnist")
    ap.add_argument("--n", type=int, default=6000)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--engine", default="vectorized", help="the simulator's engine (vectorized | loop)")
    ap.add_argument("--out", default="runs/bench_flower")
    ap.add_argument("--resume", action="store_true", help="reuse finished runs in --out")
    ap.add_argument("--record", action="store_true", help="write benchmarks/results/bench_flower.json")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = out / "plan.json"
    py = [sys.executable, "-m", "hdp_planner"]
    subprocess.run(
        [
            *py,
            "solve",
            "--eps",
            "0.5,1.5,3.0",
            "--n",
            str(args.n),
            "--rounds",
            str(args.rounds),
            "--q",
            "0.02",
            "--clip",
            "1.5",
            "--local-steps",
            "5",
            "--sparsity",
            "0.7,0.8,0.9",
            "-o",
            str(plan),
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    common = ["--dataset", args.dataset, "--clients", str(args.n)]
    rows = []
    for method in args.methods.split(","):
        for seed in [int(s) for s in args.seeds.split(",")]:
            tag = f"{method}-s{seed}"
            sim = _run(
                [
                    *py,
                    "train",
                    str(plan),
                    "--method",
                    method,
                    *common,
                    "--seed",
                    str(seed),
                    "--engine",
                    args.engine,
                    "--seeded-noise",  # a benchmark, not a release: keep the per-round times (diagnostics)
                    "--out",
                    str(out / f"train-{tag}"),
                ],
                out / f"train-{tag}",
                args.resume,
            )
            flw = _run(
                [
                    *py,
                    "flower",
                    str(plan),
                    "--method",
                    method,
                    *common,
                    "--seed",
                    str(seed),
                    "--diagnostics",  # the per-round times
                    "--out",
                    str(out / f"flower-{tag}"),
                ],
                out / f"flower-{tag}",
                args.resume,
            )
            rows.append((method, seed, sim, flw))
            print(f"{tag}: simulator {sim['final_accuracy']:.2f}%, Flower {flw['final_accuracy']:.2f}%", flush=True)
    caption = f"{args.dataset}, n = {args.n}, {args.rounds} rounds; load average at the end {os.getloadavg()[0]:.2f}"
    columns = ("method", "seed", "simulator acc", "Flower acc", "Δ", "simulator s/round median (min)",
               "Flower s/round median (min)", "process wall s simulator / Flower", "Flower Λ measured / planned",
               "Flower ε spent / budget")  # fmt: skip
    table = []
    for method, seed, sim, flw in rows:
        s, f = sim["round_seconds"], flw["round_seconds"]
        table.append((
            method, str(seed), f"{sim['final_accuracy']:.2f}", f"{flw['final_accuracy']:.2f}",
            f"{flw['final_accuracy'] - sim['final_accuracy']:+.2f}", f"{statistics.median(s):.3f} ({min(s):.3f})",
            f"{statistics.median(f):.3f} ({min(f):.3f})", f"{_wall(sim)} / {_wall(flw)}", _lam(flw), _spent(flw),
        ))  # fmt: skip
    print(f"\n{caption}\n{markdown_table(columns, table)}")
    notes = []
    for method in args.methods.split(","):
        sims = [r[2]["final_accuracy"] for r in rows if r[0] == method]
        flws = [r[3]["final_accuracy"] for r in rows if r[0] == method]
        notes.append(
            f"{method}: simulator mean {statistics.mean(sims):.2f}%, Flower mean {statistics.mean(flws):.2f}% "
            f"(difference {statistics.mean(flws) - statistics.mean(sims):+.2f} points over {len(sims)} seeds)"
        )
        print(notes[-1])
    if args.record:
        result = Result(
            name="bench_flower",
            title="A plan on Flower against the simulator: accuracy and time per round",
            tables=(Table(caption, columns, tuple(table)),),
            notes=tuple(notes),
        )
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
