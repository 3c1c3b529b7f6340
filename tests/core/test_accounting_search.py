"""The calibration search for many groups at once: whatever the steps proposed, each group's answer meets its target
and is within the tolerance of the smallest parameter that does; good steps only make it faster."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from hdp_planner.accounting.search import smallest_meeting_each

XTOL = 1e-7
roots = st.lists(st.floats(-20.0, 20.0), min_size=1, max_size=6)


def linear(roots: np.ndarray):
    """Gap x ↦ root − x per group: met from the root on; value = the gap, detail = the point."""

    def measure(x: np.ndarray, groups: np.ndarray):
        gap = roots[groups] - x
        return gap <= 0, gap, x[:, None]

    return measure


def newton(roots: np.ndarray):
    def propose(current, paired, a, b, iteration):
        d = roots[current.groups] - current.x  # the exact step to the root
        return d, np.abs(d) < XTOL

    return propose


def blind(current, paired, a, b, iteration):
    return np.full(current.groups.size, np.nan), np.zeros(current.groups.size, dtype=bool)


def wrong(current, paired, a, b, iteration):
    return np.full(current.groups.size, 1e6), np.ones(current.groups.size, dtype=bool)  # far, and claims close


def check(found, root: np.ndarray) -> None:
    assert np.all(found.x >= root)  # meets
    assert np.all(found.x - root <= XTOL)  # tight
    assert np.array_equal(found.value, root - found.x)  # the value measured at the safe end


@given(roots=roots, start=st.floats(-30.0, 30.0))
def test_good_steps_meet_and_are_tight(roots, start):
    root = np.array(roots)
    found = smallest_meeting_each(
        linear(root), newton(root), lo=-30.0, hi=30.0, start=np.full(root.size, start), xtol=XTOL, max_evaluations=200
    )
    check(found, root)


@given(roots=roots, start=st.floats(-30.0, 30.0), propose=st.sampled_from([blind, wrong]))
def test_useless_steps_still_meet_and_are_tight(roots, start, propose):
    root = np.array(roots)
    found = smallest_meeting_each(
        linear(root), propose, lo=-30.0, hi=30.0, start=np.full(root.size, start), xtol=XTOL, max_evaluations=200
    )
    check(found, root)


def evaluations(root: np.ndarray, propose) -> int:
    calls = []

    def measure(x, groups):
        calls.append(groups.size)
        return linear(root)(x, groups)

    smallest_meeting_each(measure, propose, lo=-30.0, hi=30.0, start=np.zeros(root.size), xtol=XTOL)
    return len(calls)


def test_good_steps_take_few_evaluations():
    root = np.array([-2.0, 0.5, 2.25])
    assert evaluations(root, newton(root)) <= 5  # steps aimed just past the root, from either side, then a pair
    assert evaluations(root, blind) >= 20  # bisection: log2(width / xtol)


def test_range_ends():
    root = np.array([-5.0, 0.0, 5.0])  # met everywhere, at 0, nowhere in [-2, 2]
    found = smallest_meeting_each(linear(root), blind, lo=-2.0, hi=2.0, start=np.zeros(3), xtol=XTOL)
    assert found.x[0] == -2.0 and abs(found.x[1]) <= XTOL and found.x[1] >= 0 and found.x[2] == np.inf
    assert np.isnan(found.value[2])


def test_out_of_evaluations_is_nan():
    root = np.array([0.123456789])
    found = smallest_meeting_each(linear(root), blind, lo=-30.0, hi=30.0, start=np.zeros(1), xtol=1e-12,
                                  max_evaluations=5)  # fmt: skip
    assert np.isnan(found.x[0])
