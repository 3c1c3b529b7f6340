"""Fast, exact RDP accounting and calibration for the Poisson-subsampled Gaussian mechanism.

``rdp_epsilon`` reproduces the ε that dp-accounting's ``RdpAccountant`` (default orders,
add-or-remove-one neighbours) reports for
``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), rounds)``, including its
numerical quirks (absolute-value binomial series for fractional orders, the 1000-term cap after
which a fractional order is *excluded*, and the improved RDP→(ε, δ) conversion of
Canonne–Kamath–Steinke / Asoodeh et al. with the KL shortcut). It does so with vectorised numpy
instead of per-term Python loops, for many groups (σ_g, q_g) sharing δ and T at once. It skips the
orders that provably cannot attain the minimum, which keeps the result exact: Rényi divergence does not
decrease with the order (orders 128 … 1024 and the fractional ones are bounded below by a smaller
integer order), and a fractional order's partial sum bounds its series (all terms are positive).

Calibration (see :func:`_integer_roots` and :func:`_bracket`) uses ε(x) = min_α ε_α(x), every ε_α
decreasing in x = log σ (or −log q): Newton steps on each order's own smooth curve, first for all
integer orders at once (cheap; it resolves the staircase that the minimum forms at small q), then on
the order attaining the minimum, inside a bracket with a bisection fallback. The returned parameter is
the safe end of an evaluated bracket of width 2e-7, solved against the target shrunk by 1e-9, so it
also meets the target under dp-accounting's own floating-point evaluation. Where those steps stall (the jump to
ε = 0 of the KL branch), a bisection on the same bracket finishes (:func:`_bisect`).

One departure from dp-accounting, in the KL branch only: the RDP of orders 1.1 … 2 is also bounded in closed form
(:func:`low_order_rdp_bounds`, :func:`kl_certifies_zero`). Near the threshold δ², dp-accounting's integer-order sums
are float noise (they cancel terms of size 1) and its fractional-order series, summed in absolute value, over-estimate
(330x at order 1.1 for q = 1e-3, σ = 742); the bound is a true upper bound, so its ε = 0 is sound.

Only numpy and scipy are imported.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from scipy import special

from hdp_planner.accounting.search import smallest_meeting
from hdp_planner.accounting.validation import (
    check_delta,
    check_epsilon,
    check_noise_multiplier,
    check_ratio,
    check_rounds,
)

__all__ = [
    "DEFAULT_RDP_ORDERS",
    "SIGMA_MAX",
    "SIGMA_MIN",
    "calibrate_q_rdp",
    "calibrate_sigma_rdp",
    "calibrate_sigmas_rdp",
    "kl_certifies_zero",
    "low_order_rdp_bounds",
    "rdp_curve",
    "rdp_epsilon",
    "rdp_epsilons",
]

# Same orders as ``dp_accounting.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS``.
DEFAULT_RDP_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024]
)

#: Search range for ``calibrate_sigma_rdp``. If even σ = SIGMA_MIN meets the target, SIGMA_MIN is
#: returned (valid, but not minimal); if σ = SIGMA_MAX does not, ValueError is raised.
SIGMA_MIN = 1e-3
SIGMA_MAX = 1e12
#: Smallest sampling ratio ``calibrate_q_rdp`` will consider.
Q_MIN = 1e-12

_MAX_STEPS_LOG_A_FRAC = 1000  # dp-accounting's cap; orders not converged by then are excluded.
_SAFETY = 1e-9  # relative shrink of the ε target (covers float differences vs. dp-accounting)
_XTOL = 2e-7  # bracket width in log-parameter space at termination (2e-7 relative)
_CHUNKS = (20, 60, 240, 680)  # fractional-order series evaluated in these chunks (the 1000-term cap)
_MAX_ITERATIONS = 40  # then _bisect finishes (the secant steps can stall at the KL branch's jump to ε = 0)
_MAX_NEWTON = 30
_CONVERGED = 3e-5  # a Newton or secant step this small leaves an error ≲ 100·step² < 0.4·_XTOL
_SQRT2 = 2**0.5
_KL_MARGIN = 1e-6  # relative margin of a closed-form RDP bound under the KL threshold (kl_certifies_zero)

_ORDERS = np.array(DEFAULT_RDP_ORDERS, dtype=np.float64)
_IS_INT = np.array([float(a).is_integer() for a in DEFAULT_RDP_ORDERS])
_INT_IDX = np.flatnonzero(_IS_INT)  # positions of the integer orders in _ORDERS
_FRAC_IDX = np.flatnonzero(~_IS_INT)
_INT_ORDERS = _ORDERS[_INT_IDX]
_FRAC_ORDERS = _ORDERS[_FRAC_IDX]
_SMALL = slice(0, int(np.sum(_INT_ORDERS < 100)))  # integer orders 2 … 63
_LARGE = slice(_SMALL.stop, _INT_ORDERS.size)  # 128, 256, 512, 1024
_FRAC_FLOOR = np.maximum(_FRAC_ORDERS.astype(np.int64) - 2, 0)  # position of ⌊a⌋ among the integer orders
_LOW = slice(0, DEFAULT_RDP_ORDERS.index(2.0) + 1)  # orders 1.1 … 2: their RDP has a closed-form bound

Wrt = Literal["u", "log q"]
"""Variables for derivatives: u = 1/(2σ²) (log A_α is convex in u for integer α), or log q."""


def _log_comb(n, k):
    return special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)


# Integer orders: the binomial expansion of every order, flattened (segment k holds i = 0..α_k).
_INT_LEN = (_INT_ORDERS + 1).astype(np.int64)
_INT_START = np.cumsum(_INT_LEN) - _INT_LEN
_INT_I = np.arange(_INT_LEN.sum(), dtype=np.float64) - np.repeat(_INT_START, _INT_LEN)
_INT_J = np.repeat(_INT_ORDERS, _INT_LEN) - _INT_I
_INT_LC = _log_comb(_INT_I + _INT_J, _INT_I)
_INT_II = _INT_I * _INT_I - _INT_I


@functools.cache
def _frac_tables() -> tuple[tuple, ...]:
    """Per chunk [k0, k1) of the fractional series: k1, i (k,), j = a - i (n, k), log C(a, i) (n, k),
    stacked (i²-i, j²-j) (2, n, k), and the distinct values of j (u,) with the map j = u[inv]."""
    tables = []
    k0 = 0
    for size in _CHUNKS:
        k1 = k0 + size
        i = np.arange(k0, k1, dtype=np.float64)
        j = _FRAC_ORDERS[:, None] - i[None, :]
        lc = _log_comb(_FRAC_ORDERS[:, None], i[None, :])
        quad = np.stack([np.broadcast_to(i * i - i, j.shape), j * j - j])
        # a - i only takes ~9·(k+10) distinct values (a has one decimal): erfc once per value and σ
        _, first, inv = np.unique(np.round(j * 10).astype(np.int64), return_index=True, return_inverse=True)
        tables.append((k1, i, j, lc, quad, j.ravel()[first], inv.reshape(j.shape)))
        k0 = k1
    return tuple(tables)


def _int_base(q: np.ndarray, orders: slice = slice(None)) -> np.ndarray:
    """The q-dependent part log C(α, i) + i·log q + (α − i)·log(1 − q) of the terms of the integer orders
    ``_INT_ORDERS[orders]`` (all: (n, 4001)), for q of shape (n, 1), or (n, k) for one value per order."""
    terms = _terms(orders)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (
            _INT_LC[terms]
            + _INT_I[terms] * _per_term(np.log(q), orders)
            + _INT_J[terms] * _per_term(np.log1p(-q), orders)
        )


def _terms(orders: slice) -> slice:
    """The terms (columns) of the integer orders ``_INT_ORDERS[orders]``, a contiguous range of orders."""
    first = int(_INT_START[orders][0])
    return slice(first, first + int(_INT_LEN[orders].sum()))


def _per_term(z: np.ndarray, orders: slice = slice(None)) -> np.ndarray:
    return z if z.shape[1] == 1 else np.repeat(z, _INT_LEN[orders], axis=1)


def _int_rdp(
    q: np.ndarray,
    sigma: np.ndarray,
    rounds: int,
    wrt: Wrt | None = None,
    base: np.ndarray | None = None,
    orders: slice = slice(None),
) -> tuple[np.ndarray, np.ndarray | None]:
    """Composed RDP of the integer orders ``_INT_ORDERS[orders]`` (n, k), and its derivative in ``wrt`` (None if
    not asked).

    q and σ are (n, 1), or (n, k) for one value per order; ``base`` is :func:`_int_base` (q) of every integer
    order, if known.
    Integer orders are the binomial expansion of dp-accounting's ``_compute_log_a_int``, one segmented
    log-sum-exp per order (max + log1p of the rest, ties with the maximum counted exactly); q = 1 is the plain
    Gaussian.
    """
    lens, alpha, terms = _INT_LEN[orders], _INT_ORDERS[orders], _terms(orders)
    starts = _INT_START[orders] - terms.start
    base = _int_base(q, orders) if base is None else base[:, terms]
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


class _Rounds:
    """``rounds`` compositions of Poisson(q_g)-subsampled Gaussians (one rate per group, 0 < q_g ≤ 1) at ``delta``;
    :meth:`epsilon` is dp-accounting's ε (the minimum over the default orders) for a noise multiplier per group.
    """

    prune = True  # drop the fractional orders that cannot attain the minimum over orders

    def __init__(self, q: np.ndarray, rounds: int, delta: float):
        self.rounds, self.delta = rounds, delta
        self.q = q
        with np.errstate(divide="ignore"):
            self.log_q, self.log1mq, self.log_odds = np.log(q), np.log1p(-q), np.log(1 / q - 1)
        self.c = conversion_constants(delta)
        self.frac_scale = rounds / (_FRAC_ORDERS - 1)  # composed RDP per unit of log A
        self.kl = kl_threshold(delta)  # rdp below this: ε = 0 (KL branch)
        self.tol = np.full(q.shape, self.kl * 1e-6 + rounds * 1e-14)
        self._int_base: np.ndarray | None = None  # q-dependent parts, computed on first use
        self._first: np.ndarray | None = None

    def convert(self, rdp: np.ndarray, order: np.ndarray | slice, groups: np.ndarray) -> np.ndarray:
        """Clipped per-order ε of dp-accounting's compute_epsilon (orders > 1.01 here) for RDP of ``order``, one
        row (or value, for 1-D ``rdp``) per group of ``groups``.

        max(0, min_a e_a) == min_a max(0, e_a), and max(0, e_a) is non-decreasing in the RDP value,
        which is what makes lower-bound pruning exact.

        dp-accounting returns ε = 0 for an order whose RDP is negative (numerical noise) or below
        δ²-ish (its KL shortcut) — a jump from a positive ε to 0. Our RDP can differ from theirs by
        float noise (|Δ| ≲ rounds·1e-15), so near that cliff we only take the shortcut when it
        holds with margin; otherwise we use the (larger, hence safe) formula.
        """
        c = self.c[order]
        eps = np.maximum(rdp + c, 0.0)
        tol = self.tol[groups][:, None] if rdp.ndim == 2 else self.tol[groups]
        risky = rdp < self.kl + tol
        if risky.any():
            zero = (rdp + tol < self.kl) | (rdp < -tol)
            eps = np.where(zero, 0.0, np.where(risky, np.maximum(np.maximum(rdp, 0.0) + c, 0.0), eps))
        return eps

    def _frac(self, sigma: np.ndarray, groups: np.ndarray, best: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The clipped ε of the fractional orders of each group (n, 90) where ``rows`` (n, 90) is set; inf for the
        others and for the orders excluded or dropped because they cannot get below ``best`` of their group.

        Replicates dp-accounting's ``_compute_log_a_frac`` term by term (same terms, same stopping rule, same
        1000-term cap: excluded after it), evaluated chunk-wise for all (group, order) rows at once. A row whose
        partial sum already proves ε ≥ best[group] is dropped: terms are positive and ε is non-decreasing in
        log A. ``best`` is lowered as rows complete.
        """
        nf = _FRAC_ORDERS.size
        row = np.flatnonzero(rows)  # (group, order) rows still running, as group·90 + order
        rg, rk = np.divmod(row, nf)
        every = row.size == rows.size
        found = np.full(rows.size, np.inf)  # ε of the rows that completed
        # the erfc arguments (i − z0)/(√2σ) of dp-accounting, times −√2: y0 = (z0 − i)/σ, y1 = (j − z0)/σ
        z0 = (sigma**2 * self.log_odds[groups] + 0.5)[:, None]
        inv_s = (1 / sigma)[:, None]
        two_s2 = (2 * sigma**2)[:, None]
        cum = last = None  # log of the running sum A0 + A1 and the last terms, of the rows still running
        for k1, i, j, lc, quad, ju, jinv in _frac_tables():
            if every:  # first chunk, every order of every group: as (2, group, order, term)
                s = self._first_terms(i, j, lc)[:, groups] + quad[:, None] / two_s2[:, :, None]
                s[0] += special.log_ndtr((z0 - i) * inv_s)[:, None, :]
                s[1] += special.log_ndtr((ju - z0) * inv_s)[:, jinv]
                s = s.reshape(2, row.size, i.size)
                every = False
            else:  # the rows still running
                lq, l1q, lcr, jr = self.log_q[groups[rg], None], self.log1mq[groups[rg], None], lc[rk], j[rk]
                s = np.stack([lcr + i * lq + jr * l1q, lcr + jr * lq + i * l1q]) + quad[:, rk] / two_s2[rg]
                # erfc factors depend on (σ, i) and (σ, j): per group, then gathered, where that is cheaper
                if sigma.size <= row.size:
                    s[0] += special.log_ndtr((z0 - i) * inv_s)[rg]
                else:
                    s[0] += special.log_ndtr((z0[rg] - i) * inv_s[rg])
                if sigma.size * ju.size < row.size * i.size:
                    s[1] += special.log_ndtr((ju - z0) * inv_s)[rg[:, None], jinv[rk]]
                else:
                    s[1] += special.log_ndtr((j[rk] - z0[rg]) * inv_s[rg])
            smax = s.max(axis=0)
            m = smax.max(axis=1, keepdims=True) if cum is None else np.maximum(smax.max(axis=1), cum)[:, None]
            lin = np.cumsum(np.exp(s[0] - m) + np.exp(s[1] - m), axis=1)
            total = np.log(lin if cum is None else lin + np.exp(cum[:, None] - m)) + m
            # stop at the first term where both series decrease and are 30 below the total
            cond = smax < total - 30
            cond[:, 0] = False if last is None else cond[:, 0] & (s[:, :, 0] < last).all(axis=0)
            cond[:, 1:] &= (s[:, :, 1:] < s[:, :, :-1]).all(axis=0)
            done = cond.any(axis=1)
            if done.any():
                d = np.flatnonzero(done)
                found[row[d]] = eps = self.convert(
                    total[d, cond[d].argmax(axis=1)] * self.frac_scale[rk[d]], _FRAC_IDX[rk[d]], groups[rg[d]]
                )
                if self.prune:
                    np.minimum.at(best, rg[d], eps)
            if done.all() or k1 >= _MAX_STEPS_LOG_A_FRAC:
                break  # still running after 1000 terms: dp-accounting excludes the order
            # Rows still running: their partial sums are lower bounds (all terms are positive).
            keep = np.flatnonzero(~done)
            lower = self.convert(total[keep, -1] * self.frac_scale[rk[keep]], _FRAC_IDX[rk[keep]], groups[rg[keep]])
            keep = keep[lower < best[rg[keep]]]
            if not keep.size:
                break
            row, rg, rk = row[keep], rg[keep], rk[keep]
            cum, last = total[keep, -1], s[:, keep, -1]
        return found.reshape(groups.size, nf)

    def _first_terms(self, i: np.ndarray, j: np.ndarray, lc: np.ndarray) -> np.ndarray:
        """The q-dependent parts log C(a, i) + i·log q + j·log(1 − q) and log C(a, i) + j·log q + i·log(1 − q) of
        the series' first chunk, (2, group, order, term), for every group (computed on first use)."""
        if self._first is None:
            lq, l1q = self.log_q[:, None, None], self.log1mq[:, None, None]
            with np.errstate(invalid="ignore"):  # NaN for q = 1, whose fractional orders are in closed form
                self._first = np.stack([lc + i * lq + j * l1q, lc + j * lq + i * l1q])
        return self._first

    def epsilon(self, sigma: np.ndarray, groups: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """ε per group at noise ``sigma`` (one per group of ``groups``, default all), and the ε of every order
        (n, 155), inf for the fractional orders dropped because they cannot attain the minimum."""
        groups = np.arange(self.q.size) if groups is None else groups
        per_order = np.full((groups.size, _ORDERS.size), np.inf)
        base = self.int_terms(groups)
        small, large = _INT_IDX[_SMALL], _INT_IDX[_LARGE]
        rdp = _int_rdp(self.q[groups, None], sigma[:, None], self.rounds, base=base, orders=_SMALL)[0]
        per_order[:, small] = self.convert(rdp, small, groups)
        best = per_order[:, small].min(axis=1)
        # Rényi divergence does not decrease with the order, so an order's RDP is at least that of any smaller
        # order: ε_α ≥ RDP_β + c_α for β < α. Orders 128 … 1024 (β = 63) and the fractional orders (β = ⌊α⌋, or
        # RDP ≥ 0 below 2) are evaluated only for the groups where that bound does not already exceed the minimum
        # (with margins far above the series' truncation, ~1e-13 in log A).
        below = rdp * (1 - 1e-9) - self.rounds * 1e-12
        big = np.flatnonzero(self.convert(below[:, -1:], large, groups).min(axis=1) <= best)
        if big.size:
            rdp = _int_rdp(self.q[groups[big], None], sigma[big, None], self.rounds, base=base[big], orders=_LARGE)[0]
            per_order[np.ix_(big, large)] = self.convert(rdp, large, groups[big])
            best[big] = np.minimum(best[big], per_order[np.ix_(big, large)].min(axis=1))
        floor = np.where(_FRAC_ORDERS >= 2, below[:, _FRAC_FLOOR], 0.0)
        rows = self.convert(floor, _FRAC_IDX, groups) <= best[:, None]
        sub = (self.q[groups] < 1.0) & rows.any(axis=1)
        if sub.any():
            per_order[np.ix_(sub, _FRAC_IDX)] = self._frac(sigma[sub], groups[sub], best[sub], rows[sub])
        plain = self.q[groups] == 1.0
        if plain.any():  # the plain Gaussian: T·α/(2σ²)
            gaussian = self.rounds * (_FRAC_ORDERS / (2 * sigma[plain, None] ** 2))
            per_order[np.ix_(plain, _FRAC_IDX)] = self.convert(gaussian, _FRAC_IDX, groups[plain])
        zero, order = self.kl_zero(sigma, groups)
        per_order[zero, order[zero]] = 0.0
        return per_order.min(axis=1), per_order

    def kl_zero(self, sigma: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where some order α ∈ (1, 2] certifies ε = 0 in closed form (:func:`kl_certifies_zero` for many groups),
        and which: returns the mask and, per row, the column of the certifying order."""
        rdp = self.rounds * low_order_rdp_bounds(self.q[groups, None], sigma[:, None])[1]
        return rdp.min(axis=1) * (1 + _KL_MARGIN) < self.kl, rdp.argmin(axis=1)

    def int_terms(self, groups: np.ndarray) -> np.ndarray:
        """:func:`_int_base` of these groups' q (computed once for all groups)."""
        if self._int_base is None:
            self._int_base = _int_base(self.q[:, None])
        return self._int_base[groups]


def low_order_rdp_bounds(q: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds on the sampled Gaussian's RDP (log A_α)/(α − 1) at orders 1.1 … 2 (last axis).

    A_α = E[(1 + qX)^α] with X = L − 1, L the likelihood ratio of N(1, σ²) to N(0, σ²) under N(0, σ²):
    E[X] = 0, E[X²] = e^{1/σ²} − 1, E[X⁴] ≤ E[L⁴] + 1 = e^{6/σ²} + 1. For α ∈ (1, 2] and x = qX ≥ −q, Taylor's theorem
    with Lagrange remainder gives (1 + x)^α − 1 − αx = C(α, 2)(1 + ξ)^(α−2)x² with ξ between 0 and x, and
    (1 + max(x, 0))^(α−2) ≤ (1 + ξ)^(α−2) ≤ (1 − q)^(α−2). Hence
    A_α − 1 ≤ C(α, 2)(1 − q)^(α−2)q²E[X²] and, by (1 + y)^(α−2) ≥ 1 − (2 − α)y and Cauchy–Schwarz,
    A_α − 1 ≥ C(α, 2)q²(E[X²] − (2 − α)q√(E[X²]E[X⁴])). Both are exact at α = 2, and free of the cancellation
    of the term-wise sum when A_α − 1 is tiny."""
    a = _ORDERS[_LOW]
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
    return bool(np.min(total) * (1 + _KL_MARGIN) < kl_threshold(delta))


def conversion_constants(delta: float) -> np.ndarray:
    """Per default order, the constant of dp-accounting's RDP→(ε, δ) conversion: ε_α = RDP_α + c_α."""
    return np.log1p(-1 / _ORDERS) - np.log(delta * _ORDERS) / (_ORDERS - 1)


# ------------------------------------------------------------------------------------------- validation


# ------------------------------------------------------------------------------------------- accounting


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
        out[live] = _Rounds(qs[live], rounds, float(delta)).epsilon(sigma[live])[0]
    return out


class _Curve(_Rounds):
    """One round, every order, unconverted: :meth:`_Rounds._frac` with the identity conversion and no pruning."""

    prune = False

    def convert(self, rdp: np.ndarray, order: np.ndarray | slice, groups: np.ndarray) -> np.ndarray:
        return rdp


@functools.lru_cache(maxsize=4096)
def rdp_curve(*, noise_multiplier: float, q: float) -> np.ndarray:
    """RDP of one Poisson(q)-subsampled Gaussian(σ) round at every default order (inf: an order dp-accounting
    excludes), term for term dp-accounting's ``_compute_rdp_poisson_subsampled_gaussian``. Rényi DP composes by
    addition (Mironov 2017, Prop. 1): sum curves to account for rounds whose σ changes."""
    sigma = np.array([check_noise_multiplier(noise_multiplier)])
    q = check_ratio(q)
    out = np.empty(_ORDERS.size)
    out[_INT_IDX] = _int_rdp(np.array([[q]]), sigma[:, None], 1)[0][0]
    if q == 1.0:
        out[_FRAC_IDX] = _FRAC_ORDERS / (2 * sigma[0] ** 2)
    else:
        curve = _Curve(np.array([q]), 1, 0.5)
        everything = np.ones((1, _FRAC_ORDERS.size), dtype=bool)
        out[_FRAC_IDX] = curve._frac(sigma, np.zeros(1, dtype=np.int64), np.full(1, np.inf), everything)[0]
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


# ------------------------------------------------------------------------------------------- calibration

# epsilon_at(x, groups) → (ε, every order's ε) at x for those groups (see _Rounds.epsilon)
_Epsilon = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
# (x → v, v → x, dv/dx): the variable v in which Newton steps are taken, as a function of the searched x
_Variable = tuple[
    Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]
]
# x = log σ ↔ u = 1/(2σ²) (log A_α is a log-sum-exp of affine functions of u), and x = −log q ↔ log q
_SIGMA_VARIABLE: _Variable = (
    lambda x: 0.5 * np.exp(-2 * x),
    lambda u: -0.5 * np.log(2 * u),
    lambda x: -np.exp(-2 * x),
)
_Q_VARIABLE: _Variable = (np.negative, np.negative, lambda x: -np.ones_like(x))


def _integer_roots(
    rdp_at: Callable[[np.ndarray, np.ndarray, slice], tuple[np.ndarray, np.ndarray]],
    variable: _Variable,
    target: np.ndarray,
    x0: np.ndarray,
    lo: float,
    hi: float,
    rounds: int,
    delta: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group, the smallest of the integer orders' own roots ε_α(x) = target (x0 where none has one),
    d log ε_α/dx of that order there (−1 where none), and whether there was one.

    At small q, ε(x) = min_α ε_α(x) is a staircase: each order's ε is flat, then explodes within a few 0.01 of
    log σ, and the root lies on such a cliff, which steps on ε itself cross slowly. Each order alone is smooth.
    Newton steps for every integer order at once, each at its own x (``rdp_at(x, groups, orders)``: the
    composed RDP of ``_INT_ORDERS[orders]`` and its derivative in v, each at its own x), on log(A_α − 1), which
    is nearly linear in v both on the cliff (where the largest binomial term dominates) and, for v = log q,
    where A_α − 1 ∝ q²; they stop once the orders that may hold the smallest root have converged. The result is
    a starting point for :func:`_bracket`.
    """
    to_v, from_v, dv_dx = variable
    per = (_INT_ORDERS - 1) / rounds  # log A_α per unit of composed RDP
    c = conversion_constants(delta)[_INT_IDX]
    level = _log_expm1((target[:, None] - c) * per)
    usable = np.isfinite(level)  # ε_α ≥ c_α: the other orders never meet the target
    x = np.repeat(x0[:, None], _INT_IDX.size, axis=1)
    rdp, slope = np.full(x.shape, np.nan), np.full(x.shape, np.nan)
    live = np.flatnonzero(usable.any(axis=1))  # groups still iterating
    orders = slice(None)  # after the first step, only the range of orders that may hold a smallest root
    for _ in range(_MAX_NEWTON):
        if not live.size:
            break
        xl = x[live]
        rdp[live, orders], slope[live, orders] = rdp_at(xl[:, orders], live, orders)
        log_a = rdp[live] * per
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # d log(A − 1) = d log A · A/(A − 1), and A/(A − 1) = 1/(1 − e^−log A)
            xn = from_v(to_v(xl) - (_log_expm1(log_a) - level[live]) * -np.expm1(-log_a) / (slope[live] * per))
        xn = np.clip(np.clip(np.where(np.isnan(xn), xl + 3.0, xn), xl - 3.0, xl + 3.0), lo, hi)
        frozen = np.ones(_INT_ORDERS.size, dtype=bool)
        frozen[orders] = False
        xn[:, frozen] = xl[:, frozen]  # not evaluated in this step: unchanged
        xn = np.where(usable[live], xn, np.inf)
        relevant = xn <= xn.min(axis=1, keepdims=True) + 0.01  # orders that may hold the smallest root
        moving = (relevant & ((np.abs(xn - xl) > _CONVERGED) | frozen)).any(axis=1)
        x[live] = np.where(usable[live], xn, xl)
        live = live[moving]
        needed = np.flatnonzero(relevant[moving].any(axis=0))
        orders = slice(needed[0], needed[-1] + 1) if needed.size else orders
    k = np.where(usable, x, np.inf).argmin(axis=1)
    rows = np.arange(k.size)
    found = usable.any(axis=1)
    xk = x[rows, k]
    with np.errstate(divide="ignore", invalid="ignore"):
        log_slope = slope[rows, k] * dv_dx(xk) / (rdp[rows, k] + c[k])
    log_slope = np.where(found & (log_slope < 0) & np.isfinite(log_slope), log_slope, -1.0)
    return np.where(found, xk, x0), log_slope, found


def _log_expm1(y: np.ndarray) -> np.ndarray:
    """log(e^y − 1) = y + log(1 − e^−y), without overflow; NaN for y ≤ 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(y > 0, y + np.log(-np.expm1(-y)), np.nan)


def _step(x: np.ndarray, d: np.ndarray, a: np.ndarray, b: np.ndarray, bisect: bool | np.ndarray, lo: float, hi: float):
    """The next point from x for a predicted step d within the bracket (a, b] (±inf while open): aimed just past
    the root so that the bracket closes from both sides, at most 3 in x, and the bracket's midpoint where
    ``bisect`` or where the step would leave it, so that termination is guaranteed."""
    d = d + np.copysign(0.3 * _XTOL + 1e-3 * np.abs(d), d)
    xn = x + np.clip(d, -3.0, 3.0)
    bracketed = np.isfinite(a) & np.isfinite(b)
    xn = np.clip(np.where(bracketed & (bisect | (xn <= a) | (xn >= b)), 0.5 * (a + b), xn), lo, hi)
    xn = np.where(xn <= a, 0.5 * (a + np.minimum(b, hi)), xn)
    return np.where(xn >= b, 0.5 * (b + np.maximum(a, lo)), xn)


def _gap(eps: np.ndarray, target: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.clip(np.log(eps) - np.log(target), -50.0, 50.0)


def _secant(f: np.ndarray, f_prev: np.ndarray, x: np.ndarray, x_prev: np.ndarray, default: np.ndarray) -> np.ndarray:
    """Slope of (x, f) through the last two points where it is negative and finite, else ``default``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = (f - f_prev) / (x - x_prev)
    return np.where((slope < 0) & np.isfinite(slope), slope, default)


def _bracket(
    epsilon_at: _Epsilon,
    variable: _Variable,
    target: np.ndarray,
    x0: np.ndarray,
    slope0: np.ndarray,
    pair: np.ndarray,
    lo: float,
    hi: float,
    rounds: int,
    delta: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Per group, the smallest x ∈ [lo, hi] (to within _XTOL) at which ε(x) ≤ target, for ε decreasing in x.

    ``epsilon_at(x, groups)`` is ε at x for those groups (a group may appear twice) and the ε of every order.
    Returns the safe end b of a bracket (a, b] holding the root, both ends evaluated (b = lo if lo meets the
    target, inf if hi does not, NaN if not found in 40 evaluations), and ε at b. Where the order attaining ε
    was also evaluated at the last point, a secant step on its own smooth curve, log(A_α − 1) against v (as
    :func:`_integer_roots`); otherwise on (x, log ε), from slope ``slope0``.
    Steps aim just past the predicted root so the bracket closes from both sides; bisection takes over if a
    step leaves the bracket or after 12 steps, so termination is guaranteed. Where the root is known to within
    _XTOL (x0 where ``pair``, or after a step below _CONVERGED), the two points 0.4·_XTOL either side of it are
    evaluated at once, closing the bracket in one evaluation when the prediction holds.
    """
    to_v, from_v, _ = variable
    c = conversion_constants(delta)
    n = target.size
    x = np.clip(x0, lo, hi)
    a = np.full(n, -np.inf)  # largest x evaluated where ε > target
    b = np.full(n, np.inf)  # smallest x evaluated where ε ≤ target
    x_prev, f_prev = np.full(n, np.nan), np.full(n, np.nan)
    e_prev = np.full((n, _ORDERS.size), np.nan)  # every order's ε at the previous point
    last_step = np.full(n, np.inf)
    eps_b = np.full(n, np.nan)  # ε at b
    out = np.full(n, np.nan)
    todo = np.arange(n)
    pair = pair.copy()

    def order_gap(eps: np.ndarray, k: np.ndarray, tg: np.ndarray) -> np.ndarray:
        """log(A_α − 1) at ε minus at the target, for the order α attaining ε (NaN where undefined)."""
        per = (_ORDERS[k] - 1) / rounds
        return _log_expm1((eps - c[k]) * per) - _log_expm1((tg - c[k]) * per)

    for it in range(_MAX_ITERATIONS):
        two = todo[pair[todo]]
        points = np.concatenate([np.where(pair[todo], x[todo] - 0.4 * _XTOL, x[todo]), x[two] + 0.4 * _XTOL])
        points = np.clip(points, lo, hi)
        owner = np.concatenate([todo, two])
        eps, per_order = epsilon_at(points, owner)
        ok = eps <= target[owner]
        np.maximum.at(a, owner[~ok], points[~ok])
        np.minimum.at(b, owner[ok], points[ok])
        at_b = ok & (points == b[owner])
        eps_b[owner[at_b]] = eps[at_b]
        f_all = _gap(eps, target[owner])
        # steps continue from the first point and, for pairs, from the second as the previous one
        m = todo.size
        f, per, xg = f_all[:m], per_order[:m], points[:m]
        x_prev[two], f_prev[two], e_prev[two] = points[m:], f_all[m:], per_order[m:]
        ag, bg = a[todo], b[todo]
        finished = (bg - ag <= _XTOL) | (bg <= lo) | (ag >= hi)
        out[todo[finished]] = np.where(bg[finished] <= lo, lo, bg[finished])
        live = ~finished
        todo, xg, f, per, ag, bg = todo[live], xg[live], f[live], per[live], ag[live], bg[live]
        if not todo.size:
            return out, eps_b
        k, rows, tg = per.argmin(axis=1), np.arange(todo.size), target[todo]
        g, g_prev = order_gap(per[rows, k], k, tg), order_gap(e_prev[todo, k], k, tg)
        v = to_v(xg)
        with np.errstate(divide="ignore", invalid="ignore"):
            slope_v = (g - g_prev) / (v - to_v(x_prev[todo]))
            d = from_v(v - g / slope_v) - xg
        smooth = np.isfinite(d) & (slope_v > 0)  # the order attaining ε had been evaluated at the last point
        d = np.where(smooth, d, -f / _secant(f, f_prev[todo], xg, x_prev[todo], slope0[todo]))
        # superlinear steps: the error after this one is about |d|·|previous step| (or 100·d² for Newton's)
        close = (np.abs(d) < _CONVERGED) | (np.abs(d) * last_step[todo] < 0.4 * _XTOL)
        pair[todo] = close & ~(np.isfinite(ag) & np.isfinite(bg) & (it >= 12))
        last_step[todo] = np.abs(d)
        x_prev[todo], f_prev[todo], e_prev[todo] = xg, f, per
        x[todo] = np.where(pair[todo], xg + d, _step(xg, d, ag, bg, it >= 12, lo, hi))
    return out, eps_b  # NaN for the groups still searching: :func:`_bisect` takes over


def _calibrate(
    epsilon_at: _Epsilon,
    int_rdp: Callable[[np.ndarray, np.ndarray, slice], tuple[np.ndarray, np.ndarray]],
    variable: _Variable,
    target: np.ndarray,
    x0: np.ndarray,
    lo: float,
    hi: float,
    rounds: int,
    delta: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The smallest x ∈ [lo, hi] (to within _XTOL) with ε(x) ≤ target per group (inf if none), and ε there: bracketed
    (:func:`_bracket`) from the integer orders' smallest root (:func:`_integer_roots`). ε(x) = min_α ε_α(x), so
    the root is the smallest per-order root: there, or a fractional order's below it."""
    start, slope, found = _integer_roots(int_rdp, variable, target, x0, lo, hi, rounds, delta)
    x, eps = _bracket(epsilon_at, variable, target, start, slope, found, lo, hi, rounds, delta)
    stuck = np.flatnonzero(~np.isfinite(x))
    if stuck.size:
        x[stuck], eps[stuck] = _bisect(epsilon_at, target[stuck], stuck, lo, hi)
    return x, eps


def _bisect(
    epsilon_at: _Epsilon, target: np.ndarray, groups: np.ndarray, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray]:
    """The smallest x ∈ [lo, hi] (to within _XTOL) with ε(x) ≤ target for these groups (inf if none), and ε there,
    by the generic search (:func:`~hdp_planner.accounting.search.smallest_meeting`), one group at a time: slower
    than :func:`_bracket` but blind to the shape of ε, only to its monotonicity, so it also crosses the jumps to
    ε = 0 of the KL branch that the secant steps can stall on."""
    x, eps = np.full(groups.size, np.inf), np.full(groups.size, np.nan)
    for i in range(groups.size):
        seen: dict[float, float] = {}  # ε at each point evaluated
        found = smallest_meeting(
            functools.partial(_log_gap, epsilon_at, groups[i : i + 1], float(target[i]), seen),
            lo=lo, hi=hi, start=0.5 * (lo + hi), xtol=_XTOL, max_evaluations=200,
        )  # fmt: skip
        if math.isfinite(found.x):
            x[i], eps[i] = found.x, seen[found.x]
    return x, eps


def _log_gap(epsilon_at: _Epsilon, group: np.ndarray, goal: float, seen: dict[float, float], x: float) -> float:
    """log ε(x) − log goal for one group (−inf where ε = 0), ε recorded in ``seen``."""
    seen[x] = e = float(epsilon_at(np.array([x]), group)[0][0])
    return math.log(e / goal) if e > 0 else -math.inf


def never_sampled_bound(q: float, rounds: int) -> float:
    """1 − (1 − q)^T: the probability that a client takes part in at least one of T Poisson(q) rounds, which bounds
    the total variation between the mechanism's outputs on neighbouring datasets (see the calibration docs)."""
    return -math.expm1(rounds * math.log1p(-q)) if q < 1 else 1.0


def calibrate_sigmas_rdp(
    *, epsilons: Sequence[float] | np.ndarray, delta: float, q: Sequence[float] | np.ndarray, rounds: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`calibrate_sigma_rdp` for many groups (ε_g, q_g) sharing ``delta`` and ``rounds``, solved together
    (every evaluation is vectorised over the groups still searching), and the ε each σ spends, as evaluated there
    (``rdp_epsilon`` of it, up to float rounding). Same guarantee per group."""
    eps = np.array([check_epsilon(e) for e in epsilons], dtype=np.float64)
    rounds, delta = check_rounds(rounds), check_delta(delta)
    delta = float(delta)
    qs = np.array([check_ratio(x) for x in q], dtype=np.float64)
    if eps.shape != qs.shape:
        raise ValueError(f"{eps.size} epsilons for {qs.size} sampling ratios")
    if not eps.size:
        return eps, eps.copy()
    mech = _Rounds(qs, rounds, delta)
    # first guess: Gaussian closed form with the q·√T subsampling scaling
    guess = np.log(qs * math.sqrt(2 * rounds * math.log(1 / delta)) / eps + 0.5)
    x, spent = _calibrate(
        lambda x, groups: mech.epsilon(np.exp(x), groups),
        lambda x, groups, orders: _int_rdp(qs[groups, None], np.exp(x), rounds, "u", mech.int_terms(groups), orders),
        _SIGMA_VARIABLE,
        eps * (1 - _SAFETY),
        guess,
        math.log(SIGMA_MIN),
        math.log(SIGMA_MAX),
        rounds,
        delta,
    )
    bad = ~np.isfinite(x)
    if bad.any():
        g = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"epsilon={eps[g]} is not reachable with noise_multiplier ≤ {SIGMA_MAX:g} "
            f"(delta={delta}, q={qs[g]}, rounds={rounds}); the RDP→(ε,δ) conversion has a floor"
        )
    return np.exp(x), spent


def calibrate_sigma_rdp(*, epsilon: float, delta: float, q: float, rounds: int) -> float:
    """Smallest noise multiplier σ (to ~2e-7 relative) whose RDP ε (dp-accounting) is ≤ ``epsilon``.

    The returned σ always satisfies ε(σ) ≤ epsilon (the upper end of the final bracket, solved against
    epsilon·(1 − 1e-9)). If even σ = SIGMA_MIN (1e-3) meets the target, SIGMA_MIN is returned. Raises
    ValueError on invalid input or if σ = SIGMA_MAX (1e12) does not suffice.
    """
    return float(calibrate_sigmas_rdp(epsilons=[epsilon], delta=delta, q=[q], rounds=rounds)[0][0])


def calibrate_q_rdp(*, epsilon: float, delta: float, noise_multiplier: float, rounds: int) -> float:
    """Largest sampling ratio q ∈ (0, 1] (to ~2e-7 relative) whose RDP ε (dp-accounting) is ≤ ``epsilon``.

    Returns 1.0 if q = 1 already meets the target; the returned q always satisfies the target (lower
    end of the final bracket, solved against epsilon·(1 − 1e-9)). Raises ValueError on invalid input
    or if no q ≥ 1e-12 meets the target.
    """
    epsilon = check_epsilon(epsilon)
    rounds, delta = check_rounds(rounds), check_delta(delta)
    sigma = np.array([check_noise_multiplier(noise_multiplier)])
    delta = float(delta)
    hi = -math.log(Q_MIN)  # in x = −log q, so that ε decreases in x
    guess = epsilon * sigma[0] / math.sqrt(2 * rounds * max(math.log(1 / delta), 1e-12))
    x = _calibrate(
        lambda x, groups: _Rounds(np.exp(-x), rounds, delta).epsilon(sigma[groups]),
        lambda x, groups, orders: _int_rdp(np.exp(-x), sigma[groups, None], rounds, "log q", orders=orders),
        _Q_VARIABLE,
        np.array([epsilon * (1 - _SAFETY)]),
        np.array([min(max(-math.log(guess), 1e-3), hi)]),
        0.0,
        hi,
        rounds,
        delta,
    )[0][0]
    if not math.isfinite(x):
        raise ValueError(
            f"no sampling ratio q ≥ {Q_MIN:g} meets epsilon={epsilon} at noise_multiplier={sigma[0]} "
            f"(delta={delta}, rounds={rounds})"
        )
    return math.exp(-x)
