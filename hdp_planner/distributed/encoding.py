"""The distributed discrete Gaussian mechanism of one group and round, written once for the simulator and Flower.

Kairouz, Liu and Steinke, "The Distributed Discrete Gaussian Mechanism for Federated Learning with Secure
Aggregation" (ICML 2021), Algorithms 1-2. Each sampled client: clip its update to C, rotate it with a public
per-round randomized Hadamard transform (flattening: every coordinate of the rotated vector is sub-Gaussian with
variance proxy ‖x‖²/d'), scale by 1/γ, round each coordinate randomly to a neighbouring integer, retrying until the
rounded vector's norm is within the inflated bound Δ₂ (conditional randomized rounding, so Δ₂ holds with
certainty), add an integer noise share from the discrete Gaussian, and reduce modulo 2^b. Secure aggregation
returns the sum modulo 2^b; the server centres it, multiplies by γ and rotates back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hdp_planner.distributed.randomness import Bits, words
from hdp_planner.distributed.sampler import discrete_gaussian

ROUNDING_BIAS = math.exp(-0.5)
"""β: each rounding attempt exceeds Δ₂ with probability at most β (Kairouz et al.'s choice), so a client needs at
most 1/(1 − β) ≈ 2.5 attempts on average."""
MAX_ROUNDING_TRIES = 200
"""A client whose rounding exceeds Δ₂ this many times in a row (probability below β^200 ≈ 1e-44) refuses."""


def padded_dimension(dim: int) -> int:
    """d': the smallest power of 2 ≥ d (the Hadamard transform's size)."""
    if dim < 1:
        raise ValueError(f"dim must be ≥ 1, got {dim}")
    return 1 << (dim - 1).bit_length()


@dataclass(frozen=True, kw_only=True)
class Encoding:
    """How one client's clipped update becomes an integer vector modulo 2^b (all norms in integer units).

    ``gamma`` is the size of one integer unit in update units; ``clip`` is C in update units."""

    dim: int
    clip: float
    bits: int
    gamma: float
    beta: float = ROUNDING_BIAS

    def __post_init__(self) -> None:
        if not 2 <= self.bits <= 62:
            raise ValueError(f"bits must be in [2, 62], got {self.bits}")
        if not (self.clip > 0 and self.gamma > 0 and 0 < self.beta < 1):
            raise ValueError("clip and gamma must be > 0 and beta in (0, 1)")
        padded_dimension(self.dim)

    @property
    def padded(self) -> int:
        return padded_dimension(self.dim)

    @property
    def modulus(self) -> int:
        return 1 << self.bits

    @property
    def scaled_clip(self) -> float:
        """c = C/γ: the clipped update's norm bound in integer units, before rounding."""
        return self.clip / self.gamma

    @property
    def norm_bound(self) -> float:
        """Δ₂: the rounded vector's ℓ2 bound (Kairouz et al. 2021, the conditional rounding bound),
        Δ₂² = min{c² + d'/4 + √(2 ln(1/β))·(c + √d'/2), (c + √d')²}."""
        c, d = self.scaled_clip, self.padded
        return math.sqrt(min(c * c + d / 4 + math.sqrt(2 * math.log(1 / self.beta)) * (c + math.sqrt(d) / 2),
                             (c + math.sqrt(d)) ** 2))  # fmt: skip

    @property
    def l1_bound(self) -> float:
        """Δ₁ ≤ min(√d'·Δ₂, Δ₂²): an integer vector's ℓ1 norm is at most its squared ℓ2 norm."""
        return min(math.sqrt(self.padded) * self.norm_bound, self.norm_bound**2)

    @property
    def inflation(self) -> float:
        """Δ₂/c: how much rounding inflates the sensitivity (≥ 1)."""
        return self.norm_bound / self.scaled_clip


def rotation_signs(seed: int, *, padded: int) -> np.ndarray:
    """The public random signs D of one round's rotation, from the round's public seed (not secret: it only
    flattens the vector; privacy rests on the noise)."""
    return np.random.default_rng(seed).integers(0, 2, padded) * 2.0 - 1.0


def hadamard(x: np.ndarray) -> np.ndarray:
    """H·x for the (unnormalised, ±1) Walsh-Hadamard matrix of size len(x), a power of 2, in O(d log d)."""
    y = np.array(x, dtype=np.float64)
    n = y.size
    h = 1
    while h < n:
        y = y.reshape(-1, 2, h)
        y = np.concatenate([y[:, 0] + y[:, 1], y[:, 0] - y[:, 1]], axis=1)
        h *= 2
    return y.reshape(n)


def rotate(x: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """U·x with U = H·D/√d' orthogonal: x padded with zeros to d'."""
    padded = np.zeros(signs.size)
    padded[: x.size] = x
    return hadamard(signs * padded) / math.sqrt(signs.size)


def unrotate(y: np.ndarray, signs: np.ndarray, dim: int) -> np.ndarray:
    """Uᵀ·y = D·H·y/√d' (H is symmetric and H² = d'·I), truncated to the first ``dim`` coordinates."""
    return (signs * hadamard(y) / math.sqrt(signs.size))[:dim]


def clip(update: np.ndarray, bound: float) -> np.ndarray:
    """The update scaled to ℓ2 norm at most ``bound``."""
    norm = math.sqrt(float(np.einsum("i,i->", update, update)))  # einsum: no BLAS threads for one vector
    return update * min(1.0, bound / norm) if norm > 0 else update


def _uniform(bits: Bits, size: int) -> np.ndarray:
    return (words(bits, np.uint64, size) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def conditional_round(y: np.ndarray, bound: float, bits: Bits) -> np.ndarray:
    """Each coordinate rounded up with probability equal to its fractional part (unbiased), the whole vector drawn
    again until its ℓ2 norm is at most ``bound``."""
    low = np.floor(y)
    frac = y - low
    for _ in range(MAX_ROUNDING_TRIES):
        rounded = (low + (_uniform(bits, y.size) < frac)).astype(np.int64)
        if int(np.einsum("i,i->", rounded, rounded)) <= bound * bound:  # the exact integer norm
            return rounded
    raise RuntimeError("conditional rounding kept exceeding its norm bound: the update was not clipped")


def integer_message(
    update: np.ndarray, *, encoding: Encoding, signs: np.ndarray, share_sigma2: int, bits: Bits, coin: int = 1
) -> np.ndarray:
    """A client's integer vector before the modulus: its update clipped, rotated, scaled, conditionally rounded,
    times ``coin`` (a cohort member's private coin, 1 or 0: :mod:`.coins`), plus a discrete Gaussian noise share
    N_Z(0, σ²_share) per coordinate."""
    if update.shape != (encoding.dim,):
        raise ValueError(f"update has shape {update.shape}, expected ({encoding.dim},)")
    scaled = rotate(clip(np.asarray(update, dtype=np.float64), encoding.clip), signs) / encoding.gamma
    rounded = conditional_round(scaled, encoding.norm_bound, bits)
    return rounded * coin + discrete_gaussian(bits, sigma2=share_sigma2, size=encoding.padded)


def encode(
    update: np.ndarray, *, encoding: Encoding, signs: np.ndarray, share_sigma2: int, bits: Bits, coin: int = 1
) -> np.ndarray:
    """A client's message: :func:`integer_message` modulo 2^b (int64 in [0, 2^b))."""
    message = integer_message(update, encoding=encoding, signs=signs, share_sigma2=share_sigma2, bits=bits, coin=coin)
    return np.mod(message, encoding.modulus)


def modular_sum(messages: np.ndarray, modulus: int) -> np.ndarray:
    """What secure aggregation returns: the sum of the clients' messages (rows) modulo 2^b."""
    return np.mod(np.asarray(messages, dtype=np.int64).sum(axis=0, dtype=np.int64), modulus)


def top_up(total: np.ndarray, *, missing: int, share_sigma2: int, modulus: int, bits: Bits) -> np.ndarray:
    """``total`` plus ``missing`` independent N_Z(0, σ²_share) shares per coordinate, modulo 2^b: the server's
    shares that bring a sum of s client shares to the law's N (:mod:`.law`)."""
    total = np.asarray(total, dtype=np.int64)
    if missing <= 0:
        return total
    extra = discrete_gaussian(bits, sigma2=share_sigma2, size=missing * total.size).reshape(missing, total.size)
    return np.mod(total + extra.sum(axis=0), modulus)


def decode(total: np.ndarray, *, encoding: Encoding, signs: np.ndarray) -> np.ndarray:
    """The server's estimate of the group's clipped sum (plus noise): the modular sum centred to
    [−2^(b−1), 2^(b−1)), times γ, rotated back."""
    half = encoding.modulus // 2
    centred = np.mod(np.asarray(total, dtype=np.int64) + half, encoding.modulus) - half
    return unrotate(centred * encoding.gamma, signs, encoding.dim)
