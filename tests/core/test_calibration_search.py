"""The one calibration search: whatever the monotone cost, its answer meets the target and is within the tolerance
of the smallest parameter that does."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hdp_planner.accounting.search import smallest_meeting

roots = st.floats(-20.0, 20.0)
scales = st.floats(1e-3, 1e3)


def counted(gap):
    calls = []

    def wrapped(x):
        calls.append(x)
        return gap(x)

    return wrapped, calls


SHAPES = {"linear": lambda y: y, "convex": lambda y: math.expm1(min(y, 50.0)), "saturating": math.tanh}


@given(root=roots, scale=scales, shape=st.sampled_from(sorted(SHAPES)), start=roots)
def test_smooth_gap_meets_and_is_tight(root, scale, shape, start):
    """Simple roots, as log ε(log σ) has: at most 60 evaluations from anywhere in a range 60 wide to 1e-9."""
    gap, calls = counted(lambda x: SHAPES[shape](scale * (root - x)))
    found = smallest_meeting(gap, lo=-30.0, hi=30.0, start=start, xtol=1e-9)
    assert found.evaluations == len(calls) <= 60
    assert found.gap == gap(found.x) <= 0 and found.x <= root + 1e-9 and gap(found.x - 1.01e-9) > 0


@given(root=roots, start=roots)
def test_a_multiple_root_still_converges(root, start):
    gap, calls = counted(lambda x: (root - x) ** 3)
    found = smallest_meeting(gap, lo=-30.0, hi=30.0, start=start, xtol=1e-9)
    assert found.evaluations == len(calls) <= 200 and gap(found.x) <= 0 and found.x <= root + 1e-9


@given(root=roots, jump=st.floats(0.1, 50.0), start=roots)
def test_jumps_and_infinite_gaps_fall_back_to_bisection(root, jump, start):
    """A staircase with infinite gaps on both sides (ε = 0 below the root, ∞ far above it: the KL branch's jump)."""

    def gap(x):
        if x >= root:
            return -math.inf
        return math.inf if x < root - 1 else jump

    found = smallest_meeting(gap, lo=-30.0, hi=30.0, start=start, xtol=1e-7)
    assert root <= found.x <= root + 1e-7


def test_range_ends():
    assert smallest_meeting(lambda x: -1.0, lo=-2.0, hi=2.0, start=0.0, xtol=1e-9).x == -2.0  # lo meets
    missing = smallest_meeting(lambda x: 1.0, lo=-2.0, hi=2.0, start=0.0, xtol=1e-9)
    assert missing.x == math.inf and math.isnan(missing.gap)
    # hi assumed to meet: returned unevaluated when nothing below it does
    gap, calls = counted(lambda x: 1.0 if x < 2.0 else pytest.fail("hi was evaluated"))
    assumed = smallest_meeting(gap, lo=-2.0, hi=2.0, start=0.0, xtol=1e-6, hi_meets=True)
    assert assumed.x == 2.0 and math.isnan(assumed.gap) and 2.0 not in calls


def test_accept_stops_at_the_first_point_inside_the_window():
    gap, calls = counted(lambda x: 1.0 - x)
    found = smallest_meeting(gap, lo=-10.0, hi=10.0, start=1.05, xtol=1e-12, accept=0.1)
    assert found.x == 1.05 and len(calls) == 1


@pytest.mark.parametrize("proposal", [lambda x, g, a, b: math.nan, lambda x, g, a, b: x + 100.0, lambda x, g, a, b: x])
def test_a_bad_proposal_cannot_break_the_guarantee(proposal):
    found = smallest_meeting(lambda x: 0.7 - x, lo=-10.0, hi=10.0, start=3.0, xtol=1e-9, propose=proposal)
    assert 0.7 <= found.x <= 0.7 + 1e-9


def test_max_evaluations_returns_the_safe_end_found_so_far():
    found = smallest_meeting(lambda x: 0.5 - x, lo=-10.0, hi=10.0, start=3.0, xtol=1e-15, max_evaluations=3)
    assert found.evaluations == 3 and found.x >= 0.5 and found.gap <= 0
