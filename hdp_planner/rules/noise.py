"""The rules of one DP aggregation round, written once for the planner's Λ and the trainer's updates.

Per group m and round (GDPFed Algorithm 1, secure-aggregation form):
1. every client of the group joins independently with probability q_m (Poisson sampling, the sampling
   the accountant assumes);
2. each joined client clips its update to ℓ2 norm C;
3. the group's sum carries Gaussian noise N(0, C²σ_m² I) *whatever the number of joined clients*: each of
   the c ≥ 1 joined clients adds an equal share N(0, C²σ_m²/c · I) (the server announces c after sampling,
   as secure-aggregation protocols do); if nobody joined, the server adds the whole N(0, C²σ_m² I) itself;
4. the server keeps the top-k_m coordinates of the group's noisy sum (GDPFed+) and updates
   θ ← θ + Σ_m ω_m·Top_k(y_m) with ω_m = r_m/Σ_j r_j² (:func:`aggregation_weights`): the paper's group
   weights α_m = r_m²/Σ_j r_j² (B.2) applied to each group's *mean* y_m/r_m, as Appendix F's proof does.
   The step along the clients' mean update is Σ_m ω_m r_m = 1 for every method.

So the noise in the applied update has, per coordinate, E[noise²] = C²Σ_m ω_m²σ_m²·(k_m/d) when the kept
coordinates are chosen independently of the noise: that is Λ ("exact" convention).

The baselines (:mod:`hdp_planner.methods.baselines`) vary these rules in three ways, all covered by
:func:`lambda_exact`:
per-group clipping thresholds C_m (IDP-FedAvg-Scale); one *pooled* draw for the sum of every group instead of
one per group (IDP-FedAvg: each of the c joined clients of the pool adds N(0, s²/c), s = C_mσ_m for every m,
and every group's weight is 1/Σ_j r_j, :func:`pooled_weights`); a kept fraction k_m/d that is a projection onto
a k-dimensional subspace independent of the group's noise (PFA) instead of Top-k. A per-round σ schedule
(time-adaptive) enters Λ through the root mean square of σ_m over the rounds.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Literal

import numpy as np

LambdaConvention = Literal["exact", "paper"]
LAMBDA_CONVENTIONS: tuple[str, ...] = ("exact", "paper")
PaperWeights = Literal["uniform", "participation"]
"""GDPFed Table 3/5's weights w_m in its Λ: 1/M (DP-FedAvg, GDPFed), or r_m²/(M·Σ_j r_j²) (GDPFed-op, GDPFed+).
A method row declares its own (:attr:`hdp_planner.methods.method.Method.paper_weights`); the baselines have none."""


def poisson_sample(rng: np.random.Generator | SecureRandom, *, size: int, q: float) -> np.ndarray:
    """Indices (0..size-1) of the clients that join this round, each independently with probability q."""
    return np.flatnonzero(rng.random(size) < q)


def secure_uniform(size: int) -> np.ndarray:
    """``size`` floats uniform on [0, 1) with 53 random bits each, from the OS's CSPRNG (``os.urandom``)."""
    bits = np.frombuffer(os.urandom(8 * size), dtype=np.uint64) >> np.uint64(11)
    return bits.astype(np.float64) * 2.0**-53


def secure_normal(size: int) -> np.ndarray:
    """``size`` independent N(0, 1) draws in float64 from a cryptographically secure source: Box-Muller on
    :func:`secure_uniform` pairs, √(−2 ln(1−u₁))·(cos 2πu₂, sin 2πu₂). Unlike a seeded generator, nothing
    recorded with a run regenerates them. Floating-point attacks on the sampler (Mironov 2012)
    are not addressed: see the README's trust model."""
    if size < 0:
        raise ValueError(f"size must be ≥ 0, got {size}")
    pairs = (size + 1) // 2
    u = secure_uniform(2 * pairs)
    radius = np.sqrt(-2.0 * np.log1p(-u[:pairs]))
    angle = 2.0 * np.pi * u[pairs:]
    return np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:size]


class SecureRandom:
    """The ``random(size)`` of a numpy Generator from the OS's CSPRNG: :func:`poisson_sample` with it draws who
    joins a round so that no recorded seed regenerates the draw (secure mode)."""

    def random(self, size: int) -> np.ndarray:
        return secure_uniform(size)


def clip_factor(norm: np.ndarray | float, clip: float) -> np.ndarray:
    """min(1, C/‖Δ‖): the factor that clips an update of norm ‖Δ‖ to at most C (Algorithm 1, line 12)."""
    norm = np.asarray(norm, dtype=float)
    return np.minimum(1.0, clip / np.maximum(norm, 1e-300))


def noise_share_std(clip: float, *, noise_multiplier: float, joined: int) -> float:
    """Std of the noise one of ``joined`` clients adds, so the group's sum carries exactly C·σ_m."""
    return clip * noise_multiplier / np.sqrt(max(joined, 1))


def aggregation_weights(expected_clients: Sequence[float]) -> np.ndarray:
    """ω_m = r_m/Σ_j r_j², the weight on group m's noisy sum y_m: α_m·y_m/r_m with α_m = r_m²/Σ_j r_j².

    GDPFed B.2 writes ω_m = (1/qn)·r_m²/Σr² on the sums, whose step Σ_m ω_m r_m is 1 for one group but
    1/M for M equal groups: it shrinks the learning rate of every grouped method. Weighing the group means
    by α_m keeps the step at 1 (Σα_m = 1) and makes the noise of the update, C²Σ α_m²σ_m²/r_m², exactly
    the noise term of Problem 1 (Appendix F). For one group, ω = 1/qn: DP-FedAvg's average.
    """
    r = np.asarray(expected_clients, dtype=float)
    return r / np.sum(r**2)


def paper_aggregation_weights(expected_clients: Sequence[float], *, q: float, n: int) -> np.ndarray:
    """GDPFed B.2's ω_m = (1/qn)·r_m²/Σ_j r_j² on the group sums: group shares α_m ∝ r_m³ and a step
    Σ_m ω_m r_m = Σr³/(qn·Σr²), 1/M for M equal groups (``train --weights paper``, to compare with the paper; a
    post-processing of the released sums, so the privacy is the plan's)."""
    r = np.asarray(expected_clients, dtype=float)
    return r**2 / (q * n * np.sum(r**2))


def pooled_weights(expected_clients: Sequence[float]) -> np.ndarray:
    """ω_m = 1/Σ_j r_j for every group: one pool of clients averaged over its expected size, as DP-FedAvg."""
    r = np.asarray(expected_clients, dtype=float)
    return np.full(r.shape, 1.0 / np.sum(r))


def lambda_exact(
    weight: Sequence[float],
    noise_multiplier: Sequence[float],
    k_ratio: Sequence[float],
    clip: float | Sequence[float],
    pooled: bool = False,
) -> float:
    """Expected squared noise per coordinate of the applied update, C²Σ_m ω_m²σ_m²(k_m/d).

    ``clip`` is C or the per-group C_m. ``pooled``: one draw of std s = C_mσ_m (the same for every m) on the
    sum of all groups, weighed by ω (the same for every m), so Λ = ω²s²(k/d) with the first group's values.
    """
    w, s, k, c = (
        np.broadcast_to(np.asarray(x, dtype=float), np.shape(weight)) for x in (weight, noise_multiplier, k_ratio, clip)
    )
    terms = w**2 * (c * s) ** 2 * k
    return float(terms[0] if pooled else np.sum(terms))


def lambda_paper(
    weights: PaperWeights,
    expected_clients: Sequence[float],
    noise_multiplier: Sequence[float],
    k_ratio: Sequence[float],
    clip: float,
) -> float:
    """GDPFed Table 3/5's Λ = C²Σ_m w_m(k_m/d)σ_m², with the table's own w_m (:data:`PaperWeights`).

    ``uniform``: w_m = 1/M (DP-FedAvg's one group: w = 1); ``participation``: w_m = r_m²/(M·Σ_j r_j²).
    A reporting convention of the paper (the weights are not one aggregator's), kept for comparison.
    """
    r, s, k = (np.asarray(x, dtype=float) for x in (expected_clients, noise_multiplier, k_ratio))
    m = len(r)
    if weights == "uniform":
        w = np.full(m, 1.0 / m)
    else:
        w = r**2 / (m * np.sum(r**2))
    return float(clip**2 * np.sum(w * k * s**2))


def lambda_for(
    convention: LambdaConvention,
    paper_weights: PaperWeights | None,
    *,
    expected_clients: Sequence[float],
    weight: Sequence[float],
    noise_multiplier: Sequence[float],
    k_ratio: Sequence[float],
    clip: float | Sequence[float],
    pooled: bool = False,
) -> float:
    """Λ of a method row under the named convention; a row without Table 5 weights (the baselines) is exact."""
    if convention == "paper" and paper_weights is not None:
        return lambda_paper(paper_weights, expected_clients, noise_multiplier, k_ratio, float(clip))  # type: ignore[arg-type]
    return lambda_exact(weight, noise_multiplier, k_ratio, clip, pooled)


def compare_noise(lam: float, *, base: float) -> str:
    """Λ against a baseline's, in words: "3.1x less" or "1.6x more" (the same for "same")."""
    if lam == base:
        return "same"
    return f"{base / lam:.2f}x less" if lam < base else f"{lam / base:.2f}x more"
