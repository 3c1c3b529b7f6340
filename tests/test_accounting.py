"""calibrate_sigma / epsilon_spent against dp-accounting itself, on many configurations."""

from __future__ import annotations

import math

import pytest

from hdp_planner import GaussianRounds, calibrate_q, calibrate_sigma, epsilon_spent
from hdp_planner.accounting.calibration import (
    CalibrationMemo,
    calibrate_sigmas,
    closed_form_sigma2,
    epsilons_spent,
    reference_epsilon,
)

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
    assert s2 > 4 * calibrate_sigma(0.5, delta, 0.02, 50) ** 2  # Theorem 1 against the accountant: 11.0 vs 2.25


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0.0, 1e-5, 0.1, 10), "epsilon"),
        ((float("nan"), 1e-5, 0.1, 10), "epsilon"),
        ((1.0, 0.0, 0.1, 10), "delta"),
        ((1.0, 1.5, 0.1, 10), "delta"),  # δ = 1 (one client) is vacuous, not invalid
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


@pytest.mark.parametrize("accountant", ["rdp", "closed-form", "pld"])
def test_batched_calibration_and_spending(accountant):
    """calibrate_sigmas / epsilons_spent are calibrate_sigma / epsilon_spent per group."""
    eps, q, delta, rounds = [0.5, 3.0], [0.1, 0.4], 1e-5, 10
    sigmas = calibrate_sigmas(eps, delta, q, rounds, accountant)
    assert sigmas.tolist() == pytest.approx([calibrate_sigma(e, delta, x, rounds, accountant) for e, x in zip(eps, q)])
    measure = "rdp" if accountant == "closed-form" else accountant
    spent = epsilons_spent(sigmas, q, rounds, delta, measure)
    assert spent.tolist() == pytest.approx(
        [epsilon_spent(GaussianRounds(s, x, rounds), delta, measure) for s, x in zip(sigmas, q)], rel=1e-12
    )
    with pytest.raises(ValueError):
        calibrate_sigmas([1.0, 2.0], delta, [0.1], rounds, accountant)


def test_memo_calibrates_only_new_groups_and_records_their_spending(monkeypatch):
    from hdp_planner.accounting import rdp

    calls = []
    real = rdp.calibrate_sigmas_rdp
    monkeypatch.setattr(rdp, "calibrate_sigmas_rdp", lambda e, *a: calls.append(list(e)) or real(e, *a))
    memo = CalibrationMemo(limit=3)
    first = memo.sigmas([0.5, 1.5], 1e-5, [0.02, 0.02], 50, "rdp")
    again = memo.sigmas([1.5, 0.5, 3.0], 1e-5, [0.02, 0.02, 0.02], 50, "rdp")
    assert calls == [[0.5, 1.5], [3.0]] and again[:2] == first[::-1]
    spent = memo.spent(first[0], 0.02, 50, 1e-5, "rdp")
    assert spent == pytest.approx(epsilon_spent(GaussianRounds(first[0], 0.02, 50), 1e-5), rel=1e-13)
    assert spent <= 0.5
    memo.sigmas([4.0], 1e-5, [0.02], 50, "rdp")  # over the limit: starts afresh
    assert len(memo._sigma) == 1
