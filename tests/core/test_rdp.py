"""hdp_planner.accounting.rdp against dp-accounting's RdpAccountant (the reference it must reproduce)."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hdp_planner.accounting.calibration import GaussianRounds, reference_epsilon
from hdp_planner.accounting.rdp import (
    DEFAULT_RDP_ORDERS,
    calibrate_q_rdp,
    calibrate_sigma_rdp,
    calibrate_sigmas_rdp,
    kl_certifies_zero,
    rdp_curve,
    rdp_epsilon,
    rdp_epsilons,
)


def ref_eps(sigma: float, q: float, rounds: int, delta: float) -> float:
    return reference_epsilon(GaussianRounds(noise_multiplier=sigma, q=q, rounds=rounds), delta=delta)


def test_orders_match_dp_accounting():
    from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS as REFERENCE_ORDERS

    assert np.array_equal(np.array(DEFAULT_RDP_ORDERS), np.array(REFERENCE_ORDERS))


CONFIGS = [
    (1.0, 0.01, 1000, 1e-5),
    (0.7, 0.01, 100, 1e-5),
    (0.5, 0.001, 10, 1e-6),
    (0.3, 0.0001, 1, 1e-9),
    (2.0, 0.3, 100, 1e-6),
    (5.0, 1e-4, 10000, 1e-9),
    (1.0, 0.5, 10, 1e-5),
    (30.0, 0.5, 1000, 1e-9),
    (1.0, 1.0, 1, 1e-5),
    (10.0, 1.0, 500, 1e-3),
    (0.8, 0.9, 3, 1e-4),
    (3.0, 0.99, 50, 1e-7),
    (1.3, 0.05, 2000, 1e-8),
    (0.6, 0.2, 5, 1e-3),
    (4.0, 0.02, 10000, 1e-5),
    (100.0, 0.1, 1, 1e-5),
    (0.2, 0.5, 1, 1e-5),
    (1.1, 0.003, 300, 1e-3),
    (15.0, 0.25, 10000, 1e-9),
    (0.9, 0.06, 40, 1e-6),
]


@pytest.mark.parametrize("sigma,q,rounds,delta", CONFIGS)
def test_rdp_epsilon_matches_dp_accounting(sigma, q, rounds, delta):
    ours = rdp_epsilon(noise_multiplier=sigma, q=q, rounds=rounds, delta=delta)
    ref = ref_eps(sigma, q, rounds, delta)
    assert ours == pytest.approx(ref, rel=1e-9, abs=1e-12)


def test_rdp_epsilon_edge_values():
    assert rdp_epsilon(noise_multiplier=1.0, q=0.0, rounds=10, delta=1e-5) == 0.0
    assert math.isinf(rdp_epsilon(noise_multiplier=0.0, q=0.1, rounds=10, delta=1e-5))


def test_no_dp_accounting_log_lines(caplog):
    # q large, σ small: dp-accounting itself would warn about non-converging fractional orders
    with caplog.at_level(logging.DEBUG):
        rdp_epsilon(noise_multiplier=0.5, q=0.5, rounds=10, delta=1e-5)
        calibrate_sigma_rdp(epsilon=2.0, delta=1e-5, q=0.5, rounds=10)
    assert not [r for r in caplog.records if "converge" in r.getMessage()]


eps_st = st.floats(0.1, 20.0)
q_st = st.floats(-4.0, math.log10(0.5)).map(lambda x: 10**x)
rounds_st = st.integers(0, 4).map(lambda k: 10**k).flatmap(lambda hi: st.integers(max(1, hi // 10), hi))
delta_st = st.floats(-9.0, -3.0).map(lambda x: 10**x)


@settings(max_examples=25, deadline=None)
@given(eps=eps_st, q=q_st, rounds=rounds_st, delta=delta_st)
def test_calibrate_sigma_safe_and_minimal(eps, q, rounds, delta):
    sigma = calibrate_sigma_rdp(epsilon=eps, delta=delta, q=q, rounds=rounds)
    assert ref_eps(sigma, q, rounds, delta) <= eps + 1e-12 or kl_certifies_zero([(sigma, q, rounds)], delta)
    if sigma * (1 - 1e-3) > 1e-3:  # otherwise clamped at SIGMA_MIN (valid, not minimal)
        assert ref_eps(sigma * (1 - 1e-3), q, rounds, delta) > eps


@settings(max_examples=25, deadline=None)
@given(eps=eps_st, sigma=st.floats(0.3, 20.0), rounds=rounds_st, delta=delta_st)
def test_calibrate_q_safe_and_maximal(eps, sigma, rounds, delta):
    try:
        q = calibrate_q_rdp(epsilon=eps, delta=delta, noise_multiplier=sigma, rounds=rounds)
    except ValueError:
        # no q ≥ 1e-12 works: then even q = 1e-12 must exceed the target, except in dp-accounting's
        # degenerate KL-shortcut corner (RDP ≲ δ² gives ε = 0), where we deliberately stay conservative
        at_min = ref_eps(sigma, 1e-12, rounds, delta)
        assert at_min > eps or at_min == 0.0
        return
    assert 0 < q <= 1
    assert ref_eps(sigma, q, rounds, delta) <= eps + 1e-12 or kl_certifies_zero([(sigma, q, rounds)], delta)
    if q < 1.0:
        above = ref_eps(sigma, min(1.0, q * (1 + 1e-3)), rounds, delta)
        # 0.0: dp-accounting's discontinuous KL shortcut (RDP ≲ δ²) — we stay conservative there
        assert above > eps or above == 0.0


@settings(max_examples=8, deadline=None)
@given(
    groups=st.lists(st.tuples(eps_st, q_st | st.just(1.0)), min_size=1, max_size=6),
    rounds=rounds_st,
    delta=delta_st,
)
@example(groups=[(0.25, 0.001)], rounds=1, delta=0.001)  # σ at the KL boundary: dp-accounting's float RDP is 0.4% high
def test_batched_calibration_is_the_scalar_one(groups, rounds, delta):
    """Groups calibrated together (as a plan does) get the scalar σ, safe and tight by dp-accounting, or safe by the
    closed-form KL certificate where dp-accounting's fractional-order RDP is float noise above the true one."""
    eps, q = [e for e, _ in groups], [x for _, x in groups]
    sigmas, spent = calibrate_sigmas_rdp(epsilons=eps, delta=delta, q=q, rounds=rounds)
    for e, qm, sigma in zip(eps, q, sigmas):
        assert sigma == pytest.approx(calibrate_sigma_rdp(epsilon=e, delta=delta, q=qm, rounds=rounds), rel=1e-6)
        assert ref_eps(sigma, qm, rounds, delta) <= e or kl_certifies_zero([(sigma, qm, rounds)], delta)
        if sigma * (1 - 1e-3) > 1e-3:
            assert ref_eps(sigma * (1 - 1e-3), qm, rounds, delta) > e
    measured = [rdp_epsilon(noise_multiplier=s, q=x, rounds=rounds, delta=delta) for s, x in zip(sigmas, q)]
    assert rdp_epsilons(noise_multipliers=sigmas, q=q, rounds=rounds, delta=delta).tolist() == pytest.approx(
        measured, rel=1e-13
    )
    assert spent.tolist() == pytest.approx(measured, rel=1e-13)  # evaluated with other groups: float rounding


@pytest.mark.parametrize(
    ("eps", "delta", "q", "rounds"),
    [(0.1, 1e-5, 1e-4, 10000), (0.3, 1e-6, 1e-3, 1000), (10.0, 1e-6, 1e-3, 10000), (15.0, 1e-3, 0.05, 2)],
)
def test_calibrate_sigma_on_the_staircase(eps, delta, q, rounds):
    """Small q: ε(σ) is a staircase of per-order cliffs (integer orders) or set by one fractional order."""
    sigma = calibrate_sigma_rdp(epsilon=eps, delta=delta, q=q, rounds=rounds)
    assert ref_eps(sigma, q, rounds, delta) <= eps < ref_eps(sigma * (1 - 1e-6), q, rounds, delta)


def test_batch_edge_cases():
    assert calibrate_sigmas_rdp(epsilons=[], delta=1e-5, q=[], rounds=10)[0].size == 0
    with pytest.raises(ValueError, match="sampling ratios"):
        calibrate_sigmas_rdp(epsilons=[1.0, 2.0], delta=1e-5, q=[0.1], rounds=10)
    with pytest.raises(ValueError):
        calibrate_sigmas_rdp(epsilons=[1.0, 0.0], delta=1e-5, q=[0.1, 0.1], rounds=10)
    assert rdp_epsilons(noise_multipliers=[1.0, 2.0], q=[0.0, 0.1], rounds=10, delta=1e-5)[0] == 0.0


def test_calibrate_q_returns_one_when_q1_suffices():
    assert calibrate_q_rdp(epsilon=10.0, delta=1e-5, noise_multiplier=5.0, rounds=1) == 1.0


def test_calibrate_sigma_q_one():
    sigma = calibrate_sigma_rdp(epsilon=1.0, delta=1e-5, q=1.0, rounds=10)
    assert ref_eps(sigma, 1.0, 10, 1e-5) <= 1.0
    assert ref_eps(sigma * (1 - 1e-6), 1.0, 10, 1e-5) > 1.0


def test_calibrate_sigma_huge_epsilon_clamps_at_sigma_min():
    from hdp_planner.accounting.rdp import SIGMA_MIN

    sigma = calibrate_sigma_rdp(epsilon=1e6, delta=1e-3, q=1e-4, rounds=1)
    assert sigma == pytest.approx(SIGMA_MIN)
    assert ref_eps(sigma, 1e-4, 1, 1e-3) <= 1e6


def test_inverse_consistency():
    sigma = calibrate_sigma_rdp(epsilon=2.0, delta=1e-5, q=0.02, rounds=500)
    q = calibrate_q_rdp(epsilon=2.0, delta=1e-5, noise_multiplier=sigma, rounds=500)
    assert q == pytest.approx(0.02, rel=1e-5)


@pytest.mark.parametrize(
    "args",
    [
        (0.0, 1e-5, 0.1, 10),
        (-1.0, 1e-5, 0.1, 10),
        (1.0, 0.0, 0.1, 10),
        (1.0, 1.5, 0.1, 10),  # δ = 1 is vacuous but valid (one client); δ > 1 is not
        (1.0, 1e-5, 0.0, 10),
        (1.0, 1e-5, 1.5, 10),
        (1.0, 1e-5, 0.1, 0),
        (1.0, 1e-5, 0.1, 2.5),
        (float("nan"), 1e-5, 0.1, 10),
    ],
)
def test_calibrate_sigma_invalid(args):
    with pytest.raises(ValueError):
        calibrate_sigma_rdp(**dict(zip(("epsilon", "delta", "q", "rounds"), args)))


@pytest.mark.parametrize(
    "args",
    [(0.0, 1e-5, 1.0, 10), (1.0, 2.0, 1.0, 10), (1.0, 1e-5, 0.0, 10), (1.0, 1e-5, -1.0, 10), (1.0, 1e-5, 1.0, 0)],
)
def test_calibrate_q_invalid(args):
    with pytest.raises(ValueError):
        calibrate_q_rdp(**dict(zip(("epsilon", "delta", "noise_multiplier", "rounds"), args)))


def test_calibrate_q_unreachable():
    # the RDP→(ε, δ) conversion has a floor; below it only the KL branch (ε = 0) helps, which at σ = 0.1 and
    # δ = 1e-12 needs q²(e^100 − 1)·T < δ²: no q ≥ 1e-12
    with pytest.raises(ValueError, match="no sampling ratio"):
        calibrate_q_rdp(epsilon=1e-4, delta=1e-12, noise_multiplier=0.1, rounds=10)


def test_calibrate_q_below_the_conversion_floor_reaches_the_kl_branch():
    # ε = 1e-4 is below the floor at δ = 1e-9, but a q with ε = 0 exists (T·q²(e^4 − 1) < δ²): it is found
    q = calibrate_q_rdp(epsilon=1e-4, delta=1e-9, noise_multiplier=0.5, rounds=10)
    assert 1e-12 < q < 1e-9 and rdp_epsilon(noise_multiplier=0.5, q=q, rounds=10, delta=1e-9) == 0.0


def test_rdp_epsilon_invalid():
    with pytest.raises(ValueError):
        rdp_epsilon(noise_multiplier=-1.0, q=0.1, rounds=10, delta=1e-5)
    with pytest.raises(ValueError):
        rdp_epsilon(noise_multiplier=1.0, q=1.1, rounds=10, delta=1e-5)
    with pytest.raises(ValueError):
        rdp_epsilon(noise_multiplier=1.0, q=0.1, rounds=0, delta=1e-5)
    with pytest.raises(ValueError):
        rdp_epsilon(noise_multiplier=1.0, q=0.1, rounds=10, delta=0.0)


@pytest.mark.parametrize(
    ("sigma", "q"), [(0.4, 0.3), (0.9, 0.1), (1.5, 0.02), (6.0, 1e-3), (2.0, 1.0), (0.3, 0.5), (0.6, 0.9)]
)
def test_rdp_curve_is_dp_accountings_at_every_order(sigma, q):
    from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS, _compute_rdp_poisson_subsampled_gaussian

    from hdp_planner.accounting.calibration import quiet_dp_accounting

    with quiet_dp_accounting():
        reference = np.asarray(_compute_rdp_poisson_subsampled_gaussian(q, sigma, DEFAULT_RDP_ORDERS))
    ours = rdp_curve(noise_multiplier=sigma, q=q)
    assert np.array_equal(np.isinf(ours), np.isinf(reference))  # the same orders excluded (1000-term cap)
    finite = np.isfinite(reference)
    assert np.allclose(ours[finite], reference[finite], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(("q", "sigma"), [(0.01, 1.0), (0.3, 2.0), (1e-4, 0.7), (0.9, 5.0)])
def test_the_integer_orders_slopes_are_their_derivatives(q, sigma):
    """The calibration's Newton steps use d RDP/du (u = 1/(2σ²)) and d RDP/d log q of every integer order: each equals
    a central difference of the RDP itself (3 rounds composed)."""
    from hdp_planner.accounting.rdp_orders import INT_ORDERS, int_rdp

    qs, sigmas = np.array([[q]]), np.array([[sigma]])
    u, h = 1 / (2 * sigma**2), 1e-6

    def at(q, u):
        return int_rdp(np.array([[q]]), np.array([[1 / math.sqrt(2 * u)]]), rounds=3)[0]

    rdp, du = int_rdp(qs, sigmas, rounds=3, wrt="u")
    assert np.allclose(rdp, at(q, u), rtol=1e-13, atol=0)
    assert np.allclose(du, (at(q, u * (1 + h)) - at(q, u * (1 - h))) / (2 * h * u), rtol=1e-5, atol=0)
    _, dlogq = int_rdp(qs, sigmas, rounds=3, wrt="log q")
    assert np.allclose(dlogq, (at(q * math.exp(h), u) - at(q * math.exp(-h), u)) / (2 * h), rtol=1e-5, atol=0)
    plain, slope = int_rdp(np.array([[1.0]]), sigmas, rounds=3, wrt="u")
    assert np.allclose(slope, 3 * INT_ORDERS, rtol=1e-15) and np.allclose(plain, 3 * INT_ORDERS * u, rtol=1e-15)
