"""ε of T rounds of Poisson(q_g)-subsampled Gaussians, many groups at once, exactly as dp-accounting's
``RdpAccountant`` (default orders, add-or-remove-one neighbours) reports it, numerical quirks included
(absolute-value binomial series for fractional orders, the 1000-term cap after which a fractional order is
*excluded*, and the improved RDP→(ε, δ) conversion of Canonne–Kamath–Steinke / Asoodeh et al. with the KL shortcut).

Vectorised numpy replaces dp-accounting's per-term Python loops. Orders that provably cannot attain the minimum are
skipped, which keeps the result exact: Rényi divergence does not decrease with the order (orders 128 … 1024 and the
fractional ones are bounded below by a smaller integer order), and a fractional order's partial sum bounds its series
(all terms are positive).
"""

from __future__ import annotations

import numpy as np
from scipy import special

from hdp_planner.accounting.rdp_orders import (
    FRAC_FLOOR,
    FRAC_IDX,
    FRAC_ORDERS,
    INT_IDX,
    KL_MARGIN,
    LARGE,
    MAX_TERMS_LOG_A_FRAC,
    ORDERS,
    SMALL,
    conversion_constants,
    frac_tables,
    int_base,
    int_rdp,
    kl_threshold,
    low_order_rdp_bounds,
)

__all__ = ["RdpCurve", "RdpRounds"]


class RdpRounds:
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
        self.frac_scale = rounds / (FRAC_ORDERS - 1)  # composed RDP per unit of log A
        self.kl = kl_threshold(delta)  # rdp below this: ε = 0 (KL branch)
        self.tol = np.full(q.shape, self.kl * 1e-6 + rounds * 1e-14)
        self._base: np.ndarray | None = None  # q-dependent parts, computed on first use
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

    def fractional_epsilons(
        self, sigma: np.ndarray, groups: np.ndarray, best: np.ndarray, rows: np.ndarray
    ) -> np.ndarray:
        """The clipped ε of the fractional orders of each group (n, 90) where ``rows`` (n, 90) is set; inf for the
        others and for the orders excluded or dropped because they cannot get below ``best`` of their group.

        Replicates dp-accounting's ``_compute_log_a_frac`` term by term (same terms, same stopping rule, same
        1000-term cap: excluded after it), evaluated chunk-wise for all (group, order) rows at once. A row whose
        partial sum already proves ε ≥ best[group] is dropped: terms are positive and ε is non-decreasing in
        log A. ``best`` is lowered as rows complete.
        """
        nf = FRAC_ORDERS.size
        row = np.flatnonzero(rows)  # (group, order) rows still running, as group·90 + order
        rg, rk = np.divmod(row, nf)
        every = row.size == rows.size
        found = np.full(rows.size, np.inf)  # ε of the rows that completed
        # the erfc arguments (i − z0)/(√2σ) of dp-accounting, times −√2: y0 = (z0 − i)/σ, y1 = (j − z0)/σ
        z0 = (sigma**2 * self.log_odds[groups] + 0.5)[:, None]
        inv_s = (1 / sigma)[:, None]
        two_s2 = (2 * sigma**2)[:, None]
        cum = last = None  # log of the running sum A0 + A1 and the last terms, of the rows still running
        for k1, i, j, lc, quad, ju, jinv in frac_tables():
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
                    total[d, cond[d].argmax(axis=1)] * self.frac_scale[rk[d]], FRAC_IDX[rk[d]], groups[rg[d]]
                )
                if self.prune:
                    np.minimum.at(best, rg[d], eps)
            if done.all() or k1 >= MAX_TERMS_LOG_A_FRAC:
                break  # still running after 1000 terms: dp-accounting excludes the order
            # Rows still running: their partial sums are lower bounds (all terms are positive).
            keep = np.flatnonzero(~done)
            lower = self.convert(total[keep, -1] * self.frac_scale[rk[keep]], FRAC_IDX[rk[keep]], groups[rg[keep]])
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
        per_order = np.full((groups.size, ORDERS.size), np.inf)
        base = self.int_terms(groups)
        small, large = INT_IDX[SMALL], INT_IDX[LARGE]
        rdp = int_rdp(self.q[groups, None], sigma[:, None], rounds=self.rounds, base=base, orders=SMALL)[0]
        per_order[:, small] = self.convert(rdp, small, groups)
        best = per_order[:, small].min(axis=1)
        # Rényi divergence does not decrease with the order, so an order's RDP is at least that of any smaller
        # order: ε_α ≥ RDP_β + c_α for β < α. Orders 128 … 1024 (β = 63) and the fractional orders (β = ⌊α⌋, or
        # RDP ≥ 0 below 2) are evaluated only for the groups where that bound does not already exceed the minimum
        # (with margins far above the series' truncation, ~1e-13 in log A).
        below = rdp * (1 - 1e-9) - self.rounds * 1e-12
        big = np.flatnonzero(self.convert(below[:, -1:], large, groups).min(axis=1) <= best)
        if big.size:
            rdp = int_rdp(
                self.q[groups[big], None], sigma[big, None], rounds=self.rounds, base=base[big], orders=LARGE
            )[0]
            per_order[np.ix_(big, large)] = self.convert(rdp, large, groups[big])
            best[big] = np.minimum(best[big], per_order[np.ix_(big, large)].min(axis=1))
        floor = np.where(FRAC_ORDERS >= 2, below[:, FRAC_FLOOR], 0.0)
        rows = self.convert(floor, FRAC_IDX, groups) <= best[:, None]
        sub = (self.q[groups] < 1.0) & rows.any(axis=1)
        if sub.any():
            per_order[np.ix_(sub, FRAC_IDX)] = self.fractional_epsilons(sigma[sub], groups[sub], best[sub], rows[sub])
        plain = self.q[groups] == 1.0
        if plain.any():  # the plain Gaussian: T·α/(2σ²)
            gaussian = self.rounds * (FRAC_ORDERS / (2 * sigma[plain, None] ** 2))
            per_order[np.ix_(plain, FRAC_IDX)] = self.convert(gaussian, FRAC_IDX, groups[plain])
        zero, order = self.kl_zero(sigma, groups)
        per_order[zero, order[zero]] = 0.0
        return per_order.min(axis=1), per_order

    def kl_zero(self, sigma: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where some order α ∈ (1, 2] certifies ε = 0 in closed form (:func:`kl_certifies_zero` for many groups),
        and which: returns the mask and, per row, the column of the certifying order."""
        rdp = self.rounds * low_order_rdp_bounds(self.q[groups, None], sigma[:, None])[1]
        return rdp.min(axis=1) * (1 + KL_MARGIN) < self.kl, rdp.argmin(axis=1)

    def int_terms(self, groups: np.ndarray) -> np.ndarray:
        """:func:`int_base` of these groups' q (computed once for all groups)."""
        if self._base is None:
            self._base = int_base(self.q[:, None])
        return self._base[groups]


class RdpCurve(RdpRounds):
    """One round, every order, unconverted: :meth:`RdpRounds.fractional_epsilons` with the identity conversion and
    no pruning."""

    prune = False

    def convert(self, rdp: np.ndarray, order: np.ndarray | slice, groups: np.ndarray) -> np.ndarray:
        return rdp
