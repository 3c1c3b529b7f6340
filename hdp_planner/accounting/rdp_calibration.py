"""RDP calibration of the Poisson-subsampled Gaussian: the smallest noise multiplier σ (or the largest sampling ratio
q) whose ε under dp-accounting's ``RdpAccountant`` (as :mod:`.rdp_rounds` evaluates it) meets a target, many groups
at once.

ε(x) = min_α ε_α(x), every ε_α decreasing in x = log σ (or −log q). Newton steps on each order's own smooth curve,
first for all integer orders at once (:func:`_integer_roots`: cheap, and it resolves the staircase that the minimum
forms at small q), then secant steps on the order attaining the minimum (:class:`_Steps`), proposed to the one
calibration search (:func:`~hdp_planner.accounting.search.smallest_meeting_each`), which keeps the bracket of
evaluated points, bisects where a step would leave it and returns its safe end. The returned parameter is the safe end
of an evaluated bracket of width 2e-7, solved against the target shrunk by 1e-9, so it also meets the target under
dp-accounting's own floating-point evaluation. Where the steps stall (the jump to ε = 0 of the KL branch), the scalar
search finishes, blind to the shape of ε (:func:`_bisect`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hdp_planner.accounting.rdp_orders import INT_IDX, INT_ORDERS, ORDERS, conversion_constants, int_rdp
from hdp_planner.accounting.rdp_rounds import RdpRounds
from hdp_planner.accounting.search import Evaluated, smallest_meeting, smallest_meeting_each
from hdp_planner.accounting.validation import (
    check_delta,
    check_epsilon,
    check_noise_multiplier,
    check_ratio,
    check_rounds,
)

__all__ = ["Q_MIN", "SIGMA_MAX", "SIGMA_MIN", "calibrate_q_rdp", "calibrate_sigma_rdp", "calibrate_sigmas_rdp"]

#: Search range for ``calibrate_sigma_rdp``. If even σ = SIGMA_MIN meets the target, SIGMA_MIN is
#: returned (valid, but not minimal); if σ = SIGMA_MAX does not, ValueError is raised.
SIGMA_MIN = 1e-3
SIGMA_MAX = 1e12
#: Smallest sampling ratio ``calibrate_q_rdp`` will consider.
Q_MIN = 1e-12

_SAFETY = 1e-9  # relative shrink of the ε target (covers float differences vs. dp-accounting)
_XTOL = 2e-7  # bracket width in log-parameter space at termination (2e-7 relative)
_MAX_ITERATIONS = 40  # then _bisect finishes (the secant steps can stall at the KL branch's jump to ε = 0)
_MAX_NEWTON = 30
_CONVERGED = 3e-5  # a Newton or secant step this small leaves an error ≲ 100·step² < 0.4·_XTOL

# epsilon_at(x, groups) → (ε, every order's ε) at x for those groups (see RdpRounds.epsilon)
_Epsilon = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
# rdp_at(x, groups, orders) → the composed RDP of INT_ORDERS[orders] and its derivative in v, each at its own x
_IntegerRdp = Callable[[np.ndarray, np.ndarray, slice], tuple[np.ndarray, np.ndarray]]
# (x → v, v → x, dv/dx): the variable v in which Newton steps are taken, as a function of the searched x
_Variable = tuple[
    Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]
]
# x = log σ ↔ u = 1/(2σ²) (log A_α is a log-sum-exp of affine functions of u), and x = −log q ↔ log q
_SIGMA_VARIABLE: _Variable = (
    lambda x: 0.5 * np.exp(-2 * x),
    lambda u: -0.5 * np.log(2 * u),
    lambda x: -np.exp(-2 * x),
)
_Q_VARIABLE: _Variable = (np.negative, np.negative, lambda x: -np.ones_like(x))


@dataclass(frozen=True, kw_only=True)
class _Problem:
    """One calibration: per group, the smallest x ∈ [lo, hi] with ε(x) ≤ target, at ``delta`` after ``rounds``;
    Newton and secant steps are taken in ``variable``."""

    variable: _Variable
    target: np.ndarray
    lo: float
    hi: float
    rounds: int
    delta: float


def _integer_roots(rdp_at: _IntegerRdp, problem: _Problem, x0: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group, the smallest of the integer orders' own roots ε_α(x) = target (x0 where none has one),
    d log ε_α/dx of that order there (−1 where none), and whether there was one.

    At small q, ε(x) = min_α ε_α(x) is a staircase: each order's ε is flat, then explodes within a few 0.01 of
    log σ, and the root lies on such a cliff, which steps on ε itself cross slowly. Each order alone is smooth.
    Newton steps for every integer order at once, each at its own x (``rdp_at(x, groups, orders)``: the
    composed RDP of ``INT_ORDERS[orders]`` and its derivative in v, each at its own x), on log(A_α − 1), which
    is nearly linear in v both on the cliff (where the largest binomial term dominates) and, for v = log q,
    where A_α − 1 ∝ q²; they stop once the orders that may hold the smallest root have converged. The result is
    a starting point for the bracketed search.
    """
    to_v, from_v, dv_dx = problem.variable
    target, lo, hi, rounds = problem.target, problem.lo, problem.hi, problem.rounds
    per = (INT_ORDERS - 1) / rounds  # log A_α per unit of composed RDP
    c = conversion_constants(problem.delta)[INT_IDX]
    level = _log_expm1((target[:, None] - c) * per)
    usable = np.isfinite(level)  # ε_α ≥ c_α: the other orders never meet the target
    x = np.repeat(x0[:, None], INT_IDX.size, axis=1)
    rdp, slope = np.full(x.shape, np.nan), np.full(x.shape, np.nan)
    live = np.flatnonzero(usable.any(axis=1))  # groups still iterating
    orders = slice(None)  # after the first step, only the range of orders that may hold a smallest root
    for _ in range(_MAX_NEWTON):
        if not live.size:
            break
        xl = x[live]
        rdp[live, orders], slope[live, orders] = rdp_at(xl[:, orders], live, orders)
        log_a = rdp[live] * per
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # d log(A − 1) = d log A · A/(A − 1), and A/(A − 1) = 1/(1 − e^−log A)
            xn = from_v(to_v(xl) - (_log_expm1(log_a) - level[live]) * -np.expm1(-log_a) / (slope[live] * per))
        xn = np.clip(np.clip(np.where(np.isnan(xn), xl + 3.0, xn), xl - 3.0, xl + 3.0), lo, hi)
        frozen = np.ones(INT_ORDERS.size, dtype=bool)
        frozen[orders] = False
        xn[:, frozen] = xl[:, frozen]  # not evaluated in this step: unchanged
        xn = np.where(usable[live], xn, np.inf)
        relevant = xn <= xn.min(axis=1, keepdims=True) + 0.01  # orders that may hold the smallest root
        moving = (relevant & ((np.abs(xn - xl) > _CONVERGED) | frozen)).any(axis=1)
        x[live] = np.where(usable[live], xn, xl)
        live = live[moving]
        needed = np.flatnonzero(relevant[moving].any(axis=0))
        orders = slice(needed[0], needed[-1] + 1) if needed.size else orders
    k = np.where(usable, x, np.inf).argmin(axis=1)
    rows = np.arange(k.size)
    found = usable.any(axis=1)
    xk = x[rows, k]
    with np.errstate(divide="ignore", invalid="ignore"):
        log_slope = slope[rows, k] * dv_dx(xk) / (rdp[rows, k] + c[k])
    log_slope = np.where(found & (log_slope < 0) & np.isfinite(log_slope), log_slope, -1.0)
    return np.where(found, xk, x0), log_slope, found


def _log_expm1(y: np.ndarray) -> np.ndarray:
    """log(e^y − 1) = y + log(1 − e^−y), without overflow; NaN for y ≤ 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(y > 0, y + np.log(-np.expm1(-y)), np.nan)


def _gap(eps: np.ndarray, target: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.clip(np.log(eps) - np.log(target), -50.0, 50.0)


def _secant(f: np.ndarray, f_prev: np.ndarray, x: np.ndarray, x_prev: np.ndarray, default: np.ndarray) -> np.ndarray:
    """Slope of (x, f) through the last two points where it is negative and finite, else ``default``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = (f - f_prev) / (x - x_prev)
    return np.where((slope < 0) & np.isfinite(slope), slope, default)


def _measure(epsilon_at: _Epsilon, target: np.ndarray, x: np.ndarray, groups: np.ndarray):
    """:data:`~hdp_planner.accounting.search.Measure` of ε(x) ≤ target: met, ε, and every order's ε."""
    eps, per_order = epsilon_at(x, groups)
    return eps <= target[groups], eps, per_order


class _Steps:
    """The steps of the bracketed search (:data:`~hdp_planner.accounting.search.Proposals`). Where the order
    attaining ε was also evaluated at the previous point, a secant step on its own smooth curve, log(A_α − 1) against
    v (as :func:`_integer_roots`); otherwise a secant step on (x, log ε), from the slope found by
    :func:`_integer_roots`. After a step below _CONVERGED, or one whose product with the previous step is below
    0.4·_XTOL (superlinear steps), the root is predicted to within _XTOL."""

    def __init__(self, problem: _Problem, slope0: np.ndarray):
        self.to_v, self.from_v, _ = problem.variable
        self.target, self.slope0, self.rounds = problem.target, slope0, problem.rounds
        self.c = conversion_constants(problem.delta)
        n = self.target.size
        self.x_prev, self.f_prev = np.full(n, np.nan), np.full(n, np.nan)
        self.e_prev = np.full((n, ORDERS.size), np.nan)  # every order's ε at the previous point
        self.last_step = np.full(n, np.inf)

    def order_gap(self, eps: np.ndarray, k: np.ndarray, tg: np.ndarray) -> np.ndarray:
        """log(A_α − 1) at ε minus at the target, for the order α attaining ε (NaN where undefined)."""
        per = (ORDERS[k] - 1) / self.rounds
        return _log_expm1((eps - self.c[k]) * per) - _log_expm1((tg - self.c[k]) * per)

    def propose(self, current: Evaluated, paired: Evaluated, a: np.ndarray, b: np.ndarray, iteration: int):
        two = paired.groups
        self.x_prev[two], self.f_prev[two] = paired.x, _gap(paired.value, self.target[two])
        self.e_prev[two] = paired.detail
        todo, xg, per = current.groups, current.x, current.detail
        f = _gap(current.value, self.target[todo])
        k, rows, tg = per.argmin(axis=1), np.arange(todo.size), self.target[todo]
        g, g_prev = self.order_gap(per[rows, k], k, tg), self.order_gap(self.e_prev[todo, k], k, tg)
        v = self.to_v(xg)
        with np.errstate(divide="ignore", invalid="ignore"):
            slope_v = (g - g_prev) / (v - self.to_v(self.x_prev[todo]))
            d = self.from_v(v - g / slope_v) - xg
        smooth = np.isfinite(d) & (slope_v > 0)  # the order attaining ε had been evaluated at the last point
        d = np.where(smooth, d, -f / _secant(f, self.f_prev[todo], xg, self.x_prev[todo], self.slope0[todo]))
        # superlinear steps: the error after this one is about |d|·|previous step| (or 100·d² for Newton's)
        close = (np.abs(d) < _CONVERGED) | (np.abs(d) * self.last_step[todo] < 0.4 * _XTOL)
        self.last_step[todo] = np.abs(d)
        self.x_prev[todo], self.f_prev[todo], self.e_prev[todo] = xg, f, per
        return d, close


def _calibrate(
    epsilon_at: _Epsilon, int_rdp: _IntegerRdp, problem: _Problem, x0: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The smallest x ∈ [lo, hi] (to within _XTOL) with ε(x) ≤ target per group (inf if none), and ε there: the
    bracketed search (:func:`~hdp_planner.accounting.search.smallest_meeting_each` with :class:`_Steps`) from the
    integer orders' smallest root (:func:`_integer_roots`). ε(x) = min_α ε_α(x), so the root is the smallest
    per-order root: there, or a fractional order's below it."""
    start, slope, found = _integer_roots(int_rdp, problem, x0)
    lo, hi, target = problem.lo, problem.hi, problem.target
    found_each = smallest_meeting_each(
        functools.partial(_measure, epsilon_at, target), _Steps(problem, slope).propose,
        lo=lo, hi=hi, start=start, paired=found, xtol=_XTOL, max_evaluations=_MAX_ITERATIONS,
    )  # fmt: skip
    x, eps = found_each.x, found_each.value
    stuck = np.flatnonzero(~np.isfinite(x))
    if stuck.size:
        x[stuck], eps[stuck] = _bisect(epsilon_at, target[stuck], stuck, lo, hi)
    return x, eps


def _bisect(
    epsilon_at: _Epsilon, target: np.ndarray, groups: np.ndarray, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray]:
    """The smallest x ∈ [lo, hi] (to within _XTOL) with ε(x) ≤ target for these groups (inf if none), and ε there,
    by the generic search (:func:`~hdp_planner.accounting.search.smallest_meeting`), one group at a time: slower
    than the steps of :class:`_Steps` but blind to the shape of ε, only to its monotonicity, so it also crosses the
    jumps to ε = 0 of the KL branch that the secant steps can stall on."""
    x, eps = np.full(groups.size, np.inf), np.full(groups.size, np.nan)
    for i in range(groups.size):
        seen: dict[float, float] = {}  # ε at each point evaluated
        found = smallest_meeting(
            functools.partial(_log_gap, epsilon_at, groups[i : i + 1], float(target[i]), seen),
            lo=lo, hi=hi, start=0.5 * (lo + hi), xtol=_XTOL, max_evaluations=200,
        )  # fmt: skip
        if math.isfinite(found.x):
            x[i], eps[i] = found.x, seen[found.x]
    return x, eps


def _log_gap(epsilon_at: _Epsilon, group: np.ndarray, goal: float, seen: dict[float, float], x: float) -> float:
    """log ε(x) − log goal for one group (−inf where ε = 0), ε recorded in ``seen``."""
    seen[x] = e = float(epsilon_at(np.array([x]), group)[0][0])
    return math.log(e / goal) if e > 0 else -math.inf


def calibrate_sigmas_rdp(
    *, epsilons: Sequence[float] | np.ndarray, delta: float, q: Sequence[float] | np.ndarray, rounds: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`calibrate_sigma_rdp` for many groups (ε_g, q_g) sharing ``delta`` and ``rounds``, solved together
    (every evaluation is vectorised over the groups still searching), and the ε each σ spends, as evaluated there
    (``rdp_epsilon`` of it, up to float rounding). Same guarantee per group."""
    eps = np.array([check_epsilon(e) for e in epsilons], dtype=np.float64)
    rounds, delta = check_rounds(rounds), check_delta(delta)
    delta = float(delta)
    qs = np.array([check_ratio(x) for x in q], dtype=np.float64)
    if eps.shape != qs.shape:
        raise ValueError(f"{eps.size} epsilons for {qs.size} sampling ratios")
    if not eps.size:
        return eps, eps.copy()
    mech = RdpRounds(qs, rounds, delta)
    # first guess: Gaussian closed form with the q·√T subsampling scaling
    guess = np.log(qs * math.sqrt(2 * rounds * math.log(1 / delta)) / eps + 0.5)
    x, spent = _calibrate(
        lambda x, groups: mech.epsilon(np.exp(x), groups),
        lambda x, groups, orders: int_rdp(
            qs[groups, None], np.exp(x), rounds=rounds, wrt="u", base=mech.int_terms(groups), orders=orders
        ),
        _Problem(
            variable=_SIGMA_VARIABLE,
            target=eps * (1 - _SAFETY),
            lo=math.log(SIGMA_MIN),
            hi=math.log(SIGMA_MAX),
            rounds=rounds,
            delta=delta,
        ),
        guess,
    )
    bad = ~np.isfinite(x)
    if bad.any():
        g = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"epsilon={eps[g]} is not reachable with noise_multiplier ≤ {SIGMA_MAX:g} "
            f"(delta={delta}, q={qs[g]}, rounds={rounds}); the RDP→(ε,δ) conversion has a floor"
        )
    return np.exp(x), spent


def calibrate_sigma_rdp(*, epsilon: float, delta: float, q: float, rounds: int) -> float:
    """Smallest noise multiplier σ (to ~2e-7 relative) whose RDP ε (dp-accounting) is ≤ ``epsilon``.

    The returned σ always satisfies ε(σ) ≤ epsilon (the upper end of the final bracket, solved against
    epsilon·(1 − 1e-9)). If even σ = SIGMA_MIN (1e-3) meets the target, SIGMA_MIN is returned. Raises
    ValueError on invalid input or if σ = SIGMA_MAX (1e12) does not suffice.
    """
    return float(calibrate_sigmas_rdp(epsilons=[epsilon], delta=delta, q=[q], rounds=rounds)[0][0])


def calibrate_q_rdp(*, epsilon: float, delta: float, noise_multiplier: float, rounds: int) -> float:
    """Largest sampling ratio q ∈ (0, 1] (to ~2e-7 relative) whose RDP ε (dp-accounting) is ≤ ``epsilon``.

    Returns 1.0 if q = 1 already meets the target; the returned q always satisfies the target (lower
    end of the final bracket, solved against epsilon·(1 − 1e-9)). Raises ValueError on invalid input
    or if no q ≥ 1e-12 meets the target.
    """
    epsilon = check_epsilon(epsilon)
    rounds, delta = check_rounds(rounds), check_delta(delta)
    sigma = np.array([check_noise_multiplier(noise_multiplier)])
    delta = float(delta)
    hi = -math.log(Q_MIN)  # in x = −log q, so that ε decreases in x
    guess = epsilon * sigma[0] / math.sqrt(2 * rounds * max(math.log(1 / delta), 1e-12))
    x = _calibrate(
        lambda x, groups: RdpRounds(np.exp(-x), rounds, delta).epsilon(sigma[groups]),
        lambda x, groups, orders: int_rdp(np.exp(-x), sigma[groups, None], rounds=rounds, wrt="log q", orders=orders),
        _Problem(
            variable=_Q_VARIABLE, target=np.array([epsilon * (1 - _SAFETY)]), lo=0.0, hi=hi, rounds=rounds, delta=delta
        ),
        np.array([min(max(-math.log(guess), 1e-3), hi)]),
    )[0][0]
    if not math.isfinite(x):
        raise ValueError(
            f"no sampling ratio q ≥ {Q_MIN:g} meets epsilon={epsilon} at noise_multiplier={sigma[0]} "
            f"(delta={delta}, rounds={rounds})"
        )
    return math.exp(-x)
