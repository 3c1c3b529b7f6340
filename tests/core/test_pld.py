"""hdp_planner.accounting.pld against dp-accounting's PLDAccountant at its default discretization."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdp_planner.accounting.calibration import dp_event
from hdp_planner.accounting.pld import calibrate_sigma_pld, pld_epsilon
from hdp_planner.accounting.rdp import calibrate_sigma_rdp


def ref_eps(sigma: float, q: float, rounds: int, delta: float) -> float:
    """dp-accounting's PLD accountant called directly: independent of pld.py's path to it."""
    from dp_accounting.pld import PLDAccountant

    return float(PLDAccountant().compose(dp_event(sigma, q=q, rounds=rounds)).get_epsilon(delta))


@pytest.mark.parametrize(
    ("sigma", "q", "rounds", "delta"),
    [
        (2.0, 0.1, 20, 1e-5),
        (1.5, 0.39, 10, 6e-8),
        (5.8, 0.015, 2, 2e-5),
        (12.0, 0.066, 154, 1.8e-6),
        (3.0, 1.0, 5, 1e-6),
    ],
)
def test_pld_epsilon_is_dp_accountings(sigma, q, rounds, delta):
    """The vectorised inverse privacy loss builds the very same distribution: the same ε, to the last bit."""
    assert pld_epsilon(noise_multiplier=sigma, q=q, rounds=rounds, delta=delta) == ref_eps(sigma, q, rounds, delta)


def test_pld_epsilon_of_no_sampling_is_zero():
    assert pld_epsilon(noise_multiplier=1.0, q=0.0, rounds=20, delta=1e-5) == 0.0


@pytest.mark.parametrize(
    "eps,delta,q,rounds",
    [
        (1.0, 1e-5, 0.1, 20),
        (4.0, 1e-6, 0.5, 3),
        (2.0, 1e-5, 1.0, 4),
        pytest.param(1.0, 1e-5, 0.01, 1000, marks=pytest.mark.slow),
    ],
)
def test_calibrate_sigma_pld_safe_and_tight(eps, delta, q, rounds):
    sigma = calibrate_sigma_pld(epsilon=eps, delta=delta, q=q, rounds=rounds)
    assert ref_eps(sigma, q, rounds, delta) <= eps
    assert ref_eps(sigma * (1 - 1e-3), q, rounds, delta) > eps  # within 0.1% of the smallest σ
    assert sigma <= calibrate_sigma_rdp(epsilon=eps, delta=delta, q=q, rounds=rounds)  # PLD is tighter than RDP


@settings(max_examples=4, deadline=None)
@given(
    eps=st.floats(0.3, 8.0),
    delta=st.floats(-7.0, -4.0).map(lambda x: 10**x),
    q=st.floats(-2.0, 0.0).map(lambda x: 10**x),
    rounds=st.integers(1, 30),
)
def test_calibrate_sigma_pld_is_safe_by_dp_accounting(eps, delta, q, rounds):
    """The coarse search and extrapolated root are only guesses: the σ returned was evaluated and meets ε."""
    sigma = calibrate_sigma_pld(epsilon=eps, delta=delta, q=q, rounds=rounds)
    assert ref_eps(sigma, q, rounds, delta) <= eps
    assert math.log(sigma / calibrate_sigma_rdp(epsilon=eps, delta=delta, q=q, rounds=rounds)) <= 1e-3


@pytest.mark.parametrize(
    "args", [(0.0, 1e-5, 0.1, 10), (1.0, 0.0, 0.1, 10), (1.0, 1e-5, 0.0, 10), (1.0, 1e-5, 1.2, 10), (1.0, 1e-5, 0.1, 0)]
)
def test_calibrate_sigma_pld_invalid(args):
    with pytest.raises(ValueError):
        calibrate_sigma_pld(**dict(zip(("epsilon", "delta", "q", "rounds"), args)))
