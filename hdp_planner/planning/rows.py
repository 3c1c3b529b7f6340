"""A plan row's calibrations: σ_m for each group's budget (memoized, never below the spending accountant's exact σ),
the ε a row spends, σ_m²(q_m) inside Problem 1, and one method's row from its groups (:class:`~.plan.MethodNoise`,
with ω_m, ε spent and Λ)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from hdp_planner.accounting.accountants import closed_form_sigma2, get_accountant
from hdp_planner.accounting.calibration import CALIBRATIONS, Accountant, calibrate_sigma
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.grouping import Groups
from hdp_planner.planning.method_noise import MethodNoise
from hdp_planner.planning.plan import Plan
from hdp_planner.rules.noise import PaperWeights, aggregation_weights, lambda_exact, lambda_for


def rdp_sigmas(p: Plan) -> tuple[float, ...] | None:
    """For a PLD plan, the σ_m the RDP accountant gives each planned group at the same (ε_m, q_m): what the tighter
    PLD accountant saves (σ_m/σ_m,RDP); None for a plan of another accountant."""
    c, g = p.config, p.groups
    if not get_accountant(c.accountant).refines:
        return None
    return tuple(
        calibrate_sigma(epsilon=e, delta=c.delta, q=q, rounds=c.rounds, accountant="rdp")
        for e, q in zip(g.epsilon, g.q)
    )


def calibrated_sigma(
    *, epsilon: float | Sequence[float], delta: float, q: float | Sequence[float], rounds: int, accountant: Accountant
) -> float | list[float]:
    """σ for budget ε at rate q; for sequences ε_m, q_m, the list of σ_m, the groups not calibrated before
    solved together (one vectorised batch). Memoized with the ε each σ spends (accounting.CALIBRATIONS)."""
    if isinstance(epsilon, (int, float)):
        return calibrated_sigma(epsilon=[epsilon], delta=delta, q=[q], rounds=rounds, accountant=accountant)[0]
    sigma = CALIBRATIONS.sigmas(epsilons=epsilon, delta=delta, q=q, rounds=rounds, accountant=accountant)
    acc = get_accountant(accountant)
    if acc.rule:  # Theorem 1 under-noises at small q: never go below the exact σ of the accountant measuring it
        spending = CALIBRATIONS.sigmas(epsilons=epsilon, delta=delta, q=q, rounds=rounds, accountant=acc.spending)
        sigma = [max(s, r) for s, r in zip(sigma, spending)]
    return sigma


def planned_epsilon(*, noise_multiplier: float, q: float, rounds: int, delta: float, accountant: Accountant) -> float:
    """ε that ``rounds`` rounds at (σ, q) spend at ``delta`` (memoized with the calibrations)."""
    return CALIBRATIONS.spent(noise_multiplier=noise_multiplier, q=q, rounds=rounds, delta=delta, accountant=accountant)


def clear_caches() -> None:
    """Forget memoized calibrations (for cold timings; results do not depend on the cache)."""
    CALIBRATIONS.clear()


def derived_row(name: str, base: MethodNoise, plan: Plan, **changes: object) -> MethodNoise:
    """``base`` renamed with ``changes``, its Λ recomputed (exact: Table 5 has no convention for the baselines and the
    pooled row), from the r.m.s. σ of a schedule and the row's own clips, weights and pooling."""
    m = dataclasses.replace(base, name=name, **changes)  # type: ignore[arg-type]
    sigma = m.rms_noise_multiplier(plan.config.rounds)
    lam = lambda_exact(m.weight, sigma, m.k_ratio, m.clips(plan.config.clip), m.pooled)
    return dataclasses.replace(m, lam=lam, lambda_exact=lam)


def method_noise(
    name: str,
    *,
    epsilons: Sequence[float],
    sizes: Sequence[int],
    q: Sequence[float],
    k_ratio: Sequence[float],
    config: PlanConfig,
    noise_multiplier: Sequence[float] | None = None,
    paper_weights: PaperWeights | None = None,
) -> MethodNoise:
    """Calibrate σ_m (unless given), weigh the groups with ω_m, measure ε spent and Λ for one method (``paper_weights``:
    the row's weights in GDPFed Table 5's Λ, for ``lambda_convention="paper"``)."""
    sigma = noise_multiplier or calibrated_sigma(
        epsilon=list(epsilons), delta=config.delta, q=list(q), rounds=config.rounds, accountant=config.accountant
    )
    r = [qm * s for qm, s in zip(q, sizes)]
    weight = aggregation_weights(r)
    spent = [
        planned_epsilon(
            noise_multiplier=s, q=qm, rounds=config.rounds, delta=config.delta, accountant=config.spending_accountant
        )
        for s, qm in zip(sigma, q)
    ]
    return MethodNoise(
        name=name,
        epsilon=tuple(float(e) for e in epsilons),
        size=tuple(int(s) for s in sizes),
        q=tuple(float(x) for x in q),
        noise_multiplier=tuple(float(s) for s in sigma),
        k_ratio=tuple(float(k) for k in k_ratio),
        weight=tuple(float(w) for w in weight),
        epsilon_spent=tuple(float(e) for e in spent),
        lam=lambda_for(
            config.lambda_convention,
            paper_weights,
            expected_clients=r,
            weight=weight,
            noise_multiplier=sigma,
            k_ratio=k_ratio,
            clip=config.clip,
        ),
        lambda_exact=lambda_exact(weight, sigma, k_ratio, config.clip),
    )


def sigma2_model(groups: Groups, config: PlanConfig):
    """σ_m²(q_m) inside Problem 1: Theorem 1's bound, or the RDP accountant (PLD is too slow in a loop)."""
    eps = np.asarray(groups.epsilons)
    if config.sigma_model == "bound" or get_accountant(config.accountant).rule:
        return lambda q_vec: closed_form_sigma2(
            epsilon=eps, delta=config.delta, q=np.asarray(q_vec, dtype=float), rounds=config.rounds
        )
    return lambda q_vec: np.square(
        calibrated_sigma(
            epsilon=eps.tolist(),
            delta=config.delta,
            q=np.asarray(q_vec).tolist(),
            rounds=config.rounds,
            accountant="rdp",
        )
    )
