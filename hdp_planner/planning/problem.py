"""GDPFed Problem 1: per-group client sampling ratios q_m, with Remark 3's sparsification level k_m.

Notation (GDPFed, Section 4 and Appendices E-F): r_m = q_m|G_m| expected clients of group m,
Σ_m r_m = qn, ω_m = (1/qn)·r_m²/Σ_j r_j² (Appendix B.2), μ4 = 32ητ + η + η/τ, μ5 = 4/(ητ),
φ_m = (1 - k_m/d)², and Problem 1's objective Σ_m ω_m(μ4(1 + φ_m) + μ5(1 - √φ_m)ω_m σ_m²/r_m²).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import minimize

SigmaModel = Literal["bound", "accountant"]
SIGMA_MODELS: tuple[str, ...] = ("bound", "accountant")
K_FLOOR = 0.01
"""Smallest k_m/d the closed form may give; below it Remark 3's coarse formula is clamped."""


@dataclass(frozen=True, kw_only=True)
class Coefficients:
    """μ4 and μ5 of Problem 1 from the learning rate η and local steps τ."""

    lr: float
    local_steps: int

    @property
    def mu4(self) -> float:
        eta, tau = self.lr, self.local_steps
        return 32.0 * eta * tau + eta + eta / tau

    @property
    def mu5(self) -> float:
        return 4.0 / (self.lr * self.local_steps)


def reweighting(expected_clients: Sequence[float]) -> np.ndarray:
    """ω_m = (1/Σr)·r_m²/Σ_j r_j² (GDPFed B.2), with Σr = qn the expected participants per round."""
    r = np.asarray(expected_clients, dtype=float)
    return r**2 / (r.sum() * np.sum(r**2))


def closed_form_k_ratio(
    *, weight: np.ndarray, sigma2: np.ndarray, expected_clients: np.ndarray, coef: Coefficients
) -> tuple[np.ndarray, np.ndarray]:
    """Remark 3: k_m/d = 1 - 2ω_mσ_m²/(ητμ4 r_m²), clamped to [K_FLOOR, 1]: the sparsity that minimises
    Problem 1's objective (convex in each k_m).

    Args:
        weight: ω_m per group (:func:`reweighting`).
        sigma2: σ_m² per group.
        expected_clients: r_m = q_m|G_m| per group.
        coef: η, τ and μ4.

    Returns:
        (k_m/d per group, which groups were clamped to K_FLOOR).
    """
    raw = 1.0 - 2.0 * weight * sigma2 / (coef.lr * coef.local_steps * coef.mu4 * expected_clients**2)
    return np.clip(raw, K_FLOOR, 1.0), raw < K_FLOOR


def objective(
    *,
    expected_clients: np.ndarray,
    sigma2: np.ndarray,
    coef: Coefficients,
    k_ratio: np.ndarray | None,
) -> float:
    """Problem 1's objective Σ_m ω_m(μ4(1 + φ_m) + μ5(1-√φ_m)σ_m²ω_m/r_m²), with φ_m = (1 - k_m/d)².

    Its noise term weighs each group's *average* (Appendix F), so it is μ5/(C²(qn)²) times the exact Λ of the
    aggregation the trainer applies (``noise.aggregation_weights``).

    Args:
        expected_clients: r_m = q_m|G_m| per group.
        sigma2: σ_m² per group.
        coef: μ4, μ5 (and η, τ for Remark 3).
        k_ratio: k_m/d per group, or None for Remark 3's optimal k_m (:func:`closed_form_k_ratio`).

    Returns:
        The objective's value.
    """
    w = reweighting(expected_clients)
    if k_ratio is None:
        k_ratio, _ = closed_form_k_ratio(weight=w, sigma2=sigma2, expected_clients=expected_clients, coef=coef)
    phi = (1.0 - k_ratio) ** 2
    noise = w * sigma2 / expected_clients**2
    return float(np.sum(w * (coef.mu4 * (1.0 + phi) + coef.mu5 * k_ratio * noise)))


@dataclass(frozen=True, kw_only=True)
class SamplingSolution:
    """Problem 1's answer: per-group q_m and the objective there (and at uniform q, for comparison)."""

    q: tuple[float, ...]
    objective: float
    uniform_objective: float


@dataclass(frozen=True, kw_only=True)
class SamplingProblem:
    """Problem 1 over q_m subject to Σ_m q_m|G_m| = qn and 0 < q_m ≤ 1.

    ``sigma2_of(q_vector)`` gives σ_m² at candidate ratios (Theorem 1's bound, or an accountant).
    As in the paper (Remark 4), φ_m is Remark 3's optimal φ_m*, whatever sparsity is finally applied:
    a fixed φ_m would make the μ4 term reward moving all weight to the least-sparsified group.
    With Theorem 1's σ ∝ q this reproduces Table 1; with an accountant's σ, which does not shrink like q
    as q → 0, the least noisy allocation starves the strictest groups: Problem 1 has no term
    for what their data would add. ``min_share`` F bounds every group's weight share α_m = r_m²/Σr² ≥ F|G_m|/n
    (F = 1: proportional representation).
    """

    sizes: tuple[int, ...]
    q: float
    sigma2_of: Callable[[np.ndarray], np.ndarray]
    coef: Coefficients
    min_share: float = 0.0

    def shares_met(self, s: np.ndarray) -> bool:
        """Whether the shares s_m = r_m/qn give every group α_m = s_m²/Σs² ≥ F|G_m|/n (to 1e-9)."""
        g = np.asarray(self.sizes, dtype=float)
        return bool(np.all(s**2 / np.sum(s**2) >= self.min_share * g / g.sum() * (1 - 1e-9)))

    def value(self, q_vec: Sequence[float]) -> float:
        """Problem 1's objective at per-group ratios ``q_vec``."""
        g = np.asarray(self.sizes, dtype=float)
        qv = np.asarray(q_vec, dtype=float)
        return objective(expected_clients=qv * g, sigma2=self.sigma2_of(qv), coef=self.coef, k_ratio=None)

    def solve(self) -> SamplingSolution:
        """Minimize with SLSQP on the shares s_m = r_m/qn (scaled to order one; the raw objective is
        O(1/qn)), from the uniform and the Cauchy-Schwarz starts; never worse than uniform sampling."""
        g = np.asarray(self.sizes, dtype=float)
        total = self.q * g.sum()
        uniform = np.full(len(g), self.q)
        uniform_value = self.value(uniform)
        if len(g) == 1:
            return SamplingSolution(q=(self.q,), objective=uniform_value, uniform_objective=uniform_value)
        upper = np.minimum(g / total, 1.0)
        lower = np.full(len(g), 1e-6)
        pop = g / g.sum()

        def scaled(s: np.ndarray) -> float:
            return self.value(s * total / g) / uniform_value

        # With Theorem 1's σ_m² ∝ q_m² and ω_m ∝ r_m², the optimum is r_m ∝ |G_m|/σ_m(q) (Cauchy-Schwarz).
        balanced = g / np.sqrt(self.sigma2_of(uniform))
        starts = [pop, balanced / balanced.sum()]
        constraints = [{"type": "eq", "fun": lambda s: np.sum(s) - 1.0}]
        if self.min_share > 0:  # α_m ≥ F·p_m as s_m² − F·p_m·Σs² ≥ 0; s ∝ √p gives α = p exactly
            constraints.append({"type": "ineq", "fun": lambda s: (s**2 - self.min_share * pop * np.sum(s**2)) * 1e2})
            starts.append(np.sqrt(pop) / np.sqrt(pop).sum())
        best_s, best_val = None, np.inf
        candidates = []
        for s0 in starts:
            res = minimize(
                scaled,
                np.clip(s0, lower, upper),
                method="SLSQP",
                bounds=list(zip(lower, upper)),
                constraints=constraints,
                options={"ftol": 1e-12, "maxiter": 500},
            )
            s = np.clip(res.x, lower, upper)
            candidates += [s / s.sum(), s0 / s0.sum()]
        for s in candidates:
            if np.all(s * total / g <= 1.0 + 1e-12) and self.shares_met(s):
                val = scaled(s)
                if val < best_val:
                    best_s, best_val = s, val
        if best_s is None:
            raise ValueError(
                f"min share {self.min_share:g}: Problem 1 cannot give every group its share of the weight "
                "(a small group would need q_m > 1); lower --min-share or raise --q"
            )
        q_opt = np.minimum(best_s * total / g, 1.0)
        return SamplingSolution(
            q=tuple(float(x) for x in q_opt), objective=best_val * uniform_value, uniform_objective=uniform_value
        )
