"""The distributed discrete Gaussian's accountant: privacy of the noised sum against each adversary, from published
bounds only (registered as ``ddg`` in :mod:`.accountants`).

Notation: the noise the adversary cannot remove is the sum of ``honest`` independent discrete Gaussian shares
N_Z(0, σ²_share) per coordinate; Δ₂ is one client's rounded ℓ2 bound (``hdp_planner.distributed.encoding``), and
z = √(honest·σ²_share)/Δ₂ the effective noise multiplier.

- One release, add/remove one client (Kairouz, Liu, Steinke 2021, Proposition 14, first bound): for every order
  α ≥ 1, D_α ≤ α·Δ₂²/(2·honest·σ²_share) + τ·d' = α/(2z²) + τ·d', with
  τ = 10·Σ_{k=1}^{honest−1} exp(−2π²σ²_share·k/(k+1)) (:func:`tau`).
- Third parties, who see only released models (Poisson sampling at q hidden from them): the general upper bound
  for Poisson-subsampled RDP of Zhu and Wang, "Poisson Subsampled Rényi Differential Privacy" (ICML 2019),
  Theorem 6, at integer orders, composed over the T rounds.
- The server (it draws the sample and sees who sends a vector, so sampling does not amplify): the unsampled bound
  composed over the at most K rounds a client takes part in.
RDP is converted to (ε, δ) with Canonne, Kamath and Steinke (2020), Proposition 12 (the conversion dp-accounting
uses): ε = min_α RDP(α) + log(1 − 1/α) − (log δ + log α)/(α − 1).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.special import gammaln, logsumexp

from hdp_planner.accounting.search import smallest_meeting

ORDERS = np.arange(2, 257, dtype=np.float64)
"""Integer orders α = 2..256 (Theorem 6 of Zhu and Wang holds at integer orders)."""


def tau(share_sigma2: float, honest: int) -> float:
    """τ of Proposition 14: 10·Σ_{k=1}^{honest−1} exp(−2π²σ²k/(k+1)) (0 for a single share, an exact discrete
    Gaussian)."""
    k = np.arange(1, max(honest, 1), dtype=np.float64)
    return float(10 * np.exp(-2 * math.pi**2 * share_sigma2 * k / (k + 1)).sum())


def release_rdp(orders: np.ndarray, *, noise_multiplier: float, tau_d: float = 0.0) -> np.ndarray:
    """RDP of one release of the group sum: α/(2z²) + τ·d' (Proposition 14)."""
    return orders / (2 * noise_multiplier**2) + tau_d


def _log_binom(n: np.ndarray, k: np.ndarray) -> np.ndarray:
    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


def poisson_subsampled_rdp(orders: np.ndarray, rdp: np.ndarray, q: float) -> np.ndarray:
    """Zhu and Wang (2019), Theorem 6: for integer α ≥ 2 and a mechanism with RDP ε(·),
    ε'(α) ≤ log{(1−q)^{α−1}(αq − q + 1) + C(α,2)q²(1−q)^{α−2}e^{ε(2)}
    + 3·Σ_{ℓ=3}^{α} C(α,ℓ)(1−q)^{α−ℓ}q^ℓ e^{(ℓ−1)ε(ℓ)}}/(α − 1),
    and never more than ε(α) itself: the subsampled mechanism's two output distributions are mixtures, with the
    same weights, of pairs each at Rényi divergence at most ε(α), and Rényi divergence is jointly quasi-convex (van
    Erven and Harremoës 2014, Theorem 13); the generic bound can exceed ε(α) at large q.
    ``rdp[i]`` is ε at ``orders[i]``, which must be 2, 3, … consecutively."""
    if not np.array_equal(orders, np.arange(2, 2 + orders.size)):
        raise ValueError("orders must be the consecutive integers 2, 3, …")
    if q >= 1:
        return np.array(rdp, dtype=np.float64)
    if q <= 0:
        return np.zeros(orders.size)
    lq, l1q = math.log(q), math.log1p(-q)
    alpha = orders.astype(np.float64)[:, None]
    ell = np.arange(3, int(orders[-1]) + 1, dtype=np.float64)[None, :]
    eps_ell = np.asarray(rdp, dtype=np.float64)[(ell[0] - 2).astype(int)][None, :]  # ε(ℓ) at ℓ = 3, …
    with np.errstate(invalid="ignore"):
        third = math.log(3) + _log_binom(alpha, ell) + (alpha - ell) * l1q + ell * lq + (ell - 1) * eps_ell
    third = np.where(ell <= alpha, third, -np.inf)  # only ℓ ≤ α
    first = (alpha[:, 0] - 1) * l1q + np.log1p(q * (alpha[:, 0] - 1))
    second = _log_binom(alpha[:, 0], np.float64(2)) + 2 * lq + (alpha[:, 0] - 2) * l1q + rdp[0]
    total = logsumexp(np.column_stack([first, second, third]), axis=1)
    return np.minimum(np.maximum(total, 0.0) / (alpha[:, 0] - 1), rdp)


def epsilon_from_rdp(orders: np.ndarray, rdp: np.ndarray, delta: float) -> float:
    """(ε, δ) from RDP (Canonne, Kamath, Steinke 2020, Proposition 12), the best order."""
    eps = rdp + np.log1p(-1 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
    return max(float(np.min(eps)), 0.0)


def epsilon_third_parties(*, noise_multiplier: float, q: float, rounds: int, delta: float, tau_d: float = 0.0) -> float:
    """ε of T releases against those who see only the released models: each release Poisson-subsampled at q."""
    per_round = poisson_subsampled_rdp(ORDERS, release_rdp(ORDERS, noise_multiplier=noise_multiplier, tau_d=tau_d), q)
    return epsilon_from_rdp(ORDERS, rounds * per_round, delta)


def epsilon_server(*, noise_multiplier: float, participations: int, delta: float, tau_d: float = 0.0) -> float:
    """ε against the server (and colluders it tolerates): no amplification, at most K participations."""
    return epsilon_from_rdp(ORDERS, participations * release_rdp(ORDERS, noise_multiplier=noise_multiplier,
                                                                 tau_d=tau_d), delta)  # fmt: skip


@functools.lru_cache(maxsize=4096)
def calibrate_noise_multiplier(*, epsilon: float, delta: float, q: float, rounds: int, tau_d: float = 0.0) -> float:
    """The smallest z (to a relative 1e-9, rounded up) whose third-party ε is at most ``epsilon``
    (:func:`~hdp_planner.accounting.search.smallest_meeting` on log z)."""
    if epsilon <= 0 or not 0 < delta < 1 or not 0 < q <= 1 or rounds < 1:
        raise ValueError("need epsilon > 0, delta in (0, 1), q in (0, 1] and rounds ≥ 1")

    def gap(x: float) -> float:  # log ε − log target at z = e^x, non-increasing in x
        spent = epsilon_third_parties(noise_multiplier=math.exp(x), q=q, rounds=rounds, delta=delta, tau_d=tau_d)
        return math.log(spent / epsilon) if spent > 0 else -math.inf

    found = smallest_meeting(gap, lo=math.log(1e-3), hi=math.log(1e8), start=0.0, xtol=1e-9)
    if not math.isfinite(found.x):
        raise ValueError(f"epsilon={epsilon:g} is not reachable with a noise multiplier ≤ 1e8")
    return math.exp(found.x)
