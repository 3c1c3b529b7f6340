"""Fast, exact RDP accounting and calibration for the Poisson-subsampled Gaussian mechanism.

``rdp_epsilon`` reproduces the ε that dp-accounting's ``RdpAccountant`` (default orders,
add-or-remove-one neighbours) reports for
``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), rounds)``, including its
numerical quirks (absolute-value binomial series for fractional orders, the 1000-term cap after
which a fractional order is *excluded*, and the improved RDP→(ε, δ) conversion of
Canonne–Kamath–Steinke / Asoodeh et al. with the KL shortcut). It does so with vectorised numpy
instead of per-term Python loops, and prunes fractional orders whose partial sum already proves
they cannot attain the minimum, which keeps the result exact.

``calibrate_sigma_rdp`` / ``calibrate_q_rdp`` solve ε(σ, q) = target with a bracketing
Illinois (modified regula falsi) iteration on (log x, log ε), always returning the *safe* end of
the final bracket, computed against a target shrunk by ``_SAFETY`` (1e-9 relative) so that the
returned parameter also satisfies the target under dp-accounting's own floating-point evaluation.

Only numpy and scipy are imported.
"""

from __future__ import annotations

import math
import operator

import numpy as np
from scipy import special

__all__ = ["DEFAULT_RDP_ORDERS", "SIGMA_MAX", "SIGMA_MIN", "calibrate_q_rdp", "calibrate_sigma_rdp", "rdp_epsilon"]

# Same orders as ``dp_accounting.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS``.
DEFAULT_RDP_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024]
)

#: Search range for ``calibrate_sigma_rdp``. If even σ = SIGMA_MIN meets the target, SIGMA_MIN is
#: returned (valid, but not minimal); if σ = SIGMA_MAX does not, ValueError is raised.
SIGMA_MIN = 1e-3
SIGMA_MAX = 1e8
#: Smallest sampling ratio ``calibrate_q_rdp`` will consider.
Q_MIN = 1e-12

_MAX_STEPS_LOG_A_FRAC = 1000  # dp-accounting's cap; orders not converged by then are excluded.
_SAFETY = 1e-9  # relative shrink of the ε target (covers float differences vs. dp-accounting)
_XTOL = 2e-7  # bracket width in log-parameter space at termination (2e-7 relative)
_CHUNKS = (8, 16, 32, 64, 128, 256, 496)  # fractional-order series evaluated in these chunks

_ORDERS = np.array(DEFAULT_RDP_ORDERS, dtype=np.float64)
_IS_INT = np.array([float(a).is_integer() for a in DEFAULT_RDP_ORDERS])
_INT_ORDERS = _ORDERS[_IS_INT]
_FRAC_ORDERS = _ORDERS[~_IS_INT]

_FRAC_TABLES: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]] | None = None
_INT_FLAT: tuple[np.ndarray, ...] | None = None
_SQRT2 = 2**0.5


def _log_comb(n, k):
    return special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)


def _frac_tables() -> list[tuple]:
    """Per chunk [k0, k1) of the fractional series: k1, i (k,), j = a - i (n, k), log C(a, i) (n, k),
    stacked (i²-i, j²-j) (2, n, k), and the distinct values of j (u,) with the map j = u[inv]."""
    global _FRAC_TABLES
    if _FRAC_TABLES is None:
        tables = []
        k0 = 0
        for size in _CHUNKS:
            k1 = k0 + size
            i = np.arange(k0, k1, dtype=np.float64)
            j = _FRAC_ORDERS[:, None] - i[None, :]
            lc = _log_comb(_FRAC_ORDERS[:, None], i[None, :])
            quad = np.stack([np.broadcast_to(i * i - i, j.shape), j * j - j])
            # a - i only takes ~9·(k+10) distinct values (a has one decimal): evaluate erfc once each
            _, first, inv = np.unique(np.round(j * 10).astype(np.int64), return_index=True, return_inverse=True)
            tables.append((k1, i, j, lc, quad, j.ravel()[first], inv.reshape(j.shape)))
            k0 = k1
        _FRAC_TABLES = tables
    return _FRAC_TABLES


def _int_flat() -> tuple[np.ndarray, ...]:
    """Flattened (order, i) index arrays for the integer-order binomial sums."""
    global _INT_FLAT
    if _INT_FLAT is None:
        sizes = (_INT_ORDERS + 1).astype(np.int64)
        alpha = np.repeat(_INT_ORDERS, sizes)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        i = np.arange(alpha.size, dtype=np.float64) - np.repeat(starts, sizes)
        _INT_FLAT = (alpha, i, starts, np.repeat(np.arange(sizes.size), sizes), _log_comb(alpha, i), i * i - i)
    return _INT_FLAT


def _eps_from_rdp(rdp: np.ndarray, orders: np.ndarray, delta: float) -> np.ndarray:
    """Per-order ε of dp-accounting's ``compute_epsilon`` (before the min), clipped at 0.

    max(0, min_a e_a) == min_a max(0, e_a), and max(0, e_a) is non-decreasing in the RDP value,
    which is what makes lower-bound pruning exact.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        eps = rdp + np.log1p(-1 / orders) - np.log(delta * orders) / (orders - 1)
        zero = (rdp < 0) | (delta**2 + np.expm1(-rdp) > 0)
    eps = np.where(zero, 0.0, eps)
    eps = np.where(orders > 1.01, eps, np.where(zero, 0.0, np.inf))
    return np.maximum(eps, 0.0)


class _Curve:
    """ε(σ) for a fixed sampling ratio q, with the q-dependent terms precomputed."""

    def __init__(self, q: float, rounds: int, delta: float):
        self.q, self.rounds, self.delta = q, rounds, delta
        if 0.0 < q < 1.0:
            alpha, i, self.starts, self.seg, lc, self.ii = _int_flat()
            log_q, log1mq = math.log(q), math.log1p(-q)
            self.int_base = lc + i * log_q + (alpha - i) * log1mq
            self.int_scale = self.rounds / (_INT_ORDERS - 1)
            self.int_c = np.log1p(-1 / _INT_ORDERS) - np.log(delta * _INT_ORDERS) / (_INT_ORDERS - 1)
            self.frac_scale = self.rounds / (_FRAC_ORDERS - 1)
            self.frac_c = np.log1p(-1 / _FRAC_ORDERS) - np.log(delta * _FRAC_ORDERS) / (_FRAC_ORDERS - 1)
            self.log_1q_m1 = math.log(1 / q - 1)
            # q-dependent parts of the fractional series, stacked (t0, t1), per chunk
            self.log_q, self.log1mq = log_q, log1mq
            self._frac_t: list[np.ndarray] = []  # filled lazily, one chunk at a time
        self.kl = -math.log1p(-(delta**2))  # rdp below this: delta² + expm1(-rdp) > 0 → ε = 0

    def _eps(self, rdp: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Clipped per-order ε of dp-accounting's compute_epsilon (orders > 1.01 here).

        max(0, min_a e_a) == min_a max(0, e_a), and max(0, e_a) is non-decreasing in the RDP value,
        which is what makes lower-bound pruning exact.

        dp-accounting returns ε = 0 for an order whose RDP is negative (numerical noise) or below
        δ²-ish (its KL shortcut) — a jump from a positive ε to 0. Our RDP can differ from theirs by
        float noise (|Δ| ≲ rounds·1e-15), so near that cliff we only take the shortcut when it
        holds with margin; otherwise we use the (larger, hence safe) formula.
        """
        eps = np.maximum(rdp + c, 0.0)
        tol = self.kl * 1e-6 + self.rounds * 1e-14
        risky = rdp < self.kl + tol
        if risky.any():
            zero = (rdp + tol < self.kl) | (rdp < -tol)
            eps[zero] = 0.0
            near = risky & ~zero
            eps[near] = np.maximum(np.maximum(rdp[near], 0.0) + c[near], 0.0)
        return eps

    # -- integer orders -------------------------------------------------------------------------
    def _int_best(self, sigma: float) -> float:
        s = self.int_base + self.ii / (2 * (sigma**2))
        m = np.maximum.reduceat(s, self.starts)
        m_seg = m[self.seg]
        is_max = s == m_seg
        e = np.exp(s - m_seg)
        e[is_max] = 0.0
        rest = np.add.reduceat(e, self.starts)
        n_max = np.add.reduceat(is_max, self.starts)
        if (n_max > 1).any():
            rest += n_max - 1
        log_a = m + np.log1p(rest)
        return float(self._eps(log_a * self.int_scale, self.int_c).min())

    # -- fractional orders ----------------------------------------------------------------------
    def _frac_min(self, sigma: float, best: float) -> float:
        """min over fractional orders of the clipped ε, or any value ≥ ``best`` if none beats it.

        Replicates dp-accounting's ``_compute_log_a_frac`` term by term (same terms, same stopping
        rule, same 1000-term cap), evaluated chunk-wise for all orders at once. Orders whose partial
        sum already proves ε ≥ best are dropped (terms are positive, ε is non-decreasing in log A).
        """
        z0 = sigma**2 * self.log_1q_m1 + 0.5
        sq2s = math.sqrt(2) * sigma
        two_s2 = 2 * (sigma**2)
        n = _FRAC_ORDERS.size
        active = None  # None = all rows
        cum = np.full(n, -np.inf)  # log of the running sum A0 + A1
        last = np.full((2, n), -np.inf)
        result = math.inf
        for ci, (k1, i, j, lc, quad, ju, jinv) in enumerate(_frac_tables()):
            if ci == len(self._frac_t):
                lq, l1q = self.log_q, self.log1mq
                self._frac_t.append(np.stack([lc + i * lq + j * l1q, lc + j * lq + i * l1q]))
            tt = self._frac_t[ci]
            if active is not None:
                jinv, quad, tt = jinv[active], quad[:, active], tt[:, active]
                cum_a, last_a = cum[active], last[:, active]
            else:
                cum_a, last_a = cum, last
            s = tt + quad / two_s2
            s[0] += special.log_ndtr(-(((i - z0) / sq2s) * _SQRT2))
            s[1] += special.log_ndtr(-(((z0 - ju) / sq2s) * _SQRT2))[jinv]
            smax = s.max(axis=0)
            m = np.maximum(smax.max(axis=1), cum_a)
            lin = np.exp(smax - m[:, None]) + np.exp(s.min(axis=0) - m[:, None])
            total = np.log(np.cumsum(lin, axis=1) + np.exp(cum_a - m)[:, None]) + m[:, None]
            prev = np.concatenate([last_a[:, :, None], s[:, :, :-1]], axis=2)
            cond = (s < prev).all(axis=0) & (smax < total - 30)
            done = cond.any(axis=1)
            rows = np.arange(done.size) if active is None else active
            if done.any():
                first = cond[done].argmax(axis=1)
                log_a = total[done, first]
                r = rows[done]
                eps = self._eps(log_a * self.frac_scale[r], self.frac_c[r])
                result = min(result, float(eps.min()))
                best = min(best, result)
            keep = ~done
            if not keep.any():
                break
            # Orders still running: their partial sums are lower bounds (all terms are positive).
            r = rows[keep]
            lb = self._eps(total[keep, -1] * self.frac_scale[r], self.frac_c[r])
            still = lb < best
            if not still.any() or k1 >= _MAX_STEPS_LOG_A_FRAC:
                break
            cum[r] = total[keep, -1]
            last[:, r] = s[:, keep, -1]
            active = r[still]
        # Anything still active after 1000 terms did not converge: dp-accounting excludes it (inf).
        return result

    def epsilon(self, sigma: float) -> float:
        q, delta = self.q, self.delta
        if q == 0.0:
            return float(_eps_from_rdp(np.zeros_like(_ORDERS), _ORDERS, delta).min())
        if sigma == 0.0:
            return math.inf
        if q == 1.0:
            rdp = self.rounds * (_ORDERS / (2 * sigma**2))
            return float(_eps_from_rdp(rdp, _ORDERS, delta).min())
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            best = self._int_best(sigma)
            return min(best, self._frac_min(sigma, best))


def _check_common(delta: float, rounds: int) -> int:
    if not (isinstance(delta, (int, float, np.floating)) and 0.0 < float(delta) < 1.0):
        raise ValueError(f"delta must be in (0, 1); got {delta!r}")
    try:
        r = operator.index(rounds)
    except TypeError:
        if isinstance(rounds, float) and rounds.is_integer():
            r = int(rounds)
        else:
            raise ValueError(f"rounds must be a positive integer; got {rounds!r}") from None
    if r < 1:
        raise ValueError(f"rounds must be a positive integer; got {rounds!r}")
    return r


def _check_q(q: float, allow_zero: bool = False) -> float:
    q = float(q)
    lo_ok = q >= 0.0 if allow_zero else q > 0.0
    if not (lo_ok and q <= 1.0):
        raise ValueError(f"sampling ratio q must be in {'[0' if allow_zero else '(0'}, 1]; got {q!r}")
    return q


def _check_positive(name: str, x: float) -> float:
    x = float(x)
    if not (x > 0.0 and math.isfinite(x)):
        raise ValueError(f"{name} must be a positive finite number; got {x!r}")
    return x


def rdp_epsilon(noise_multiplier: float, q: float, rounds: int, delta: float) -> float:
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
    rounds = _check_common(delta, rounds)
    q = _check_q(q, allow_zero=True)
    return _Curve(q, rounds, float(delta)).epsilon(sigma)


def _boundary(f, x0: float, lo_lim: float, hi_lim: float) -> tuple[float | None, float | None]:
    """Bracket the root of an increasing ``f`` on [lo_lim, hi_lim] starting from ``x0``.

    Returns (a, b) with f(a) ≤ 0 < f(b) and b − a ≤ _XTOL; a is None if f(lo_lim) > 0 and b is None
    if f(hi_lim) ≤ 0. Secant steps (which converge superlinearly on these smooth, nearly linear
    log–log curves) aim slightly past the predicted root so the bracket closes from both sides;
    bisection takes over if the secant misbehaves, so termination is guaranteed.
    """
    a = b = None
    x, fx = x0, f(x0)
    x_prev = f_prev = None
    for it in range(200):
        if fx <= 0:
            if a is None or x > a:
                a = x
        elif b is None or x < b:
            b = x
        if a is not None and b is not None and b - a <= _XTOL:
            return a, b
        if a is None and x <= lo_lim:
            return None, b
        if b is None and x >= hi_lim:
            return a, None
        # secant proposal from the last two points (slope 1 guess for the first step)
        slope = 1.0
        if x_prev is not None and fx != f_prev:
            s = (fx - f_prev) / (x - x_prev)
            if s > 0 and math.isfinite(s):
                slope = s
        d = -fx / slope
        d += math.copysign(0.3 * _XTOL + 1e-3 * abs(d), d)  # aim just past the root
        xn = x + max(min(d, 3.0), -3.0)
        if a is not None and b is not None:
            if not (a < xn < b) or it >= 12:
                xn = 0.5 * (a + b)
        xn = min(max(xn, lo_lim), hi_lim)
        if a is not None and xn <= a:
            xn = 0.5 * (a + (b if b is not None else hi_lim))
        if b is not None and xn >= b:
            xn = 0.5 * (b + (a if a is not None else lo_lim))
        x_prev, f_prev = x, fx
        x, fx = xn, f(xn)
    raise RuntimeError("root bracketing did not converge")  # pragma: no cover


def _log_gap(eps: float, target: float) -> float:
    if eps <= 0.0:
        return -1e3
    if math.isinf(eps):
        return 1e3
    return math.log(eps) - math.log(target)


def calibrate_sigma_rdp(epsilon: float, delta: float, q: float, rounds: int) -> float:
    """Smallest noise multiplier σ (to ~1e-8 relative) whose RDP ε (dp-accounting) is ≤ ``epsilon``.

    The returned σ always satisfies ε(σ) ≤ epsilon (it is the upper end of the final bracket, solved
    against epsilon·(1 − 1e-9)). If even σ = SIGMA_MIN (1e-3) meets the target, SIGMA_MIN is
    returned. Raises ValueError on invalid input or if σ = SIGMA_MAX (1e8) does not suffice.
    """
    epsilon = _check_positive("epsilon", epsilon)
    rounds = _check_common(delta, rounds)
    q = _check_q(q)
    target = epsilon * (1 - _SAFETY)
    curve = _Curve(q, rounds, float(delta))

    # g(x) = log ε(e^x) − log target is *decreasing* in x; solve h(x) = −g(x) (increasing).
    def h(x: float) -> float:
        return -_log_gap(curve.epsilon(math.exp(x)), target)

    # initial guess: Gaussian closed form with the q·√T subsampling scaling (secant fixes the rest)
    guess = q * math.sqrt(2 * rounds * math.log(1 / delta)) / epsilon + 0.5
    lo_lim, hi_lim = math.log(SIGMA_MIN), math.log(SIGMA_MAX)
    x0 = min(max(math.log(guess), lo_lim), hi_lim)
    _, b = _boundary(h, x0, lo_lim, hi_lim)
    if b is None:
        raise ValueError(
            f"epsilon={epsilon} is not reachable with noise_multiplier ≤ {SIGMA_MAX:g} "
            f"(delta={delta}, q={q}, rounds={rounds}); the RDP→(ε,δ) conversion has a floor"
        )
    return math.exp(b)  # h(b) > 0: ε(σ) < target, and σ_min ≥ e^a (or SIGMA_MIN if a is None)


def calibrate_q_rdp(epsilon: float, delta: float, noise_multiplier: float, rounds: int) -> float:
    """Largest sampling ratio q ∈ (0, 1] (to ~1e-8 relative) whose RDP ε (dp-accounting) is ≤ ``epsilon``.

    Returns 1.0 if q = 1 already meets the target; the returned q always satisfies the target (lower
    end of the final bracket, solved against epsilon·(1 − 1e-9)). Raises ValueError on invalid input
    or if no q ≥ 1e-12 meets the target.
    """
    epsilon = _check_positive("epsilon", epsilon)
    rounds = _check_common(delta, rounds)
    sigma = _check_positive("noise_multiplier", noise_multiplier)
    delta = float(delta)
    target = epsilon * (1 - _SAFETY)

    def eps_at(q: float) -> float:
        return _Curve(q, rounds, delta).epsilon(sigma)

    def g(x: float) -> float:  # increasing in x = log q
        return _log_gap(eps_at(math.exp(x)), target)

    if g(0.0) <= 0:
        return 1.0
    guess = epsilon * sigma / math.sqrt(2 * rounds * math.log(1 / delta))
    lo_lim = math.log(Q_MIN)
    x0 = min(max(math.log(guess), lo_lim), -1e-3)
    a, _ = _boundary(g, x0, lo_lim, 0.0)
    if a is None:
        raise ValueError(
            f"no sampling ratio q ≥ {Q_MIN:g} meets epsilon={epsilon} at noise_multiplier={sigma} "
            f"(delta={delta}, rounds={rounds})"
        )
    return math.exp(a)
