"""Public cohorts, private coins: participation hidden from the server.

Each round, the server names a public **cohort** of ``cohort`` clients of a group. Every member flips a private coin,
heads with probability ``coin`` = r/m (r: the group's expected contributors in the trusted-server plan), from the
OS's CSPRNG. Heads contributes its clipped update, tails a zero vector; both add their discrete Gaussian noise
share and send a masked vector through the group's SecAgg+. The server sees the cohort, who replied and the group's
noisy sum, but not who contributed; each client takes part in at most K = ⌈T·m/|G|⌉ cohorts (the cap it enforces
itself).

Against the server, one cohort membership of client i is then the Poisson subsampling, at rate p, of the
distributed discrete Gaussian sum of one release: the server's view is x_i + R with probability p and R otherwise,
R being the others' contributions plus the shares of the honest survivors, and the zero-out neighbour (x_i = 0)
gives R. So the RDP of one membership is at most Zhu and Wang's Theorem 6 applied to Proposition 14 of Kairouz,
Liu and Steinke (the bound :func:`~.accounting.epsilon_third_parties` computes for third parties at q over T
rounds, here at p over K memberships), and adaptive composition (Mironov 2017, Proposition 1) adds at most K of
them, whatever cohorts the server chooses. The proof and its assumptions are on the documentation's hidden
participation page.

The noise law depends only on public plan quantities: the share variance and the grid γ are those of a round of
``cohort`` clients whose t − k honest guaranteed survivors carry z (:func:`~.law.grid_law`), so the release carries
no trace of how many coins came up heads.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from hdp_planner.distributed.accounting import calibrate_noise_multiplier, epsilon_third_parties
from hdp_planner.distributed.law import GroupLaw, LawError, grid_law
from hdp_planner.distributed.rounds import group_tau_d
from hdp_planner.distributed.trust import TrustModel
from hdp_planner.planning.plan import MethodNoise, Plan
from hdp_planner.rules.noise import lambda_exact

COHORT_STEPS = 2 ** (1 / 2)
"""Candidate cohorts grow by this factor from the expected contributors up to the cap (plus the cap itself)."""


@dataclass(frozen=True, kw_only=True)
class CohortGroup:
    """One group's hidden-participation round: ``cohort`` m public members, each contributing with probability
    ``coin`` p, at most ``memberships`` K cohorts per client, reconstruction threshold ``threshold`` t, noise
    multiplier z of the honest shares, the ε that z spends against the server, and the decoded noise's effective
    multiplier (√(per-coordinate error variance of the sum)/C_m: every member's share, rounding, wrap-around)."""

    cohort: int
    coin: float
    memberships: int
    threshold: int
    noise_multiplier: float
    epsilon_server: float
    effective_noise_multiplier: float

    @property
    def expected_contributors(self) -> float:
        """m·p: the expected number of heads, GDPFed's r_m."""
        return self.cohort * self.coin


@dataclass(frozen=True, kw_only=True)
class CohortRow:
    """A method row with participation hidden from the server: its groups, its Λ, the trusted server's Λ, and the
    vectors each round sends (one per cohort member)."""

    name: str
    groups: tuple[CohortGroup, ...]
    lambda_cohort: float
    lambda_server: float

    @property
    def price(self) -> float:
        """Λ with hidden participation over Λ with a trusted server."""
        return self.lambda_cohort / self.lambda_server

    @property
    def vectors_per_round(self) -> int:
        """Masked vectors a round sends: every cohort member's."""
        return sum(g.cohort for g in self.groups)


@functools.lru_cache(maxsize=4096)
def cohort_group(
    *,
    epsilon: float,
    delta: float,
    size: int,
    expected: float,
    cohort: int,
    rounds: int,
    clip: float,
    trust: TrustModel,
) -> CohortGroup | None:
    """The group's parameters for a cohort of ``cohort`` of its ``size`` clients and ``expected`` contributors a
    round: z calibrated so that K = ⌈T·m/|G|⌉ memberships subsampled at p = r/m spend at most ``epsilon`` against
    the server. None where the cohort cannot release (fewer than 2 members, a coin above 1, or no honest guaranteed
    survivor)."""
    if cohort < 2 or cohort > size or expected > cohort or expected <= 0:
        return None
    coin = expected / cohort
    memberships = min(rounds, math.ceil(rounds * cohort / size - 1e-9))
    tau_d = group_tau_d(cohort, int(trust.model_dim or 0))
    z = calibrate_noise_multiplier(epsilon=epsilon, delta=delta, q=coin, rounds=memberships, tau_d=tau_d)
    try:
        law = cohort_law(cohort=cohort, noise_multiplier=z, clip=clip, trust=trust)
    except LawError:
        return None
    gamma = law.encoding.gamma
    variance = gamma**2 * cohort * (law.share_sigma2 + 0.25) + law.wrap_bound * (law.encoding.modulus * gamma) ** 2
    return CohortGroup(
        cohort=cohort,
        coin=coin,
        memberships=memberships,
        threshold=law.threshold,
        noise_multiplier=z,
        epsilon_server=epsilon_third_parties(noise_multiplier=z, q=coin, rounds=memberships, delta=delta, tau_d=tau_d),
        effective_noise_multiplier=math.sqrt(variance) / clip,
    )


def cohort_threshold(cohort: int, *, survivors: float, colluders: int) -> int:
    """SecAgg+'s reconstruction threshold for a cohort: t = ⌈F·m⌉, a strict majority of the cohort (Flower's SecAgg+
    has no consistency round), at least k + 1 and at least 2."""
    return max(math.ceil(survivors * cohort - 1e-9), cohort // 2 + 1, colluders + 1, 2)


def cohort_law(*, cohort: int, noise_multiplier: float, clip: float, trust: TrustModel) -> GroupLaw:
    """The cohort's noise law: threshold t (:func:`cohort_threshold`), every member's share sized so that the t − k
    honest guaranteed survivors carry z, on the finest grid that holds the m shares without wrap-around. Raises
    :class:`~.law.LawError` where no grid does, or where the colluders leave no honest survivor."""
    t = cohort_threshold(cohort, survivors=trust.survivors, colluders=trust.colluders)
    if t > cohort:
        raise LawError(f"a cohort of {cohort} cannot wait for {t} survivors")
    return grid_law(noise_multiplier=noise_multiplier, threshold=t, shares=cohort, colluders=trust.colluders,
                    dim=int(trust.model_dim or 0), clip=clip, bits=trust.bits, wrap=trust.wrap,
                    sized_for=t - trust.colluders)  # fmt: skip


def candidate_cohorts(expected: float, size: int, cap: int | None) -> list[int]:
    """Cohort sizes tried for a group: ⌈r⌉·√2^j up to min(|G|, cap), and that limit itself."""
    top = size if cap is None else min(size, cap)
    m = max(2, math.ceil(expected))
    out = []
    while m < top:
        out.append(m)
        m = max(m + 1, math.ceil(m * COHORT_STEPS))
    return [*out, top] if top >= max(2, math.ceil(expected)) else []


def cohort_row(
    m: MethodNoise,
    plan: Plan,
    trust: TrustModel,
    *,
    max_cohort: int | None = None,
    max_multiple: float | None = None,
) -> CohortRow | None:
    """Row ``m`` with hidden participation: each group keeps the row's expected contributors r_m = q_m·|G_m| and
    weights, and takes the cohort (at most ``max_cohort`` clients and ``max_multiple``·r_m) whose noise term
    ω_m²C_m²σ_eff²k_m/d is smallest (Λ is a sum over groups, so each group chooses alone). None where the row has
    no distributed form (a pooled draw, a σ schedule, no noise) or a group cannot hide its participation under the
    caps."""
    if m.pooled or m.schedule is not None or all(s == 0 for s in m.noise_multiplier):
        return None
    c = plan.config
    groups = []
    for eps, size, q, clip, weight, k in zip(m.epsilon, m.size, m.q, m.clips(c.clip), m.weight, m.k_ratio):
        expected = q * size
        caps = [c for c in (max_cohort, None if max_multiple is None else math.floor(max_multiple * expected)) if c]
        tried = []
        for cohort in candidate_cohorts(expected, size, min(caps, default=None)):
            g = cohort_group(
                epsilon=eps, delta=c.delta, size=size, expected=expected, cohort=cohort, rounds=c.rounds,
                clip=clip, trust=trust,
            )  # fmt: skip
            if g is not None:
                tried.append(g)
        if not tried:
            return None
        groups.append(min(tried, key=lambda g: (weight * clip * g.effective_noise_multiplier) ** 2 * k))
    lam = lambda_exact(m.weight, [g.effective_noise_multiplier for g in groups], m.k_ratio, m.clips(c.clip))
    return CohortRow(name=m.name, groups=tuple(groups), lambda_cohort=lam, lambda_server=m.lambda_exact)


def cohort_frontier(
    m: MethodNoise, plan: Plan, trust: TrustModel, *, multiples: tuple[float, ...] = (2, 5, 10, 20, 50)
) -> list[tuple[float | None, CohortRow]]:
    """What each factor of communication buys: the row with every group's cohort capped at ``multiple`` times its
    expected contributors, for each multiple, then uncapped (None: cohorts up to the whole group)."""
    out: list[tuple[float | None, CohortRow]] = []
    for multiple in (*multiples, None):
        row = cohort_row(m, plan, trust, max_multiple=multiple)
        if row is not None:
            out.append((multiple, row))
    return out
