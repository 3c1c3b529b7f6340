"""A round of the FMNIST Table 2 plan with the paper-scale CNN (cnn2-paper, d = 1,663,370): ours against the best
plain PyTorch loop doing the same work, in the same process, interleaved.

Ours is the trainer's round as ``hdp-plan train`` runs it: the plan's Poisson sample (about 120 clients), each
client's τ = 5 steps of batch 10 at lr 0.1 by the vectorized engine (``clients_deltas``), and the group aggregation
(``GroupAggregator.round``): for P-FedAvg the weighted sum of the updates, for GDPFed+ also the clipping, the
groups' noise and Top-k. The plain loops train the same clients on the same batches with a textbook
``nn.Sequential`` copy of the network and ``torch.optim.SGD``, then sum the updates with P-FedAvg's weights:

- ``plain, 2 threads``: one client after the other, torch's default intra-op threads (what most code does);
- ``plain, 1 thread``: the same on one thread;
- ``plain, channels-last``: the model and inputs in ``torch.channels_last`` (the usual CPU recipe), default threads;
- ``plain, 2 workers``: the clients split between worker threads, one intra-op thread each.

The reference is the plain loop with the least median. ``--eval`` also times one evaluation of 10,000 test images:
ours (``evaluate``) against the plain loop over batches of 1,000 with default threads. Data are synthetic 28×28
images (the cost does not depend on the pixels); P-FedAvg's update is checked against the plain loops'. Every
repeat runs each variant once, in an order that rotates; the load average is printed per repeat. Usage::

    PYTHONPATH=. python benchmarks/bench_paper_round.py [--repeats 5] [--eval] [--record]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from hdp_planner import plan
from hdp_planner.report.results import Result, Table, write_result
from hdp_planner_train.learning.engines import (
    ClientData,
    LocalTraining,
    batch_indices,
    clients_deltas,
    evaluate,
    in_workers,
)
from hdp_planner_train.learning.models import make_model
from hdp_planner_train.rules.aggregate import GroupAggregator
from hdp_planner_train.rules.noise_sources import noise_source
from hdp_planner_train.rules.sampling import round_rows, sample_round
from hdp_planner_train.rules.specs import method_spec

STEPS, BATCH, LR, PER_CLIENT = 5, 10, 0.1, 10


def textbook_cnn() -> nn.Module:
    """McMahan et al. 2017's CNN as a tutorial writes it (the parameters in ``CNN2Paper``'s order)."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, 10),
    )  # fmt: skip


def plain_deltas(model: nn.Module, theta: torch.Tensor, xs: torch.Tensor, ys: torch.Tensor, cl: bool) -> torch.Tensor:
    """Each client's Δ_i after τ steps of torch.optim.SGD from θ, one client after the other."""
    local = copy.deepcopy(model)
    if cl:
        local = local.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(local.parameters(), lr=LR)
    out = []
    for i in range(xs.shape[0]):
        with torch.no_grad():
            for p, v in zip(local.parameters(), torch.split(theta, [p.numel() for p in local.parameters()])):
                p.copy_(v.view_as(p))
        for s in range(xs.shape[1]):
            opt.zero_grad(set_to_none=True)
            x = xs[i, s].contiguous(memory_format=torch.channels_last) if cl else xs[i, s]
            F.cross_entropy(local(x), ys[i, s]).backward()
            opt.step()
        out.append(torch.cat([p.detach().reshape(-1) for p in local.parameters()]) - theta)
    return torch.stack(out) if out else theta.new_zeros((0, theta.numel()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--eval", action="store_true", help="also time one evaluation of 10,000 test images")
    ap.add_argument("--record", action="store_true", help="write benchmarks/results/bench_paper_round.json")
    args = ap.parse_args()
    threads = torch.get_num_threads()
    torch.manual_seed(0)
    p = plan([0.5, 1.5, 3.0], n=6000, rounds=50, q=0.02, clip=1.5, local_steps=STEPS, sparsity=(0.7, 0.8, 0.9))
    specs = {m: method_spec(p, m) for m in ("p-fedavg", "gdpfed+")}
    model = make_model("fmnist", model="cnn2-paper")
    plain_model = textbook_cnn()
    vector_to_parameters(parameters_to_vector(model.parameters()).detach(), plain_model.parameters())
    theta = parameters_to_vector(model.parameters()).detach()
    n = sum(specs["p-fedavg"].sizes)
    x_train = torch.randn(n * PER_CLIENT, 1, 28, 28)
    y_train = torch.randint(0, 10, (n * PER_CLIENT,))
    clients = [np.arange(i * PER_CLIENT, (i + 1) * PER_CLIENT) for i in range(n)]
    x_test, y_test = torch.randn(10_000, 1, 28, 28), torch.randint(0, 10, (10_000,))

    data = ClientData(x_train, y_train, clients)
    training = LocalTraining(steps=STEPS, batch=BATCH, lr=LR, momentum=0.0)

    def ours(method: str) -> Callable[[int], torch.Tensor]:
        spec = specs[method]

        def round_(rnd: int) -> torch.Tensor:
            ids, group_of_row = round_rows(sample_round(spec, seed=0, rnd=rnd))
            deltas = clients_deltas(model, training, theta=theta, data=data, ids=ids, seed=0, rnd=rnd)
            source = noise_source("seeded", seed=0, rnd=rnd) if spec.private else None
            update, _ = GroupAggregator(spec).round(deltas, group_of_row, source=source, rnd=rnd)
            return theta + update

        return round_

    def plain(variant: str) -> Callable[[int], torch.Tensor]:
        spec = specs["p-fedavg"]

        def round_(rnd: int) -> torch.Tensor:
            ids, group_of_row = round_rows(sample_round(spec, seed=0, rnd=rnd))
            idx = torch.as_tensor(batch_indices(clients, ids, steps=STEPS, batch=BATCH, seed=0, rnd=rnd))
            xs, ys = x_train[idx], y_train[idx]
            cl = variant == "channels-last"
            if variant == "2 workers":
                halves = np.array_split(np.arange(len(ids)), threads)
                deltas = torch.cat(in_workers(lambda h: plain_deltas(plain_model, theta, xs[h], ys[h], False),
                                              halves, threads))  # fmt: skip
            else:
                torch.set_num_threads(1 if variant == "1 thread" else threads)
                try:
                    deltas = plain_deltas(plain_model, theta, xs, ys, cl)
                finally:
                    torch.set_num_threads(threads)
            weights = torch.as_tensor(np.asarray(spec.weight)[group_of_row], dtype=deltas.dtype)
            return theta + (weights[:, None] * deltas).sum(0)

        return round_

    variants: dict[str, Callable[[int], torch.Tensor]] = {
        "ours, P-FedAvg": ours("p-fedavg"),
        "ours, GDPFed+": ours("gdpfed+"),
        f"plain, {threads} threads": plain("threads"),
        "plain, 1 thread": plain("1 thread"),
        "plain, channels-last": plain("channels-last"),
        f"plain, {threads} workers": plain("2 workers"),
    }
    if args.eval:

        def plain_eval(_: int) -> torch.Tensor:
            plain_model.eval()
            with torch.no_grad():
                out = torch.cat([plain_model(x_test[i : i + 1000]) for i in range(0, 10_000, 1000)])
            plain_model.train()
            return out.argmax(-1)

        variants["ours, evaluation"] = lambda _: torch.tensor(evaluate(model, x_test, y_test))
        variants["plain, evaluation"] = plain_eval
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    loads = [os.getloadavg()[0]]
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; {threads} threads")
    for rep in range(args.repeats + 1):  # repeat 0 warms up; each repeat starts with another variant
        order = names[rep % len(names) :] + names[: rep % len(names)]
        outs = {}
        for name in order:
            t0 = time.perf_counter()
            outs[name] = variants[name](rep)
            if rep:
                times[name].append(time.perf_counter() - t0)
        ref = outs["ours, P-FedAvg"]
        diff = max(float((outs[v] - ref).abs().max()) for v in names if v.startswith("plain,") and "eval" not in v)
        loads.append(os.getloadavg()[0])
        print(f"repeat {rep}{' (warm-up)' if not rep else ''}: load {loads[-1]:.2f}; "
              + ", ".join(f"{k} {times[k][-1]:.2f}s" for k in names if rep)
              + f"; max |θ_ours − θ_plain| {diff:.1e} (θ up to {float(ref.abs().max()):.2f})")  # fmt: skip
    train = [n for n in names if "evaluation" not in n]
    best = min((n for n in train if n.startswith("plain")), key=lambda n: statistics.median(times[n]))
    rows = []
    for name in names:
        t = times[name]
        reference = best if "evaluation" not in name else "plain, evaluation"
        ratio = statistics.median(t) / statistics.median(times[reference])
        ratio_min = min(t) / min(times[reference])
        rows.append((name, f"{statistics.median(t):.2f}", f"{min(t):.2f}", f"{ratio:.2f}x", f"{ratio_min:.2f}x"))
        print(f"{name:<22} median {statistics.median(t):.2f} s, min {min(t):.2f} s; against {reference}: "
              f"{ratio:.2f}x (medians), {ratio_min:.2f}x (minima)")  # fmt: skip
    load_note = f"load average (1 min) over the run: {min(loads):.2f} to {max(loads):.2f}"
    print(load_note)
    if args.record:
        result = Result(
            name="bench_paper_round",
            title="A round of the FMNIST Table 2 plan with the paper-scale CNN: ours against plain PyTorch loops",
            tables=(
                Table(
                    caption=f"seconds per round (evaluation: per 10,000 images), {args.repeats} interleaved repeats, "
                    f"{threads} threads; about 120 clients × 5 steps × batch 10, d = {theta.numel():,}; "
                    f"reference: {best} (least median)",
                    columns=("variant", "median (s)", "min (s)", "against reference (medians)", "(minima)"),
                    rows=tuple(rows),
                ),
            ),
            notes=(load_note,),
        )
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
