"""Client budgets and dataset sizes drawn as in the selection paper (Section VI), for ``hdp-plan select``.

    python examples/make_clients.py                              # writes examples/clients.csv (committed)
    python examples/make_clients.py --budgets uniform -o mnist_clients.csv
    hdp-plan select examples/clients.csv -o probs.csv --plot fig3.png

Dataset sizes |M_k| = |S|·v_k/Σv_i with v_k ~ U(0.5, 1.5) (Section VI-A); budgets from the Gaussian mixture
0.3·N(0.5, 0.2²) + 0.7·N(10, 1²) with non-positive draws redrawn (Fig. 4, Fig. 6 case 1; |S| = 50,000 as
CIFAR-10) or, with ``--budgets uniform``, ε_k ~ U(0, 1) (Tables III-IV; |S| = 60,000 as MNIST).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

TRAIN_SIZE = {"mixture": 50_000, "uniform": 60_000}


def budgets(rng: np.random.Generator, count: int, kind: str) -> np.ndarray:
    if kind == "uniform":
        eps = rng.uniform(0.0, 1.0, count)
        while np.any(eps <= 0):  # U(0, 1) may return exactly 0
            eps[eps <= 0] = rng.uniform(0.0, 1.0, int(np.sum(eps <= 0)))
        return eps
    strict = rng.random(count) < 0.3
    eps = np.where(strict, rng.normal(0.5, 0.2, count), rng.normal(10.0, 1.0, count))
    while np.any(eps <= 0):  # "negative values discarded": redraw them from their component
        bad = eps <= 0
        eps[bad] = np.where(strict[bad], rng.normal(0.5, 0.2, bad.sum()), rng.normal(10.0, 1.0, bad.sum()))
    return eps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--budgets", choices=sorted(TRAIN_SIZE), default="mixture")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--out", default=str(Path(__file__).with_name("clients.csv")))
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    v = rng.uniform(0.5, 1.5, args.clients)
    sizes = np.maximum(1, np.round(TRAIN_SIZE[args.budgets] * v / v.sum())).astype(int)
    eps = budgets(rng, args.clients, args.budgets)
    with open(args.out, "w", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(("client_id", "epsilon", "num_samples"))
        for k, (e, m) in enumerate(zip(eps, sizes)):
            writer.writerow((f"c{k:03d}", f"{e:.4f}", int(m)))
    print(f"{args.clients} clients written to {args.out}")


if __name__ == "__main__":
    main()
