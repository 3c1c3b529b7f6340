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

``--secagg`` times rounds instead, in this process (an in-process federation, nodes run one after another, no Ray):
for the same sampled nodes each round, interleaved, GDPFed+ of the plan solved with ``--trust secagg`` through our
secure round (Flower's SecAgg+ per group, the share mod, ChaCha20 masks), the same round with ``--trust server``,
and Flower's own ``SecAggPlusWorkflow`` + ``secaggplus_mod`` (its float quantization, MT19937 masks) summing the
same clients' clipped updates of the same d per group, with the same full neighbour graph and threshold. All three
include the clients' local training. Usage::

    PYTHONPATH=. nice -n 10 python benchmarks/bench_flower.py --secagg [--rounds 3] [--record]

``--secagg --sizes 10,20,30,40`` times one group at a time instead: each round exactly c of group 1's nodes are
sampled (the other groups none, so they are withheld), for every c in the list, interleaved; ours pays the plan's
law in full (each client's share, the server's top-up to N shares), Flower's bare workflow runs the same c nodes with
the same threshold max(t, ⌊c/2⌋ + 1).
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


def secagg_rounds(args) -> None:
    """Seconds per round: our secure round, the trusted-server round, Flower's bare SecAgg+ (see the module doc)."""
    import numpy as np
    from flwr.app import ArrayRecord, Context, Message, RecordDict
    from flwr.client.mod import secaggplus_mod
    from flwr.clientapp import ClientApp
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.compat.common import recorddict_compat as compat
    from flwr.server.workflow import SecAggPlusWorkflow

    from hdp_planner_flower.app import client_app, model_arrays, train
    from hdp_planner_flower.local import InProcessGrid
    from hdp_planner_flower.pin import Pin, file_sha256
    from hdp_planner_flower.preparation import FlowerConfig, prepare
    from hdp_planner_flower.records import ARRAYS, HDP, TRAIN_SETTINGS, fit_config, flatten, split_config
    from hdp_planner_flower.secagg_workflow import run_secaggplus
    from hdp_planner_flower.strategy import HdpStrategy
    from hdp_planner_train.learning.models import model_dim
    from hdp_planner_train.rules.clipping import clip_rows
    from hdp_planner_train.run.options import DataOptions, TrustOptions

    out = Path(args.out) / "secagg"
    out.mkdir(parents=True, exist_ok=True)
    d = model_dim(args.dataset)
    plan = out / "plan.json"
    _solve(plan, args, ["--methods", "gdpfed+", "--trust", "secagg", "--bits", "20", "--model-dim", str(d)])
    data = DataOptions(dataset=args.dataset, clients=args.n)
    ours_p = prepare(FlowerConfig(plan=str(plan), data=data, trust=TrustOptions(kind="secagg")))
    server_p = prepare(FlowerConfig(plan=str(plan), data=data, trust=TrustOptions(kind="server", override=True)))

    def bare_train(msg: Message, ctx: Context) -> Message:  # Flower's legacy fit: the clipped update as floats
        ins = compat.recorddict_to_fitins(msg.content, keep_input=True)
        rules, settings = split_config(ins.config)
        sent = ArrayRecord(parameters_to_ndarrays(ins.parameters))
        reply = train(Message(RecordDict({ARRAYS: sent, HDP: rules, TRAIN_SETTINGS: settings}), reply_to=msg), ctx)
        delta = clip_rows((flatten(reply.content[ARRAYS]) - flatten(sent))[None], float(rules["clip"]))[0][0]
        res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([delta.numpy()]), num_examples=1, metrics={})
        return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=msg)

    bare_app = ClientApp(mods=[secaggplus_mod])
    bare_app.train()(bare_train)
    pin = Pin(
        plan=str(plan.resolve()), sha256=file_sha256(plan), method="gdpfed+", groups=None, state_dir=str(out / "nodes")
    )
    grids = {
        "ours": InProcessGrid(client_app(train, pin=pin), args.n),
        "server": InProcessGrid(client_app(train), args.n),
        "bare": InProcessGrid(bare_app, args.n),  # the same node ids: node i is 5000 + 11i in every grid
    }

    class Replay:  # every runtime samples the same nodes in a round
        def __init__(self, draws):
            self.draws = draws

        def random(self, size):
            return self.draws.pop(0)

    sizes = [int(c) for c in args.sizes.split(",")] if args.sizes else [None]
    times: dict[tuple, list[float]] = {(k, c): [] for c in sizes for k in ("ours", "server", "bare")}
    warm: dict[tuple, list[float]] = {key: [] for key in times}  # the warm-up rounds: every node's first time
    loads: list[float] = []
    arrays = model_arrays(args.dataset, num_classes=ours_p.data.num_classes, seed=0)
    settings = ours_p.settings.record()
    rng = np.random.default_rng(0)
    for rnd, c in ((r, c) for r in range(1, args.warmup + args.rounds + 1) for c in sizes):
        timed = times if rnd > args.warmup else warm
        draws = [rng.random(size) for size in ours_p.spec.sizes]
        if c is not None:  # exactly c nodes of group 1, none elsewhere
            draws = [np.where(np.arange(size) < (c if m == 0 else 0), 0.0, 1.0)
                     for m, size in enumerate(ours_p.spec.sizes)]  # fmt: skip
        ours = HdpStrategy(ours_p.plan, ours_p.spec, trust="secagg", uniform=Replay(list(draws)),
                           plan_sha256=ours_p.plan_sha256)  # fmt: skip
        server = HdpStrategy(server_p.plan, server_p.spec, uniform=Replay(list(draws)))
        for s, g in ((ours, grids["ours"]), (server, grids["server"])):
            s.enroll(g)
        loads.append(os.getloadavg()[0])
        print(f"  round {rnd}{'' if timed is times else ' (warm-up)'}: load average {loads[-1]:.2f}", flush=True)
        t0 = time.perf_counter()
        ours.secure_round(grids["ours"], server_round=rnd, arrays=arrays, config=settings, timeout=None)
        timed["ours", c].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        server.aggregate_train(
            rnd, grids["server"].send_and_receive(server.configure_train(rnd, arrays, settings, None))
        )
        timed["server", c].append(time.perf_counter() - t0)
        picked = [[n for n, m in ours.sent.items() if m == g] for g in range(len(ours_p.spec.sizes))]
        t0 = time.perf_counter()
        for m, nodes in enumerate(picked):
            if len(nodes) < 2:
                continue
            law = ours_p.spec.secagg.laws[m]
            if len(nodes) < law.threshold:
                continue
            workflow = SecAggPlusWorkflow(num_shares=1.0, reconstruction_threshold=law.run_threshold(len(nodes)),
                                          max_weight=1.0)  # fmt: skip
            config = fit_config(server.rules(rnd, m=m), settings)
            run_secaggplus(grids["bare"], workflow, configs=dict.fromkeys(nodes, config), server_round=rnd,
                           arrays=arrays)  # fmt: skip
        timed["bare", c].append(time.perf_counter() - t0)
        print(f"    joined {ours.joined}: ours {timed['ours', c][-1]:.2f} s, server {timed['server', c][-1]:.2f} s, "
              f"Flower SecAgg+ {timed['bare', c][-1]:.2f} s", flush=True)  # fmt: skip
    caption = (f"{args.dataset}, n = {args.n}, d = {d}, GDPFed+ of the FMNIST Table 2 plan; {args.rounds} timed rounds "
               f"after {args.warmup} warm-up round(s), in one process; load average {min(loads):.1f}-{max(loads):.1f} "
               f"during the run")  # fmt: skip
    columns = ("clients of group 1", "runtime", "s per round, median (min)", "against Flower's SecAgg+ (median)")
    labels = {"ours": "ours: --trust secagg (SecAgg+ with ChaCha20 masks, shares, top-up)", "server": "--trust server",
              "bare": "Flower's SecAggPlusWorkflow (float path, MT19937 masks)"}  # fmt: skip
    table = tuple(
        ("sampled" if c is None else str(c), labels[k], f"{statistics.median(v):.2f} ({min(v):.2f})",
         f"{statistics.median(v) / statistics.median(times['bare', c]):.2f}x")
        for (k, c), v in times.items()
    )  # fmt: skip
    notes = tuple(
        f"warm-up, {c} clients (each node's first round: the plan read and verified, its state created): "
        + ", ".join(f"{labels[k].split(':')[0].split(' (')[0]} {statistics.median(warm[k, c]):.2f} s" for k in labels)
        for c in sizes
        if warm["ours", c]
    )
    print(f"\n{caption}\n{markdown_table(columns, table)}\n" + "\n".join(notes))
    if args.record:
        result = Result(name="bench_flower_secagg", title="A secure round on Flower against Flower's own SecAgg+",
                        tables=(Table(caption=caption, columns=columns, rows=table),), notes=notes)  # fmt: skip
        print(f"written to {write_result(result)}")


def _solve(plan: Path, args, extra: list[str]) -> None:
    """The FMNIST Table 2 plan shape for ``args.n`` clients and ``args.rounds`` rounds."""
    cmd = [sys.executable, "-m", "hdp_planner", "solve", "--eps", "0.5,1.5,3.0", "--n", str(args.n), "--rounds",
           str(args.rounds if not args.secagg else 50), "--q", "0.02", "--clip", "1.5", "--local-steps", "5",
           "--sparsity", "0.7,0.8,0.9", *extra, "-o", str(plan)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


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
    ap.add_argument("--record", action="store_true", help="write benchmarks/results/bench_flower[_secagg].json")
    ap.add_argument("--secagg", action="store_true", help="time secure rounds in this process (see the module doc)")
    ap.add_argument("--sizes", default="", help="--secagg: exactly these counts of group 1's clients, one at a time")
    ap.add_argument("--warmup", type=int, default=1, help="--secagg: untimed rounds first (reported apart) [1]")
    args = ap.parse_args()
    if args.secagg:
        secagg_rounds(args)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = out / "plan.json"
    py = [sys.executable, "-m", "hdp_planner"]
    _solve(plan, args, [])
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
                    "--overwrite",  # without --resume every run is measured again
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
            tables=(Table(caption=caption, columns=columns, rows=tuple(table)),),
            notes=tuple(notes),
        )
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
