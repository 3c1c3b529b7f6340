"""The distributed accountant's ε is the tightest bound its theorems give, and never below it: checked against an
independent implementation written from the DDG authors' accounting code (``_compute_rdp_subsampled``, one order at a
time, without the factor 3 of its ``upper_bound=True`` branch: the binomial expansion the documentation's
"Subsampling both ways" proves for both directions) over a denser grid of orders, and against the best real order of
the unsampled bound found by a scalar minimizer; and never above Zhu and Wang's Theorem 6 (that branch itself)."""

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import optimize, special

from hdp_planner.accounting import ddg
from hdp_planner.distributed import accounting as distributed

INTEGERS = np.union1d(np.arange(2, ddg.DENSE_ORDER + 1), np.round(ddg.DENSE_ORDER * 1.01 ** np.arange(1, 280)))
"""Every integer to 1024, then 1% apart to 16,384: 5 times denser than the accountant's orders there."""
DENSE_FRACTIONAL = 1 + np.geomspace(1e-4, ddg.DENSE_ORDER - 1, 9000)  # 16 times denser than the accountant's grid


def release(alpha, z, tau_d):
    """Proposition 14 of Kairouz, Liu and Steinke (2021): α/(2z²) + τ·d'."""
    return alpha / (2 * z * z) + tau_d


def subsampled(alpha: int, q: float, eps, factor: float = 1.0) -> float:
    """The DDG authors' ``_compute_rdp_subsampled(alpha, gamma=q, eps)``: the same terms and weights, its loop over
    ℓ = 3 … α as one array, with ``factor`` on those terms (1: the binomial expansion; 3: ``upper_bound=True``, Zhu
    and Wang's Theorem 6)."""
    ell = np.arange(3, alpha + 1, dtype=np.float64)
    log_comb = special.gammaln(alpha + 1) - special.gammaln(ell + 1) - special.gammaln(alpha - ell + 1)
    first = ((1 - q) ** (alpha - 1)) * (alpha * q - q + 1)
    second = special.comb(alpha, 2) * q**2 * (1 - q) ** (alpha - 2)
    a = np.concatenate(
        [[0.0, eps(2)], (ell - 1) * eps(ell) + log_comb + (alpha - ell) * np.log(1 - q) + ell * np.log(q)]
    )
    b = np.concatenate([[first, second], np.full(ell.size, factor)])
    return float(special.logsumexp(a=a, b=b)) / (alpha - 1)


def convert(alpha, rdp, delta):
    """Canonne, Kamath and Steinke (2020), Proposition 12, at each order."""
    return rdp + np.log1p(-1 / alpha) - (math.log(delta) + np.log(alpha)) / (alpha - 1)


def reference_third_parties(z, q, rounds, delta, tau_d, top=ddg.MAX_ORDER):
    """The smallest ε over the integer orders of :data:`INTEGERS` up to ``top`` and every integer between the best
    one's neighbours (the binomial expansion with ε(ℓ) exact at every ℓ, capped by the unsampled bound) and a dense
    grid of fractional orders (the unsampled bound, or the expansion at the next integer order); at q = 1, where the
    bound is the unsampled one, also its best real order (:func:`reference_server`: the grid's spacing alone leaves it
    up to a few parts in 10^7 above the optimum)."""
    eps = lambda a: release(a, z, tau_d)  # noqa: E731
    ints = INTEGERS[INTEGERS <= top]
    zw = np.array([min(subsampled(int(a), q, eps), eps(a)) if q < 1 else eps(a) for a in ints])
    frac = DENSE_FRACTIONAL[DENSE_FRACTIONAL % 1 != 0]
    above = np.searchsorted(ints, frac)
    frac_rdp = np.where(above < ints.size, np.minimum(eps(frac), zw[np.minimum(above, ints.size - 1)]), eps(frac))
    at_ints = convert(ints, rounds * zw, delta)
    k = int(np.argmin(at_ints))  # then every integer order between its neighbours
    window = np.arange(ints[max(k - 1, 0)] + 1, ints[min(k + 1, ints.size - 1)])
    near = [min(subsampled(int(a), q, eps), eps(a)) if q < 1 else eps(a) for a in window]
    best = min(
        at_ints.min(), convert(frac, rounds * frac_rdp, delta).min(), *convert(window, rounds * np.array(near), delta)
    )
    if q == 1:
        best = min(best, reference_server(z, rounds, delta, tau_d))
    return max(float(best), 0.0)


def reference_server(z, participations, delta, tau_d):
    """The unsampled bound at its best real order in (1, 1024]: a bounded scalar minimization over log(α − 1)."""
    f = lambda t: float(convert(1 + math.exp(t), participations * release(1 + math.exp(t), z, tau_d), delta))  # noqa: E731
    grid = np.linspace(math.log(1e-4), math.log(ddg.MAX_ORDER - 1), 400)
    start = grid[int(np.argmin([f(t) for t in grid]))]
    found = optimize.minimize_scalar(f, bounds=(start - 0.05, start + 0.05), method="bounded", options={"xatol": 1e-9})
    return max(min(found.fun, f(start)), 0.0)


zs = st.floats(0.4, 30.0)
qs = st.one_of(st.floats(1e-3, 0.3), st.just(1.0))
deltas = st.sampled_from([1e-3, 1e-5, 1e-7, 1e-9])
taus = st.sampled_from([0.0, 1e-6, 1e-3])


@settings(max_examples=8, deadline=None)
@given(z=zs, q=qs, rounds=st.integers(1, 2000), delta=deltas, tau_d=taus)
@example(z=162.2, q=0.1, rounds=10, delta=1e-5, tau_d=0.0)  # the best order lies above 1024
@example(z=20.0, q=0.003, rounds=1, delta=1e-5, tau_d=0.0)  # just below a cliff between two orders 5% apart
@example(z=4.0, q=1.0, rounds=70, delta=1e-5, tau_d=0.0)  # unsampled: the best real order lies between grid points
def test_third_party_epsilon_is_the_tightest_bound_within_one_percent(z, q, rounds, delta, tau_d):
    ours = ddg.epsilon_third_parties(noise_multiplier=z, q=q, rounds=rounds, delta=delta, tau_d=tau_d)
    reference = reference_third_parties(z, q, rounds, delta, tau_d)
    assert reference * (1 - 1e-7) - 1e-12 <= ours <= reference * 1.01 + 1e-12


@settings(max_examples=30, deadline=None)
@given(z=zs, participations=st.integers(1, 2000), delta=deltas, tau_d=taus)
def test_server_epsilon_is_the_best_real_order_within_one_percent(z, participations, delta, tau_d):
    ours = ddg.epsilon_server(noise_multiplier=z, participations=participations, delta=delta, tau_d=tau_d)
    reference = reference_server(z, participations, delta, tau_d)
    assert reference * (1 - 1e-9) - 1e-12 <= ours <= reference * 1.01 + 1e-12


@settings(max_examples=5, deadline=None)
@given(epsilon=st.floats(0.05, 10.0), q=st.floats(1e-3, 0.3), rounds=st.integers(1, 500), delta=deltas)
def test_a_calibrated_noise_multiplier_meets_its_target_by_the_reference(epsilon, q, rounds, delta):
    z = ddg.calibrate_noise_multiplier(epsilon=epsilon, delta=delta, q=q, rounds=rounds)
    assert reference_third_parties(z, q, rounds, delta, 0.0) <= epsilon * (1 + 1e-7)
    assert ddg.epsilon_third_parties(noise_multiplier=z * (1 - 1e-6), q=q, rounds=rounds, delta=delta) > epsilon


def test_orders_beyond_256_and_below_2_are_what_the_old_grid_missed():
    """Orders 2 … 256 alone over-report: at z = 162.2, q = 0.1, T = 10, δ = 1e-5 (the noise ε = 0.005 needs) third
    parties' best order lies above 1024 (ε 4 times higher without it); the server's ε after 50 participations at
    z = 0.3 is best at a fractional order (α ≈ 1.2)."""
    ours = ddg.epsilon_third_parties(noise_multiplier=162.2, q=0.1, rounds=10, delta=1e-5)
    assert ours <= 0.005 and reference_third_parties(162.2, 0.1, 10, 1e-5, 0.0, top=256) > 3.9 * ours
    assert reference_third_parties(162.2, 0.1, 10, 1e-5, 0.0, top=1024) > 1.05 * ours
    server = ddg.epsilon_server(noise_multiplier=0.3, participations=50, delta=1e-5)
    old_server = float(convert(INTEGERS[:255], 50 * release(INTEGERS[:255], 0.3, 0.0), 1e-5).min())
    assert server < 0.75 * old_server


@settings(max_examples=10, deadline=None)
@given(z=zs, q=st.floats(1e-4, 0.9), tau_d=taus)
def test_the_bound_is_theorem_6_without_its_factor_3(z, q, tau_d):
    """At every integer order to 256 the bound is Zhu and Wang's Theorem 6 with the factor 3 on the terms ℓ ≥ 3
    dropped, both computed one order at a time by the reference: never above Theorem 6, and below it somewhere."""
    eps = lambda a: release(a, z, tau_d)  # noqa: E731
    orders = np.arange(2, 257, dtype=np.float64)
    ours = ddg.amplified_release_rdp(orders, noise_multiplier=z, tau_d=tau_d, q=q)
    binomial = np.array([min(subsampled(int(a), q, eps), eps(a)) for a in orders])
    theorem6 = np.array([min(subsampled(int(a), q, eps, factor=3.0), eps(a)) for a in orders])
    assert ours == pytest.approx(binomial, rel=1e-9, abs=1e-13)  # the reference loses digits of log(1 + tiny)
    assert np.all(ours <= theorem6 * (1 + 1e-9) + 1e-13) and np.any(ours < theorem6 * (1 - 1e-9))


def test_the_orders_and_the_names_secure_aggregation_uses():
    assert ddg.ORDERS[0] > 1 and np.all(np.diff(ddg.ORDERS) > 0) and 15000 < ddg.ORDERS[-1] <= ddg.MAX_ORDER
    assert set(range(2, 1025)) <= set(ddg.ORDERS) and (ddg.ORDERS < 2).sum() > 50
    assert distributed.ORDERS is ddg.ORDERS and distributed.epsilon_server is ddg.epsilon_server
    for orders in ([3.0, 4.0], [2.0, 1.5], [1.0, 2.0]):
        with pytest.raises(ValueError, match="with 2 among them"):
            ddg.poisson_subsampled_rdp(np.array(orders), np.array([0.1, 0.2]), 0.1)


def test_an_order_between_the_given_ones_is_bounded_by_the_next():
    """Orders 2, 3, 5: the expansion at 5 needs ε(4), bounded by ε(5): valid, and looser than with ε(4) itself."""
    rdp = lambda orders: ddg.release_rdp(np.array(orders), noise_multiplier=1.0)  # noqa: E731
    sparse = ddg.poisson_subsampled_rdp(np.array([2.0, 3.0, 5.0]), rdp([2.0, 3.0, 5.0]), 0.1)
    dense = ddg.poisson_subsampled_rdp(np.array([2.0, 3.0, 4.0, 5.0]), rdp([2.0, 3.0, 4.0, 5.0]), 0.1)
    assert np.array_equal(sparse[:2], dense[:2]) and dense[3] < sparse[2] <= dense[3] * 2


def test_a_mixed_composition_at_the_orders_is_never_below_either_part():
    """What the ledger composes: Σ T·(amplified release) at :data:`ORDERS`, one conversion."""
    curve = lambda z, tau_d, q: ddg.poisson_subsampled_rdp(  # noqa: E731
        ddg.ORDERS, ddg.release_rdp(ddg.ORDERS, noise_multiplier=z, tau_d=tau_d), q
    )
    a, b = 20 * curve(1.1, 1e-4, 0.02), 30 * curve(0.9, 0.0, 0.05)
    both = ddg.epsilon_from_rdp(ddg.ORDERS, a + b, 1e-5)
    assert both >= max(ddg.epsilon_from_rdp(ddg.ORDERS, a, 1e-5), ddg.epsilon_from_rdp(ddg.ORDERS, b, 1e-5))
    alone = ddg.epsilon_third_parties(noise_multiplier=1.1, q=0.02, rounds=20, delta=1e-5, tau_d=1e-4)
    assert ddg.epsilon_from_rdp(ddg.ORDERS, a, 1e-5) == pytest.approx(alone, rel=1e-12)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(z=zs, q=qs, rounds=st.integers(1, 5000), delta=deltas, tau_d=taus)
def test_third_party_epsilon_sweep(z, q, rounds, delta, tau_d):
    test_third_party_epsilon_is_the_tightest_bound_within_one_percent.hypothesis.inner_test(z, q, rounds, delta, tau_d)
