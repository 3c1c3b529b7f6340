"""σ schedules (the time-adaptive baseline): ε of phases is dp-accounting's RDP of the composed phases, a schedule
is cut part-way exactly, and the calibrated schedule meets its budget with the least noise."""

from __future__ import annotations

import dp_accounting as dpa
import pytest
from dp_accounting.rdp import RdpAccountant

from hdp_planner.accounting.schedule import calibrate_schedule, schedule_epsilon, truncate


def reference(phases, *, q, delta):
    """dp-accounting's RDP accountant (default orders) of the phases composed in turn."""
    acc = RdpAccountant()
    for rounds, sigma in phases:
        if rounds:
            acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), rounds)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize(
    ("phases", "q", "delta"),
    [([(5, 3.0), (5, 1.5)], 0.1, 1e-5), ([(1, 0.8)], 1.0, 1e-3), ([(0, 2.0), (20, 1.1), (7, 4.0)], 0.02, 1e-6)],
)
def test_the_epsilon_of_phases_is_dp_accountings(phases, q, delta):
    assert schedule_epsilon(phases, q=q, delta=delta) == pytest.approx(reference(phases, q=q, delta=delta), rel=1e-9)


def test_no_round_spends_nothing_and_phases_are_checked():
    assert schedule_epsilon([(0, 1.0)], q=0.1, delta=1e-5) == 0.0
    assert schedule_epsilon([], q=0.1, delta=1e-5) == 0.0
    with pytest.raises(ValueError, match=r"^noise_multiplier must be a positive finite number, got 0\.0$"):
        schedule_epsilon([(2, 0.0)], q=0.1, delta=1e-5)
    with pytest.raises(ValueError, match=r"^rounds must be a positive integer, got -1$"):
        schedule_epsilon([(-1, 1.0)], q=0.1, delta=1e-5)


def test_truncate_keeps_the_first_rounds():
    phases = [(3, 2.0), (4, 1.0), (2, 0.5)]
    assert truncate(phases, 0) == []
    assert truncate(phases, 2) == [(2, 2.0)]
    assert truncate(phases, 3) == [(3, 2.0)]
    assert truncate(phases, 5) == [(3, 2.0), (2, 1.0)]
    assert truncate(phases, 9) == phases and truncate(phases, 12) == phases


@pytest.mark.parametrize(("saving", "ratio"), [(0, 1.0), (5, 2.0), (9, 1.3)])
def test_the_calibrated_schedule_meets_its_budget_with_the_least_noise(saving, ratio):
    eps, delta, q, rounds = 1.5, 1e-5, 0.1, 10
    save, spend = calibrate_schedule(epsilon=eps, delta=delta, q=q, rounds=rounds, saving_rounds=saving,
                                     saving_noise=ratio)  # fmt: skip
    assert save == ratio * spend
    phases = [(saving, save), (rounds - saving, spend)]
    assert reference(phases, q=q, delta=delta) <= eps * (1 + 1e-12)
    less = [(saving, save * (1 - 1e-7)), (rounds - saving, spend * (1 - 1e-7))]
    assert reference(less, q=q, delta=delta) > eps


def test_impossible_schedules_are_refused():
    common = dict(epsilon=1.0, delta=1e-5, q=0.1, rounds=10)
    for saving, message in ((10, "[0, 10), got 10"), (-1, "[0, 10), got -1"), (2.0, "[0, 10), got 2.0")):
        with pytest.raises(ValueError) as caught:
            calibrate_schedule(**common, saving_rounds=saving, saving_noise=2.0)
        assert str(caught.value) == f"saving rounds must be an integer in [0, T) = {message}"
    for ratio in (0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError) as caught:
            calibrate_schedule(**common, saving_rounds=2, saving_noise=ratio)
        assert str(caught.value) == f"saving noise ratio must be ≥ 1 (more noise while saving), got {ratio}"
    with pytest.raises(ValueError) as caught:  # below the RDP conversion's floor, whatever the noise
        calibrate_schedule(epsilon=0.1, delta=1e-300, q=1.0, rounds=10, saving_rounds=2, saving_noise=2.0)
    assert str(caught.value) == (
        "epsilon=0.1 is not reachable with noise_multiplier ≤ 1e+12 (delta=1e-300, q=1.0, rounds=10); the RDP→(ε,δ) "
        "conversion has a floor"
    )
