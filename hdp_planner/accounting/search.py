"""One calibration search for every accountant: the smallest parameter at which a monotone privacy cost meets its
target, as dp-accounting's ``calibrate_dp_mechanism`` (a bracket on a monotone ε(σ), searched to a tolerance, whose
answer is the bracket's safe end).

The searched variable x is chosen so that the cost falls as x grows (x = log σ, or −log q for a sampling ratio), and
the caller states the cost as a gap: gap(x) ≤ 0 exactly where the target is met (log ε − log ε_target, or any
non-increasing function). :func:`smallest_meeting` keeps a bracket (a, b] of evaluated points, a failing, b meeting,
and returns b: the answer always meets the target, and is within ``xtol`` of the smallest x that does. Steps are
Illinois regula falsi inside the bracket (superlinear on smooth gaps), expanding steps until there is one, and
bisection wherever a step would leave it or a gap is infinite (ε = 0 or ∞), so only monotonicity is needed for the
result, smoothness only for its speed. A caller that knows its cost's shape better may propose the steps itself;
the bracket, the termination and the guarantee stay here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Found", "Proposal", "smallest_meeting"]

Proposal = Callable[[float, float, float, float], float]
"""(x, gap(x), a, b) → the next x to evaluate, for a bracket (a, b] (a = −inf while nothing failed, b = +inf while
nothing met); a proposal outside (a, b) is replaced by bisection or an expanding step."""


@dataclass(frozen=True)
class Found:
    """The answer of :func:`smallest_meeting`."""

    x: float
    """The safe end: the smallest evaluated x with gap ≤ 0, ``lo`` if ``lo`` meets, ``hi`` where it is assumed to
    meet and nothing smaller did, +inf where nothing in [lo, hi] meets."""
    gap: float
    """gap(x) (NaN where x is the assumed ``hi`` or +inf)."""
    evaluations: int


def smallest_meeting(
    gap: Callable[[float], float],
    *,
    lo: float,
    hi: float,
    start: float,
    xtol: float,
    accept: float = 0.0,
    hi_meets: bool = False,
    step: float = 1.0,
    max_evaluations: int = 100,
    propose: Proposal | None = None,
) -> Found:
    """The smallest x ∈ [lo, hi] with gap(x) ≤ 0, for gap non-increasing in x, to within ``xtol``.

    Args:
        gap: the cost's distance to its target, ≤ 0 exactly where the target is met.
        lo, hi: the search range (``lo`` may be −inf); ``hi`` is taken to meet the target unevaluated if ``hi_meets``.
        start: the first point evaluated (clipped to the range).
        xtol: the search stops once the bracket (a, b] is this narrow.
        accept: it also stops at the first evaluated x with −accept ≤ gap(x) ≤ 0 (dp-accounting's ``tol``).
        step: the first expanding step while one side of the bracket is open; it doubles at each step.
        max_evaluations: then the safe end found so far is returned.
        propose: the caller's own steps (:data:`Proposal`); Illinois regula falsi otherwise.

    Returns:
        :class:`Found`: its ``x`` meets the target whenever it is finite, and was evaluated unless it is the assumed
        ``hi``.
    """
    a, ga = -math.inf, math.nan  # the largest x evaluated that fails, and its gap
    b, gb = (hi, math.nan) if hi_meets else (math.inf, math.nan)  # the smallest meeting
    x, width, side, repeats = min(max(start, lo), hi), step, 0, 0
    widths = [math.inf, math.inf]  # the bracket's width after the last two evaluations
    for evaluation in range(1, max_evaluations + 1):
        g = gap(x)
        if g <= 0:
            b, gb = x, g
            if g >= -accept or x <= lo:
                return Found(x if x > lo else lo, g, evaluation)
            repeats, side = (repeats + 1 if side < 0 else 1), -1
        else:
            a, ga = x, g
            repeats, side = (repeats + 1 if side > 0 else 1), 1
        if b - a <= xtol or a >= hi:
            break
        slow = b - a > 0.5 * widths[0]  # not halved in two steps: bisect (at most 3 times bisection's evaluations)
        widths = [widths[1], b - a]
        x = propose(x, g, a, b) if propose is not None else _illinois(a, ga, b, gb, side, repeats, xtol)
        if slow and propose is None:
            x = math.nan
        if not a < x < b:  # outside the bracket (or NaN): bisect it, or expand toward its open side
            if math.isfinite(a) and math.isfinite(b):
                x = 0.5 * (a + b)
            else:
                x = b - width if math.isfinite(b) else a + width
                width *= 2
        x = min(max(x, lo), hi)
    if not math.isfinite(b):
        return Found(math.inf, math.nan, evaluation)
    return Found(b, gb, evaluation)


def _illinois(a: float, ga: float, b: float, gb: float, side: int, repeats: int, xtol: float) -> float:
    """Regula falsi between (a, ga) and (b, gb), the end kept twice or more in a row weighted down by 2^(repeats−1)
    (Illinois), kept 0.4·xtol inside the bracket so that it closes from both sides; NaN (bisection) where either
    gap is not finite or an end is open."""
    if not (math.isfinite(ga) and math.isfinite(gb) and math.isfinite(a) and math.isfinite(b)):
        return math.nan
    # the last point replaced the end on `side` (1: a, −1: b), so the other end has been kept `repeats` times
    weight = 0.5 ** max(repeats - 1, 0)
    ga_, gb_ = (ga, gb * weight) if side > 0 else (ga * weight, gb)
    x = a + (b - a) * ga_ / (ga_ - gb_)
    return min(max(x, a + 0.4 * xtol), b - 0.4 * xtol)
