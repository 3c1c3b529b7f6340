"""Median local-training time per round, loop vs vectorized engine, on GDPFed's FMNIST setting.

120 sampled clients × τ = 5 local steps, batch 10, the 2-layer CNN, lr 0.1, synthetic 28×28 data
(the engines' cost does not depend on the pixel values). Usage::

    python benchmarks/bench_train_engines.py [--clients 120] [--repeats 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.nn.utils import parameters_to_vector

from hdp_planner_train.engines import loop_deltas, vectorized_deltas
from hdp_planner_train.models import make_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=120)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    torch.manual_seed(0)
    model = make_model("fmnist").to(dev)
    theta = parameters_to_vector(model.parameters()).detach()
    xs = torch.randn(args.clients, args.steps, args.batch, 1, 28, 28, device=dev)
    ys = torch.randint(0, 10, (args.clients, args.steps, args.batch), device=dev)

    def timed(fn) -> tuple[float, torch.Tensor]:
        times, out = [], None
        for _ in range(args.repeats + 1):  # first call warms up
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return statistics.median(times[1:]), out

    t_loop, a = timed(lambda: loop_deltas(model, theta, xs, ys, 0.1, 0.0))
    t_vec, b = timed(lambda: vectorized_deltas(model, theta, xs, ys, 0.1, 0.0))
    diff = float((a - b).abs().max())
    print(
        f"FMNIST setting: {args.clients} clients × {args.steps} steps × batch {args.batch}, 2-layer CNN "
        f"(d = {theta.numel():,}), {torch.get_num_threads()} threads, device {dev}"
    )
    print(f"loop       median {t_loop:.3f} s/round")
    print(f"vectorized median {t_vec:.3f} s/round")
    print(f"speed-up   {t_loop / t_vec:.2f}x   (max |Δ_loop − Δ_vec| = {diff:.2e})")


if __name__ == "__main__":
    main()
