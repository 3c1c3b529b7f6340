"""PLD accounting and fast calibration for the Poisson-subsampled Gaussian mechanism.

``pld_epsilon`` is dp-accounting's ``PLDAccountant`` ε (default value discretization 1e-4, pessimistic
connect-the-dots) for ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), rounds)``,
computed by the same dp-accounting code with one step vectorised: the accountant builds each round's
privacy loss distribution from the hockey-stick divergence δ(ε) at every point of the ε grid, inverting
the privacy loss point by point in Python (most of its run time); :class:`_GaussianLoss` inverts it for
the whole grid at once with the same formulas. Composition and the ε for δ are dp-accounting's own.

``calibrate_sigma_pld`` (see docs/concepts/calibration.md):

0. where 1 − (1 − q)^T ≤ δ the mechanism is (0, δ)-DP whatever σ: ``SIGMA_MIN`` at once, nothing built;
1. seed with the RDP-calibrated σ (``hdp_planner.accounting.rdp``, milliseconds); PLD ε ≤ RDP ε, so the PLD σ
   lies below it, and it is the ceiling of the answer;
2. the fine discretization v is chosen from ε (:func:`discretization`: the default 1e-4, finer at small ε);
3. secant steps on (log σ, log ε) at a coarse discretization (2e-3 for the default v, else 4·v) find that
   discretization's root;
4. the connect-the-dots error is quadratic in the discretization interval (ε(v) ≈ ε(0) + K·v², to a
   few 1e-6 relative over 1e-4 … 4e-3), so ε at twice the coarse interval extrapolates ε at v (Richardson),
   and the secant slope turns it into the fine discretization's root;
5. σ just above that root is evaluated at v (usually once): returned if its ε meets the target (shrunk by
   1e-9) within 1e-3 in log ε; otherwise refined by secant steps inside a bracket. The returned σ is always one
   that was evaluated at v and met the target, or the RDP σ.

dp-accounting is imported lazily (only when these functions are called).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from hdp_planner.accounting.rdp import SIGMA_MIN, calibrate_sigma_rdp, never_sampled_bound
from hdp_planner.accounting.search import smallest_meeting
from hdp_planner.accounting.validation import (
    check_delta,
    check_epsilon,
    check_noise_multiplier,
    check_ratio,
    check_rounds,
)

__all__ = [
    "DEFAULT_VALUE_DISCRETIZATION",
    "calibrate_sigma_pld",
    "discretization",
    "never_sampled_bound",
    "pld_epsilon",
    "roundoff_mass",
]

DEFAULT_VALUE_DISCRETIZATION = 1e-4  # dp-accounting PLDAccountant's default
MAX_POINTS = 4_000_000  # one round's PLD on more grid points than this is not built (ε reported as inf),
COARSER_STEPS = 10  # where a round's grid is too large, intervals up to 2^10 times coarser are tried before inf
MAX_WORK = 20_000_000  # nor on more than this / √T (composing T rounds costs about that much more; the paper's
# settings need < 1.5e6), unless composing it is measured to fit MAX_COMPOSED (below)
MAX_COMPOSED = 2_000_000  # where MAX_WORK binds, a finer grid is still used while composing it T times takes an FFT of
# at most this many points (dp-accounting's Chernoff truncation of the composition). scipy keeps a plan for each of
# the last 16 lengths it transformed (about 23 bytes a point), so this also bounds that cache (< 0.8 GB)
_TAIL_MASS = 1e-15  # dp-accounting's tail mass truncation of a self-composition (DensePLDPmf.self_compose)
ROUNDOFF_SHARE = 1e-3  # FFT round-off r of a composition (its negative probability mass) moves δ(ε) by about 2r
# either way; where 2r exceeds this share of δ, ε is taken at δ − 2r (below it, the pessimistic grid's slack covers it)
_COARSE = 2e-3  # discretizations of the root search and of the Richardson extrapolation for the default 1e-4
_COARSER = 4e-3
_ACCEPT = 1e-3  # a σ meeting the target with log ε this close to it is returned (≈ 7e-4 relative in σ)
_SAFETY = 1e-9  # relative shrink of the ε target (covers float differences vs. dp-accounting)
_MARGIN = 1e-4  # the first σ evaluated at the fine discretization is this far (log) above the predicted root
_XTOL = 1e-4  # the coarse secant stops after a step this small (in log σ): superlinear, it is then ~1e-7 off


@lru_cache(maxsize=1)
def _loss_class() -> type:
    """:class:`dp_accounting.pld.privacy_loss_mechanism.GaussianPrivacyLoss` with its hockey-stick divergence
    vectorised over ε (defined on first use: dp-accounting is imported lazily)."""
    from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType, GaussianPrivacyLoss

    class _GaussianLoss(GaussianPrivacyLoss):
        def get_delta_for_epsilon(self, epsilon):
            """dp-accounting's ``get_delta_for_epsilon`` (same branches and formulas) with the inverse privacy
            loss computed for all ε at once instead of one ``inverse_privacy_loss`` call each."""
            eps = np.asarray(epsilon, dtype=float)
            deltas = np.zeros_like(eps)
            q = self.sampling_prob
            if q == 1.0:
                inverse = np.full(eps.shape, True)
            elif self.adjacency_type == AdjacencyType.ADD:
                inverse = eps < -math.log1p(-q)
            else:
                inverse = eps > math.log1p(-q)
                deltas[~inverse] = -np.expm1(eps[~inverse])
            x = self._inverse(eps[inverse])
            deltas[inverse] = self.mu_upper_cdf(x) - np.exp(eps[inverse] + self.mu_lower_log_cdf(x))
            return np.clip(deltas, 0, 1)

        def _inverse(self, loss: np.ndarray) -> np.ndarray:
            """``inverse_privacy_loss`` for an array of losses (sensitivity 1, REMOVE or ADD adjacency)."""
            q, var = self.sampling_prob, self._standard_deviation**2
            add = self.adjacency_type == AdjacencyType.ADD
            if q == 1.0:
                unsampled = loss
            else:
                # loss without subsampling: ±log(exp(±loss)/q + 1 − 1/q), dp-accounting's log_a_times_exp_b_plus_c
                b = -loss if add else loss
                with np.errstate(divide="ignore", invalid="ignore"):
                    d = b + np.log(1 / q)
                    inner = np.where(b == 0, 0.0, d + np.log1p(-np.exp(np.log(-(1 - 1 / q)) - d)))
                unsampled = -inner if add else inner
                # at the mechanism's extreme loss ±log(1 − q) (math.isclose): x = ∓inf
                edge = -math.log(1 - q) if add else math.log(1 - q)
                at_edge = np.abs(loss - edge) <= 1e-9 * np.maximum(np.abs(loss), abs(edge))
                unsampled = np.where(at_edge, math.inf if add else -math.inf, unsampled)
            x = -0.5 - unsampled * var  # REMOVE: −sensitivity/2 − loss·σ²/sensitivity
            return x + 1 if add else x

    return _GaussianLoss


def _losses(noise_multiplier: float, q: float) -> list[tuple[Any, Any]]:
    """One round's privacy losses, REMOVE then (where q < 1) ADD adjacency, each with its connect-the-dots bounds
    (they do not depend on the interval)."""
    from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType

    out = []
    for adjacency in (AdjacencyType.REMOVE,) if q == 1.0 else (AdjacencyType.REMOVE, AdjacencyType.ADD):
        loss = _loss_class()(noise_multiplier, sampling_prob=q, adjacency_type=adjacency)
        out.append((loss, loss.connect_dots_bounds()))
    return out


def _extent(bounds, discretization: float) -> tuple[int, int]:
    """The first and last grid index of the loss range at this interval."""
    return math.floor(bounds.epsilon_lower / discretization), math.ceil(bounds.epsilon_upper / discretization)


def _points(losses: list[tuple[Any, Any]], v: float) -> int:
    """One round's grid points at interval ``v`` (the larger of the two adjacencies)."""
    return max(upper - lower for lower, upper in (_extent(bounds, v) for _, bounds in losses))


def _composed_points(pmfs: list[Any], rounds: int) -> int:
    """The FFT length of composing one round's PMFs ``rounds`` times, as dp-accounting's ``self_convolve`` truncates
    it (Chernoff bounds on the built grid)."""
    from dp_accounting.pld import common

    sizes = []
    for pmf in pmfs:
        probs = pmf._probs  # dp-accounting's dense PMF, as its own self_compose reads it
        lower, upper = common.compute_self_convolve_bounds(probs, rounds, _TAIL_MASS)
        sizes.append(max(upper - lower + 1, len(probs)))
    return max(sizes)


def _grid(losses: list[tuple[Any, Any]], rounds: int, discretization: float) -> tuple[float, list[Any] | None] | None:
    """(the interval of :func:`grid_interval`, its PMFs where the search built them, else None), or None."""
    limit = min(MAX_POINTS, MAX_WORK / math.sqrt(rounds))
    for step in range(COARSER_STEPS + 1):
        v = discretization * 2.0**step
        if _points(losses, v) >= limit:
            continue
        if step == 0:
            return v, None
        pmfs = _pmfs(losses, v)
        size = _composed_points(pmfs, rounds)
        # halving v at least doubles the composition (its loss range does not shrink): skip a build that cannot fit
        while step > 0 and 2 * size <= MAX_COMPOSED and _points(losses, v / 2) < MAX_POINTS:
            finer = _pmfs(losses, v / 2)
            finer_size = _composed_points(finer, rounds)
            if finer_size > MAX_COMPOSED:
                break
            v, step, pmfs, size = v / 2, step - 1, finer, finer_size
        return v, pmfs
    return None


@lru_cache(maxsize=256)
def grid_interval(noise_multiplier: float, *, q: float, rounds: int, discretization: float) -> float | None:
    """The interval one round's distribution is built on: ``discretization``, or where that grid would have more than
    min(MAX_POINTS, MAX_WORK/√T) points, the first of 2v, 4v, … (at most 2^COARSER_STEPS·v) within the limit, then
    halved toward ``discretization`` while composing it T times is measured to fit MAX_COMPOSED; None if none is.
    Pessimistic connect-the-dots bounds ε at every interval, so a coarser grid is a valid, looser bound."""
    grid = _grid(_losses(noise_multiplier, q), rounds, discretization)
    return None if grid is None else grid[0]


def _pmfs(losses: list[tuple[Any, Any]], discretization: float) -> list[Any]:
    """One round's PMFs (REMOVE, then ADD) as ``from_gaussian_mechanism(σ, sampling_prob=q,
    value_discretization_interval=v)`` builds them (pessimistic connect-the-dots, mass truncation e^-50)."""
    from dp_accounting.pld import pld_pmf

    def pmf(loss, bounds):
        lower, upper = _extent(bounds, discretization)
        deltas = loss.get_delta_for_epsilon(np.arange(lower, upper + 1) * discretization)
        return pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(discretization, lower, upper, deltas)

    return [pmf(loss, bounds) for loss, bounds in losses]


def _roundoff(parts: list[Any]) -> float:
    """The largest negative probability mass among composed PMFs: what the FFT's round-off left below zero (a sparse
    PMF is composed by convolving its few points directly: none)."""
    from dp_accounting.pld import pld_pmf

    dense = [part._probs for part in parts if isinstance(part, pld_pmf.DensePLDPmf)]
    return max((float(-np.minimum(probs, 0.0).sum()) for probs in dense), default=0.0)


def roundoff_mass(*, noise_multiplier: float, q: float, rounds: int, discretization: float) -> float:
    """The FFT round-off of the ``rounds``-fold composition that :func:`pld_epsilon` evaluates at ``discretization``
    (its negative probability mass; inf where no grid fits). :func:`pld_epsilon` takes ε at δ less twice this where
    that is more than ``ROUNDOFF_SHARE·δ``, and reports ε = inf where twice this exceeds δ/2 (the calibration then
    keeps the RDP σ)."""
    composed = _composed(noise_multiplier, q, rounds, discretization)
    return math.inf if composed is None else _roundoff(composed[1])


def _composed(noise_multiplier: float, q: float, rounds: int, discretization: float) -> tuple[float, list[Any]] | None:
    """(the grid's interval, the ``rounds``-fold composition of each of one round's PMFs, as
    ``PrivacyLossDistribution.self_compose`` composes them), or None where no grid fits."""
    losses = _losses(noise_multiplier, q)
    grid = _grid(losses, rounds, discretization)
    if grid is None:
        return None
    v, pmfs = grid
    return v, [pmf.self_compose(rounds, _TAIL_MASS) for pmf in (pmfs or _pmfs(losses, v))]


@lru_cache(maxsize=256)
def _pld_epsilon(noise_multiplier: float, q: float, rounds: int, delta: float, discretization: float) -> float:
    """ε of ``rounds`` rounds at ``delta``, composed as ``PLDAccountant`` does (from the identity), on the grid of
    :func:`grid_interval` (bounded memory and time); inf (a valid, uninformative bound) where no interval fits.
    The FFT's round-off r (:func:`_roundoff`) moves δ(ε) by about 2r either way: beyond ``ROUNDOFF_SHARE·δ`` the ε is
    taken at δ − 2r, and where 2r exceeds δ/2 it is inf."""
    from dp_accounting.pld import privacy_loss_distribution
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

    composed = _composed(noise_multiplier, q, rounds, discretization)
    if composed is None:
        return math.inf
    v, parts = composed
    slack = 2 * _roundoff(parts)  # the round-off moves δ(ε) by about this much, either way
    if slack > delta / 2:
        return math.inf
    target = delta - slack if slack > ROUNDOFF_SHARE * delta else delta
    total = privacy_loss_distribution.identity(value_discretization_interval=v).compose(PrivacyLossDistribution(*parts))
    return float(total.get_epsilon_for_delta(target))


def pld_epsilon(*, noise_multiplier: float, q: float, rounds: int, delta: float) -> float:
    """ε at ``delta`` of ``rounds`` Poisson-subsampled Gaussian steps per dp-accounting's PLDAccountant (default
    discretization). σ must be > 0, q in [0, 1] (q = 0 gives 0), rounds ≥ 1, delta in (0, 1]. Where
    1 − (1 − q)^T ≤ δ, ε is 0 for every σ (:func:`never_sampled_bound`); inf where the grid would exceed
    its limits or the composition's FFT round-off exceeds δ/4 (see :func:`_pld_epsilon`)."""
    sigma, rounds, delta = check_noise_multiplier(noise_multiplier), check_rounds(rounds), check_delta(delta)
    q = check_ratio(q, allow_zero=True)
    if never_sampled_bound(q, rounds=rounds) <= delta:
        return 0.0
    return _pld_epsilon(sigma, q, rounds, delta, DEFAULT_VALUE_DISCRETIZATION)


def discretization(epsilon: float, *, delta: float, rounds: int) -> float:
    """Value discretization of the PLD calibration for target ``epsilon``: dp-accounting's default 1e-4, or finer
    where the target is small.

    Pessimistic connect-the-dots rounding adds to ε a bias of about C·T·v²/s for a round's loss spread s (C ≲ 0.01
    measured). At the target, the composed loss is about N(η, 2η) with η + z·√(2η) = ε, z = √(2 log(1/δ)), so
    s = √(2η/T); v = √(0.1·ε·s/T) keeps the bias near 1e-3·ε (≈ 0.1% of σ).
    """
    z = math.sqrt(2 * math.log(1 / delta)) if delta < 1 else 0.0
    spread = (math.sqrt(z * z + 2 * epsilon) - z) / math.sqrt(rounds)
    return min(DEFAULT_VALUE_DISCRETIZATION, math.sqrt(0.1 * epsilon * spread / rounds))


def calibrate_sigma_pld(*, epsilon: float, delta: float, q: float, rounds: int) -> float:
    """Smallest σ (to ~1e-3 relative) whose PLD ε (dp-accounting's connect-the-dots PLD, discretization
    :func:`discretization` (ε)) is ≤ ``epsilon``, never above the RDP σ.

    Where 1 − (1 − q)^T ≤ δ the mechanism is (0, δ)-DP for every σ: ``SIGMA_MIN`` is returned at once.
    Guarantee: the returned σ is ``SIGMA_MIN`` in that case, the RDP σ, or was evaluated at the chosen discretization
    with ε ≤ epsilon·(1 − 1e-9). Raises ValueError on invalid input or where the RDP σ is not reachable.
    """
    epsilon, rounds, delta, q = check_epsilon(epsilon), check_rounds(rounds), check_delta(delta), check_ratio(q)
    if never_sampled_bound(q, rounds=rounds) <= delta:
        return SIGMA_MIN
    sigma_rdp = calibrate_sigma_rdp(epsilon=epsilon, delta=delta, q=q, rounds=rounds)
    target = epsilon * (1 - _SAFETY)
    fine = discretization(epsilon, delta=delta, rounds=rounds)

    def gap(x: float, v: float) -> float:
        """log ε − log target at σ = e^x (±50 where ε is 0 or infinite)."""
        eps = _pld_epsilon(math.exp(x), q, rounds, delta, v)
        return math.log(eps / target) if 0 < eps < math.inf else math.copysign(50.0, eps - target)

    # root at the coarse discretization: secant steps from the RDP σ (slope guess −1.5 in log–log)
    x = math.log(sigma_rdp)
    # the default grid searches at 2e-3 and 4e-3; a grid refined from ε at 4 and 8 times itself (20 times would put
    # the rounding bias at ~40% of ε there, far outside the quadratic regime the extrapolation assumes)
    coarse, coarser = (_COARSE, _COARSER) if fine == DEFAULT_VALUE_DISCRETIZATION else (4 * fine, 8 * fine)
    fx, slope = gap(x, coarse), -1.5
    for _ in range(30):
        step = max(min(-fx / slope, 1.0), -1.0)
        x_new = x + step
        f_new = gap(x_new, coarse)
        if f_new != fx and math.isfinite(s := (f_new - fx) / step) and s < 0:
            slope = s
        x, fx = x_new, f_new
        if abs(step) < _XTOL:
            break
    # Richardson: ε(v) ≈ ε(0) + K·v², from the coarse v and twice it, predicts ε at the fine discretization
    f_fine = fx - (gap(x, coarser) - fx) * (coarse**2 - fine**2) / (coarser**2 - coarse**2)
    x = min(x + ((0.0 - f_fine) / slope + _MARGIN), math.log(sigma_rdp))
    return min(math.exp(_refine(lambda x: gap(x, fine), x, slope, math.log(sigma_rdp))), sigma_rdp)


def _refine(gap, x: float, slope: float, x_max: float) -> float:
    """The smallest evaluated x with gap(x) ≤ 0 once a point with gap in [−_ACCEPT, 0] is found (or the bracket
    is narrower than _XTOL): :func:`~hdp_planner.accounting.search.smallest_meeting` below x_max (the RDP σ, known
    to meet the target), with this search's own steps: secant steps on the fine discretization, just above the root
    from a point short of the target and at gap = −_ACCEPT/2 from one far below it; x_max if no evaluated point
    meets the target within 20 evaluations."""
    last = [math.nan, math.nan, slope]  # the previous point, its gap, and the secant slope

    def propose(x: float, f: float, a: float, b: float) -> float:
        x_prev, f_prev, slope = last
        if math.isfinite(s := (f - f_prev) / (x - x_prev)) and s < 0 and abs(f) < 50:
            slope = s
        last[:] = x, f, slope
        # short of the target: raise σ by the measured shortfall and a margin; far above it: aim inside the window
        return x + (max(-f / slope, 0.0) + _MARGIN if f > 0 else -(f + 0.5 * _ACCEPT) / slope)

    return smallest_meeting(
        gap,
        lo=-math.inf,
        hi=x_max,
        start=x,
        xtol=_XTOL,
        accept=_ACCEPT,
        hi_meets=True,
        max_evaluations=20,
        propose=propose,
    ).x
