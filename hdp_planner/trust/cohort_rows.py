"""Public cohorts, private coins: participation hidden from the server.

Each round, the server names a public **cohort** of ``cohort`` clients of a group. Every member flips a private coin,
heads with probability ``coin`` = r/m (r: the group's expected contributors, :func:`cohort_row`), from the OS's
CSPRNG. Heads contributes its clipped update, tails a zero vector; both add their discrete Gaussian noise
share and send a masked vector through the group's SecAgg+. The server sees the cohort, who replied and the group's
noisy sum, but not who contributed; each client takes part in at most K = ⌈T·m/|G|⌉ cohorts (the cap it enforces
itself).

Against the server, one cohort membership of client i is then the Poisson subsampling, at rate p, of the
distributed discrete Gaussian sum of one release: the server's view is x_i + R with probability p and R otherwise,
R being the others' contributions plus the shares of the honest survivors, and the zero-out neighbour (x_i = 0)
gives R. So the RDP of one membership, in both directions, is at most the binomial expansion applied to Proposition
14 of Kairouz, Liu and Steinke (the bound :func:`~hdp_planner.distributed.accounting.epsilon_third_parties` computes
for third parties at q over T rounds, here at p over K memberships), and adaptive composition (Mironov 2017,
Proposition 1) adds at most K of them, whatever cohorts the server chooses. The proof and its assumptions are on the
documentation's hidden participation page.

The noise law depends only on public plan quantities: the share variance and the grid γ are those of a round of
``cohort`` clients whose t − k honest guaranteed survivors carry z (:func:`~hdp_planner.distributed.law.grid_law`),
so the release carries no trace of how many coins came up heads.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from hdp_planner.distributed.accounting import calibrate_noise_multiplier, epsilon_third_parties
from hdp_planner.distributed.cohort_group import CohortGroup
from hdp_planner.distributed.group_law import GroupLaw
from hdp_planner.distributed.law import LawError, grid_law
from hdp_planner.distributed.rounds import group_tau_d
from hdp_planner.methods.gdpfed import OP, PLUS
from hdp_planner.methods.registry import row_paper_weights
from hdp_planner.planning.method_noise import MethodNoise
from hdp_planner.planning.plan import Plan
from hdp_planner.planning.problem import closed_form_k_ratio, reweighting
from hdp_planner.planning.rows import calibrated_sigma, method_noise
from hdp_planner.planning.trust import (
    CohortCaps,
    CohortRow,
    FrontierPoint,
    HiddenSection,
    SecaggParameters,
)
from hdp_planner.rules.noise import aggregation_weights, lambda_exact

COHORT_STEPS = 2 ** (1 / 2)
"""Candidate cohorts grow by this factor from the expected contributors up to the cap (plus the cap itself)."""
FRONTIER_MULTIPLES = (2.0, 5.0, 10.0, 20.0, 50.0)
"""Cohort caps, in multiples of each group's expected contributors, that a plan's frontier shows (then uncapped)."""
CONTRIBUTOR_STEPS = (8, 16, 32, 64, 128)
"""The search over expected contributors moves qn/8, then qn/16, and so on down to qn/128 of them between two groups
at a time."""
Row = TypeVar("Row")


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
    trust: SecaggParameters,
) -> CohortGroup | None:
    """The group's parameters for a cohort of ``cohort`` of its ``size`` clients and ``expected`` contributors a
    round: z calibrated so that K = ⌈T·m/|G|⌉ memberships subsampled at p = r/m spend at most ``epsilon`` against
    the server. None where the cohort cannot release (fewer than 2 members, a coin above 1, or no honest guaranteed
    survivor)."""
    if cohort < 2 or cohort > size or expected > cohort or expected <= 0:
        return None
    coin = expected / cohort
    memberships = min(rounds, math.ceil(rounds * cohort / size - 1e-9))
    tau_d = group_tau_d(cohort, model_dim=trust.dim)
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
        expected_contributors=expected,
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


def cohort_law(*, cohort: int, noise_multiplier: float, clip: float, trust: SecaggParameters) -> GroupLaw:
    """The cohort's noise law: threshold t (:func:`cohort_threshold`), every member's share sized so that the t − k
    honest guaranteed survivors carry z, on the finest grid that holds the m shares without wrap-around. Raises
    :class:`~hdp_planner.distributed.law.LawError` where no grid does, or where the colluders leave no honest
    survivor."""
    t = cohort_threshold(cohort, survivors=trust.survivors, colluders=trust.colluders)
    if t > cohort:
        raise LawError(f"a cohort of {cohort} cannot wait for {t} survivors")
    return grid_law(noise_multiplier=noise_multiplier, threshold=t, shares=cohort, colluders=trust.colluders,
                    dim=trust.dim, clip=clip, bits=trust.bits, wrap=trust.wrap,
                    sized_for=t - trust.colluders)  # fmt: skip


def candidate_cohorts(expected: float, *, size: int, cap: int | None) -> list[int]:
    """Cohort sizes tried for a group: ⌈r⌉·√2^j up to min(|G|, cap), and that limit itself."""
    top = size if cap is None else min(size, cap)
    m = max(2, math.ceil(expected))
    out = []
    while m < top:
        out.append(m)
        m = max(m + 1, math.ceil(m * COHORT_STEPS))
    return [*out, top] if top >= max(2, math.ceil(expected)) else []


@functools.lru_cache(maxsize=4096)
def best_cohort(
    *,
    epsilon: float,
    delta: float,
    size: int,
    expected: float,
    rounds: int,
    clip: float,
    trust: SecaggParameters,
    cap: int | None,
    exhaustive: bool = True,
) -> CohortGroup | None:
    """The group's cohort for ``expected`` contributors a round among :func:`candidate_cohorts` up to ``cap``
    clients: the one of least effective noise (``exhaustive``), or the largest that can release (larger cohorts
    amplify more, so it is nearly always the least noisy: the search over contributors evaluates only it). None
    where no candidate can release."""
    candidates = candidate_cohorts(expected, size=size, cap=cap)
    groups = (
        cohort_group(epsilon=epsilon, delta=delta, size=size, expected=expected, cohort=cohort, rounds=rounds,
                     clip=clip, trust=trust)
        for cohort in (candidates if exhaustive else candidates[::-1])
    )  # fmt: skip
    released = (g for g in groups if g is not None)
    if not exhaustive:
        return next(released, None)
    return min(released, key=lambda g: g.effective_noise_multiplier, default=None)


def moves_contributors(m: MethodNoise, plan: Plan) -> bool:
    """Whether the row's expected contributors are Problem 1's to choose (GDPFed-op and GDPFed+ with several groups
    and no ``--fixed-q``): with cohorts they are chosen again (:func:`cohort_row`); the other rows keep theirs."""
    return m.name in (OP.row, PLUS.row) and len(m.size) > 1 and plan.config.fixed_q is None


def cohort_row(
    m: MethodNoise,
    plan: Plan,
    trust: SecaggParameters,
    *,
    max_cohort: int | None = None,
    max_multiple: float | None = None,
) -> CohortRow | None:
    """Row ``m`` with hidden participation, each cohort at most ``max_cohort`` clients and ``max_multiple`` times its
    group's expected contributors r_m.

    For given r_m, Λ = C²Σω_m²σ_m²k_m/d with ω_m = r_m/Σr² (:func:`~hdp_planner.rules.noise.aggregation_weights`)
    is least where each group takes the cohort of least effective noise σ_m (:func:`best_cohort`). Where the row's
    r_m are Problem 1's (:func:`moves_contributors`), they are chosen again under Problem 1's constraints (Σr_m = qn,
    r_m ≤ |G_m|, every weight share r_m²/Σr² ≥ F|G_m|/n) to minimise that Λ: under cohorts σ_m grows with r_m more
    slowly than under the server's sampling, so the trusted plan's r_m are no longer the optimum. Λ is not a sum
    over groups once r moves, so the search moves qn/8, qn/16, … down to qn/128 contributors between two groups at a
    time while Λ falls (:data:`CONTRIBUTOR_STEPS`), from the trusted plan's r_m, which stays the answer unless a move
    lowers Λ. GDPFed+'s k_m, where Remark 3's closed form gave them (no ``--sparsity``), are re-derived by it at each
    candidate's r_m and σ_m; every other row keeps its k_m (and a row whose r_m stay keeps its weights).

    Returns:
        The row, or None where it has no distributed form (a pooled draw, a σ schedule, no noise) or a group cannot
        hide its participation under the caps at the trusted plan's r_m.
    """
    if m.pooled or m.schedule is not None or all(s == 0 for s in m.noise_multiplier):
        return None
    c = plan.config
    clips = m.clips(c.clip)
    moving = moves_contributors(m, plan)

    def groups_at(r: tuple[float, ...], exhaustive: bool) -> tuple[CohortGroup, ...] | None:
        out = []
        for eps, size, clip, expected in zip(m.epsilon, m.size, clips, r):
            multiple = None if max_multiple is None else math.floor(max_multiple * expected)
            caps = [x for x in (max_cohort, multiple) if x is not None]
            g = best_cohort(epsilon=eps, delta=c.delta, size=size, expected=expected, rounds=c.rounds, clip=clip,
                            trust=trust, cap=min(caps, default=None), exhaustive=exhaustive)  # fmt: skip
            if g is None:
                return None
            out.append(g)
        return tuple(out)

    def row_at(r: tuple[float, ...], exhaustive: bool = False) -> CohortRow | None:
        groups = groups_at(r, exhaustive)
        if groups is None:
            return None
        sigma = np.array([g.effective_noise_multiplier for g in groups])
        rv = np.asarray(r, dtype=float)
        k = contributors_k_ratio(m, plan, expected=rv, sigma=sigma)
        weight = aggregation_weights(rv) if moving else np.asarray(m.weight)
        return CohortRow(name=m.name, groups=groups, weight=tuple(float(w) for w in weight), clips=tuple(clips),
                         k_ratio=tuple(float(x) for x in k), lambda_cohort=lambda_exact(weight, sigma, k, clips),
                         lambda_server=m.lambda_exact)  # fmt: skip

    fixed = row_at(m.expected_clients, exhaustive=True)
    if fixed is None or not moving:
        return fixed
    return descend(m.expected_clients, fixed, row_at, contributors_feasible(m, plan), lam=lambda row: row.lambda_cohort)


def trusted_least_lambda(m: MethodNoise, plan: Plan) -> MethodNoise:
    """Row ``m`` under a trusted server with the freedom :func:`cohort_row` takes: its r_m chosen again for the least
    Λ alone, by the same search (:func:`descend`, the same moves from the trusted plan's r_m) under the same
    constraints (:func:`contributors_feasible`). Each σ_m is calibrated at q_m = r_m/|G_m| by the plan's accountant
    (:func:`~hdp_planner.planning.rows.calibrated_sigma`, as the plan's rows are), GDPFed+'s k_m re-derived by Remark
    3's closed form where the row's came from it (no ``--sparsity``), ω_m = r_m/Σr² and Λ = C²Σω_m²σ_m²k_m/d
    (:func:`~hdp_planner.planning.rows.method_noise`).

    Problem 1's r_m minimise its objective (Theorem 1's σ, plus the sparsification term), not Λ, so this row is the
    like-for-like reference for a cohort row's Λ: the two searches differ only in the noise model.

    Returns:
        The row at the r_m found; ``m`` itself where its r_m are not Problem 1's to choose (:func:`moves_contributors`)
        or no move lowers its Λ.
    """
    if not moves_contributors(m, plan):
        return m
    c = plan.config
    paper = row_paper_weights(m.name)

    def row_at(r: tuple[float, ...]) -> MethodNoise:
        q = [x / size for x, size in zip(r, m.size)]
        sigma = calibrated_sigma(epsilon=list(m.epsilon), delta=c.delta, q=q, rounds=c.rounds, accountant=c.accountant)
        rv = np.asarray(r, dtype=float)
        k = contributors_k_ratio(m, plan, expected=rv, sigma=np.asarray(sigma)).tolist()
        return method_noise(m.name, epsilons=m.epsilon, sizes=m.size, q=q, k_ratio=k, config=c, noise_multiplier=sigma,
                            paper_weights=paper)  # fmt: skip

    return descend(m.expected_clients, m, row_at, contributors_feasible(m, plan), lam=lambda row: row.lambda_exact)


def contributors_k_ratio(m: MethodNoise, plan: Plan, *, expected: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """Row ``m``'s sparsity k_m/d at expected contributors ``expected`` and noise multipliers ``sigma``: GDPFed+'s
    re-derived by Remark 3's closed form where the plan's came from it (no ``--sparsity``), every other row's own."""
    if m.name == PLUS.row and plan.config.sparsity is None:
        return closed_form_k_ratio(weight=reweighting(expected), sigma2=np.square(sigma), expected_clients=expected,
                                   coef=plan.config.coefficients)[0]  # fmt: skip
    return np.asarray(m.k_ratio)


def contributors_feasible(m: MethodNoise, plan: Plan) -> Callable[[tuple[float, ...]], bool]:
    """Problem 1's constraints on row ``m``'s expected contributors, bar the total that :func:`descend` keeps: every
    0 < r_m ≤ |G_m|, every weight share r_m²/Σr² at least ``--min-share`` times the population share."""

    def feasible(r: tuple[float, ...]) -> bool:
        rv = np.asarray(r)
        return bool(np.all(rv > 0) and np.all(rv <= np.asarray(m.size)) and plan.keeps_shares(rv**2 / np.sum(rv**2)))

    return feasible


def descend(
    start: tuple[float, ...],
    at_start: Row,
    row_at: Callable[[tuple[float, ...]], Row | None],
    feasible: Callable[[tuple[float, ...]], bool],
    *,
    lam: Callable[[Row], float],
) -> Row:
    """Pairwise moves of expected contributors from ``start``: at each step of :data:`CONTRIBUTOR_STEPS` (a fraction
    of Σr), the move of that many from one group to another that lowers Λ (``lam`` of a row) most, while one does.
    Every point is ``start`` plus whole multiples of the finest step, so a point revisited is the same floats (and
    cached)."""
    total, finest = sum(start), CONTRIBUTOR_STEPS[-1]
    offsets, best = np.zeros(len(start), dtype=np.int64), at_start
    for steps in CONTRIBUTOR_STEPS:
        stride = finest // steps
        improved = True
        while improved:
            improved = False
            for i, j in itertools.permutations(range(len(start)), 2):
                moved = offsets.copy()
                moved[i] -= stride
                moved[j] += stride
                r = tuple(float(x + n * total / finest) for x, n in zip(start, moved))
                if not feasible(r):
                    continue
                row = row_at(r)
                if row is not None and lam(row) < lam(best):
                    best, next_offsets, improved = row, moved, True
            if improved:
                offsets = next_offsets
    return best


def cohort_frontier(
    m: MethodNoise, plan: Plan, trust: SecaggParameters, *, multiples: tuple[float, ...] = (2, 5, 10, 20, 50)
) -> list[tuple[float | None, CohortRow]]:
    """What each factor of communication buys: the row with every group's cohort capped at ``multiple`` times its
    expected contributors, for each multiple, then uncapped (None: cohorts up to the whole group)."""
    out: list[tuple[float | None, CohortRow]] = []
    for multiple in (*multiples, None):
        row = cohort_row(m, plan, trust, max_multiple=multiple)
        if row is not None:
            out.append((multiple, row))
    return out


def keeps_every_group(row: CohortRow, plan: Plan) -> bool:
    """Whether every group of the plan keeps at least --min-share times its population's share of the update under
    the cohort row: by the row's own shares where its groups are the plan's (its expected contributors may have
    moved), by the trusted row's where it pools them."""
    if len(row.groups) != len(plan.population_share):
        return plan.meets_min_share(plan.method(row.name))
    return plan.keeps_shares(row.weight_shares)


def hidden_section(plan: Plan, trust: SecaggParameters, caps: CohortCaps) -> HiddenSection:
    """Every row of ``plan`` with public cohorts under ``caps`` (:func:`cohort_row`), the recommended one (the least
    Λ among those meeting ``--min-share``) and its frontier of cohort size against Λ at each cap of
    :data:`FRONTIER_MULTIPLES` and uncapped (:func:`cohort_frontier`)."""
    rows = tuple(
        (m, cohort_row(m, plan, trust, max_cohort=caps.max_cohort, max_multiple=caps.max_multiple))
        for m in plan.methods
    )
    eligible = [(m, r) for m, r in rows if r is not None and keeps_every_group(r, plan)]
    best = min(eligible, key=lambda mr: mr[1].lambda_cohort, default=None)
    frontier = () if best is None else tuple(
        FrontierPoint(multiple=multiple, vectors_per_round=r.vectors_per_round, lam=r.lambda_cohort, price=r.price)
        for multiple, r in cohort_frontier(best[0], plan, trust, multiples=FRONTIER_MULTIPLES)
    )  # fmt: skip
    return HiddenSection(caps=caps, rows=tuple((m.name, r) for m, r in rows),
                         recommendation=None if best is None else best[0].name, frontier=frontier)  # fmt: skip
