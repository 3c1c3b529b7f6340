"""Exact integer samplers with no floating point: every decision compares uniform integers.

Canonne, Kamath and Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020): Algorithm 1
(Bernoulli(exp(−γ)) for rational γ), Algorithm 2 (discrete Laplace) and Algorithm 3 (discrete Gaussian by
rejection from a discrete Laplace), vectorized with numpy: each array element runs the algorithm's loop on its
own, and the loops run until every element has finished. The random words come from a :class:`Bits` source
(the OS's CSPRNG for released noise).
"""

from __future__ import annotations

import math

import numpy as np

from hdp_planner.distributed.randomness import Bits, below

MAX_SIGMA2 = 2**30
"""Largest σ² (in integer units) of :func:`discrete_gaussian`: its rejection step's denominator 2σ²t² stays below
2^62, so every comparison is in int64 (shares larger than 32,768 units are not needed: a coarser grid serves)."""


def bernoulli_ratio(bits: Bits, num: np.ndarray, den: int | np.ndarray, k: np.ndarray | None = None) -> np.ndarray:
    """Bernoulli(num / (den·k)) exactly, for 0 ≤ num ≤ den·k: U uniform below den and V below k make U·k + V
    uniform below den·k, and U·k + V < num ⟺ U < ⌊num/k⌋ or (U = ⌊num/k⌋ and V < num mod k), with no product
    that could overflow; V is drawn only on a tie U = ⌊num/k⌋."""
    u = below(bits, den, num.size) if np.ndim(den) == 0 else below(bits, den)
    if k is None:
        return u < num
    quotient, remainder = np.divmod(num, k)
    result = u < quotient
    tie = np.flatnonzero(u == quotient)
    if tie.size:
        result[tie] = below(bits, k[tie]) < remainder[tie]
    return result


def bernoulli_exp_fraction(bits: Bits, num: np.ndarray, den: int | np.ndarray) -> np.ndarray:
    """Bernoulli(exp(−γ)) for γ = num/den ∈ [0, 1] (CKS Algorithm 1, first part): draw A_k ~ Bernoulli(γ/k) for
    k = 1, 2, … until the first A_k = 0; return 1 when that k is odd. P(1) = Σ_k (−γ)^k/k! = e^{−γ}."""
    num = np.asarray(num, dtype=np.int64)
    k = np.ones(num.shape, dtype=np.int64)
    alive = np.arange(num.size)
    first = True
    while alive.size:
        d = den if np.ndim(den) == 0 else den[alive]
        success = bernoulli_ratio(bits, num[alive], d, None if first else k[alive])
        first = False
        alive = alive[success]
        k[alive] += 1
    return k % 2 == 1


def bernoulli_exp(bits: Bits, whole: np.ndarray, num: np.ndarray, den: int | np.ndarray) -> np.ndarray:
    """Bernoulli(exp(−γ)) for γ = whole + num/den ≥ 0 with 0 ≤ num ≤ den (CKS Algorithm 1): e^{−γ} is
    e^{−num/den} times e^{−1} once per unit of ``whole``, each an independent draw that may fail early."""
    out = bernoulli_exp_fraction(bits, num, den)
    whole = np.asarray(whole, dtype=np.int64)
    alive = np.flatnonzero(out & (whole > 0))
    done = 0
    while alive.size:
        success = bernoulli_exp_fraction(bits, np.ones(alive.size, dtype=np.int64), 1)
        out[alive[~success]] = False
        done += 1
        alive = alive[success & (whole[alive] > done)]
    return out


def _geometric_exp1(bits: Bits, size: int, block: int = 2) -> np.ndarray:
    """V = the number of successes of Bernoulli(e^{−1}) before the first failure: P(V = v) = (1 − e^{−1})e^{−v}.
    The draws come ``block`` at a time per element (one vectorized call), and only the elements whose whole block
    succeeded (probability e^{−2}) draw another block."""
    v = np.zeros(size, dtype=np.int64)
    alive = np.arange(size)
    while alive.size:
        ones = np.ones(alive.size * block, dtype=np.int64)
        success = bernoulli_exp_fraction(bits, ones, 1).reshape(alive.size, block)
        run = np.argmin(success, axis=1)  # the first failure, 0 when the block holds none …
        full = success.all(axis=1)
        v[alive] += np.where(full, block, run)  # … so a block of successes counts whole
        alive = alive[full]
    return v


def _first(candidates: np.ndarray, accepted: np.ndarray, need: int) -> np.ndarray:
    """The first ``need`` accepted candidates (all of them when fewer): i.i.d. draws stay i.i.d. when kept in order."""
    return candidates[accepted][:need]


def discrete_laplace(bits: Bits, scale: int, size: int) -> np.ndarray:
    """``size`` draws of the discrete Laplace distribution P(x) ∝ exp(−|x|/t) for an integer scale t ≥ 1 (CKS
    Algorithm 2 with s = 1): U uniform below t kept with probability e^{−U/t}, plus t·V with V geometric, a
    random sign, and the negative zero rejected. Candidates are drawn in batches of about 1.7x the draws still
    needed (U is kept with probability ≥ 1 − e^{−1}), so the rejection loop ends in a few passes."""
    if scale < 1 or int(scale) != scale:
        raise ValueError(f"scale must be a positive integer, got {scale}")
    t = int(scale)
    parts, need = [], size
    while need:
        m = int(1.7 * need) + 16
        u = below(bits, t, m)
        u = u[bernoulli_exp_fraction(bits, u, t)]
        x = u + t * _geometric_exp1(bits, u.size)
        negative = below(bits, 2, u.size) == 1
        kept = _first(np.where(negative, -x, x), ~(negative & (x == 0)), need)
        parts.append(kept)
        need -= kept.size
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _square_divmod(a: np.ndarray, den: int) -> tuple[np.ndarray, np.ndarray]:
    """⌊a²/den⌋ and a² mod den exactly: in int64 where |a| < 2^31, in Python integers for the rest."""
    small = np.abs(a) < 2**31
    quotient, remainder = np.empty_like(a), np.empty_like(a)
    quotient[small], remainder[small] = np.divmod(a[small] * a[small], den)
    for i in np.flatnonzero(~small):
        quotient[i], remainder[i] = divmod(int(a[i]) ** 2, den)
    return quotient, remainder


def discrete_gaussian(bits: Bits, sigma2: int, size: int) -> np.ndarray:
    """``size`` draws of the discrete Gaussian N_Z(0, σ²), P(x) ∝ exp(−x²/(2σ²)) on the integers, for an integer
    σ² ≤ :data:`MAX_SIGMA2` (CKS Algorithm 3): Y from the discrete Laplace of scale t = ⌊σ⌋ + 1, accepted with
    probability exp(−(|Y| − σ²/t)²/(2σ²)) = exp(−(|Y|·t − σ²)²/(2σ²t²)), a rational exponent."""
    if sigma2 < 1 or int(sigma2) != sigma2 or sigma2 > MAX_SIGMA2:
        raise ValueError(f"sigma2 must be an integer in [1, 2^30], got {sigma2}")
    s2 = int(sigma2)
    t = math.isqrt(s2) + 1
    den = 2 * s2 * t * t
    parts, need = [], size
    while need:  # acceptance is above 1/2 for every σ² ≥ 1: batches of 2x the draws still needed
        y = discrete_laplace(bits, t, 2 * need + 16)
        whole, num = _square_divmod(np.abs(y) * t - s2, den)
        kept = _first(y, bernoulli_exp(bits, whole, num, den), need)
        parts.append(kept)
        need -= kept.size
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
