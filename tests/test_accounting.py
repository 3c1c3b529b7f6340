"""calibrate_sigma / epsilon_spent against dp-accounting itself, on many configurations."""

from __future__ import annotations

import math

import pytest

from hdp_planner import GaussianRounds, calibrate_q, calibrate_sigma, epsilon_spent
from hdp_planner.accounting import closed_form_sigma2, reference_epsilon

SETTINGS = [  # (epsilon, delta, q, rounds)
    (0.5, 6000**-1.1, 0.02, 50),
    (1.5, 6000**-1.1, 0.02, 50),
    (3.0, 6000**-1.1, 0.0342, 50),
    (2.0, 600**-1.1, 0.1, 100),
    (12.0, 600**-1.1, 0.1677, 100),
    (0.5, 714**-1.1, 0.1, 50),
    (0.1, 1e-9, 1e-3, 1000),
    (8.0, 1e-5, 0.5, 10),
    (1.0, 1e-5, 1.0, 1),
    (4.0, 1e-3, 0.01, 5000),
]


@pytest.mark.parametrize(("epsilon", "delta", "q", "rounds"), SETTINGS)
def test_rdp_calibration_meets_budget_by_dp_accounting(epsilon, delta, q, rounds):
    sigma = calibrate_sigma(epsilon, delta, q, rounds)
    assert reference_epsilon(GaussianRounds(sigma, q, rounds), delta) <= epsilon * (1 + 1e-12)
    # and is tight: 0.1% less noise would overspend
    assert reference_epsilon(GaussianRounds(sigma * 0.999, q, rounds), delta) > epsilon


@pytest.mark.parametrize(("epsilon", "delta", "q", "rounds"), SETTINGS[:6])
def test_epsilon_spent_equals_dp_accounting(epsilon, delta, q, rounds):
    event = GaussianRounds(1.3, q, rounds)
    assert epsilon_spent(event, delta) == pytest.approx(reference_epsilon(event, delta), rel=1e-9)


def test_calibrate_q_is_the_inverse_of_calibrate_sigma():
    delta = 6000**-1.1
    sigma = calibrate_sigma(1.5, delta, 0.02, 50)
    assert calibrate_q(1.5, delta, sigma, 50) == pytest.approx(0.02, rel=1e-3)


def test_closed_form_is_theorem_1_and_looser_than_rdp():
    delta = 6000**-1.1
    s2 = closed_form_sigma2(0.5, delta, 0.02, 50)
    assert s2 == pytest.approx(7 * 0.02**2 * 50 * (0.5 + 2 * math.log(1 / delta)) / 0.25)
    assert calibrate_sigma(0.5, delta, 0.02, 50, "closed-form") ** 2 == pytest.approx(s2)
    assert s2 > 4 * calibrate_sigma(0.5, delta, 0.02, 50) ** 2  # NOTES §1: 11.0 vs 2.25


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0.0, 1e-5, 0.1, 10), "epsilon"),
        ((float("nan"), 1e-5, 0.1, 10), "epsilon"),
        ((1.0, 0.0, 0.1, 10), "delta"),
        ((1.0, 1.0, 0.1, 10), "delta"),
        ((1.0, 1e-5, 0.0, 10), "q"),
        ((1.0, 1e-5, 1.5, 10), "q"),
        ((1.0, 1e-5, 0.1, 0), "rounds"),
    ],
)
def test_invalid_inputs_raise(args, message):
    with pytest.raises(ValueError, match=message):
        calibrate_sigma(*args)


def test_unknown_accountant_raises():
    with pytest.raises(ValueError, match="accountant"):
        calibrate_sigma(1.0, 1e-5, 0.1, 10, accountant="moments")
