"""hdp_planner.pld against dp-accounting's PLDAccountant at its default discretization."""

from __future__ import annotations

import pytest

from hdp_planner.accounting import dp_event
from hdp_planner.pld import calibrate_sigma_pld, pld_epsilon
from hdp_planner.rdp import calibrate_sigma_rdp


def ref_eps(sigma: float, q: float, rounds: int, delta: float) -> float:
    """dp-accounting's PLD accountant called directly: independent of pld.py's path to it."""
    from dp_accounting.pld import PLDAccountant

    return float(PLDAccountant().compose(dp_event(sigma, q, rounds)).get_epsilon(delta))


def test_pld_epsilon_matches_dp_accounting():
    assert pld_epsilon(2.0, 0.1, 20, 1e-5) == ref_eps(2.0, 0.1, 20, 1e-5)
    assert pld_epsilon(1.0, 0.0, 20, 1e-5) == 0.0


@pytest.mark.parametrize(
    "eps,delta,q,rounds",
    [
        (1.0, 1e-5, 0.1, 20),
        (4.0, 1e-6, 0.5, 3),
        pytest.param(1.0, 1e-5, 0.01, 1000, marks=pytest.mark.slow),
    ],
)
def test_calibrate_sigma_pld_safe_and_tight(eps, delta, q, rounds):
    sigma = calibrate_sigma_pld(eps, delta, q, rounds)
    assert ref_eps(sigma, q, rounds, delta) <= eps
    assert ref_eps(sigma * (1 - 1e-3), q, rounds, delta) > eps  # within 0.1% of the smallest σ
    assert sigma <= calibrate_sigma_rdp(eps, delta, q, rounds)  # PLD is tighter than RDP


@pytest.mark.parametrize(
    "args", [(0.0, 1e-5, 0.1, 10), (1.0, 0.0, 0.1, 10), (1.0, 1e-5, 0.0, 10), (1.0, 1e-5, 1.2, 10), (1.0, 1e-5, 0.1, 0)]
)
def test_calibrate_sigma_pld_invalid(args):
    with pytest.raises(ValueError):
        calibrate_sigma_pld(*args)
