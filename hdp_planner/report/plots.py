"""Figures of plans and sweeps (matplotlib, Agg backend, imported only when a figure is drawn).

- :func:`draw_sweep` / :func:`save_sweep`: optimal q_m against the varied parameter (GDPFed Figure 2);
- :func:`plot_plan`: for a plan, the Table 5 comparison (σ² per group, Λ per method), ε spent against
  rounds per group, and σ against q per group with the plan's q_m marked.

Figures are saved atomically; the format follows the file's suffix (.png, .svg or .pdf).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hdp_planner.accounting.accountants import get_accountant
from hdp_planner.io.files import os_message
from hdp_planner.io.overwrite import Replacing, write_results
from hdp_planner.planning.plan import Plan
from hdp_planner.rules.noise import compare_noise

FORMATS: tuple[str, ...] = ("png", "svg", "pdf")
GROUP_COLORS = (
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#882255", "#44AA99", "#999933",
)  # fmt: skip
METHOD_COLORS = {"DP-FedAvg": "#7f7f7f", "GDPFed": "#56B4E9", "GDPFed-op": "#E69F00", "GDPFed+": "#009E73"}
OTHER_METHOD_COLORS = ("#CC79A7", "#0072B2", "#D55E00", "#882255", "#44AA99", "#999933", "#332288", "#000000")
"""Colours of the baselines' rows, in the plan's order (Okabe-Ito and Tol, readable on white)."""


def method_colors(names: list[str]) -> dict[str, str]:
    """A colour per row: the GDPFed rows keep theirs, the baselines take the next free ones in order."""
    others = iter(OTHER_METHOD_COLORS * (1 + len(names) // len(OTHER_METHOD_COLORS)))
    return {name: METHOD_COLORS.get(name) or next(others) for name in names}


MAX_CURVE_POINTS = 40
SIGMA_GRID_POINTS = 25


def group_color(m: int) -> str:
    return GROUP_COLORS[m % len(GROUP_COLORS)]


def figure_format(path: str | os.PathLike[str]) -> str:
    """The format of a figure path from its suffix; ValueError for anything but png, svg, pdf."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise ValueError(f"{path}: figure format must be one of .png, .svg, .pdf (from the file name)")
    return suffix


def check_figure_path(path: str | os.PathLike[str]) -> None:
    """Fail before any work if a figure cannot be written to ``path``."""
    figure_format(path)
    parent = Path(path).parent
    if str(parent) and not parent.is_dir():
        raise ValueError(f"cannot write {path}: directory {parent} does not exist")


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "figure.dpi": 100,
            "savefig.dpi": 200,
            "font.size": 10,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
            "legend.fontsize": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
        }
    )
    return plt


def round_ticks(ax: Any) -> None:
    """Ticks at whole rounds only on ``ax``'s x axis (a run of a few rounds would otherwise show round 1.25)."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


FIXED_METADATA = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}
"""Metadata that would make the same figure's bytes differ from one drawing to the next (a date), left out."""


def figure_bytes(fig: Any, fmt: str) -> bytes:
    """``fig`` as a ``fmt`` file's bytes: the same figure gives the same bytes (no date; SVG ids from a fixed salt)."""
    import io

    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "hdp-planner"}):
        fig.savefig(buf, format=fmt, bbox_inches="tight", metadata=FIXED_METADATA[fmt])
    return buf.getvalue()


def save_figure(
    fig: Any, path: str | os.PathLike[str], *, overwrite: bool = True, hint: str = "overwrite=True replaces it"
) -> Path:
    """Save ``fig`` through a temporary file and a rename, so no half-written figure is left behind.

    Args:
        fig: the matplotlib figure.
        path: where to save it; its suffix gives the format.
        overwrite: replace a different figure already at ``path`` (False: refuse, :class:`EarlierResult`).
        hint: how the caller asks for the replacement, for the refusal's message.

    Returns:
        ``path``.
    """
    path = Path(path)
    check_figure_path(path)
    write_results({path: figure_bytes(fig, figure_format(path))}, overwrite=overwrite, what="figure", hint=hint)
    return path


# --------------------------------------------------------------------------------------------- sweeps


def draw_sweep(ax: Any, result: Any, title: str | None = None) -> None:
    """Draw the optimal q_m (%) of every group against the varied parameter.

    Args:
        ax: the matplotlib axes.
        result: the sweep (:class:`~hdp_planner.report.sweep.SweepResult`).
        title: the axes' title, or None for one naming the fixed settings.
    """
    x = np.asarray(result.values)
    for m in range(result.count):
        eps = result.epsilons[0][m]
        if result.varied.group == m:
            label = rf"group {m + 1} ($\varepsilon_{{{m + 1}}}$ varies)"
        else:
            label = rf"group {m + 1} ($\varepsilon_{{{m + 1}}}$ = {eps:g})"
        ax.plot(x, 100 * result.q_of(m), marker="o", ms=3.5, lw=1.8, color=group_color(m), label=label)
    if result.varied.group is not None:  # mark where the varied ε meets a fixed one
        for m in range(result.count):
            if m != result.varied.group:
                e = result.epsilons[0][m]
                if x.min() <= e <= x.max():
                    ax.axvline(e, color=group_color(m), ls=":", lw=1, alpha=0.8)
    ax.set_xlabel(result.varied.label)
    ax.set_ylabel(r"optimal sampling ratio $q_m$ (%)")
    c = result.base
    fixed = {"n": rf"$n$ = {c.n}", "rounds": rf"$T$ = {c.rounds}", "q": rf"$q$ = {c.q:g}"}
    fixed.pop(result.varied.name, None)  # the varied parameter is on the x axis, not a constant of the title
    ax.set_title(title or rf"Optimal $q_m$ ({', '.join(fixed.values())})")
    ax.legend(frameon=False)
    ax.set_ylim(bottom=0)


def sweep_figure(result: Any, fmt: str, title: str | None = None) -> bytes:
    """:func:`draw_sweep` in its own figure, as a ``fmt`` file's bytes (:func:`figure_bytes`)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    try:
        draw_sweep(ax, result, title)
        fig.tight_layout()
        return figure_bytes(fig, fmt)
    finally:
        plt.close(fig)


def save_sweep(result: Any, path: str | os.PathLike[str], title: str | None = None, *, overwrite: bool = True) -> Path:
    """Draw :func:`draw_sweep` into its own figure and save it (as :func:`save_figure`).

    Args:
        result: the sweep.
        path: where to save the figure.
        title: as in :func:`draw_sweep`.
        overwrite: replace a different figure already at ``path`` (False: refuse, :class:`EarlierResult`).

    Returns:
        ``path``.
    """
    check_figure_path(path)
    data = sweep_figure(result, figure_format(path), title)
    write_results({path: data}, overwrite=overwrite, what="figure", hint="overwrite=True replaces it")
    return Path(path)


# --------------------------------------------------------------------------------------------- plans


def draw_comparison(plt: Any, p: Plan) -> Any:
    """Table 5 as a figure: every row's σ_m² per group of plan ``p`` (left) and each row's Λ (right).

    Args:
        plt: matplotlib's pyplot (:func:`pyplot`).
        p: the plan; every method row it holds is drawn, the GDPFed rows and each baseline.

    Returns:
        The figure (the caller saves and closes it).
    """
    g = p.groups
    m_count = len(g.size)
    names = [meth.name for meth in p.methods]  # the GDPFed rows and every baseline the plan holds
    colors = method_colors(names)
    left = max(5.0, 1.1 * m_count + 1.5, 0.35 * m_count * len(names))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(left + 5.0, 4.2), gridspec_kw={"width_ratios": [left, 5.0]})
    width = 0.8 / len(names)
    x = np.arange(m_count)
    for i, name in enumerate(names):
        s2 = np.asarray(p.method(name).sigma2)
        if s2.size == 1:  # one group or one pooled draw: every client gets the same noise
            s2 = np.full(m_count, s2[0])
        ax1.bar(
            x + (i - (len(names) - 1) / 2) * width,
            s2,
            width,
            label=name,
            color=colors[name],
            edgecolor="white",
            linewidth=0.5,
        )
    ax1.set_xticks(x, [f"group {m + 1}\n" + rf"$\varepsilon$ = {e:g}" for m, e in enumerate(g.epsilon)])
    ax1.set_ylabel(r"noise multiplier squared $\sigma_m^2$ (variance / $C^2$)")
    ax1.set_title(r"Per-group noise $\sigma_m^2$")
    ax1.set_ylim(0, ax1.get_ylim()[1] * (1.15 if m_count > 4 else 1.3))
    ax1.legend(frameon=False, ncols=min(len(names), 3 if m_count <= 4 else 5), loc="upper right", fontsize=8)
    ax1.grid(axis="x", visible=False)
    lams = np.array([p.method(name).lam for name in names])
    y = np.arange(len(names))[::-1]  # DP-FedAvg on top
    ax2.barh(y, lams, color=[colors[n] for n in names], edgecolor="white", height=0.6)
    base = lams[0]
    for yi, lam in zip(y, lams):
        text = f"{lam:.3g}" if lam == base else f"{lam:.3g} ({compare_noise(lam, base=base)})"
        ax2.annotate(text, (lam, yi), va="center", ha="left", fontsize=8, xytext=(3, 0), textcoords="offset points")
    ax2.set_yticks(y, names)
    ax2.set_xscale("log")
    ax2.set_xlim(lams.min() / 3, lams.max() * 8)
    ax2.set_xlabel(r"$\Lambda$, noise variance per coordinate of the update")
    ax2.set_title(rf"Aggregated noise $\Lambda$ ({p.config.lambda_convention} convention)")
    ax2.grid(axis="y", visible=False)
    c = p.config
    fig.suptitle(
        rf"Noise comparison (Table 5): $n$ = {c.n}, $T$ = {c.rounds}, $q$ = {c.q:g}, $\delta$ = {c.delta:.2g}, "
        rf"$C$ = {c.clip:g}"
    )
    fig.tight_layout()
    return fig


def _round_grid(rounds: int, points: int) -> np.ndarray:
    if rounds <= points:
        return np.arange(1, rounds + 1)
    return np.unique(np.round(np.geomspace(1, rounds, points)).astype(int))


def _draw_spent(plt: Any, p: Plan, epsilon_of: Callable[[float, float, int], float]) -> Any:
    g, c = p.groups, p.config
    points = 15 if get_accountant(c.spending_accountant).refines else MAX_CURVE_POINTS
    t = _round_grid(c.rounds, points)
    m_count = len(g.size)
    ncols = 1 if m_count <= 3 else 2
    fig, ax = plt.subplots(figsize=(6.5, 4.0 + 0.22 * math.ceil((m_count + 1) / ncols)), layout="constrained")
    for m in range(m_count):
        spent = [epsilon_of(g.noise_multiplier[m], g.q[m], int(r)) for r in t]
        color = group_color(m)
        label = (
            rf"group {m + 1}: $\varepsilon_{{{m + 1}}}$ = {g.epsilon[m]:g} "
            rf"($\sigma$ = {g.noise_multiplier[m]:.3g}, $q$ = {100 * g.q[m]:.3g}%)"
        )
        ax.plot(t, spent, color=color, lw=1.8, label=label)
        ax.axhline(g.epsilon[m], color=color, ls="--", lw=1, alpha=0.8)
    ax.plot([], [], color="gray", ls="--", lw=1, label=r"budget $\varepsilon_m$ of the group")
    ax.set_xlim(1, c.rounds)
    round_ticks(ax)
    ax.set_xlabel("training round $t$")
    ax.set_ylabel(rf"$\varepsilon$ spent after $t$ rounds ($\delta$ = {c.delta:.2g})")
    ax.set_title(f"Privacy spent per group ({c.spending_accountant.upper()} accountant)")
    ax.set_ylim(bottom=0, top=max(g.epsilon) * 1.1)
    fig.legend(frameon=False, loc="outside lower center", ncols=ncols, fontsize=8)
    return fig


def _draw_sigma(
    plt: Any, p: Plan, sigma_of: Callable[[float, float], float], bound_of: Callable[[float, float], float]
) -> Any:
    g, c = p.groups, p.config
    lo = max(min(min(g.q), c.q) / 10, 1e-4)
    grid = np.geomspace(lo, 1.0, SIGMA_GRID_POINTS)
    m_count = len(g.size)
    ncols = 1 if m_count <= 3 else 2
    fig, ax = plt.subplots(figsize=(6.5, 4.2 + 0.22 * math.ceil((m_count + 2) / ncols)), layout="constrained")
    for m in range(len(g.size)):
        color = group_color(m)
        e = g.epsilon[m]
        ax.plot(
            grid,
            [sigma_of(e, q) for q in grid],
            color=color,
            lw=1.8,
            label=rf"group {m + 1}, $\varepsilon$ = {e:g}: planned $q_{{{m + 1}}}$ = {100 * g.q[m]:.3g}%",
        )
        ax.plot(grid, [bound_of(e, q) for q in grid], color=color, lw=1, ls=":", alpha=0.8)
        ax.plot([g.q[m]], [g.noise_multiplier[m]], marker="*", ms=13, color=color, mec="black", mew=0.6, ls="none")
    ax.plot([], [], color="gray", lw=1, ls=":", label="Theorem 1 bound")
    ax.plot(
        [], [], marker="*", ms=10, color="gray", mec="black", mew=0.6, ls="none", label=r"planned ($q_m$, $\sigma_m$)"
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"sampling ratio $q_m$ (fraction of the group per round)")
    ax.set_ylabel(r"noise multiplier $\sigma_m$ (noise std / $C$)")
    acc = get_accountant(c.accountant).label
    ax.set_title(rf"Noise needed for each budget ($T$ = {c.rounds}, $\delta$ = {c.delta:.2g}, {acc})")
    fig.legend(frameon=False, loc="outside lower center", ncols=ncols, fontsize=8)
    return fig


def plot_plan(
    p: Plan,
    out_dir: str | os.PathLike[str],
    fmt: str = "png",
    progress: Callable[[str], None] | None = None,
    *,
    overwrite: bool = True,
    hint: str = "overwrite=True replaces it",
) -> dict[str, Replacing]:
    """Draw the comparison, epsilon_spent and sigma_vs_q figures of a plan.

    Args:
        p: the plan.
        out_dir: the folder to write them in (created if missing).
        fmt: the figures' format (png, svg or pdf).
        progress: called with each figure's name before it is drawn, or None.
        overwrite: replace different figures already there (False: refuse before writing any,
            :class:`EarlierResult`).
        hint: how the caller asks for the replacement, for the refusal's message.

    Returns:
        What each write did, by path (:func:`~hdp_planner.io.overwrite.write_results`).

    Raises:
        ValueError: an unknown format.
    """
    from hdp_planner.accounting.calibration import GaussianRounds, calibrate_sigma, closed_form_sigma2, epsilon_spent

    if fmt not in FORMATS:
        raise ValueError(f"figure format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    out = Path(out_dir)
    try:  # every figure's folder checked before the first is computed
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise ValueError(os_message(exc, out)) from None
    c = p.config
    plt = pyplot()

    def spent(sigma: float, q: float, t: int) -> float:
        return epsilon_spent(
            GaussianRounds(noise_multiplier=sigma, q=q, rounds=t), delta=c.delta, accountant=c.spending_accountant
        )

    def sigma_of(e: float, q: float) -> float:
        return calibrate_sigma(epsilon=e, delta=c.delta, q=float(q), rounds=c.rounds, accountant=c.accountant)

    def bound_of(e: float, q: float) -> float:
        return math.sqrt(closed_form_sigma2(epsilon=e, delta=c.delta, q=float(q), rounds=c.rounds))

    drawers = {
        "comparison": lambda: draw_comparison(plt, p),
        "epsilon_spent": lambda: _draw_spent(plt, p, spent),
        "sigma_vs_q": lambda: _draw_sigma(plt, p, sigma_of, bound_of),
    }
    figures = {}
    for name, draw in drawers.items():
        if progress:
            progress(name)
        fig = draw()
        try:
            figures[out / f"{name}.{fmt}"] = figure_bytes(fig, fmt)
        finally:
            plt.close(fig)
    return write_results(figures, overwrite=overwrite, what="figure", hint=hint)
