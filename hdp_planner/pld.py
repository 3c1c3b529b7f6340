"""PLD accounting and fast calibration for the Poisson-subsampled Gaussian mechanism.

``pld_epsilon`` is exactly dp-accounting's ``PLDAccountant`` (default value discretization 1e-4,
pessimistic estimate, connect-the-dots) ε for
``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), rounds)``.

``calibrate_sigma_pld`` finds (nearly) the smallest σ with that ε ≤ target using far fewer PLD
evaluations than ``dp_accounting.calibrate_dp_mechanism``:

1. seed with the RDP-calibrated σ (``hdp_planner.rdp``, milliseconds); PLD ε ≤ RDP ε, so the PLD σ
   lies below it;
2. secant iterations on (log σ, log ε) with a *coarse* discretization (cheap) locate the root;
3. secant/bracketing with the *default* discretization (exactly as dp-accounting's accountant
   computes it) finishes, and the returned σ is always one that was evaluated at the default
   discretization and found to meet the target — never an extrapolation.

dp-accounting is imported lazily (only when these functions are called).
"""

from __future__ import annotations

import math

from hdp_planner.rdp import _check_common, _check_positive, _check_q, calibrate_sigma_rdp

__all__ = ["DEFAULT_VALUE_DISCRETIZATION", "calibrate_sigma_pld", "pld_epsilon"]

DEFAULT_VALUE_DISCRETIZATION = 1e-4  # dp-accounting PLDAccountant's default
_COARSE_DISCRETIZATION = 1e-3
_RTOL = 5e-4  # the returned σ is within this relative distance of the minimal one


def _pld_eps_default(noise_multiplier: float, q: float, rounds: int, delta: float) -> float:
    from hdp_planner.accounting import GaussianRounds, reference_epsilon  # accounting imports this module

    return reference_epsilon(GaussianRounds(noise_multiplier, q, rounds), delta, "pld")


def _pld_eps_coarse(noise_multiplier: float, q: float, rounds: int, delta: float, vdi: float) -> float:
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    pld = pld_lib.from_gaussian_mechanism(noise_multiplier, sampling_prob=q, value_discretization_interval=vdi)
    return float(pld.self_compose(rounds).get_epsilon_for_delta(delta))


def pld_epsilon(noise_multiplier: float, q: float, rounds: int, delta: float) -> float:
    """ε at ``delta`` of ``rounds`` Poisson-subsampled Gaussian steps per dp-accounting's PLDAccountant (default
    discretization). σ must be > 0, q in [0, 1] (q = 0 gives 0), rounds ≥ 1, delta in (0, 1)."""
    sigma = _check_positive("noise_multiplier", noise_multiplier)
    rounds = _check_common(delta, rounds)
    q = _check_q(q, allow_zero=True)
    if q == 0.0:
        return 0.0
    return _pld_eps_default(sigma, q, rounds, float(delta))


def _log_gap(eps: float, target: float) -> float:
    if eps <= 0.0:
        return -50.0
    if math.isinf(eps):
        return 50.0
    return math.log(eps / target)


def calibrate_sigma_pld(epsilon: float, delta: float, q: float, rounds: int) -> float:
    """Smallest σ (to ~5e-4 relative) whose PLD ε (dp-accounting PLDAccountant, default discretization) is ≤
    ``epsilon``.

    Guarantee: the returned σ was evaluated with dp-accounting's PLD accountant at the default discretization
    and its ε is ≤ epsilon. Raises ValueError on invalid input (epsilon ≤ 0, delta ∉ (0, 1), q ∉ (0, 1],
    rounds < 1) or if the target is unreachable (see ``calibrate_sigma_rdp``).
    """
    epsilon = _check_positive("epsilon", epsilon)
    rounds = _check_common(delta, rounds)
    q = _check_q(q)
    delta = float(delta)

    sigma_rdp = calibrate_sigma_rdp(epsilon, delta, q, rounds)
    coarse = max(DEFAULT_VALUE_DISCRETIZATION, _COARSE_DISCRETIZATION)

    # -- phase 1: coarse secant on g(x) = log ε(e^x) - log target (decreasing in x) ---------------
    def g_coarse(x: float) -> float:
        return _log_gap(_pld_eps_coarse(math.exp(x), q, rounds, delta, coarse), epsilon)

    x, gx = math.log(sigma_rdp), g_coarse(math.log(sigma_rdp))
    slope = -1.0  # d log ε / d log σ; refined by the secant
    x_prev = g_prev = None
    for _ in range(8):
        if x_prev is not None and gx != g_prev:
            s = (gx - g_prev) / (x - x_prev)
            if s < 0 and math.isfinite(s):
                slope = s
        step = max(min(-gx / slope, 1.0), -1.0)
        if abs(step) < 0.1 * _RTOL:
            break
        x_prev, g_prev = x, gx
        x = x + step
        gx = g_coarse(x)

    # -- phase 2: default discretization (exactly dp-accounting's), keep a bracket ------------------
    def g_fine(x: float) -> float:
        return _log_gap(_pld_eps_default(math.exp(x), q, rounds, delta), epsilon)

    # The returned σ is the smallest evaluated one that meets the target, accepted once the secant
    # predicts the exact root to lie within _RTOL below it; steps aim at root + _RTOL/2 (safe side).
    safe = None  # smallest x with g ≤ 0 (meets the target)
    unsafe = None  # largest x with g > 0
    g_safe = 0.0
    x_prev = g_prev = None
    for it in range(40):
        gx = g_fine(x)
        if gx <= 0 and (safe is None or x < safe):
            safe, g_safe = x, gx
        elif gx > 0 and (unsafe is None or x > unsafe):
            unsafe = x
        if x_prev is not None and gx != g_prev:
            s = (gx - g_prev) / (x - x_prev)
            if s < 0 and math.isfinite(s):
                slope = s
        if safe is not None:
            root = safe - g_safe / slope  # ≤ safe
            if unsafe is not None:
                root = max(root, unsafe)
            if safe - root <= _RTOL:
                break
            xn = root + 0.5 * _RTOL
        else:
            xn = x - gx / slope + 0.5 * _RTOL
            xn = min(xn, x + 1.0)
        if (unsafe is not None and xn <= unsafe) or (safe is not None and xn >= safe) or it >= 8:
            lo = unsafe if unsafe is not None else xn - 1.0
            hi = safe if safe is not None else xn + 1.0
            xn = 0.5 * (lo + hi)
        x_prev, g_prev, x = x, gx, xn
    if safe is None:  # pragma: no cover - the loop ends with a safe point unless 40 tries fail
        raise RuntimeError("PLD calibration failed to find a σ meeting the target")
    return math.exp(safe)
