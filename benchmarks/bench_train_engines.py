"""Median local-training time per round, loop vs vectorized engine, on GDPFed's FMNIST or Shakespeare setting.

FMNIST: 120 sampled clients × τ = 5 local steps, batch 10, the 2-layer CNN (``--model``), lr 0.1, synthetic
28×28 data (the engines' cost does not depend on the pixel values). Shakespeare (``--dataset shakespeare``): the
LSTM on 80-character windows, batch 4, momentum 0.9; the paper's round is 71 clients × τ = 30 steps, so use fewer
(``--clients 8 --steps 2``) and read the time per client-step, which the script scales to the paper's round.
``--method`` times a personal method of DP²-FedSAM instead (its local rule: ``dp-fedsam`` SAM with ρ = 0.1 on the
whole model; ``dp2-fedsam`` τ_h = τ head steps then τ SAM steps on the body; ``centaur`` the same with SGD),
``--precision bf16`` the local forward in bfloat16. The two engines take turns (interleaved repeats); the load
average is printed. Usage::

    python benchmarks/bench_train_engines.py [--clients 120] [--repeats 5] [--threads 2] [--model cnn2-paper]
    python benchmarks/bench_train_engines.py --method dp2-fedsam [--precision bf16]
    python benchmarks/bench_train_engines.py --dataset shakespeare --clients 8 --steps 2 --repeats 3

``--record`` writes the table to ``benchmarks/results/bench_train_engines[_VARIANT].json`` for the documentation.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch.nn.utils import parameters_to_vector

from hdp_planner.methods.registry import REGISTRY
from hdp_planner.report.results import Result, Table, write_result
from hdp_planner_train.learning.engines import PRECISIONS, LocalTraining, loop_deltas, vectorized_deltas
from hdp_planner_train.learning.models import make_model
from hdp_planner_train.simulator.personal_local import client_update, client_updates_vectorized, head_mask

PERSONAL = ("dp2-fedsam", "dp-fedsam", "centaur")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=("fmnist", "shakespeare"), default="fmnist")
    ap.add_argument("--model", default=None, help="a --model name for the dataset [its default]")
    ap.add_argument("--clients", type=int, default=120)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=None, help="[10; shakespeare 4]")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--method", choices=("dp-fedavg", *PERSONAL), default="dp-fedavg", help="local rule [dp-fedavg]")
    ap.add_argument("--precision", choices=PRECISIONS, default="fp32", help="of the local forward pass [fp32]")
    ap.add_argument("--record", action="store_true", help="write benchmarks/results/bench_train_engines.json")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    torch.manual_seed(0)
    lstm = args.dataset == "shakespeare"
    batch = args.batch or (4 if lstm else 10)
    momentum = 0.9 if lstm else 0.0
    model = make_model(args.dataset, 96 if lstm else 10, args.model).to(dev)
    theta = parameters_to_vector(model.parameters()).detach()
    traits = REGISTRY[args.method].personal
    head = traits is not None and traits.head
    head_steps = args.steps if head else 0
    shape = (args.clients, args.steps + head_steps, batch)
    if lstm:
        xs = torch.randint(0, 96, (*shape, 80), device=dev)
        ys = torch.randint(0, 96, shape, device=dev)
    else:
        xs = torch.randn(*shape, 1, 28, 28, device=dev)
        ys = torch.randint(0, 10, shape, device=dev)
    precision = args.precision
    engines = {
        "loop": lambda: loop_deltas(model, theta, xs, ys, lr=0.1, momentum=momentum, precision=precision),
        "vectorized": lambda: vectorized_deltas(model, theta, xs, ys, lr=0.1, momentum=momentum, precision=precision),
    }
    if args.method in PERSONAL:
        mask = head_mask(model)
        heads = theta[mask].unsqueeze(0).repeat(args.clients, 1) if head else None
        training = LocalTraining(steps=args.steps, batch=batch, lr=0.1, momentum=momentum,
                                 rho=0.1 if traits.sam else 0.0, precision=precision)  # fmt: skip
        rule = dict(head_steps=head_steps, training=training, mask=mask)

        def loop() -> torch.Tensor:
            return torch.stack([
                client_update(model, theta, None if heads is None else heads[k], xs[k], ys[k], **rule)[0]
                for k in range(args.clients)
            ])  # fmt: skip

        def vectorized() -> torch.Tensor:
            return client_updates_vectorized(model, theta, heads, xs, ys, **rule)[0]

        engines = {"loop": loop, "vectorized": vectorized}
    if precision != "fp32" and args.method == "dp-fedavg":  # bf16's reference: vectorized fp32, interleaved
        engines["vectorized fp32"] = lambda: vectorized_deltas(model, theta, xs, ys, lr=0.1, momentum=momentum)
    times: dict[str, list[float]] = {name: [] for name in engines}
    outs: dict[str, torch.Tensor] = {}
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for rep in range(args.repeats + 1):  # the first round of each engine warms up
        for name, fn in engines.items():
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            outs[name] = fn()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            if rep:
                times[name].append(time.perf_counter() - t0)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    diff = float((outs["loop"] - outs["vectorized"]).abs().max())
    print(
        f"{args.dataset} setting, {args.method} ({precision}): {args.clients} clients × {args.steps}"
        f"{f' + {head_steps} head' if head_steps else ''} steps × batch {batch}, "
        f"{type(model).__name__} (d = {theta.numel():,}), {torch.get_num_threads()} threads, device {dev}"
    )
    t_loop, t_vec = (statistics.median(times[n]) for n in ("loop", "vectorized"))
    rows = []
    for name in times:
        t = statistics.median(times[name])
        line = f"{name:<10} median {t:.3f} s/round, min {min(times[name]):.3f}"
        if lstm:
            per = t / (args.clients * args.steps)
            line += f"; {per:.4f} s per client-step, {71 * 30 * per:.0f} s for the paper's 71 × 30"
        print(line)
        rows.append((name, f"{t:.3f}", f"{min(times[name]):.3f}", f"{t_loop / t:.2f}x"))
    notes = [f"speed-up of the vectorized engine over the loop (medians): {t_loop / t_vec:.2f}x",
             f"max |Δ_loop − Δ_vec| = {diff:.2e}"]  # fmt: skip
    print(f"speed-up   {t_loop / t_vec:.2f}x   (max |Δ_loop − Δ_vec| = {diff:.2e})")
    if "vectorized fp32" in times:
        t32 = statistics.median(times["vectorized fp32"])
        rel = float((outs["vectorized"] - outs["vectorized fp32"]).norm() / outs["vectorized fp32"].norm())
        notes.append(f"{precision} against fp32: {t32 / t_vec:.2f}x (relative difference of the updates {rel:.2e})")
        print(notes[-1])
    if args.record:
        setting = (
            f"{args.dataset}, {args.method} ({precision}): {args.clients} clients × {args.steps} steps × "
            f"batch {batch}, "
            f"{type(model).__name__} (d = {theta.numel():,}), {torch.get_num_threads()} threads, {args.repeats} repeats"
        )
        variant = "".join(f"_{v}" for v in (args.dataset, args.method, precision)
                          if v not in ("fmnist", "dp-fedavg", "fp32"))  # fmt: skip
        result = Result(
            name=f"bench_train_engines{variant.replace('-', '_')}",
            title="Local training per round: the loop engine against the vectorized engine",
            tables=(
                Table(
                    caption=setting,
                    columns=("engine", "median (s/round)", "min (s/round)", "loop / engine"),
                    rows=tuple(rows),
                ),
            ),
            notes=tuple(notes),
        )
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
