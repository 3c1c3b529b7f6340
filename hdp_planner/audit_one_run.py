"""The rigorous one-run ε lower bound of Steinke, Nasr and Jagielski (2023), "Privacy auditing with one (1) training
run": canaries each "in" with probability 1/2, guesses on the top-scored ones, and the (ε, δ) p-value of their §5.
The canary audit (:mod:`hdp_planner.audit`) reports it beside its empirical ε."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

STEINKE_GUESSES = (10, 20, 50, 100, 200, 500, 1000)
"""Numbers of top-scored canaries guessed "in" (Bonferroni over this grid keeps the bound a proof)."""


def steinke_p_value(m: int, *, r: int, v: int, eps: float, delta: float) -> float:
    """P[≥ v of r guesses correct] under (ε, δ)-DP with m canaries each "in" with probability 1/2: Steinke,
    Nasr, Jagielski (2023), the (ε, δ) theorem of their §5 (binomial tail of ε-randomized response plus the δ
    term 2mδ·max_i P[v−i ≤ Bin(r, p) < v]/i), as in the p-value routine of their appendix."""
    p = 1.0 / (1.0 + math.exp(-eps))
    beta = float(stats.binom.sf(v - 1, r, p))
    if v == 0:
        return min(beta, 1.0)
    partial = np.cumsum(stats.binom.pmf(v - np.arange(1, v + 1), r, p))
    alpha = float(np.max(partial / np.arange(1, v + 1)))
    return min(beta + alpha * delta * 2 * m, 1.0)


def steinke_epsilon(m: int, *, r: int, v: int, delta: float, p_value: float) -> float:
    """Largest ε (bisection, 30 steps) whose p-value of ``v`` correct out of ``r`` guesses is still < p_value:
    (ε, δ)-DP with a smaller ε is rejected at that level. 0 when even ε = 0 is not rejected."""
    if r == 0 or steinke_p_value(m, r=r, v=v, eps=0.0, delta=delta) >= p_value:
        return 0.0
    lo, hi = 0.0, 1.0
    while steinke_p_value(m, r=r, v=v, eps=hi, delta=delta) < p_value and hi < 100:
        hi += 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        if steinke_p_value(m, r=r, v=v, eps=mid, delta=delta) < p_value:
            lo = mid
        else:
            hi = mid
    return lo


def steinke_lower_bound(scores: np.ndarray, inserted: np.ndarray, *, delta: float, confidence: float = 0.95) -> float:
    """Rigorous ε lower bound at ``confidence`` from one run (Steinke et al. 2023): guess "in" for the top-r
    scores (score_j = Σ_t z_{j,t}), abstain on the rest; the best r of :data:`STEINKE_GUESSES` with a
    Bonferroni correction over that grid, so the reported bound holds at the stated confidence."""
    m = len(scores)
    grid = [r for r in STEINKE_GUESSES if r <= m] or [m]
    order = np.argsort(-np.asarray(scores), kind="stable")
    level = (1 - confidence) / len(grid)
    return max(steinke_epsilon(m, r=r, v=int(inserted[order[:r]].sum()), delta=delta, p_value=level) for r in grid)
