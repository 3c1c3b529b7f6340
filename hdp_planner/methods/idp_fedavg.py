"""IDP-FedAvg (Boenisch et al., NeurIPS 2023) at client level as in GDPFed B.2: the Sample and Scale variants' plan
rows and round rules (one pooled noise draw; per-group q_m, or per-group C_m)."""

from __future__ import annotations

import math

from hdp_planner.accounting.accountants import get_accountant
from hdp_planner.accounting.calibration import calibrate_q
from hdp_planner.accounting.search import smallest_meeting
from hdp_planner.methods.method import Method, RoundRules
from hdp_planner.methods.options import BaselineOptions
from hdp_planner.planning.method_noise import MethodNoise
from hdp_planner.planning.plan import Plan
from hdp_planner.planning.rows import calibrated_sigma, derived_row, planned_epsilon
from hdp_planner.rules.noise import pooled_weights


def idp_fedavg_sample(plan: Plan, options: BaselineOptions) -> MethodNoise:
    """IDP-FedAvg, Sample variant (Boenisch et al., NeurIPS 2023, §4.1; client level as in GDPFed B.2).

    One pool with one shared σ: group m joins at the largest q_m at which σ meets ε_m over T rounds, and σ is
    set so that Σ_m q_m|G_m| = qn, the expected participants of DP-FedAvg (IDP-SGD's ``get_sample_rates``,
    here solved to 1e-11 in log σ, at or just above the root, instead of its 0.1% bisection). The pool's sum
    carries one N(0, C²σ²) and is averaged over the qn expected participants. The q_m are found with RDP; with
    ``--accountant pld`` σ is then the largest PLD σ the groups need at their q_m, so every row is calibrated by
    the same accountant.
    """
    c, gdp = plan.config, plan.method("GDPFed")
    eps, sizes = gdp.epsilon, gdp.size
    target = c.q * sum(sizes)

    def rates(sigma: float) -> list[float]:
        return [calibrate_q(epsilon=e, delta=c.delta, noise_multiplier=sigma, rounds=c.rounds) for e in eps]

    def shortfall(log_sigma: float) -> float:  # non-increasing: more noise admits larger q_m
        return 1.0 - sum(qm * s for qm, s in zip(rates(math.exp(log_sigma)), sizes)) / target

    # the loosest group's σ at q gives every group q_m ≤ q, the strictest group's σ at q gives every q_m ≥ q
    lo, hi = (
        math.log(calibrated_sigma(epsilon=e, delta=c.delta, q=c.q, rounds=c.rounds, accountant="rdp"))
        for e in (max(eps), min(eps))
    )
    sigma = math.exp(lo)
    if lo < hi and shortfall(lo) > 0:  # else q_m ≥ q at every σ: where 1 − (1 − q)^T ≤ δ, any σ meets ε_m
        sigma = math.exp(smallest_meeting(shortfall, lo=lo, hi=hi, start=lo, xtol=1e-11, hi_meets=True).x)
    q = tuple(rates(sigma))
    if get_accountant(c.accountant).refines:  # re-solve σ at the q_m the RDP search found
        sigma = max(calibrated_sigma(epsilon=list(eps), delta=c.delta, q=list(q), rounds=c.rounds, accountant="pld"))
    r = [qm * s for qm, s in zip(q, sizes)]
    spent = tuple(
        planned_epsilon(noise_multiplier=sigma, q=qm, rounds=c.rounds, delta=c.delta, accountant=c.spending_accountant)
        for qm in q
    )
    return derived_row(
        "IDP-FedAvg-Sample",
        gdp,
        plan,
        q=q,
        noise_multiplier=tuple(sigma for _ in eps),
        weight=tuple(float(w) for w in pooled_weights(r)),
        epsilon_spent=spent,
        pooled=True,
    )


def idp_fedavg_scale(plan: Plan, options: BaselineOptions) -> MethodNoise:
    """IDP-FedAvg, Scale variant (Boenisch et al., NeurIPS 2023, §4.2; client level as in GDPFed B.2).

    One pool: every client joins at q and is clipped to its group's C_m; the pool's sum carries one draw
    N(0, (Cσ̄)²) and is averaged over the qn expected participants, as DP-FedAvg. As in the IDP-SGD code
    (``get_weights``, individualize="clipping"): σ_m is the noise multiplier that ε_m needs at q, σ̄ = Σ_m
    (|G_m|/n)σ_m and C_m = C·σ̄/σ_m, so group m's effective noise multiplier Cσ̄/C_m is σ_m and it spends ε_m.
    The harmonic mean of the C_m, weighted by |G_m|/n, is C.
    """
    base = plan.method("GDPFed")
    n = sum(base.size)
    mean_sigma = sum(s * size / n for s, size in zip(base.noise_multiplier, base.size))
    clip = tuple(plan.config.clip * mean_sigma / s for s in base.noise_multiplier)
    weight = tuple(float(w) for w in pooled_weights(base.expected_clients))
    return derived_row("IDP-FedAvg-Scale", base, plan, clip=clip, pooled=True, weight=weight)


def one_sigma(plan: Plan, m: MethodNoise) -> str | None:
    """IDP-FedAvg-Sample adds one σ for every group."""
    return "must add one σ for every group" if len(set(m.noise_multiplier)) != 1 else None


METHODS = (
    Method(
        key="idp-fedavg-sample",
        row="IDP-FedAvg-Sample",
        rules=RoundRules(sampling="per-group-q", pooled=True),
        build=idp_fedavg_sample,
        audit=True,
        flower=True,
        check=one_sigma,
    ),
    Method(
        key="idp-fedavg-scale",
        row="IDP-FedAvg-Scale",
        rules=RoundRules(sampling="plan-q", pooled=True, clip="per-group"),
        build=idp_fedavg_scale,
        audit=True,
        flower=True,
    ),
)
