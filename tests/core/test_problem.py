"""Problem 1: the constraint holds, the optimum is never worse than uniform q, and Remark 3's k_m."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdp_planner.accounting.calibration import closed_form_sigma2
from hdp_planner.planning.problem import (
    K_FLOOR,
    Coefficients,
    SamplingProblem,
    closed_form_k_ratio,
    objective,
    reweighting,
)
from hdp_planner.rules.noise import aggregation_weights, lambda_exact

COEF = Coefficients(lr=0.1, local_steps=5)


def bound_model(eps, delta, rounds):
    return lambda q_vec: np.array(
        [closed_form_sigma2(epsilon=e, delta=delta, q=q, rounds=rounds) for e, q in zip(eps, q_vec)]
    )


def test_coefficients():
    assert COEF.mu4 == pytest.approx(32 * 0.5 + 0.1 + 0.02)
    assert COEF.mu5 == pytest.approx(8.0)


@given(r=st.lists(st.floats(0.5, 1000), min_size=1, max_size=8))
def test_reweighting_sums_to_one_over_expected_participants(r):
    w = reweighting(r)
    assert w.sum() == pytest.approx(1 / sum(r))
    assert np.all(np.diff(w[np.argsort(r)]) >= -1e-15)  # more participants, more weight


@settings(max_examples=30, deadline=None)
@given(
    eps=st.lists(st.floats(0.2, 12), min_size=2, max_size=5),
    size=st.integers(50, 5000),
    q=st.floats(0.005, 0.3),
    skew=st.floats(0.5, 2.0),
)
def test_solution_meets_constraint_and_beats_uniform(eps, size, q, skew):
    sizes = tuple(max(10, int(size * skew**i)) for i in range(len(eps)))
    n = sum(sizes)
    problem = SamplingProblem(sizes=sizes, q=q, sigma2_of=bound_model(eps, n**-1.1, 50), coef=COEF)
    sol = problem.solve()
    r = np.array(sol.q) * np.array(sizes)
    assert r.sum() == pytest.approx(q * n, rel=1e-6)
    assert all(0 < qm <= 1 for qm in sol.q)
    assert sol.objective <= sol.uniform_objective * (1 + 1e-12)
    assert sol.objective == pytest.approx(problem.value(sol.q))


def test_bound_model_optimum_is_the_cauchy_schwarz_closed_form():
    # With φ ≈ 0, σ_m² = a_m q_m² and ω ∝ r²: the optimum is r_m ∝ |G_m| ε_m / sqrt(ε_m + 2 log(1/δ)).
    eps, n = (0.5, 1.5, 3.0), 6000
    delta = n**-1.1
    sol = SamplingProblem(sizes=(2000, 2000, 2000), q=0.02, sigma2_of=bound_model(eps, delta, 50), coef=COEF).solve()
    x = np.array([e / math.sqrt(e + 2 * math.log(1 / delta)) for e in eps])
    expected = 0.02 * 3 * x / x.sum()
    assert np.allclose(sol.q, expected, rtol=2e-3)


def test_accountant_model_minimizes_the_true_noise_and_says_when_it_starves_a_group():
    from hdp_planner import plan

    p = plan((0.5, 1.5, 3.0), 6000, sigma_model="accountant", min_share=0)  # the paper's Problem 1: no share rule
    bound = plan((0.5, 1.5, 3.0), 6000, min_share=0)
    assert sum(p.groups.expected_clients) == pytest.approx(0.02 * 6000)
    assert p.objective <= p.uniform_objective
    # the noise term is the exact Λ of the applied update: optimizing it with the real σ beats Theorem 1's q
    assert p.method("GDPFed-op").lambda_exact < bound.method("GDPFed-op").lambda_exact
    assert p.method("GDPFed-op").lambda_exact < p.method("GDPFed").lambda_exact
    # ... by starving the strictest group, which the plan says
    assert p.groups.q[0] * 2000 < 0.5 and any("ε=0.5 is starved" in n for n in p.notes)
    assert not any("starved" in n for n in bound.notes)
    kept = plan((0.5, 1.5, 3.0), 6000, sigma_model="accountant")  # the default share rule keeps every group
    assert kept.groups.q[0] * 2000 > 10 and not any("starved" in n for n in kept.notes)


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda m: st.tuples(
            st.lists(st.floats(0.5, 500), min_size=m, max_size=m),
            st.lists(st.floats(0.0, 500), min_size=m, max_size=m),
            st.lists(st.floats(K_FLOOR, 1.0), min_size=m, max_size=m),
        )
    )
)
def test_remark3_k_ratio_is_the_best_sparsity_for_problem_1(case):
    """Remark 3's k_m/d minimises Problem 1's objective over every k in [K_FLOOR, 1]^M (the objective is
    convex in each k_m), so the clamp to K_FLOOR is where the objective still falls at the floor."""
    r, s2, other = (np.asarray(v) for v in case)
    k, clamped = closed_form_k_ratio(weight=reweighting(r), sigma2=s2, expected_clients=r, coef=COEF)
    assert np.all((K_FLOOR <= k) & (k <= 1)) and np.array_equal(clamped, k == K_FLOOR)
    best = objective(expected_clients=r, sigma2=s2, coef=COEF, k_ratio=None)
    assert best == objective(expected_clients=r, sigma2=s2, coef=COEF, k_ratio=k)
    assert best <= objective(expected_clients=r, sigma2=s2, coef=COEF, k_ratio=other) * (1 + 1e-12)


def test_remark3_clamps_a_group_whose_noise_would_drop_every_coordinate():
    w, s2, r = np.array([0.001, 0.5]), np.array([1.0, 50.0]), np.array([40.0, 1.0])
    k, clamped = closed_form_k_ratio(weight=w, sigma2=s2, expected_clients=r, coef=COEF)
    assert not clamped[0] and 0.99 < k[0] < 1 and clamped[1] and k[1] == K_FLOOR


@given(st.lists(st.floats(0.5, 500), min_size=1, max_size=6))
def test_sampling_term_depends_only_on_the_expected_clients(r):
    """Without noise and sparsification, Problem 1's objective is μ4/(qn) whatever the split of the qn = Σ r_m
    expected clients among the groups: the reweighting ω_m sums to 1/(qn)."""
    r = np.asarray(r)
    assert objective(expected_clients=r, sigma2=np.zeros_like(r), coef=COEF, k_ratio=np.ones_like(r)) == pytest.approx(
        COEF.mu4 / r.sum(), rel=1e-12
    )


@given(
    st.lists(st.floats(0.5, 500), min_size=1, max_size=6).flatmap(
        lambda r: st.tuples(
            st.just(r),
            st.lists(st.floats(0.01, 20), min_size=len(r), max_size=len(r)),
            st.lists(st.floats(0.05, 1), min_size=len(r), max_size=len(r)),
        )
    )
)
def test_noise_term_is_the_exact_lambda_of_the_applied_aggregation(args):
    """Problem 1's noise term measures exactly the noise the trainer's update θ + Σ ω_m y_m carries."""
    r, s2, k = (np.asarray(x) for x in args)
    w = reweighting(r)
    noise_term = objective(expected_clients=r, sigma2=s2, coef=COEF, k_ratio=k) - COEF.mu4 * np.sum(
        w * (1 + (1 - k) ** 2)
    )
    lam = lambda_exact(aggregation_weights(r), np.sqrt(s2), k, clip=1.0)
    assert noise_term == pytest.approx(COEF.mu5 * lam / r.sum() ** 2, rel=1e-9)


def test_aggregation_step_is_the_mean_update_for_every_grouping():
    for r in ([120.0], [40.0, 40.0, 40.0], [13.8, 37.8, 68.4]):
        assert np.sum(aggregation_weights(r) * np.asarray(r)) == pytest.approx(1.0)
    assert aggregation_weights([120.0])[0] == pytest.approx(1 / 120)
