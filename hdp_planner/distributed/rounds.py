"""One group's round under secure aggregation: the grid γ, each share's variance, and the wrap-around bound.

Everything here is a function of public numbers (the plan's row, the bit width b, the survivor fraction F, the
colluders k and the round's announced count c of sampled clients), so every client and the server compute the
same values. Privacy does not depend on γ: each share is sized so that the ``honest`` shares the server cannot
remove (t = ⌈F·c⌉ guaranteed survivors, minus k colluders who know their own) sum to variance z²·Δ₂², with Δ₂ the
rounded norm bound at that γ; γ only trades rounding error against wrap-around.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from hdp_planner.distributed.accounting import tau
from hdp_planner.distributed.encoding import Encoding, padded_dimension
from hdp_planner.distributed.sampler import MAX_SIGMA2

WRAP_PROBABILITY = 1e-12
"""Largest probability that any coordinate of a round's integer sum leaves [−2^(b−1), 2^(b−1)) (then the decoded sum
is wrong in that coordinate): the bound of :func:`wrap_bound`, met by the choice of γ."""


@dataclass(frozen=True)
class RoundNoise:
    """A group's secure-aggregation parameters for one round with ``sampled`` clients."""

    encoding: Encoding
    share_sigma2: int
    sampled: int
    survivors: int
    honest: int
    wrap_bound: float

    @property
    def noise_multiplier(self) -> float:
        """z actually met: √(honest·σ²_share)/Δ₂ (at least the plan's, by rounding σ²_share up)."""
        return math.sqrt(self.honest * self.share_sigma2) / self.encoding.norm_bound

    def variance(self, survivors: int | None = None) -> float:
        """Per-coordinate variance, in update units, of the decoded sum's error when ``survivors`` shares arrive
        (default: all sampled clients): their noise shares plus their rounding, each at most 1/4 unit²."""
        s = self.sampled if survivors is None else survivors
        return self.encoding.gamma**2 * s * (self.share_sigma2 + 0.25)


def guaranteed(sampled: int, survivors: float, colluders: int) -> tuple[int, int]:
    """(t, t − k): the survivors secure aggregation waits for (t = ⌈F·c⌉, at least 1) and the honest ones."""
    t = max(1, math.ceil(survivors * sampled - 1e-9))
    return t, t - colluders


def wrap_bound(encoding: Encoding, sampled: int, share_sigma2: int) -> float:
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


def group_tau_d(size: int, model_dim: int) -> float:
    """τ·d' of a group of ``size`` clients (Proposition 14's additive RDP term): τ at the smallest share σ² any round
    has and the largest count of honest shares (τ grows with both), times the padded dimension d'."""
    return tau(MIN_SHARE_SIGMA2, size) * padded_dimension(max(int(model_dim), 1))


def share_sigma2(encoding: Encoding, noise_multiplier: float, honest: int) -> int:
    """σ²_share = max(16, ⌈z²Δ₂²/honest⌉): the honest shares sum to at least z²Δ₂²."""
    return max(MIN_SHARE_SIGMA2, math.ceil(noise_multiplier**2 * encoding.norm_bound**2 / honest))


def round_noise(
    *,
    dim: int,
    clip: float,
    bits: int,
    noise_multiplier: float,
    sampled: int,
    survivors: float,
    colluders: int,
    wrap: float = WRAP_PROBABILITY,
) -> RoundNoise | None:
    """The finest grid γ (to 0.1%) at which each share's σ² fits the exact sampler (≤ 2^30) and the wrap-around
    bound is at most ``wrap``; None when the group cannot release this round (fewer than k + 1 guaranteed
    survivors). Raises ValueError when no γ meets the wrap-around bound (too few bits for ``sampled`` clients)."""
    if sampled < 1:
        return None
    t, honest = guaranteed(sampled, survivors, colluders)
    if honest < 1:
        return None

    def fits(gamma: float) -> tuple[bool, RoundNoise]:
        enc = Encoding(dim=dim, clip=clip, bits=bits, gamma=gamma)
        s2 = share_sigma2(enc, noise_multiplier, honest)
        bound = wrap_bound(enc, sampled, s2) if s2 <= MAX_SIGMA2 else 1.0
        return s2 <= MAX_SIGMA2 and bound <= wrap, RoundNoise(enc, s2, sampled, t, honest, bound)

    hi = clip
    while not fits(hi)[0]:
        hi *= 4
        if hi > 1e12 * clip:
            raise ValueError(
                f"{bits} bits cannot hold the sum of {sampled} clients' shares without wrap-around: use more bits"
            )
    lo = hi
    while fits(lo)[0] and lo > 1e-12 * clip:
        lo /= 4
    while hi / lo > 1.001:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if fits(mid)[0] else (mid, hi)
    return fits(hi)[1]


@functools.lru_cache(maxsize=4096)
def expected_variance(
    *,
    dim: int,
    clip: float,
    bits: int,
    noise_multiplier: float,
    size: int,
    q: float,
    survivors: float,
    colluders: int,
    wrap: float = WRAP_PROBABILITY,
) -> float:
    """E over c ~ Binomial(|G|, q) of the decoded sum's per-coordinate error variance (all sampled clients
    surviving), plus the wrap-around bound times (2^b·γ)² per round; rounds that release nothing add no noise.
    The binomial's tails beyond 1e-12 are left out (their variance is bounded by the largest c's)."""
    dist = stats.binom(size, q)
    lo, hi = int(dist.ppf(1e-12)), int(dist.isf(1e-12)) + 1
    cs = np.arange(max(lo, 1), min(hi, size) + 1)
    total = 0.0
    for c, p in zip(cs, dist.pmf(cs)):
        r = round_noise(dim=dim, clip=clip, bits=bits, noise_multiplier=noise_multiplier, sampled=int(c),
                        survivors=survivors, colluders=colluders, wrap=wrap)  # fmt: skip
        if r is not None:
            total += p * (r.variance() + r.wrap_bound * (r.encoding.modulus * r.encoding.gamma) ** 2)
    return total
