"""The closed-form score of a grouping: how much noise Problem 1's optimum leaves for given groups.

Under Theorem 1's bound σ_m² = a_m q_m² with a_m = 7T(ε_m + 2 log(1/δ))/ε_m², and with φ_m = 0 (k_m = d),
Problem 1's objective at r_m = q_m|G_m| is

    μ4/R + μ5 · Σ_m a_m r_m⁴/|G_m|² / (R² (Σ_j r_j²)²),     R = qn = Σ_m r_m,

which is scale-free in x_m = r_m², so minimising Σ c_m x_m²/(Σ x)² (c_m = a_m/|G_m|²) gives x_m ∝ 1/c_m,
i.e. r_m ∝ |G_m|/√a_m, and the optimum is

    J* = μ4/R + μ5/(R² H),     H = Σ_m |G_m|²/a_m = Σ_m |G_m|² f(ε_m)/(7T),   f(ε) = ε²/(ε + 2 log(1/δ)).

H is a sum over groups of a term that depends on the group alone (its size and its smallest budget), so the
ω_m coupling disappears at the optimum. With Remark 3's φ_m* instead of φ = 0 the objective drops by a term of
order B²/(4μ4R) with B = μ5/(RH) (all groups share B at the optimum); B ≪ μ4 in every realistic setting, so H is
the score (:func:`closed_form_check` compares it with :class:`~hdp_planner.planning.problem.SamplingProblem`).
The closed form ignores q_m ≤ 1; a plan is then solved with the full Problem 1 on the chosen groups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from hdp_planner.planning.config import PlanConfig
    from hdp_planner.planning.grouping import Groups


def budget_score(epsilon: np.ndarray | float, *, delta: float) -> np.ndarray:
    """f(ε) = ε²/(ε + 2 log(1/δ)): a group of size g and budget ε adds g²·f(ε)/(7T) to H (Theorem 1's bound).

    Args:
        epsilon: one budget or an array of them.
        delta: the plan's δ.

    Returns:
        f at every ``epsilon``.
    """
    e = np.asarray(epsilon, dtype=float)
    return e * e / (e + 2.0 * math.log(1.0 / delta))


def closed_form_noise_term(*, sizes: Sequence[int], epsilons: Sequence[float], config: PlanConfig) -> float:
    """The grouping-dependent part μ5/(R²H) of the closed-form optimum (μ4/R does not depend on the groups).

    Args:
        sizes: |G_m| per group.
        epsilons: ε_m per group.
        config: δ, T, q, η and τ of the plan (``config.n`` is not read).

    Returns:
        μ5/(R²H) with R = q·Σ|G_m| and H = Σ_m |G_m|² f(ε_m)/(7T).
    """
    g = np.asarray(sizes, dtype=float)
    h = float(np.sum(g * g * budget_score(np.asarray(epsilons), delta=config.delta))) / (7.0 * config.rounds)
    total = config.q * float(g.sum())
    return config.coefficients.mu5 / (total * total * h)


def closed_form_objective(*, sizes: Sequence[int], epsilons: Sequence[float], config: PlanConfig) -> float:
    """Problem 1's optimum under Theorem 1's bound with φ = 0, ignoring q_m ≤ 1.

    Args:
        sizes: |G_m| per group.
        epsilons: ε_m per group, the smallest budget of each group's members (no member's budget is
            exceeded).
        config: δ, T, q, η and τ of the plan (``config.n`` is not read).

    Returns:
        J* = μ4/R + μ5/(R²H) (the module docstring derives it).
    """
    total = config.q * float(sum(sizes))
    return config.coefficients.mu4 / total + closed_form_noise_term(sizes=sizes, epsilons=epsilons, config=config)


def closed_form_q(*, sizes: Sequence[int], epsilons: Sequence[float], config: PlanConfig) -> np.ndarray:
    """The q_m of the closed-form optimum: r_m ∝ |G_m|/√a_m with Σ r_m = qn.

    Args:
        sizes: |G_m| per group.
        epsilons: ε_m per group.
        config: δ, T, q, η and τ of the plan (``config.n`` is not read).

    Returns:
        q_m per group (may exceed 1 for tiny groups: the closed form ignores q_m ≤ 1).
    """
    g = np.asarray(sizes, dtype=float)
    e = np.asarray(epsilons, dtype=float)
    a = 7.0 * config.rounds * (e + 2.0 * math.log(1.0 / config.delta)) / (e * e)
    r = g / np.sqrt(a)
    r = r * config.q * g.sum() / r.sum()
    return r / g


def closed_form_check(groups: Groups, config: PlanConfig) -> tuple[float, float]:
    """Compare the closed form with Problem 1 solved in full (Remark 3's φ_m*, q_m ≤ 1).

    Args:
        groups: the groups.
        config: the plan's settings.

    Returns:
        (closed form J*, :class:`~hdp_planner.planning.problem.SamplingProblem`'s solved objective); they agree to
        O(B²/μ4).
    """
    from hdp_planner.planning.problem import SamplingProblem
    from hdp_planner.planning.rows import sigma2_model

    problem = SamplingProblem(
        sizes=groups.sizes, q=config.q, sigma2_of=sigma2_model(groups, config), coef=config.coefficients
    )
    return closed_form_objective(sizes=groups.sizes, epsilons=groups.epsilons, config=config), problem.solve().objective
