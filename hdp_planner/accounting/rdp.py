"""Fast, exact RDP accounting and calibration for the Poisson-subsampled Gaussian mechanism: the accountant's face.

``rdp_epsilon`` reproduces the ε that dp-accounting's ``RdpAccountant`` (default orders, add-or-remove-one neighbours)
reports for ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), rounds)``, numerical quirks
included, with vectorised numpy for many groups (σ_g, q_g) sharing δ and T at once (:mod:`.rdp_rounds`, on the
per-order terms of :mod:`.rdp_orders`); ``calibrate_sigma(s)_rdp`` and ``calibrate_q_rdp`` invert it
(:mod:`.rdp_calibration`); ``rdp_curve`` gives one round's RDP at every order, for schedules.

Only numpy and scipy are imported.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from hdp_planner.accounting.rdp_calibration import (
    Q_MIN,
    SIGMA_MAX,
    SIGMA_MIN,
    calibrate_q_rdp,
    calibrate_sigma_rdp,
    calibrate_sigmas_rdp,
)
from hdp_planner.accounting.rdp_orders import (
    DEFAULT_RDP_ORDERS,
    FRAC_IDX,
    FRAC_ORDERS,
    INT_IDX,
    ORDERS,
    int_rdp,
    kl_certifies_zero,
    low_order_rdp_bounds,
)
from hdp_planner.accounting.rdp_rounds import RdpCurve, RdpRounds
from hdp_planner.accounting.validation import check_delta, check_noise_multiplier, check_ratio, check_rounds

__all__ = [
    "DEFAULT_RDP_ORDERS",
    "Q_MIN",
    "SIGMA_MAX",
    "SIGMA_MIN",
    "calibrate_q_rdp",
    "calibrate_sigma_rdp",
    "calibrate_sigmas_rdp",
    "kl_certifies_zero",
    "low_order_rdp_bounds",
    "never_sampled_bound",
    "rdp_curve",
    "rdp_epsilon",
    "rdp_epsilons",
]


def rdp_epsilons(
    *, noise_multipliers: Sequence[float] | np.ndarray, q: Sequence[float] | np.ndarray, rounds: int, delta: float
) -> np.ndarray:
    """:func:`rdp_epsilon` for many groups sharing ``rounds`` and ``delta``, vectorised (σ > 0, q in [0, 1])."""
    rounds, delta = check_rounds(rounds), check_delta(delta)
    sigma = np.array([check_noise_multiplier(s) for s in noise_multipliers], dtype=np.float64)
    qs = np.array([check_ratio(x, allow_zero=True) for x in q], dtype=np.float64)
    if sigma.shape != qs.shape:
        raise ValueError(f"{sigma.size} noise multipliers for {qs.size} sampling ratios")
    out = np.zeros(qs.size)  # q = 0 reveals nothing: ε = 0, as dp-accounting
    live = qs > 0
    if live.any():
        out[live] = RdpRounds(qs[live], rounds, float(delta)).epsilon(sigma[live])[0]
    return out


@functools.lru_cache(maxsize=4096)
def rdp_curve(*, noise_multiplier: float, q: float) -> np.ndarray:
    """RDP of one Poisson(q)-subsampled Gaussian(σ) round at every default order (inf: an order dp-accounting
    excludes), term for term dp-accounting's ``_compute_rdp_poisson_subsampled_gaussian``. Rényi DP composes by
    addition (Mironov 2017, Prop. 1): sum curves to account for rounds whose σ changes."""
    sigma = np.array([check_noise_multiplier(noise_multiplier)])
    q = check_ratio(q)
    out = np.empty(ORDERS.size)
    out[INT_IDX] = int_rdp(np.array([[q]]), sigma[:, None], rounds=1)[0][0]
    if q == 1.0:
        out[FRAC_IDX] = FRAC_ORDERS / (2 * sigma[0] ** 2)
    else:
        curve = RdpCurve(np.array([q]), 1, 0.5)
        everything = np.ones((1, FRAC_ORDERS.size), dtype=bool)
        out[FRAC_IDX] = curve.fractional_epsilons(sigma, np.zeros(1, dtype=np.int64), np.full(1, np.inf), everything)[0]
    out.setflags(write=False)
    return out


def rdp_epsilon(*, noise_multiplier: float, q: float, rounds: int, delta: float) -> float:
    """ε at ``delta`` of ``rounds`` Poisson-subsampled Gaussian steps, exactly as dp-accounting's RDP accountant.

    Args:
        noise_multiplier: σ (noise std / L2 sensitivity), ≥ 0 (σ = 0 gives ε = inf).
        q: Poisson sampling ratio in [0, 1] (q = 0 gives ε = 0, q = 1 is the plain Gaussian).
        rounds: number of compositions T ≥ 1.
        delta: target δ in (0, 1).
    """
    sigma = float(noise_multiplier)
    if not (sigma >= 0.0 and math.isfinite(sigma)):
        raise ValueError(f"noise_multiplier must be a finite number ≥ 0; got {noise_multiplier!r}")
    if sigma == 0.0:
        check_rounds(rounds), check_delta(delta)
        return 0.0 if check_ratio(q, allow_zero=True) == 0.0 else math.inf
    return float(rdp_epsilons(noise_multipliers=[sigma], q=[q], rounds=rounds, delta=delta)[0])


def never_sampled_bound(q: float, *, rounds: int) -> float:
    """1 − (1 − q)^T: the probability that a client takes part in at least one of T Poisson(q) rounds, which bounds
    the total variation between the mechanism's outputs on neighbouring datasets (see the calibration docs)."""
    return -math.expm1(rounds * math.log1p(-q)) if q < 1 else 1.0
