"""A group's shares on a grid γ: each share's variance, the wrap-around bound and the τ term of the sum.

Privacy does not depend on γ: each share is sized so that the ``honest`` shares sum to variance z²·Δ₂², with Δ₂ the
rounded norm bound at that γ; γ only trades rounding error against wrap-around (:mod:`.law` fixes it per group).
"""

from __future__ import annotations

import math

from hdp_planner.distributed.accounting import tau
from hdp_planner.distributed.encoding import Encoding, padded_dimension

WRAP_PROBABILITY = 1e-12
"""Largest probability that any coordinate of a round's integer sum leaves [−2^(b−1), 2^(b−1)) (then the decoded sum
is wrong in that coordinate): the bound of :func:`wrap_bound`, met by the choice of γ."""


def wrap_bound(encoding: Encoding, *, sampled: int, share_sigma2: int) -> float:
    """P(some coordinate of the integer sum wraps) ≤ 2d'·exp(−(2^(b−1) − c)²/(2v²)): the rotated clipped sum's
    coordinates are sub-Gaussian with variance proxy ‖Σx‖²/(γ²d') ≤ (cC/γ)²/d' (Hoeffding over the random signs),
    the c shares' sum with proxy c·σ²_share (the discrete Gaussian is σ²-sub-Gaussian: Canonne, Kamath, Steinke
    2020), and rounding moves each client's coordinate by less than 1."""
    room = encoding.modulus / 2 - sampled
    if room <= 0:
        return 1.0
    v2 = (sampled * encoding.scaled_clip) ** 2 / encoding.padded + sampled * share_sigma2
    return min(1.0, 2 * encoding.padded * math.exp(-(room**2) / (2 * v2)))


MIN_SHARE_SIGMA2 = 16
"""The smallest share σ²: the sum of discrete Gaussians is then a discrete Gaussian to within τ ≤ 10·n·e^{−16π²}
(Kairouz et al.'s τ), about 1e-67 per client: :func:`~.accounting.tau` at this σ² bounds every round's τ."""


def group_tau_d(size: int, *, model_dim: int) -> float:
    """τ·d' of a group of ``size`` clients (Proposition 14's additive RDP term): τ at the smallest share σ² any round
    has and the largest count of honest shares (τ grows with both), times the padded dimension d'."""
    return tau(MIN_SHARE_SIGMA2, honest=size) * padded_dimension(max(int(model_dim), 1))


def share_sigma2(encoding: Encoding, *, noise_multiplier: float, honest: int) -> int:
    """σ²_share = max(16, ⌈z²Δ₂²/honest⌉): the honest shares sum to at least z²Δ₂²."""
    return max(MIN_SHARE_SIGMA2, math.ceil(noise_multiplier**2 * encoding.norm_bound**2 / honest))
