"""The Rényi DP of the Poisson-subsampled Gaussian at dp-accounting's default orders, term for term: the binomial
expansion of the integer orders (dp-accounting's ``_compute_log_a_int``), the tables of the fractional orders'
series (``_compute_log_a_frac``), the RDP→(ε, δ) conversion's constants, and closed-form bounds at orders 1.1 … 2 for
the KL branch.

One departure from dp-accounting, in the KL branch only: the RDP of orders 1.1 … 2 is also bounded in closed form
(:func:`low_order_rdp_bounds`, :func:`kl_certifies_zero`). Near the threshold δ², dp-accounting's integer-order sums
are float noise (they cancel terms of size 1) and its fractional-order series, summed in absolute value, over-estimate
(330x at order 1.1 for q = 1e-3, σ = 742); the bound is a true upper bound, so its ε = 0 is sound.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from scipy import special

__all__ = [
    "DEFAULT_RDP_ORDERS",
    "conversion_constants",
    "int_base",
    "int_rdp",
    "kl_certifies_zero",
    "kl_threshold",
    "low_order_rdp_bounds",
]

# Same orders as ``dp_accounting.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS``.
DEFAULT_RDP_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024]
)

MAX_TERMS_LOG_A_FRAC = 1000  # dp-accounting's cap; orders not converged by then are excluded.
_CHUNKS = (20, 60, 240, 680)  # fractional-order series evaluated in these chunks (the 1000-term cap)
KL_MARGIN = 1e-6  # relative margin of a closed-form RDP bound under the KL threshold (kl_certifies_zero)

ORDERS = np.array(DEFAULT_RDP_ORDERS, dtype=np.float64)
_IS_INT = np.array([float(a).is_integer() for a in DEFAULT_RDP_ORDERS])
INT_IDX = np.flatnonzero(_IS_INT)  # positions of the integer orders in ORDERS
FRAC_IDX = np.flatnonzero(~_IS_INT)
INT_ORDERS = ORDERS[INT_IDX]
FRAC_ORDERS = ORDERS[FRAC_IDX]
SMALL = slice(0, int(np.sum(INT_ORDERS < 100)))  # integer orders 2 … 63
LARGE = slice(SMALL.stop, INT_ORDERS.size)  # 128, 256, 512, 1024
FRAC_FLOOR = np.maximum(FRAC_ORDERS.astype(np.int64) - 2, 0)  # position of ⌊a⌋ among the integer orders
_LOW = slice(0, DEFAULT_RDP_ORDERS.index(2.0) + 1)  # orders 1.1 … 2: their RDP has a closed-form bound

Wrt = Literal["u", "log q"]
"""Variables for derivatives: u = 1/(2σ²) (log A_α is convex in u for integer α), or log q."""


def _log_comb(n, k):
    return special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)


# Integer orders: the binomial expansion of every order, flattened (segment k holds i = 0..α_k).
_INT_LEN = (INT_ORDERS + 1).astype(np.int64)
_INT_START = np.cumsum(_INT_LEN) - _INT_LEN
_INT_I = np.arange(_INT_LEN.sum(), dtype=np.float64) - np.repeat(_INT_START, _INT_LEN)
_INT_J = np.repeat(INT_ORDERS, _INT_LEN) - _INT_I
_INT_LC = _log_comb(_INT_I + _INT_J, _INT_I)
_INT_II = _INT_I * _INT_I - _INT_I


@functools.cache
def frac_tables() -> tuple[tuple, ...]:
    """Per chunk [k0, k1) of the fractional series: k1, i (k,), j = a - i (n, k), log C(a, i) (n, k),
    stacked (i²-i, j²-j) (2, n, k), and the distinct values of j (u,) with the map j = u[inv]."""
    tables = []
    k0 = 0
    for size in _CHUNKS:
        k1 = k0 + size
        i = np.arange(k0, k1, dtype=np.float64)
        j = FRAC_ORDERS[:, None] - i[None, :]
        lc = _log_comb(FRAC_ORDERS[:, None], i[None, :])
        quad = np.stack([np.broadcast_to(i * i - i, j.shape), j * j - j])
        # a - i only takes ~9·(k+10) distinct values (a has one decimal): erfc once per value and σ
        _, first, inv = np.unique(np.round(j * 10).astype(np.int64), return_index=True, return_inverse=True)
        tables.append((k1, i, j, lc, quad, j.ravel()[first], inv.reshape(j.shape)))
        k0 = k1
    return tuple(tables)


def int_base(q: np.ndarray, orders: slice = slice(None)) -> np.ndarray:
    """The q-dependent part log C(α, i) + i·log q + (α − i)·log(1 − q) of the terms of the integer orders
    ``INT_ORDERS[orders]`` (all: (n, 4001)), for q of shape (n, 1), or (n, k) for one value per order."""
    terms = _terms(orders)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (
            _INT_LC[terms]
            + _INT_I[terms] * _per_term(np.log(q), orders)
            + _INT_J[terms] * _per_term(np.log1p(-q), orders)
        )


def _terms(orders: slice) -> slice:
    """The terms (columns) of the integer orders ``INT_ORDERS[orders]``, a contiguous range of orders."""
    first = int(_INT_START[orders][0])
    return slice(first, first + int(_INT_LEN[orders].sum()))


def _per_term(z: np.ndarray, orders: slice = slice(None)) -> np.ndarray:
    return z if z.shape[1] == 1 else np.repeat(z, _INT_LEN[orders], axis=1)


def int_rdp(
    q: np.ndarray,
    sigma: np.ndarray,
    *,
    rounds: int,
    wrt: Wrt | None = None,
    base: np.ndarray | None = None,
    orders: slice = slice(None),
) -> tuple[np.ndarray, np.ndarray | None]:
    """Composed RDP of the integer orders ``INT_ORDERS[orders]`` (n, k), and its derivative in ``wrt`` (None if
    not asked).

    q and σ are (n, 1), or (n, k) for one value per order; ``base`` is :func:`int_base` (q) of every integer
    order, if known.
    Integer orders are the binomial expansion of dp-accounting's ``_compute_log_a_int``, one segmented
    log-sum-exp per order (max + log1p of the rest, ties with the maximum counted exactly); q = 1 is the plain
    Gaussian.
    """
    lens, alpha, terms = _INT_LEN[orders], INT_ORDERS[orders], _terms(orders)
    starts = _INT_START[orders] - terms.start
    base = int_base(q, orders) if base is None else base[:, terms]
    s = base + _INT_II[terms] / _per_term(2 * sigma**2, orders)
    m = np.maximum.reduceat(s, starts, axis=1)
    m_full = np.repeat(m, lens, axis=1)
    is_max = s == m_full
    e = np.exp(s - m_full)
    e[is_max] = 0.0
    rest = np.add.reduceat(e, starts, axis=1) + (np.add.reduceat(is_max, starts, axis=1) - 1)
    rdp = rounds * ((m + np.log1p(rest)) / (alpha - 1))
    slope = None
    if wrt is not None:
        e[is_max] = 1.0  # d log Σ exp(s) = Σ exp(s)·ds / Σ exp(s)
        with np.errstate(divide="ignore", invalid="ignore"):  # q = 1: replaced below
            # d/du of (i² − i)·u, or d/d log q of i·log q + (α − i)·log(1 − q)
            ds = _INT_II[terms] if wrt == "u" else _INT_I[terms] - _INT_J[terms] * _per_term(q / (1 - q), orders)
            slope = rounds * ((np.add.reduceat(e * ds, starts, axis=1) / (rest + 1)) / (alpha - 1))
    plain = q == 1.0
    if plain.any():  # the plain Gaussian: T·α/(2σ²)
        rdp = np.where(plain, rounds * (alpha / (2 * sigma**2)), rdp)
        if slope is not None:
            slope = np.where(plain, rounds * alpha if wrt == "u" else np.nan, slope)
    return rdp, slope


def low_order_rdp_bounds(q: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds on the sampled Gaussian's RDP (log A_α)/(α − 1) at orders 1.1 … 2 (last axis).

    A_α = E[(1 + qX)^α] with X = L − 1, L the likelihood ratio of N(1, σ²) to N(0, σ²) under N(0, σ²):
    E[X] = 0, E[X²] = e^{1/σ²} − 1, E[X⁴] ≤ E[L⁴] + 1 = e^{6/σ²} + 1. For α ∈ (1, 2] and x = qX ≥ −q, Taylor's theorem
    with Lagrange remainder gives (1 + x)^α − 1 − αx = C(α, 2)(1 + ξ)^(α−2)x² with ξ between 0 and x, and
    (1 + max(x, 0))^(α−2) ≤ (1 + ξ)^(α−2) ≤ (1 − q)^(α−2). Hence
    A_α − 1 ≤ C(α, 2)(1 − q)^(α−2)q²E[X²] and, by (1 + y)^(α−2) ≥ 1 − (2 − α)y and Cauchy–Schwarz,
    A_α − 1 ≥ C(α, 2)q²(E[X²] − (2 − α)q√(E[X²]E[X⁴])). Both are exact at α = 2, and free of the cancellation
    of the term-wise sum when A_α − 1 is tiny."""
    a = ORDERS[_LOW]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        m2 = np.expm1(1 / sigma**2)
        c = a * (a - 1) / 2 * q**2
        upper = np.log1p(c * (1 - q) ** (a - 2) * m2) / (a - 1)
        lower = np.log1p(np.maximum(c * (m2 - (2 - a) * q * np.sqrt(m2 * (np.exp(6 / sigma**2) + 1))), 0.0)) / (a - 1)
    return np.where(np.isnan(lower), 0.0, lower), np.where(np.isnan(upper), np.inf, upper)


def kl_threshold(delta: float) -> float:
    """dp-accounting's KL branch gives ε = 0 below this composed RDP: −log(1 − δ²) (TV ≤ √(1 − e^−KL) ≤ δ). At δ = 1 its
    test 1 + expm1(−rdp) > 0 holds while expm1(−rdp) does not round to −1 (rdp < 37.4): 36 here, with a margin."""
    return 36.0 if delta >= 1 else -math.log1p(-(delta**2))


def kl_certifies_zero(events: Sequence[tuple[float, float, int]], delta: float) -> bool:
    """Whether ε = 0 at ``delta`` for the composition of ``events`` (noise multiplier, q, rounds) follows from
    :func:`low_order_rdp_bounds`: the summed upper bound of some order α ∈ (1, 2] is below :func:`kl_threshold` with a
    relative margin of 1e-6 (KL ≤ the Rényi divergence of every order α > 1)."""
    total = sum(rounds * low_order_rdp_bounds(np.array(q), np.array(sigma))[1] for sigma, q, rounds in events)
    return bool(np.min(total) * (1 + KL_MARGIN) < kl_threshold(delta))


def conversion_constants(delta: float) -> np.ndarray:
    """Per default order, the constant of dp-accounting's RDP→(ε, δ) conversion: ε_α = RDP_α + c_α."""
    return np.log1p(-1 / ORDERS) - np.log(delta * ORDERS) / (ORDERS - 1)
