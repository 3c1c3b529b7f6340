"""The accountants' arguments, checked once: each refusal is one line naming the argument, the range and the value
given; values at the edge of a range, numpy numbers and float rounding of q = 1 are accepted as what they mean."""

from __future__ import annotations

import numpy as np
import pytest

from hdp_planner import GaussianRounds, calibrate_q, calibrate_sigma
from hdp_planner.accounting.calibration import calibrate_sigmas
from hdp_planner.accounting.rdp import rdp_epsilons

GOOD = dict(epsilon=1.0, delta=1e-5, q=0.1, rounds=10)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("epsilon", 0.0, "epsilon must be a positive finite number, got 0.0"),
        ("epsilon", -1, "epsilon must be a positive finite number, got -1"),
        ("epsilon", float("inf"), "epsilon must be a positive finite number, got inf"),
        ("epsilon", float("nan"), "epsilon must be a positive finite number, got nan"),
        ("epsilon", True, "epsilon must be a number, got True"),
        ("epsilon", "1", "epsilon must be a number, got '1'"),
        ("delta", 0.0, "delta must lie in (0, 1], got 0.0"),
        ("delta", 1.5, "delta must lie in (0, 1], got 1.5"),
        ("delta", None, "delta must be a number, got None"),
        ("q", 0.0, "q must lie in (0, 1], got 0.0"),
        ("q", 1 + 2e-12, "q must lie in (0, 1], got 1.000000000002"),
        ("q", False, "q must be a number, got False"),
        ("rounds", 0, "rounds must be a positive integer, got 0"),
        ("rounds", 10.0, "rounds must be a positive integer, got 10.0"),
        ("rounds", True, "rounds must be a positive integer, got True"),
        ("rounds", "10", "rounds must be a positive integer, got '10'"),
    ],
)
def test_each_argument_is_refused_in_one_line(key, value, message):
    with pytest.raises(ValueError) as caught:
        calibrate_sigma(**{**GOOD, key: value})
    assert str(caught.value) == message


def test_the_edges_of_each_range_are_accepted():
    """δ = 1 is vacuous (any σ meets it: the smallest σ searched), q within float rounding of 1 is 1, and numpy
    integers count rounds."""
    assert calibrate_sigma(**{**GOOD, "delta": 1.0}) == 0.001
    assert calibrate_sigma(**{**GOOD, "q": 1 + 1e-12}) == calibrate_sigma(**{**GOOD, "q": 1.0})
    assert calibrate_sigma(**{**GOOD, "rounds": np.int64(10)}) == calibrate_sigma(**GOOD)
    assert calibrate_sigma(**{**GOOD, "epsilon": np.float32(1.0)}) == calibrate_sigma(**GOOD)
    assert GaussianRounds(noise_multiplier=1.0, q=1 + 1e-12, rounds=1).q == 1 + 1e-12  # read as 1 where measured


def test_noise_multipliers_and_groups():
    with pytest.raises(ValueError) as caught:
        calibrate_q(epsilon=1.0, delta=1e-5, noise_multiplier=0.0, rounds=10)
    assert str(caught.value) == "noise_multiplier must be a positive finite number, got 0.0"
    with pytest.raises(ValueError) as caught:
        GaussianRounds(noise_multiplier=1.0, q=-0.5, rounds=10)
    assert str(caught.value) == "q must lie in (0, 1], got -0.5"
    with pytest.raises(ValueError) as caught:
        calibrate_sigmas(epsilons=[1.0, 2.0], delta=1e-5, q=[0.1], rounds=10)
    assert str(caught.value) == "2 epsilons for 1 sampling ratios"
    with pytest.raises(ValueError) as caught:
        rdp_epsilons(noise_multipliers=[1.0], q=[-0.1], rounds=10, delta=1e-5)
    assert str(caught.value) == "q must lie in [0, 1], got -0.1"
    assert rdp_epsilons(noise_multipliers=[1.0, 1.0], q=[0.0, 1 + 1e-12], rounds=10, delta=1e-5).tolist() == [
        0.0,
        rdp_epsilons(noise_multipliers=[1.0], q=[1.0], rounds=10, delta=1e-5)[0],
    ]
