"""PLD accounting and fast calibration for the Poisson-subsampled Gaussian mechanism.

``pld_epsilon`` is dp-accounting's ``PLDAccountant`` ε (default value discretization 1e-4, pessimistic
connect-the-dots) for ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), rounds)``,
computed by the same dp-accounting code with one step vectorised: the accountant builds each round's
privacy loss distribution from the hockey-stick divergence δ(ε) at every point of the ε grid, inverting
the privacy loss point by point in Python (most of its run time); :class:`_GaussianLoss` inverts it for
the whole grid at once with the same formulas. Composition and the ε for δ are dp-accounting's own.

``calibrate_sigma_pld`` evaluates the default discretization once (twice if the first guess misses):

1. seed with the RDP-calibrated σ (``hdp_planner.accounting.rdp``, milliseconds); PLD ε ≤ RDP ε, so the PLD σ
   lies below it;
2. secant steps on (log σ, log ε) at the coarse discretization 2e-3 find that discretization's root;
3. the connect-the-dots error is quadratic in the discretization interval v (ε(v) ≈ ε(0) + K·v², to a
   few 1e-6 relative over 1e-4 … 4e-3), so ε at 4e-3 there extrapolates ε at 1e-4 (Richardson), and the
   secant slope turns it into the default discretization's root;
4. σ just above that root is evaluated at the default discretization: it is returned if its ε meets the
   target (shrunk by 1e-9), and raised by the measured shortfall otherwise. The returned σ is always one
   that was evaluated at the default discretization and met the target.

dp-accounting is imported lazily (only when these functions are called).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from hdp_planner.accounting.rdp import _check_common, _check_positive, _check_q, calibrate_sigma_rdp

__all__ = ["DEFAULT_VALUE_DISCRETIZATION", "calibrate_sigma_pld", "pld_epsilon"]

DEFAULT_VALUE_DISCRETIZATION = 1e-4  # dp-accounting PLDAccountant's default
_COARSE = 2e-3  # discretization of the root search
_COARSER = 4e-3  # second discretization of the Richardson extrapolation
_SAFETY = 1e-9  # relative shrink of the ε target (covers float differences vs. dp-accounting)
_MARGIN = 1e-4  # the first σ evaluated at the default discretization is this far (log) above the predicted root
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


def _pld(noise_multiplier: float, q: float, discretization: float):
    """One round's privacy loss distribution, as ``from_gaussian_mechanism(σ, sampling_prob=q,
    value_discretization_interval=v)`` builds it (pessimistic connect-the-dots, mass truncation e^-50)."""
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution
    from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType

    def pmf(adjacency):
        loss = _loss_class()(noise_multiplier, sampling_prob=q, adjacency_type=adjacency)
        bounds = loss.connect_dots_bounds()
        lower = math.floor(bounds.epsilon_lower / discretization)
        upper = math.ceil(bounds.epsilon_upper / discretization)
        deltas = loss.get_delta_for_epsilon(np.arange(lower, upper + 1) * discretization)
        return pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(discretization, lower, upper, deltas)

    remove = pmf(AdjacencyType.REMOVE)
    return PrivacyLossDistribution(remove) if q == 1.0 else PrivacyLossDistribution(remove, pmf(AdjacencyType.ADD))


@lru_cache(maxsize=256)
def _pld_epsilon(noise_multiplier: float, q: float, rounds: int, delta: float, discretization: float) -> float:
    """ε of ``rounds`` rounds at ``delta``, composed as ``PLDAccountant`` does (from the identity)."""
    from dp_accounting.pld import privacy_loss_distribution

    single = _pld(noise_multiplier, q, discretization).self_compose(rounds)
    composed = privacy_loss_distribution.identity(value_discretization_interval=discretization).compose(single)
    return float(composed.get_epsilon_for_delta(delta))


def pld_epsilon(noise_multiplier: float, q: float, rounds: int, delta: float) -> float:
    """ε at ``delta`` of ``rounds`` Poisson-subsampled Gaussian steps per dp-accounting's PLDAccountant (default
    discretization). σ must be > 0, q in [0, 1] (q = 0 gives 0), rounds ≥ 1, delta in (0, 1)."""
    sigma = _check_positive("noise_multiplier", noise_multiplier)
    rounds = _check_common(delta, rounds)
    q = _check_q(q, allow_zero=True)
    if q == 0.0:
        return 0.0
    return _pld_epsilon(sigma, q, rounds, float(delta), DEFAULT_VALUE_DISCRETIZATION)


def calibrate_sigma_pld(epsilon: float, delta: float, q: float, rounds: int) -> float:
    """Smallest σ (to ~1e-4 relative) whose PLD ε (dp-accounting PLDAccountant, default discretization) is ≤
    ``epsilon``.

    Guarantee: the returned σ was evaluated at the default discretization and its ε is ≤ epsilon·(1 − 1e-9).
    Raises ValueError on invalid input (epsilon ≤ 0, delta ∉ (0, 1), q ∉ (0, 1], rounds < 1) or if the target is
    unreachable (see ``calibrate_sigma_rdp``).
    """
    epsilon = _check_positive("epsilon", epsilon)
    rounds = _check_common(delta, rounds)
    q = _check_q(q)
    delta = float(delta)
    target = epsilon * (1 - _SAFETY)

    def gap(x: float, discretization: float) -> float:
        """log ε − log target at σ = e^x (±50 where ε is 0 or infinite)."""
        eps = _pld_epsilon(math.exp(x), q, rounds, delta, discretization)
        return math.log(eps / target) if 0 < eps < math.inf else math.copysign(50.0, eps - target)

    # root at the coarse discretization: secant steps from the RDP σ (slope guess −1.5 in log–log)
    x = math.log(calibrate_sigma_rdp(epsilon, delta, q, rounds))
    fx, slope = gap(x, _COARSE), -1.5
    for _ in range(30):
        step = max(min(-fx / slope, 1.0), -1.0)
        x_new = x + step
        f_new = gap(x_new, _COARSE)
        if f_new != fx and math.isfinite(s := (f_new - fx) / step) and s < 0:
            slope = s
        x, fx = x_new, f_new
        if abs(step) < _XTOL:
            break
    # Richardson: ε(v) ≈ ε(0) + K·v², from v = 2e-3 and 4e-3, gives ε at the default discretization
    fine = fx - (gap(x, _COARSER) - fx) * (_COARSE**2 - DEFAULT_VALUE_DISCRETIZATION**2) / (_COARSER**2 - _COARSE**2)
    x += (0.0 - fine) / slope + _MARGIN
    for _ in range(20):
        f = gap(x, DEFAULT_VALUE_DISCRETIZATION)
        if f <= 0:
            return math.exp(x)
        x += max(-f / slope, 0.0) + _MARGIN  # short of the target: raise σ by the measured shortfall
    raise RuntimeError("PLD calibration failed to find a σ meeting the target")  # pragma: no cover
