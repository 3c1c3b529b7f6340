r"""GDPFed Figure 2: the optimal sampling ratios q_m against ε_1, with ε_2 and ε_3 fixed (FMNIST, CIFAR-10).

    python examples/figure2.py                 # writes figure2.png
    python examples/figure2.py --out fig.pdf   # or .svg / .pdf

The same sweeps from the command line:

    hdp-plan sweep --eps 0.5,1.5,3.0 --n 6000 --rounds 50 --q 0.02 --min-share 0 --vary 1 --range 0.25:3.5:14 \
        --plot fmnist.png
    hdp-plan sweep --eps 2,6,12 --n 600 --rounds 100 --q 0.1 --clip 1.5 --min-share 0 --vary 1 --range 1:14:14 \
        --plot cifar.png
"""

from __future__ import annotations

import argparse

import numpy as np

from hdp_planner import Groups, PlanConfig
from hdp_planner.report.plots import check_figure_path, draw_sweep, pyplot, save_figure
from hdp_planner.report.sweep import sweep_plan

PANELS = {  # name: (ε per group, n, T, q, C, ε_1 values)
    "FMNIST": ((0.5, 1.5, 3.0), 6000, 50, 0.02, 1.5, np.linspace(0.25, 3.5, 14)),
    "CIFAR-10": ((2.0, 6.0, 12.0), 600, 100, 0.1, 1.5, np.linspace(1.0, 14.0, 14)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="figure2.png", help="figure file (.png, .svg or .pdf)")
    args = parser.parse_args()
    check_figure_path(args.out)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(PANELS), figsize=(11, 4.2))
    for ax, (name, (eps, n, rounds, q, clip, values)) in zip(axes, PANELS.items()):
        groups = Groups.from_budgets(eps, n)
        config = PlanConfig(n=n, rounds=rounds, q=q, clip=clip, min_share=0.0)  # the paper's Problem 1: no share rule
        result = sweep_plan(groups, config, vary=1, values=values)
        fixed = ", ".join(rf"$\varepsilon_{{{m + 1}}}$ = {e:g}" for m, e in enumerate(eps) if m)
        draw_sweep(ax, result, title=f"{name} ($n$ = {n}, $T$ = {rounds}, $q$ = {q:g}; {fixed})")
    fig.suptitle(r"Optimal client sampling ratio $q_m$ against $\varepsilon_1$ (GDPFed Figure 2)")
    fig.tight_layout()
    save_figure(fig, args.out)
    plt.close(fig)
    print(f"figure written to {args.out}")


if __name__ == "__main__":
    main()
