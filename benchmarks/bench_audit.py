"""Cost of the privacy audit on one GDPFed FMNIST round: the same round with and without canaries, interleaved.

One round of the FMNIST Table 2 plan's GDPFed+ (q_m ≈ 0.7/1.9/3.4% of 2,000 clients per group, C = 1.5, the
2-layer CNN, d = 26,010, τ = 5 steps of batch 10, synthetic 28×28 data: the cost does not depend on the pixels):
local training of the sampled clients, then ``aggregate`` (reference) or the audited round: the joining
canaries appended, the same ``aggregate`` with the ``observe`` hook (one DCT per group). 2,000 canaries per
group (the default at d = 26,010). Repeats alternate reference and audited round; the load average is printed.
Usage::

    PYTHONPATH=. python benchmarks/bench_audit.py [--repeats 5] [--threads 1] [--record]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch.nn.utils import parameters_to_vector

from hdp_planner.report.results import Result, Table, write_result
from hdp_planner_train.audit.canaries import CanaryAuditor
from hdp_planner_train.learning.engines import vectorized_deltas
from hdp_planner_train.learning.models import make_model
from hdp_planner_train.rules.aggregate import Observers, aggregate
from hdp_planner_train.rules.noise_sources import SeededNoise
from hdp_planner_train.rules.sampling import round_rows, sample_round
from hdp_planner_train.rules.specs import GroupSpec

SPEC = GroupSpec(
    method="gdpfed+", sizes=(2000, 2000, 2000), q=(0.0069, 0.0189, 0.0342), noise_multiplier=(1.19, 0.934, 0.838),
    k_ratio=(0.7, 0.8, 0.9), weight=(0.05, 0.05, 0.05), clip=1.5,
)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--record", action="store_true", help="write benchmarks/results/bench_audit.json")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = make_model("fmnist")
    theta = parameters_to_vector(model.parameters()).detach()
    d = theta.numel()
    auditor = CanaryAuditor(SPEC, d, seed=0)

    def one_round(rnd: int, audited: bool) -> dict[str, float]:
        t0 = time.perf_counter()
        sampled = sample_round(SPEC, seed=0, rnd=rnd)
        k = sum(len(s) for s in sampled)
        xs, ys = torch.randn(k, 5, 10, 1, 28, 28), torch.randint(0, 10, (k, 5, 10))
        _, group_of_row = round_rows(sampled)
        deltas = vectorized_deltas(model, theta, xs, ys, lr=0.1, momentum=0.0)
        t1 = time.perf_counter()
        observers = Observers()
        if audited:
            deltas, group_of_row = auditor.insert(deltas, group_of_row, rnd)
            observers = Observers(observe=auditor.observe)
        aggregate(deltas, group_of_row, SPEC, SeededNoise(0, rnd), rnd=rnd, observers=observers)
        t2 = time.perf_counter()
        return {"round": t2 - t0, "server": t2 - t1}

    one_round(0, True)  # warm-up
    ref: list[dict[str, float]] = []
    aud: list[dict[str, float]] = []
    for r in range(1, args.repeats + 1):  # the same round r with and without canaries, alternating which goes first
        pair = [(ref, False), (aud, True)] if r % 2 else [(aud, True), (ref, False)]
        for sink, audited in pair:
            sink.append(one_round(r, audited))
    print(f"load average {os.getloadavg()}; {torch.get_num_threads()} threads; d = {d:,}; {args.repeats} repeats")
    joins = sum(auditor.per_group / 2 * q for q in SPEC.q)
    print(f"canaries per group {auditor.per_group}; in-canary joins per round ≈ {joins:.0f}")
    rows = []
    for key in ("round", "server"):
        a, b = [x[key] for x in ref], [x[key] for x in aud]
        print(
            f"{key:6s}: reference median {statistics.median(a):.3f} s (min {min(a):.3f}); audited median "
            f"{statistics.median(b):.3f} s (min {min(b):.3f}); "
            f"ratio median {statistics.median(b) / statistics.median(a):.3f}, min {min(b) / min(a):.3f}"
        )
        rows.append((
            "whole round" if key == "round" else "server step (after local training)",
            f"{statistics.median(a):.3f} ({min(a):.3f})",
            f"{statistics.median(b):.3f} ({min(b):.3f})",
            f"{statistics.median(b) / statistics.median(a):.2f}x ({min(b) / min(a):.2f}x)",
        ))  # fmt: skip
    report_t0 = time.perf_counter()
    auditor.report([0.5, 1.5, 3.0], 6000**-1.1)
    report_s = time.perf_counter() - report_t0
    print(f"report (once per run, {len(aud) + 1} rounds observed): {report_s:.2f} s")
    if args.record:
        result = Result(
            name="bench_audit",
            title="Cost of the canary audit on one GDPFed+ FMNIST round",
            tables=(
                Table(
                    caption=f"seconds, median (min) of {args.repeats} interleaved repeats; d = {d:,}, "
                    f"{auditor.per_group} canaries per group, {torch.get_num_threads()} threads",
                    columns=("part", "without canaries", "audited", "audited / without"),
                    rows=tuple(rows),
                ),
            ),
            notes=(f"the report at the end of a run ({len(aud) + 1} rounds observed) took {report_s:.1f} s once",),
        )
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
