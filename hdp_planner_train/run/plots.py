"""A run's convergence figure: accuracy and loss by round, and the privacy audit's ε per group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def plot_history(metrics: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hdp_planner.report.plots import round_ticks

    rounds = [h["round"] for h in metrics["history"]]
    audit = metrics.get("audit")
    fig, axes = plt.subplots(1, 3 if audit else 2, figsize=(15 if audit else 10, 4))
    a1, a2 = axes[0], axes[1]
    a1.plot(rounds, [h["accuracy"] for h in metrics["history"]], marker="o", ms=3)
    a1.set_xlabel("communication round")
    a1.set_ylabel("test accuracy (%)")
    a2.plot(rounds, [h["loss"] for h in metrics["history"]], marker="o", ms=3, color="C1")
    a2.set_xlabel("communication round")
    a2.set_ylabel("test loss (cross-entropy)")
    for ax in (a1, a2):
        round_ticks(ax)
    if audit:
        plot_audit(axes[2], audit["groups"])
    fig.suptitle(f"{metrics['method']} on {metrics['dataset']} (seed {metrics['seed']})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_audit(ax, groups: list[dict[str, Any]]) -> None:
    """Planned ε beside the empirical ε (95% interval) and the one-run lower bound, per group."""
    x = np.arange(len(groups))
    ax.bar(x - 0.2, [g["epsilon_planned"] for g in groups], 0.4, color="C7", label="planned ε (accountant)")
    emp = [g["epsilon_empirical"] if g["epsilon_empirical"] is not None else np.nan for g in groups]
    err = [
        [e - g["epsilon_empirical_interval"][0], g["epsilon_empirical_interval"][1] - e]
        if g["epsilon_empirical_interval"] else [0.0, 0.0]
        for e, g in zip(emp, groups)
    ]  # fmt: skip
    ax.bar(x + 0.2, emp, 0.4, yerr=np.array(err).T, capsize=3, color="C2", label="empirical ε̂ (95% interval)")
    ax.plot(x, [g["epsilon_lower_bound"] for g in groups], "k_", ms=18, mew=2, ls="none", label="one-run lower bound")
    ax.set_xticks(x, [f"group {g['group']}" for g in groups])
    ax.set_ylabel("ε")
    ax.set_title("privacy audit (canaries)")
    ax.legend(frameon=False, fontsize=8)
