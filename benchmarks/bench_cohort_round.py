"""Seconds per secure round of one cohort of m clients on Flower's simulation engine, at m = 50, 100, 200, 400.

One group of m clients, all in the round (a cohort: q = 1), the digits model (d = 2,410, padded to 4,096), clients
that do not train (each round is the protocol's cost alone). Each m runs one ``run_simulation`` (Ray, one virtual
node per client, one CPU each) whose ServerApp alternates, round by round:

- ``ours``: ``HdpStrategy(sparse_graph=True).secure_round``, the ``--trust secagg`` round: Flower's SecAgg+ over the
  neighbour rule's graph (:mod:`hdp_planner.distributed.neighbours`) with ChaCha20 masks, pinned clients that check
  the round and add their discrete Gaussian share, the server's top-up to the law's N shares and the decoding;
- ``bare``: Flower's own ``SecAggPlusWorkflow`` + ``secaggplus_mod`` (its float path, MT19937 masks) over the same
  nodes with the same ``num_shares`` and reconstruction threshold;
- ``full`` (only where ``--full`` lists m): our round over the full graph, as without ``sparse_graph``.

Odd rounds are ours, even rounds Flower's; one client app dispatches on the round. The script prints the load
average before every round and reports each variant's median and minimum, the degree, and the growth exponent of the
median against m (least squares on log-log) next to m·log m's. Usage::

    PYTHONPATH=. nice -n 10 python benchmarks/bench_cohort_round.py [--sizes 50,100,200] [--rounds 3]
        [--full 50] [--record]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "bench_cohort_round.json"
SURVIVORS = 0.9


def solve(path: Path, m: int, rounds: int, dim: int) -> None:
    from typer.testing import CliRunner

    from hdp_planner_cli.app import app

    args = ["solve", "--eps", "2", "--n", str(m), "--rounds", str(rounds), "--q", "1.0", "--clip", "1.0",
            "--methods", "gdpfed+", "--trust", "secagg", "--bits", "16", "--survivors", str(SURVIVORS),
            "--model-dim", str(dim), "--participations", str(rounds), "-o", str(path)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    if result.exit_code != 0:
        sys.exit(result.output)


def one_size(m: int, rounds: int, full: bool, folder: Path) -> dict:
    """Time ``rounds`` rounds of each variant over a cohort of m on Ray; the timings as a dict."""
    import numpy as np
    from flwr.app import Message, RecordDict
    from flwr.client.mod import secaggplus_mod
    from flwr.clientapp import ClientApp
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
    from flwr.compat.common import recorddict_compat as compat
    from flwr.server.workflow import SecAggPlusWorkflow
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    from hdp_planner.distributed.neighbours import sparse_graph
    from hdp_planner.planfile.document import load_plan, read_document
    from hdp_planner_flower import offline_environment
    from hdp_planner_flower.app import DataSettings, model_arrays
    from hdp_planner_flower.mods import enroll
    from hdp_planner_flower.pin import Pin, file_sha256
    from hdp_planner_flower.records import ARRAYS, fit_config
    from hdp_planner_flower.secagg_mod import masked_secaggplus_mod, share_mod
    from hdp_planner_flower.secagg_workflow import run_secaggplus
    from hdp_planner_flower.strategy import HdpStrategy
    from hdp_planner_train.learning.models import model_dim
    from hdp_planner_train.rules.secagg import planned_groups
    from hdp_planner_train.rules.specs import METHOD_NAMES, method_spec

    dim = model_dim("digits")
    variants = ["ours", "bare"] + (["full"] * full)
    total = len(variants) * rounds
    plan_path = folder / f"plan-{m}.json"
    solve(plan_path, m, total, dim)
    plan = load_plan(plan_path)
    spec = planned_groups(read_document(plan_path), plan, method_spec(plan, "gdpfed+"), METHOD_NAMES["gdpfed+"])
    law = spec.secagg.laws[0]
    graph = sparse_graph(clients=m, survivors=law.run_threshold(m), colluders=law.colluders)
    sha = file_sha256(plan_path)
    pin = Pin(
        plan=str(plan_path.resolve()),
        sha256=sha,
        method="gdpfed+",
        groups=None,
        state_dir=str(folder / f"nodes-{m}-{os.getpid()}"),
        sparse_graph=True,
    )
    settings = DataSettings(
        dataset="digits",
        data_dir=None,
        clients=m,
        dirichlet=None,
        seed=0,
        local_steps=1,
        batch_size=10,
        momentum=0.0,
        lr=0.1,
        lr_decay=1.0,
    )

    def unchanged(msg: Message, ctxt) -> Message:  # ours: an update of 0, the share still drawn and added
        return Message(RecordDict({ARRAYS: msg.content[ARRAYS]}), reply_to=msg)

    def zeros(msg: Message, ctxt) -> Message:  # Flower's: a zero update in its legacy FitRes
        res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([np.zeros(dim)]), num_examples=1, metrics={})
        return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=msg)

    share = share_mod(pin)

    def dispatch(msg: Message, ctxt, call_next) -> Message:
        if variants[(int(msg.metadata.group_id) - 1) % len(variants)] == "bare":  # Flower's rounds
            return secaggplus_mod(msg, ctxt, zeros)
        return masked_secaggplus_mod(msg, ctxt, lambda mm, cc: share(mm, cc, unchanged))

    client = ClientApp()
    client.train(mods=[dispatch])(unchanged)
    client.query("hdp_enroll")(enroll)

    times: dict[str, list[float]] = {v: [] for v in variants}
    loads: list[float] = []
    server = ServerApp()

    @server.main()
    def main(grid, context) -> None:
        arrays = model_arrays("digits", num_classes=10, seed=0)
        strategies = {
            sparse: HdpStrategy(plan, spec, trust="secagg", plan_sha256=sha, uniform=Everyone(), sparse_graph=sparse)
            for sparse in (True, False)
        }
        for strategy in strategies.values():
            strategy.enroll(grid)
        for rnd in range(1, total + 1):
            variant = variants[(rnd - 1) % len(variants)]
            loads.append(os.getloadavg()[0])
            t0 = time.perf_counter()
            if variant == "bare":
                workflow = SecAggPlusWorkflow(num_shares=graph.degree, reconstruction_threshold=graph.threshold,
                                              max_weight=1.0)  # fmt: skip
                strategy = strategies[True]
                config = fit_config(strategy.rules(rnd, m=0), settings.record())
                out = run_secaggplus(grid, workflow, configs=dict.fromkeys(strategy.members[0], config),
                                     server_round=rnd, arrays=arrays)  # fmt: skip
                ok = out is not None
            else:
                strategy = strategies[variant == "ours"]
                strategy.secure_round(grid, server_round=rnd, arrays=arrays, config=settings.record(), timeout=None)
                ok = strategy.stats.withheld == 0
            if not ok:
                raise RuntimeError(f"round {rnd} ({variant}) released nothing")
            times[variant].append(time.perf_counter() - t0)
            print(f"  m = {m}, round {rnd} ({variant}): {times[variant][-1]:.2f} s, load average {loads[-1]:.2f}",
                  file=sys.stderr, flush=True)  # fmt: skip

    backend = {"client_resources": {"num_cpus": 1.0, "num_gpus": 0.0},
               "init_args": {"logging_level": "ERROR", "log_to_driver": False}}  # fmt: skip
    with offline_environment():
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
        run_simulation(server_app=server, client_app=client, num_supernodes=m, backend_config=backend)
    if any(len(v) < rounds for v in times.values()):
        sys.exit(f"m = {m}: the simulation ended early")
    return {"clients": m, "degree": graph.degree, "threshold": graph.threshold, "run_threshold": law.run_threshold(m),
            "failure_bound": graph.failure, "seconds": times, "load_average": loads}  # fmt: skip


class Everyone:
    """The cohort: every node of the group, every round."""

    def random(self, size):
        import numpy as np

        return np.zeros(size)


def exponent(points: list[tuple[int, float]]) -> float:
    """The least-squares slope of log(seconds) against log(m)."""
    xs, ys = [math.log(m) for m, _ in points], [math.log(s) for _, s in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def record(results: dict[str, dict], growth: dict[str, float]) -> None:
    """Write the sizes' timings as a result file (its table and notes), the raw timings kept under ``sizes``."""
    from dataclasses import asdict

    from hdp_planner.io.files import write_json_atomic
    from hdp_planner.report.results import Result, Table

    def cell(run: dict, variant: str) -> str:
        times = run["seconds"].get(variant)
        return f"{statistics.median(times):.2f} ({min(times):.2f})" if times else "—"

    columns = ("m", "degree d", "run's threshold", "ours, sparse graph", "Flower's workflow, same d",
               "ours, full graph", "rounds each", "load average")  # fmt: skip
    rows = tuple(
        (str(r["clients"]), str(r["degree"]), str(r["run_threshold"]), cell(r, "ours"), cell(r, "bare"),
         cell(r, "full"), str(len(r["seconds"]["ours"])), f"{min(r['load_average']):.1f}-{max(r['load_average']):.1f}")
        for r in sorted(results.values(), key=lambda r: r["clients"])
    )  # fmt: skip
    caption = (f"Seconds per round, median (minimum): one cohort of m clients (q = 1, --survivors {SURVIVORS}, "
               "digits model, clients that do not train) on Flower's simulation engine, one CPU per virtual client, "
               f"{os.cpu_count()} cores shared with other work; variants alternate round by round")  # fmt: skip
    notes = (
        f"Growth of the median over these sizes: ours m^{growth['ours']:.2f}, Flower's workflow m^{growth['bare']:.2f};"
        f" m·log m over the same sizes is m^{growth['m_log_m']:.2f}.",
        "Each size ran in its own simulation; the raw timings, load averages and commands are under `sizes`.",
    )
    result = Result(name=RESULT.stem, title="A cohort's secure round over a sparse neighbour graph",
                    tables=(Table(caption=caption, columns=columns, rows=rows),), notes=notes)  # fmt: skip
    write_json_atomic(RESULT, asdict(result) | {"sizes": results})
    print(f"written to {RESULT}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,100,200,400", help="empty with --record: rewrite the recorded sizes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--full", default="50", help="sizes at which our full-graph round is timed too")
    parser.add_argument("--out", default="runs/bench_cohort_round")
    parser.add_argument("--record", action="store_true", help=f"merge the sizes run into {RESULT.name}")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = Path(args.out).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    full = {int(m) for m in args.full.split(",") if m}
    if args.one:
        print(json.dumps(one_size(args.one, args.rounds, args.one in full, folder)))
        return
    results = json.loads(RESULT.read_text())["sizes"] if args.record and RESULT.is_file() else {}
    for m in (int(s) for s in args.sizes.split(",") if s):
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        cmd = [sys.executable, __file__, "--one", str(m), "--rounds", str(args.rounds), "--full", args.full,
               "--out", str(folder)]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"m = {m} failed:\n{proc.stderr[-3000:]}")
        print(proc.stderr.strip())
        run = json.loads(proc.stdout.strip().splitlines()[-1])
        run["command"] = f"--sizes {m} --rounds {args.rounds} --full {args.full or chr(34) * 2}"
        results[str(m)] = run
        line = ", ".join(f"{v} {statistics.median(s):.2f} s (min {min(s):.2f})" for v, s in run["seconds"].items())
        print(f"m = {m}, degree {run['degree']} (threshold {run['threshold']}): {line}", flush=True)
    sizes = sorted(results.values(), key=lambda r: r["clients"])
    growth = {}
    if len(sizes) > 1:
        for variant in ("ours", "bare"):
            growth[variant] = exponent([(r["clients"], statistics.median(r["seconds"][variant])) for r in sizes])
        growth["m_log_m"] = exponent([(r["clients"], r["clients"] * math.log(r["clients"])) for r in sizes])
        print(", ".join(f"{k}: ~ m^{v:.2f}" for k, v in growth.items()))
    if args.record:
        record(results, growth)


if __name__ == "__main__":
    main()
