"""The distributed discrete Gaussian's accountant: privacy of the noised sum against each adversary, from published
bounds and the proof of the documentation page "Subsampling both ways" (registered as ``ddg`` in :mod:`.accountants`).

Notation: the noise the adversary cannot remove is the sum of ``honest`` independent discrete Gaussian shares
N_Z(0, σ²_share) per coordinate; Δ₂ is one client's rounded ℓ2 bound (``hdp_planner.distributed.encoding``), and
z = √(honest·σ²_share)/Δ₂ the effective noise multiplier.

- One release, add/remove one client (Kairouz, Liu, Steinke 2021, Proposition 14, first bound): for every order
  α ≥ 1, D_α ≤ α·Δ₂²/(2·honest·σ²_share) + τ·d' = α/(2z²) + τ·d', with
  τ = 10·Σ_{k=1}^{honest−1} exp(−2π²σ²_share·k/(k+1)) (:func:`tau`).
- Poisson subsampling at rate q (third parties, who do not see the sample; the server, against a client's private
  coin in a cohort): the binomial expansion at integer orders α ≥ 2,
  ε'(α) ≤ log Σ_{ℓ=0}^{α} C(α,ℓ)(1−q)^{α−ℓ}q^ℓ e^{(ℓ−1)ε(ℓ)} / (α − 1) (Mironov, Talwar and Zhang 2019, §3.3,
  exact in the direction that adds the client, for any mechanism). The same expression bounds the direction that
  removes the client because the release's two outputs form a *symmetric pair* (the noise is symmetric, the shift an
  integer vector: y ↦ x − y exchanges them), for which the removing direction of a Poisson-subsampled mechanism
  never exceeds the adding one (proved on the documentation page "Subsampling both ways"). It is Zhu and Wang's
  Theorem 6 ("Poisson Subsampled Rényi Differential Privacy", ICML 2019) without its factor 3 on the terms ℓ ≥ 3,
  which that theorem needs for mechanisms that are not symmetric. At a fractional order α the subsampled release's
  RDP is at most the unsampled one (joint quasi-convexity, van Erven and Harremoës 2014, Theorem 13) and at most the
  bound at ⌈α⌉ (Rényi divergence does not decrease with its order, ibid., Theorem 3).
- The server (it draws the sample and sees who sends a vector, so sampling does not amplify): the unsampled bound
  composed over the at most K rounds a client takes part in, at every order of :data:`ORDERS` (Proposition 14
  holds for every real α ≥ 1).
RDP is converted to (ε, δ) with Canonne, Kamath and Steinke (2020), Proposition 12 (the conversion dp-accounting
uses): ε = min_α RDP(α) + log(1 − 1/α) − (log δ + log α)/(α − 1), over :data:`ORDERS`: every integer from 2 to
1024, integers 5% apart up to 16384, and 480 fractional orders, 1 + 10⁻³ … 1024 spaced by 2.9% in α − 1, so that
the best real order of the unsampled bound is within a fraction of a percent in ε (docs/concepts/calibration.md,
"The distributed accountant").
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
from scipy.special import gammaln

from hdp_planner.accounting.search import smallest_meeting

DENSE_ORDER = 1024
MAX_ORDER = 16384
_FRACTIONAL = 1 + np.geomspace(1e-3, DENSE_ORDER - 1, 480)
_SPARSE = np.unique(np.round(DENSE_ORDER * 1.05 ** np.arange(1, 200)))
ORDERS = np.union1d(
    np.concatenate([np.arange(2, DENSE_ORDER + 1), _SPARSE[_SPARSE <= MAX_ORDER]]).astype(np.float64),
    _FRACTIONAL[_FRACTIONAL % 1 != 0],
)
"""The orders of every bound here, ascending: every integer from 2 to 1024 and integers 5% apart up to 16384
(the binomial expansion holds at integer orders), and fractional orders from 1.001 to 1024 (the unsampled bound,
and the server's, hold at every real order)."""


def tau(share_sigma2: float, *, honest: int) -> float:
    """τ of Proposition 14: 10·Σ_{k=1}^{honest−1} exp(−2π²σ²k/(k+1)) (0 for a single share, an exact discrete
    Gaussian)."""
    k = np.arange(1, max(honest, 1), dtype=np.float64)
    return float(10 * np.exp(-2 * math.pi**2 * share_sigma2 * k / (k + 1)).sum())


def release_rdp(orders: np.ndarray, *, noise_multiplier: float, tau_d: float = 0.0) -> np.ndarray:
    """RDP of one release of the group sum: α/(2z²) + τ·d' (Proposition 14)."""
    return orders / (2 * noise_multiplier**2) + tau_d


def _log_binom(n: np.ndarray, k: np.ndarray) -> np.ndarray:
    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


def poisson_subsampled_rdp(
    orders: np.ndarray, rdp: np.ndarray | Callable[[np.ndarray], np.ndarray], q: float
) -> np.ndarray:
    """RDP of the Poisson(q)-subsampled mechanism at ``orders`` (ascending), in both directions, from the mechanism's
    RDP ``rdp``: its values at ``orders``, or a function giving it at any orders (as :func:`amplified_release_rdp`
    passes). The mechanism's outputs on neighbours must form a symmetric pair (a bijection of outputs exchanging
    them), as every additive mechanism here does: Gaussian or discrete Gaussian noise, summed over shares, shifted by
    the client's contribution.

    At integer α ≥ 2, the binomial expansion (Mironov, Talwar and Zhang 2019, §3.3):
    ε'(α) ≤ log{(1−q)^{α−1}(αq − q + 1) + Σ_{ℓ=2}^{α} C(α,ℓ)(1−q)^{α−ℓ}q^ℓ e^{(ℓ−1)ε(ℓ)}}/(α − 1), exact given ε(ℓ) in
    the direction that adds the client, and a bound in the direction that removes it for a symmetric pair (the
    documentation's "Subsampling both ways"). Given values only, ε(ℓ) where ℓ is not among ``orders`` is bounded by ε
    at the next integer order (Rényi divergence does not decrease with its order: van Erven and Harremoës 2014,
    Theorem 3; the bound grows with every ε(ℓ)): valid, and loose where the given orders are sparse. Never more than
    ε(α) itself: the subsampled mechanism's two output distributions are mixtures, with the same weights, of pairs
    each at Rényi divergence at most ε(α), and Rényi divergence is jointly quasi-convex (ibid., Theorem 13). At a
    fractional α, the smaller of ε(α) (the same argument) and the bound at the next integer order (Theorem 3). The
    integer orders must include 2."""
    orders = np.asarray(orders, dtype=np.float64)
    values = np.asarray(rdp(orders) if callable(rdp) else rdp, dtype=np.float64)
    integer = orders % 1 == 0
    whole = orders[integer]
    if (orders <= 1).any() or (np.diff(orders) <= 0).any() or not whole.size or whole[0] != 2:
        raise ValueError("orders must be ascending and above 1, with 2 among them")
    if q >= 1:
        return values.copy()
    if q <= 0:
        return np.zeros(orders.size)
    key = tuple(whole.astype(np.int64).tolist())
    _, _, ell, at, _, _ = _pairs(key)
    if callable(rdp):  # ε(ℓ) itself at every ℓ
        pairs = np.asarray(rdp(np.arange(2.0, whole[-1] + 1)), dtype=np.float64)[ell.astype(np.int64) - 2]
    else:
        pairs = values[integer][at]
    amplified = np.minimum(_binomial(key, values[integer][0], pairs, q), values[integer])
    out = values.copy()
    out[integer] = amplified
    frac = np.flatnonzero(~integer)
    above = np.searchsorted(whole, orders[frac])  # the next integer order
    inside = above < whole.size
    out[frac[inside]] = np.minimum(values[frac[inside]], amplified[above[inside]])
    return out


def amplified_release_rdp(orders: np.ndarray, *, noise_multiplier: float, tau_d: float = 0.0, q: float) -> np.ndarray:
    """One Poisson(q)-subsampled release's RDP at ``orders``: :func:`poisson_subsampled_rdp` of :func:`release_rdp`,
    with the release's ε(ℓ) exact at every ℓ ≤ α (it has a closed form)."""
    return poisson_subsampled_rdp(
        orders, functools.partial(release_rdp, noise_multiplier=noise_multiplier, tau_d=tau_d), q
    )


def _binomial(orders: tuple[int, ...], rdp2: float, pairs: np.ndarray, q: float) -> np.ndarray:
    """The binomial expansion at the integer ``orders`` (ascending, from 2), from ε(2) and ε(ℓ) at every pair (α, ℓ)
    of :func:`_pairs`: every order's sum over ℓ = 3 … α at once, one segmented log-sum-exp; the terms ℓ = 0, 1 and
    ℓ = 2 apart."""
    n = len(orders)
    lq, l1q = math.log(q), math.log1p(-q)
    alpha = np.asarray(orders, dtype=np.float64)
    log_binom, a, ell, _, starts, sizes = _pairs(orders)
    third = log_binom + (a - ell) * l1q + ell * lq + (ell - 1) * pairs
    first = (alpha - 1) * l1q + np.log1p(q * (alpha - 1))
    second = _log_binom(alpha, np.float64(2)) + 2 * lq + (alpha - 2) * l1q + rdp2
    m = np.maximum(first, second)
    m[1:] = np.maximum(m[1:], np.maximum.reduceat(third, starts))
    rest = np.zeros(n)
    rest[1:] = np.add.reduceat(np.exp(third - np.repeat(m[1:], sizes)), starts)
    total = m + np.log(np.exp(first - m) + np.exp(second - m) + rest)
    return np.maximum(total, 0.0) / (alpha - 1)


@functools.lru_cache(maxsize=16)  # :data:`ORDERS`' table (40 MB) and the small windows of a few epsilon_of calls
def _pairs(orders: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """For the pairs (α, ℓ), α among ``orders`` above 2 and ℓ = 3 … α, flattened by α: log C(α, ℓ), α, ℓ, the
    position among ``orders`` of the first order ≥ ℓ, where each α's pairs start, and how many it has."""
    alpha = np.asarray(orders[1:], dtype=np.int64)
    sizes = alpha - 2
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    a = np.repeat(alpha, sizes).astype(np.float64)
    ell = np.arange(a.size) - np.repeat(starts, sizes) + 3.0
    at = np.searchsorted(np.asarray(orders, dtype=np.float64), ell)
    tables = (_log_binom(a, ell), a, ell, at, starts, sizes)
    for t in tables:
        t.setflags(write=False)
    return tables


def epsilon_from_rdp(orders: np.ndarray, rdp: np.ndarray, delta: float) -> float:
    """(ε, δ) from RDP (Canonne, Kamath, Steinke 2020, Proposition 12), the best order."""
    return max(float(np.min(_converted(orders, rdp, delta))), 0.0)


def _converted(orders: np.ndarray, rdp: np.ndarray, delta: float) -> np.ndarray:
    """ε at each order: RDP + log(1 − 1/α) − (log δ + log α)/(α − 1)."""
    return rdp + np.log1p(-1 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)


def epsilon_of(total: Callable[[np.ndarray], np.ndarray], delta: float) -> float:
    """(ε, δ) of a composition whose RDP at any ascending orders (2 among them) is ``total(orders)``: the best of
    :data:`ORDERS`, then of every integer order between its neighbours there, by a search that samples 16 orders of
    that window and narrows it 8-fold around the best until it is exhausted. Above 1024 the orders are 5% apart, and
    at small q the best order sits just below a cliff (where a term of the expansion explodes), which the grid alone
    can miss by several percent in ε. Every order evaluated is a valid bound, so is the smallest."""
    values = _converted(ORDERS, total(ORDERS), delta)
    k = int(np.argmin(values))
    best = float(values[k])
    lo, hi = ORDERS[max(k - 1, 0)], ORDERS[min(k + 1, ORDERS.size - 1)]
    centre, width = ORDERS[k], hi - lo
    while width > 2:
        candidates = np.unique(np.round(np.linspace(max(centre - width / 2, lo), min(centre + width / 2, hi), 17)))
        candidates = candidates[(candidates > 2) & (candidates % 1 == 0)]
        if candidates.size:
            found = _converted(candidates, total(np.concatenate([[2.0], candidates]))[1:], delta)
            j = int(np.argmin(found))
            if found[j] < best:
                best, centre = float(found[j]), candidates[j]
        width /= 8
    return max(best, 0.0)


def epsilon_third_parties(*, noise_multiplier: float, q: float, rounds: int, delta: float, tau_d: float = 0.0) -> float:
    """ε of T releases against those who see only the released models: each release Poisson-subsampled at q
    (:func:`epsilon_of` the T-fold :func:`amplified_release_rdp`)."""
    return epsilon_of(
        lambda orders: rounds * amplified_release_rdp(orders, noise_multiplier=noise_multiplier, tau_d=tau_d, q=q),
        delta,
    )


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
