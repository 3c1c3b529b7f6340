"""HDP-Pooled: per-group q_m and clip C_m, one pooled noise draw, chosen for the least error of the update.

The mechanism (one pool, as IDP-FedAvg; Boenisch et al., NeurIPS 2023): group m joins at q_m (r_m = q_m|G_m|
expected clients), its clients clip to C_m = a_m·C, the sum of every group carries ONE draw N(0, s²), and the
update is (Σ clipped + noise)/Σ_j r_j (:func:`hdp_planner.rules.noise.pooled_weights`, with Σ_m r_mC_m = C·Σ_m r_m so
the step stays the mean update's). Group m's effective noise multiplier is σ_m = s/C_m, calibrated for ε_m at
q_m by the plan's accountant: σ_m ≥ σ*(ε_m, q_m). Group m's share of the update's weight is
α_m = r_mC_m/Σ_j r_jC_j, so C_m = C·α_m·Σr/r_m and the least s for shares α is C·Σr·max_m α_mσ*_m/r_m.

Objective: the expected squared error of the applied update per coordinate,

    J(q, α) = Λ + V,   Λ = C²·max_m (α_mσ*_m/r_m)²,   V = (C²/d)·Σ_m α_m²(1 − q_m)/r_m,

Λ the exact DP noise (:func:`hdp_planner.rules.noise.lambda_exact`, pooled) and V the client-sampling variance that
GDPFed Problem 1's μ4 term stands for (Appendix E): the variance of Σ_m α_m·(mean of group m) under Poisson
sampling, bounded for clipped updates ‖Δ‖ ≤ C_m (the whole vector's variance over d coordinates; omitted when d
is unknown). At α_m ∝ r_m/σ*_m every group sits exactly at its budget and Λ = C²/(Σ_m r_m/σ*_m)², less than
GDPFed's C²Σ_m(α_mσ_m/r_m)² at the same q by Cauchy-Schwarz. IDP-FedAvg-Sample (one σ, per-group q) and
IDP-FedAvg-Scale (one q, per-group C_m) are points of this family, and GDPFed-op's (q, α) is one too: starting
from each and keeping the best, HDP-Pooled is never worse on J than any of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from hdp_planner.accounting.accountants import get_accountant
from hdp_planner.accounting.calibration import Accountant
from hdp_planner.methods.idp_fedavg import idp_fedavg_sample, idp_fedavg_scale
from hdp_planner.methods.method import Method, RoundRules
from hdp_planner.methods.options import BaselineOptions
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.method_noise import MethodNoise
from hdp_planner.planning.plan import Plan
from hdp_planner.planning.rows import calibrated_sigma, derived_row, planned_epsilon
from hdp_planner.rules.noise import lambda_exact, pooled_weights

NAME = "HDP-Pooled"
Q_FLOOR = 1e-6
"""Smallest q_m the solver tries (a group is never dropped: its clients would never be sampled)."""


def sampling_variance(
    share: Sequence[float], *, q: Sequence[float], expected_clients: Sequence[float], clip: float, model_dim: int | None
) -> float:
    """V = (C²/d)·Σ_m α_m²(1 − q_m)/r_m: per coordinate, the Poisson-sampling variance of Σ_m α_m·(mean of group
    m) for updates clipped to C_m (at most C_m² per client), spread over d coordinates; 0 when d is None."""
    if model_dim is None:
        return 0.0
    a, qv, r = (np.asarray(x, dtype=float) for x in (share, q, expected_clients))
    return float(clip**2 / model_dim * np.sum(a**2 * (1.0 - qv) / r))


def objective(plan: Plan, m: MethodNoise, model_dim: int | None) -> float:
    """J = exact Λ + sampling variance V of any row, its weight shares from :meth:`Plan.representation`."""
    r, share = plan.representation(m)
    q = [x / s for x, s in zip(r, plan.groups.size)]
    return m.lambda_exact + sampling_variance(
        share, q=q, expected_clients=r, clip=plan.config.clip, model_dim=model_dim
    )


def best_shares(room: np.ndarray, spread: np.ndarray, lower: np.ndarray, weight: float) -> tuple[float, np.ndarray]:
    """min over t, α of t² + weight·Σ α_m²·spread_m subject to α_m ≤ t·room_m, α_m ≥ lower_m, Σα = 1.

    room_m = r_m/σ*_m, spread_m = (1 − q_m)/r_m, weight = 1/d: J/C² at fixed q is t² + V/C² with
    t = max_m α_mσ*_m/r_m. For fixed t the α are a water-filling (α_m = clip(ν/spread_m, lower_m, t·room_m),
    ν by bisection); the value is convex in t, minimised by Brent between the least feasible t and the t where
    no cap binds. With weight 0 (no d) t is the least feasible and α the least-variance shares there.
    """
    spread = np.maximum(spread, 1e-300)

    def fill(t: float) -> np.ndarray:
        upper = np.maximum(t * room, lower)
        # Σ_m clip(ν/spread_m, lower_m, upper_m) is piecewise linear in ν with kinks at lower·spread, upper·spread:
        # find the segment where it crosses 1 and solve there (exact water-filling, no bisection)
        kinks = np.unique(np.concatenate([lower * spread, upper[np.isfinite(upper)] * spread[np.isfinite(upper)]]))
        sums = np.clip(kinks[:, None] / spread, lower, upper).sum(axis=1)
        k = int(np.searchsorted(sums, 1.0))
        if k == len(kinks):  # every α_m at its cap (Σ caps = 1 up to rounding), or no cap: every α_m = ν/spread_m
            nu = kinks[-1] if np.all(np.isfinite(upper)) else max(kinks[-1], 1.0 / float(np.sum(1.0 / spread)))
        elif k == 0:
            nu = kinks[0]
        else:
            lo, hi = kinks[k - 1], kinks[k]
            nu = lo + (1.0 - sums[k - 1]) * (hi - lo) / (sums[k] - sums[k - 1])
        a = np.clip(nu / spread, lower, upper)
        return a / a.sum()

    def value(t: float) -> float:
        a = fill(t)
        return float(np.max(a / room)) ** 2 + weight * float(np.sum(a**2 * spread))

    t_min = max(1.0 / float(np.sum(room)), float(np.max(lower / room)))
    if weight == 0.0:
        return t_min, fill(t_min)
    free = fill(np.inf)  # the least-variance shares, no noise cap
    t_max = max(t_min, float(np.max(free / room)))
    if t_max <= t_min * (1 + 1e-12):
        return t_min, fill(t_min)
    res = minimize_scalar(value, bounds=(t_min, t_max), method="bounded", options={"xatol": t_min * 1e-10})
    t = min((t_min, t_max, float(res.x)), key=value)
    a = fill(t)
    return float(np.max(a / room)), a


@dataclasses.dataclass(frozen=True, kw_only=True)
class PooledPoint:
    """A point (q, α) of the pooled family with its calibrated σ*_m and J/C²."""

    q: tuple[float, ...]
    share: tuple[float, ...]
    sigma: tuple[float, ...]
    value: float


def evaluate(
    q: Sequence[float],
    *,
    eps: Sequence[float],
    sizes: Sequence[int],
    config: PlanConfig,
    model_dim: int | None,
    accountant: Accountant = "rdp",
) -> PooledPoint:
    """The best shares α at rates ``q``, σ*_m calibrated with ``accountant`` (RDP inside the solver)."""
    qv, g = np.asarray(q, dtype=float), np.asarray(sizes, dtype=float)
    sigma = np.asarray(
        calibrated_sigma(
            epsilon=list(eps), delta=config.delta, q=qv.tolist(), rounds=config.rounds, accountant=accountant
        )
    )
    r = qv * g
    lower = config.min_share * g / g.sum()
    weight = 0.0 if model_dim is None else 1.0 / model_dim
    t, share = best_shares(r / sigma, (1.0 - qv) / r, lower, weight)
    value = t * t + weight * float(np.sum(share**2 * (1.0 - qv) / r))
    return PooledPoint(q=tuple(qv.tolist()), share=tuple(share.tolist()), sigma=tuple(sigma.tolist()), value=value)


def solve_pooled(
    eps: Sequence[float],
    sizes: Sequence[int],
    config: PlanConfig,
    model_dim: int | None,
    starts: Sequence[Sequence[float]],
) -> PooledPoint:
    """Least J/C² over q (Σ q_m|G_m| = qn, Q_FLOOR ≤ q_m ≤ 1) and α, by SLSQP on the shares r_m/qn from the two
    best of ``starts`` (rates q); the best of the starts and the solutions, so never worse than any start."""
    g = np.asarray(sizes, dtype=float)
    total = config.q * g.sum()
    points = [evaluate(q, eps=eps, sizes=sizes, config=config, model_dim=model_dim) for q in starts]
    if len(g) > 1:
        lower, upper = np.minimum(Q_FLOOR * g / total, 0.5 / len(g)), np.minimum(g / total, 1.0)
        scale = min(p.value for p in points)

        def scaled(s: np.ndarray) -> float:
            q = np.clip(np.clip(s, lower, upper) / np.sum(np.clip(s, lower, upper)) * total / g, Q_FLOOR, 1.0)
            return evaluate(q, eps=eps, sizes=sizes, config=config, model_dim=model_dim).value / scale

        for p in sorted(points, key=lambda p: p.value)[:2]:  # SLSQP from the two best starts
            s0 = np.asarray(p.q) * g / total
            res = minimize(
                scaled,
                np.clip(s0 / s0.sum(), lower, upper),
                method="SLSQP",
                bounds=list(zip(lower, upper)),
                constraints=[{"type": "eq", "fun": lambda s: np.sum(s) - 1.0}],
                options={"ftol": 1e-10, "maxiter": 200, "eps": 1e-7},
            )
            s = np.clip(res.x, lower, upper)
            q = np.clip(s / s.sum() * total / g, Q_FLOOR, 1.0)
            if np.isclose(np.sum(q * g), total, rtol=1e-9):
                points.append(evaluate(q, eps=eps, sizes=sizes, config=config, model_dim=model_dim))
    return min(points, key=lambda p: p.value)


def pooled_row(plan: Plan, point: PooledPoint, model_dim: int | None, name: str = NAME) -> MethodNoise:
    """The plan row of ``point``: σ*_m recalibrated with the plan's accountant at q, the shares re-optimised for
    those σ*_m, C_m = C·α_m·Σr/r_m, one pooled std s = max_m C_mσ*_m, effective σ_m = s/C_m ≥ σ*_m."""
    c, gdp = plan.config, plan.method("GDPFed")
    acc = get_accountant(c.accountant)  # the search ran with RDP: any other calibration re-evaluates the point
    final = (
        evaluate(point.q, eps=gdp.epsilon, sizes=gdp.size, config=c, model_dim=model_dim, accountant=c.accountant)
        if acc.refines or acc.rule
        else point
    )
    r = [qm * s for qm, s in zip(final.q, gdp.size)]
    clips = tuple(c.clip * a * sum(r) / rm for a, rm in zip(final.share, r))
    std = max(cm * s for cm, s in zip(clips, final.sigma))
    sigma = tuple(std / cm for cm in clips)
    weight = tuple(float(w) for w in pooled_weights(r))
    spent = tuple(
        planned_epsilon(noise_multiplier=s, q=qm, rounds=c.rounds, delta=c.delta, accountant=c.spending_accountant)
        for s, qm in zip(sigma, final.q)
    )
    ones = tuple(1.0 for _ in r)
    return derived_row(
        name, gdp, plan, q=final.q, noise_multiplier=sigma, k_ratio=ones, weight=weight, epsilon_spent=spent,
        clip=clips, pooled=True,
    )  # fmt: skip


def hdp_pooled(plan: Plan, model_dim: int | None, corners: Sequence[MethodNoise]) -> MethodNoise:
    """HDP-Pooled for ``plan``: started from uniform q, GDPFed-op's q and each of ``corners``' q (the
    IDP-FedAvg rows), solved with RDP σ*, its final σ_m calibrated and checked with the plan's accountant."""
    c, gdp = plan.config, plan.method("GDPFed")
    starts = [gdp.q, plan.method("GDPFed-op").q, *(m.q for m in corners)]
    point = solve_pooled(gdp.epsilon, gdp.size, c, model_dim, starts)
    return pooled_row(plan, point, model_dim)


def recalibrated_lambda(plan: Plan, m: MethodNoise, accountant: Accountant) -> float | None:
    """Exact Λ of row ``m`` with every σ_m recalibrated for ε_m at its q_m by ``accountant`` (same q, C_m, k_m, ω);
    a pooled row's std becomes max_m C_mσ'_m. None for a σ schedule (composed with RDP only)."""
    if m.schedule is not None:
        return None
    c = plan.config
    sigma = calibrated_sigma(
        epsilon=list(m.epsilon), delta=c.delta, q=list(m.q), rounds=c.rounds, accountant=accountant
    )
    clips = m.clips(c.clip)
    if m.pooled:
        std = max(cm * s for cm, s in zip(clips, sigma))
        sigma = [std / cm for cm in clips]
    return lambda_exact(m.weight, sigma, m.k_ratio, clips, m.pooled)


def pooled(plan: Plan, options: BaselineOptions) -> MethodNoise:
    """HDP-Pooled (:func:`hdp_planner.methods.pooled.hdp_pooled`), started from both IDP-FedAvg rows (reused if
    planned)."""
    have = {m.name: m for m in plan.methods}
    corners = [
        have[name] if name in have else build(plan, options)
        for name, build in (("IDP-FedAvg-Sample", idp_fedavg_sample), ("IDP-FedAvg-Scale", idp_fedavg_scale))
    ]
    return hdp_pooled(plan, options.model_dim, corners)


def sampling_note(plan: Plan, options: BaselineOptions) -> str | None:
    """The plan's note when the client-sampling variance is left out (no model dimension d)."""
    if options.model_dim is not None:
        return None
    return f"{NAME} minimises the DP noise Λ alone: give --model-dim d to add the client-sampling variance"


METHODS = (
    Method(
        key="hdp-pooled",
        row=NAME,
        rules=RoundRules(sampling="per-group-q", pooled=True, clip="per-group"),
        build=pooled,
        audit=True,
        flower=True,
        note=sampling_note,
    ),
)
