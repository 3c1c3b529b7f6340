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

:func:`smallest_meeting_each` is the same search for many independent targets at once (the groups of a plan), each
evaluation vectorised over the groups still searching; there the caller always proposes the steps, and may ask for
two points 0.4·xtol either side of a predicted root, which close the bracket in one evaluation when it holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Evaluated",
    "Found",
    "FoundEach",
    "Measure",
    "Proposal",
    "Proposals",
    "smallest_meeting",
    "smallest_meeting_each",
]

Proposal = Callable[[float, float, float, float], float]
"""(x, gap(x), a, b) → the next x to evaluate, for a bracket (a, b] (a = −inf while nothing failed, b = +inf while
nothing met); a proposal outside (a, b) is replaced by bisection or an expanding step."""


@dataclass(frozen=True, kw_only=True)
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
                return Found(x=x if x > lo else lo, gap=g, evaluations=evaluation)
            repeats, side = (repeats + 1 if side < 0 else 1), -1
        else:
            a, ga = x, g
            repeats, side = (repeats + 1 if side > 0 else 1), 1
        if b - a <= xtol or a >= hi:
            break
        slow = b - a > 0.5 * widths[0]  # not halved in two steps: bisect (at most 3 times bisection's evaluations)
        widths = [widths[1], b - a]
        x = (
            propose(x, g, a, b)
            if propose is not None
            else _illinois(a, ga, b=b, gb=gb, side=side, repeats=repeats, xtol=xtol)
        )
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
        return Found(x=math.inf, gap=math.nan, evaluations=evaluation)
    return Found(x=b, gap=gb, evaluations=evaluation)


def _illinois(a: float, ga: float, *, b: float, gb: float, side: int, repeats: int, xtol: float) -> float:
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


@dataclass(frozen=True, kw_only=True)
class Evaluated:
    """Points evaluated by :func:`smallest_meeting_each`, one per entry of ``groups`` (a group may appear twice)."""

    groups: np.ndarray
    x: np.ndarray
    value: np.ndarray
    """What the caller's :data:`Measure` recorded at each point."""
    detail: np.ndarray
    """The caller's details at each point (first axis: the points)."""


Measure = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]
"""(points, groups) → per point: whether the target is met (bool), a value (kept at the safe end) and the details
for the proposals (an array whose first axis runs over the points)."""

Proposals = Callable[[Evaluated, Evaluated, np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray]]
"""(current, paired, a, b, iteration) → per group of ``current`` (the groups still searching, at their last point):
the predicted step d from ``current.x`` (NaN: none), and whether the root is predicted to within xtol (then the two
points x + d ± 0.4·xtol are evaluated next, if x + d lies inside the bracket). ``paired`` holds the upper points of
the pairs just evaluated, the natural previous points of their groups; (a, b] is each current group's bracket."""


@dataclass(frozen=True, kw_only=True)
class FoundEach:
    """The answer of :func:`smallest_meeting_each`, per group."""

    x: np.ndarray
    """The safe end (``lo`` if ``lo`` meets, +inf if ``hi`` does not, NaN where not found in max_evaluations)."""
    value: np.ndarray
    """The measured value at x (NaN where x is not finite)."""


def smallest_meeting_each(
    measure: Measure,
    propose: Proposals,
    *,
    lo: float,
    hi: float,
    start: np.ndarray,
    xtol: float,
    paired: np.ndarray | None = None,
    bisect_after: int = 12,
    max_step: float = 3.0,
    max_evaluations: int = 40,
) -> FoundEach:
    """Per group, the smallest x ∈ [lo, hi] at which its target is met (for a target met from some x on), to within
    ``xtol``: :func:`smallest_meeting` for many groups at once, with the caller's steps.

    Args:
        measure: evaluates points (:data:`Measure`); each call holds one point per group still searching, two for the
            groups evaluating a pair.
        propose: the caller's steps (:data:`Proposals`).
        lo, hi: the search range.
        start: the first point of each group (clipped to the range).
        xtol: a group stops once its bracket (a, b] is this narrow.
        paired: the groups whose start is predicted to within xtol (a pair around it is evaluated first).
        bisect_after: from this evaluation on, a bracketed group bisects (and evaluates no pairs), so that the search
            ends.
        max_step: the largest step.
        max_evaluations: then the groups still searching are returned as NaN.

    Returns:
        :class:`FoundEach`: every finite ``x`` was evaluated (or is ``lo``) and meets its target, and the x just
        below it within ``xtol`` was evaluated and failed. Steps aim just past the predicted root (so the bracket
        closes from both sides); a step that would leave the bracket, or that has no prediction, bisects it.
    """
    n = start.size
    x = np.clip(start, lo, hi)
    a = np.full(n, -np.inf)  # the largest x evaluated that fails
    b = np.full(n, np.inf)  # the smallest x evaluated that meets
    value_b, out = np.full(n, np.nan), np.full(n, np.nan)
    todo = np.arange(n)
    pair = np.zeros(n, dtype=bool) if paired is None else paired.copy()
    for it in range(max_evaluations):
        two = todo[pair[todo]]
        points = np.concatenate([np.where(pair[todo], x[todo] - 0.4 * xtol, x[todo]), x[two] + 0.4 * xtol])
        points = np.clip(points, lo, hi)
        owner = np.concatenate([todo, two])
        ok, value, detail = measure(points, owner)
        np.maximum.at(a, owner[~ok], points[~ok])
        np.minimum.at(b, owner[ok], points[ok])
        at_b = ok & (points == b[owner])
        value_b[owner[at_b]] = value[at_b]
        m = todo.size
        ag, bg = a[todo], b[todo]
        finished = (bg - ag <= xtol) | (bg <= lo) | (ag >= hi)
        out[todo[finished]] = np.where(bg[finished] <= lo, lo, bg[finished])
        live = ~finished
        todo, ag, bg = todo[live], ag[live], bg[live]
        if not todo.size:
            break
        current = Evaluated(groups=todo, x=points[:m][live], value=value[:m][live], detail=detail[:m][live])
        d, close = propose(current, Evaluated(groups=two, x=points[m:], value=value[m:], detail=detail[m:]), ag, bg, it)
        bisect = it >= bisect_after
        inside = (ag < current.x + d) & (current.x + d < bg)  # a pair outside the bracket would not narrow it
        pair[todo] = close & inside & ~(np.isfinite(ag) & np.isfinite(bg) & bisect)
        x[todo] = np.where(
            pair[todo],
            current.x + d,
            _step(current.x, d, a=ag, b=bg, bisect=bisect, lo=lo, hi=hi, xtol=xtol, cap=max_step),
        )
    return FoundEach(x=out, value=value_b)


def _step(
    x: np.ndarray,
    d: np.ndarray,
    *,
    a: np.ndarray,
    b: np.ndarray,
    bisect: bool,
    lo: float,
    hi: float,
    xtol: float,
    cap: float,
) -> np.ndarray:
    """The next point from x for a predicted step d within the bracket (a, b] (±inf while open): aimed just past the
    root so that the bracket closes from both sides, at most ``cap`` in x, and the bracket's midpoint where
    ``bisect``, where d is NaN or where the step would leave it, so that termination is guaranteed; while the bracket
    is open, a NaN step expands it by ``cap``."""
    blind = np.isnan(d)
    d = np.where(blind, np.where(np.isfinite(b), -cap, cap), d)
    d = d + np.copysign(0.3 * xtol + 1e-3 * np.abs(d), d)
    xn = x + np.clip(d, -cap, cap)
    bracketed = np.isfinite(a) & np.isfinite(b)
    xn = np.clip(np.where(bracketed & (bisect | blind | (xn <= a) | (xn >= b)), 0.5 * (a + b), xn), lo, hi)
    xn = np.where(xn <= a, 0.5 * (a + np.minimum(b, hi)), xn)
    return np.where(xn >= b, 0.5 * (b + np.maximum(a, lo)), xn)
