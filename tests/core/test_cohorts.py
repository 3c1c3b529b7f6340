"""Public cohorts, private coins: the server's ε per group, the noise law fixed by the cohort, and a server that
tries to tell who contributed."""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from scipy import stats

from hdp_planner import plan
from hdp_planner.distributed.accounting import epsilon_third_parties
from hdp_planner.distributed.cohorts import (
    candidate_cohorts,
    cohort_frontier,
    cohort_group,
    cohort_law,
    cohort_row,
)
from hdp_planner.distributed.randomness import SeededBits
from hdp_planner.distributed.rounds import group_tau_d
from hdp_planner.distributed.sampler import discrete_gaussian
from hdp_planner.distributed.trust import TrustModel

TRUST = TrustModel(kind="secagg", bits=20, survivors=0.9, colluders=0, model_dim=1000)


@pytest.fixture(scope="module")
def small():
    return plan([1.0, 2.0, 4.0], n=600, rounds=20, q=0.1, clip=1.0)


def test_every_group_meets_its_budget_against_the_server_and_no_tighter_than_the_gaussian(small):
    """ε against the server ≤ the group's budget, and never below what dp-accounting's PLD gives the continuous
    sampled Gaussian of the same z, p and K (the discrete sum is no more private than that)."""
    row = cohort_row(small.method("GDPFed+"), small, TRUST, max_multiple=10)
    assert row is not None
    m = small.method("GDPFed+")
    for g, eps, size, q in zip(row.groups, m.epsilon, m.size, m.q):
        assert g.epsilon_server <= eps * (1 + 1e-9)
        assert g.expected_contributors == pytest.approx(q * size)
        assert g.cohort <= math.floor(10 * q * size) and g.memberships * size >= small.config.rounds * g.cohort
        acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-3)
        event = dpa.PoissonSampledDpEvent(g.coin, dpa.GaussianDpEvent(g.noise_multiplier))
        acc.compose(dpa.SelfComposedDpEvent(event, g.memberships))
        assert acc.get_epsilon(small.config.delta) <= g.epsilon_server * 1.001


def test_a_cohort_of_the_whole_group_is_poisson_sampling_hidden_from_the_server():
    """m = |G| and p = q: every client is in every cohort (K = T) and the server's bound is the third parties' one
    at q over T rounds."""
    g = cohort_group(epsilon=1.0, delta=1e-5, size=200, expected=10, cohort=200, rounds=30, clip=1.0, trust=TRUST)
    assert (g.memberships, g.coin) == (30, pytest.approx(0.05))
    third = epsilon_third_parties(noise_multiplier=g.noise_multiplier, q=0.05, rounds=30, delta=1e-5,
                                  tau_d=group_tau_d(200, TRUST.model_dim))  # fmt: skip
    assert g.epsilon_server == pytest.approx(third) and third <= 1.0


def test_shares_sized_by_the_cohort_carry_the_planned_noise():
    """The honest guaranteed survivors' shares, drawn by the exact sampler at the cohort's law, sum to at least
    z²Δ₂² per coordinate, however many members flipped heads (the law has no input for it)."""
    g = cohort_group(epsilon=2.0, delta=1e-5, size=100, expected=5, cohort=20, rounds=10, clip=1.0, trust=TRUST)
    law = cohort_law(cohort=20, noise_multiplier=g.noise_multiplier, clip=1.0, trust=TRUST)
    assert law.threshold == g.threshold == 18
    draws = discrete_gaussian(SeededBits(0), law.share_sigma2, 20_000 * law.threshold)
    sums = draws.reshape(20_000, law.threshold).sum(axis=1)
    assert sums.var() >= 0.97 * (g.noise_multiplier * law.encoding.norm_bound) ** 2


def _empirical_epsilon(inside: np.ndarray, outside: np.ndarray, delta: float) -> float:
    """The largest ε a threshold test on the released value certifies (Clopper-Pearson at 95%, Bonferroni over the
    thresholds): log((TPR − δ)/FPR) at the lower TPR and upper FPR bounds."""
    n, best, thresholds = outside.size, 0.0, np.quantile(outside, 1 - np.logspace(-4, -0.5, 25))
    for thr in thresholds:
        tp, fp = int((inside >= thr).sum()), int((outside >= thr).sum())
        tpr = stats.beta.ppf(0.05 / (2 * thresholds.size), tp, n - tp + 1) if tp else 0.0
        fpr = stats.beta.ppf(1 - 0.05 / (2 * thresholds.size), fp + 1, n - fp)
        if tpr > delta:
            best = max(best, math.log((tpr - delta) / fpr))
    return best


def test_a_server_testing_who_contributed_does_no_better_than_the_bound():
    """The server's best test of one membership (the released sum of a 1-coordinate model: the likelihood ratio is
    monotone in it) certifies no more than the planned ε when the coin is private; told the coin, the same test
    certifies more than the budget, so it is strong enough to see a leak."""
    trust, delta, n = TrustModel(kind="secagg", bits=16, survivors=0.9, model_dim=1), 1e-5, 100_000
    g = cohort_group(epsilon=1.0, delta=delta, size=8, expected=0.4, cohort=4, rounds=2, clip=1.0, trust=trust)
    assert g.memberships == 1
    law = cohort_law(cohort=4, noise_multiplier=g.noise_multiplier, clip=1.0, trust=trust)
    target = math.floor(law.encoding.norm_bound)  # the target's encoded update, at the norm bound

    def released(seed: int) -> np.ndarray:  # the honest guaranteed survivors' shares (the others' the server knows)
        return discrete_gaussian(SeededBits(seed), law.share_sigma2, n * law.threshold).reshape(n, -1).sum(axis=1)

    heads = np.random.default_rng(3).random(n) < g.coin
    outside = released(1)
    hidden = _empirical_epsilon(released(2) + heads * target, outside, delta)
    told = _empirical_epsilon(released(2) + target, outside, delta)
    assert hidden <= g.epsilon_server
    assert told > g.epsilon_server


def test_candidates_start_at_the_expected_contributors_and_stop_at_the_cap():
    assert candidate_cohorts(3.2, 100, 20) == [4, 6, 9, 13, 19, 20]
    assert candidate_cohorts(3.2, 10, None)[-1] == 10
    assert candidate_cohorts(30, 100, 20) == []  # a cap below the expected contributors hides nothing


def test_the_frontier_trades_vectors_for_noise(small):
    """Larger cohorts send more vectors and buy less noise; uncapped cohorts come close to a trusted server."""
    frontier = cohort_frontier(small.method("GDPFed+"), small, TRUST, multiples=(2, 10))
    (m2, two), (m10, ten), (top, whole) = frontier
    assert (m2, m10, top) == (2, 10, None)
    assert two.vectors_per_round < ten.vectors_per_round < whole.vectors_per_round
    assert two.price > ten.price > whole.price >= 1.0
