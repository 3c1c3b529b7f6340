"""Public cohorts, private coins: the server's ε per group, the noise law fixed by the cohort, and a server that
tries to tell who contributed."""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from hdp_planner import plan
from hdp_planner.distributed.accounting import epsilon_third_parties
from hdp_planner.distributed.randomness import SeededBits
from hdp_planner.distributed.rounds import group_tau_d
from hdp_planner.distributed.sampler import discrete_gaussian
from hdp_planner.planning.problem import closed_form_k_ratio, reweighting
from hdp_planner.planning.trust import SecaggParameters
from hdp_planner.rules.noise import aggregation_weights
from hdp_planner.trust.cohort_rows import (
    candidate_cohorts,
    cohort_frontier,
    cohort_group,
    cohort_law,
    cohort_row,
    trusted_least_lambda,
)

TRUST = SecaggParameters(bits=20, survivors=0.9, colluders=0, model_dim=1000)


@pytest.fixture(scope="module")
def small():
    """A small plan without a share rule: the search over expected contributors has room to move them."""
    return plan([1.0, 2.0, 4.0], n=600, rounds=20, q=0.1, clip=1.0, min_share=0)


def test_every_group_meets_its_budget_against_the_server_and_no_tighter_than_the_gaussian(small):
    """ε against the server ≤ the group's budget, and never below what dp-accounting's PLD gives the continuous
    sampled Gaussian of the same z, p and K (the discrete sum is no more private than that)."""
    row = cohort_row(small.method("GDPFed+"), small, TRUST, max_multiple=10)
    assert row is not None
    m = small.method("GDPFed+")
    assert sum(g.expected_contributors for g in row.groups) == pytest.approx(small.config.q * small.config.n)
    for g, eps, size in zip(row.groups, m.epsilon, m.size):
        assert g.epsilon_server <= eps * (1 + 1e-9)
        assert g.coin == pytest.approx(g.expected_contributors / g.cohort)
        assert (
            g.cohort <= math.floor(10 * g.expected_contributors)
            and g.memberships * size >= small.config.rounds * g.cohort
        )
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
                                  tau_d=group_tau_d(200, model_dim=TRUST.model_dim))  # fmt: skip
    assert g.epsilon_server == pytest.approx(third) and third <= 1.0


def test_shares_sized_by_the_cohort_carry_the_planned_noise():
    """The honest guaranteed survivors' shares, drawn by the exact sampler at the cohort's law, sum to at least
    z²Δ₂² per coordinate, however many members flipped heads (the law has no input for it)."""
    g = cohort_group(epsilon=2.0, delta=1e-5, size=100, expected=5, cohort=20, rounds=10, clip=1.0, trust=TRUST)
    law = cohort_law(cohort=20, noise_multiplier=g.noise_multiplier, clip=1.0, trust=TRUST)
    assert law.threshold == g.threshold == 18
    draws = discrete_gaussian(SeededBits(0), sigma2=law.share_sigma2, size=20_000 * law.threshold)
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
    trust, delta, n = SecaggParameters(bits=16, survivors=0.9, model_dim=1), 1e-5, 100_000
    g = cohort_group(epsilon=1.0, delta=delta, size=8, expected=0.4, cohort=4, rounds=2, clip=1.0, trust=trust)
    assert g.memberships == 1
    law = cohort_law(cohort=4, noise_multiplier=g.noise_multiplier, clip=1.0, trust=trust)
    target = math.floor(law.encoding.norm_bound)  # the target's encoded update, at the norm bound

    def released(seed: int) -> np.ndarray:  # the honest guaranteed survivors' shares (the others' the server knows)
        return (
            discrete_gaussian(SeededBits(seed), sigma2=law.share_sigma2, size=n * law.threshold)
            .reshape(n, -1)
            .sum(axis=1)
        )

    heads = np.random.default_rng(3).random(n) < g.coin
    outside = released(1)
    hidden = _empirical_epsilon(released(2) + heads * target, outside, delta)
    told = _empirical_epsilon(released(2) + target, outside, delta)
    assert hidden <= g.epsilon_server
    assert told > g.epsilon_server


def test_candidates_start_at_the_expected_contributors_and_stop_at_the_cap():
    assert candidate_cohorts(3.2, size=100, cap=20) == [4, 6, 9, 13, 19, 20]
    assert candidate_cohorts(3.2, size=10, cap=None)[-1] == 10
    assert candidate_cohorts(30, size=100, cap=20) == []  # a cap below the expected contributors hides nothing


def test_the_frontier_trades_vectors_for_noise(small):
    """Larger cohorts send more vectors and buy less noise. At the trusted plan's r_m, uncapped cohorts still cost
    at least the trusted server's Λ (the expected contributors moved for Λ alone can cost less: the trusted plan's
    r_m solve Problem 1, not least Λ)."""
    frontier = cohort_frontier(small.method("GDPFed+"), small, TRUST, multiples=(2, 10))
    (m2, two), (m10, ten), (top, whole) = frontier
    assert (m2, m10, top) == (2, 10, None)
    assert two.vectors_per_round < ten.vectors_per_round < whole.vectors_per_round
    assert two.price > ten.price > whole.price
    fixed = _fixed_r(small)
    ((_, at_r),) = cohort_frontier(fixed.groups, fixed, TRUST, multiples=())
    assert at_r.price >= 1.0


def _fixed_r(p):
    """The same plan with Problem 1's q_m given as fixed q: its cohort rows keep the trusted plan's r_m."""
    return plan(list(p.groups.epsilon), n=p.config.n, sizes=list(p.groups.size), rounds=p.config.rounds,
                q=p.config.q, clip=p.config.clip, sparsity=p.config.sparsity, min_share=p.config.min_share,
                fixed_q=p.groups.q)  # fmt: skip


def _check_optimal_contributors(p, trust, multiple):
    """The row with optimal expected contributors: Σr = qn, every r_m ≤ |G_m| and weight share met, every group
    within budget against the server and within the caps, ω and k re-derived at r, Λ recomputed, never above the
    row at the trusted plan's r_m."""
    m = p.groups
    row = cohort_row(m, p, trust, max_multiple=multiple)
    trusted_r = _fixed_r(p)
    fixed = cohort_row(trusted_r.groups, trusted_r, trust, max_multiple=multiple)
    assert (row is None) == (fixed is None)
    if row is None:
        return
    r = np.array([g.expected_contributors for g in row.groups])
    assert r.sum() == pytest.approx(p.config.q * p.config.n, rel=1e-9)
    assert np.all(r > 0) and np.all(r <= np.asarray(m.size))
    assert np.all(r**2 / np.sum(r**2) >= p.config.min_share * np.asarray(p.population_share) * (1 - 1e-6))
    for g, eps in zip(row.groups, m.epsilon):
        assert g.epsilon_server <= eps * (1 + 1e-9)
        assert 2 <= g.cohort <= math.floor(multiple * g.expected_contributors)
        assert g.coin == pytest.approx(g.expected_contributors / g.cohort)
    sigma = np.array([g.effective_noise_multiplier for g in row.groups])
    assert row.weight == pytest.approx(aggregation_weights(r))
    if p.config.sparsity is None:  # GDPFed+'s k_m are Remark 3's, at the row's r_m and σ_m
        k = closed_form_k_ratio(weight=reweighting(r), sigma2=sigma**2, expected_clients=r,
                                coef=p.config.coefficients)[0]  # fmt: skip
        assert row.k_ratio == pytest.approx(k)
    else:
        assert row.k_ratio == pytest.approx(p.config.sparsity)
    lam = p.config.clip**2 * np.sum(np.asarray(row.weight) ** 2 * sigma**2 * np.asarray(row.k_ratio))
    assert row.lambda_cohort == pytest.approx(lam)
    assert row.lambda_cohort <= fixed.lambda_cohort * (1 + 1e-12)
    return row, fixed


def test_optimal_contributors_are_never_worse_than_the_trusted_plans(small):
    """Moving expected contributors between groups lowers Λ here, and never raises it."""
    row, fixed = _check_optimal_contributors(small, TRUST, 10)
    assert row.lambda_cohort < fixed.lambda_cohort


@settings(max_examples=4, deadline=None)
@given(
    eps=st.lists(st.sampled_from([0.5, 1.0, 2.0, 4.0, 8.0]), min_size=2, max_size=3),
    n=st.integers(40, 120),
    rounds=st.integers(2, 8),
    q=st.sampled_from([0.05, 0.1, 0.2]),
    multiple=st.sampled_from([3.0, 10.0]),  # 3: a group moved below 2/3 contributors has no cohort
    sparse=st.booleans(),
    min_share=st.sampled_from([0.0, 1.0]),
)
def test_optimal_contributors_on_small_random_plans(eps, n, rounds, q, multiple, sparse, min_share):
    """:func:`_check_optimal_contributors` on small plans, with and without Remark 3's k_m and a min share."""
    try:
        p = plan(eps, n=n, rounds=rounds, q=q, sparsity=[0.5] * len(eps) if sparse else None, min_share=min_share)
    except ValueError:  # a min share Problem 1 cannot meet
        return
    _check_optimal_contributors(p, SecaggParameters(bits=20, survivors=0.9, model_dim=100), multiple)


@pytest.mark.parametrize(("sparsity", "min_share"), [(None, 0.0), ((0.7, 0.8, 0.9), 0.0), (None, 1.0)])
def test_the_lambda_only_trusted_search_is_never_noisier_than_problem_1s_row(sparsity, min_share):
    """The trusted server given the cohorts' freedom: r_m under the same constraints, Λ never above Problem 1's row
    (where the search starts), the row the plan itself builds at those rates (same σ_m, k_m, ω_m, Λ), and the same
    answer twice."""
    p = plan([1.0, 2.0, 4.0], n=600, rounds=20, q=0.1, clip=1.0, sparsity=sparsity, min_share=min_share)
    m = p.groups
    row = trusted_least_lambda(m, p)
    assert row == trusted_least_lambda(m, p)
    assert row.lambda_exact <= m.lambda_exact
    if min_share == 0:  # Λ alone starves the strict groups further than Problem 1 does
        assert row.lambda_exact < m.lambda_exact
    r = np.asarray(row.expected_clients)
    assert r.sum() == pytest.approx(p.config.q * p.config.n, rel=1e-9)
    assert np.all(r > 0) and np.all(r <= np.asarray(m.size))
    assert np.all(r**2 / np.sum(r**2) >= min_share * np.asarray(p.population_share) * (1 - 1e-6))
    at_r = plan([1.0, 2.0, 4.0], n=600, rounds=20, q=0.1, clip=1.0, sparsity=sparsity, fixed_q=row.q).groups
    assert row.noise_multiplier == pytest.approx(at_r.noise_multiplier, rel=1e-9)
    assert row.k_ratio == pytest.approx(at_r.k_ratio, rel=1e-9)
    assert row.weight == pytest.approx(at_r.weight, rel=1e-9)
    assert row.lambda_exact == pytest.approx(at_r.lambda_exact, rel=1e-9)


def test_rows_whose_contributors_are_not_problem_1s_keep_them_under_the_lambda_only_search(small):
    """DP-FedAvg, GDPFed and a plan with fixed q have no r_m to choose: the search returns the row itself."""
    for name in ("DP-FedAvg", "GDPFed"):
        assert trusted_least_lambda(small.method(name), small) == small.method(name)
    fixed = _fixed_r(small)
    assert trusted_least_lambda(fixed.groups, fixed) == fixed.groups
