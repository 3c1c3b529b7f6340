"""The exact integer samplers against their exact PMFs (chi-square, seeded: each test's false-alarm rate is 1e-4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from hdp_planner.distributed.randomness import SecureBits, SeededBits, below
from hdp_planner.distributed.sampler import (
    MAX_SIGMA2,
    bernoulli_exp,
    discrete_gaussian,
    discrete_laplace,
    geometric,
)

ALPHA = 1e-4


def _chisquare(samples: np.ndarray, pmf: dict[int, float]) -> float:
    """p-value of the samples against a PMF on the integers, the tails pooled into one cell."""
    support = sorted(x for x, p in pmf.items() if p * samples.size >= 5)
    counts = [(samples == x).sum() for x in support]
    expected = [pmf[x] * samples.size for x in support]
    counts.append(samples.size - sum(counts))
    expected.append(samples.size - sum(expected))
    return stats.chisquare(counts, expected).pvalue


def _gaussian_pmf(sigma2: float) -> dict[int, float]:
    width = int(12 * math.sqrt(sigma2)) + 5
    w = {x: math.exp(-x * x / (2 * sigma2)) for x in range(-width, width + 1)}
    z = sum(w.values())
    return {x: v / z for x, v in w.items()}


@pytest.mark.parametrize("sigma2", [1, 3, 7, 25])
def test_discrete_gaussian_matches_its_pmf(sigma2):
    samples = discrete_gaussian(SeededBits(sigma2), sigma2=sigma2, size=100_000)
    assert _chisquare(samples, _gaussian_pmf(sigma2)) > ALPHA


@pytest.mark.parametrize("scale", [1, 3])
def test_discrete_laplace_matches_its_pmf(scale):
    width = 40 * scale
    w = {x: math.exp(-abs(x) / scale) for x in range(-width, width + 1)}
    z = sum(w.values())
    samples = discrete_laplace(SeededBits(10 + scale), scale=scale, size=100_000)
    assert _chisquare(samples, {x: v / z for x, v in w.items()}) > ALPHA


def test_a_wrong_pmf_is_detected():
    """The test can fail: σ² = 25 draws against the PMF of σ² = 27."""
    samples = discrete_gaussian(SeededBits(5), sigma2=25, size=100_000)
    assert _chisquare(samples, _gaussian_pmf(27)) < ALPHA


def test_large_sigma_moments():
    """σ² at the cap (the Python-integer branch of the rejection step runs): mean 0, variance σ² (to 5 sd)."""
    n = 60_000
    samples = discrete_gaussian(SeededBits(7), sigma2=MAX_SIGMA2, size=n).astype(float)
    assert abs(samples.mean()) < 5 * math.sqrt(MAX_SIGMA2 / n)
    assert abs(samples.var() / MAX_SIGMA2 - 1) < 5 * math.sqrt(2 / n)


@pytest.mark.parametrize("margin", [None, 0.05])  # 0.05: about one decision in ten takes the exact path
@pytest.mark.parametrize(("num", "den", "power"), [(0, 1, 1), (1, 3, 1), (1, 1, 1), (7, 2, 1), (3, 1, 1), (5, 7, 2)])
def test_bernoulli_exp_frequency(num, den, power, margin):
    n = 100_000
    p = math.exp(-(num**power) / den)
    extra = {} if margin is None else {"margin": margin}
    hits = bernoulli_exp(SeededBits(num + den), num=np.full(n, num), den=den, power=power, **extra).sum()
    assert stats.binomtest(int(hits), n, p).pvalue > ALPHA


@given(num=st.integers(0, 10**6), den=st.integers(1, 10**6), power=st.sampled_from([1, 2]))
@settings(max_examples=30, deadline=None)
def test_bernoulli_exp_probability(num, den, power):
    n = 4_000
    hits = bernoulli_exp(SeededBits(num), num=np.full(n, num), den=den, power=power).sum()
    assert stats.binomtest(int(hits), n, math.exp(-(num**power) / den)).pvalue > ALPHA


class Constant:
    """Every byte the same: U = 0 (bytes 0) or U just below 1 (bytes 255), for the exact path's far tail."""

    def __init__(self, byte: int) -> None:
        self.byte = byte

    def bytes(self, size: int) -> bytes:
        return bytes([self.byte]) * size


def test_exact_path_decides_far_beyond_the_floats():
    """γ = 800: e^{−γ} ≈ 2^-1154 underflows every float; U = 0 is below it, U near 1 is not, decided exactly."""
    assert bernoulli_exp(Constant(0), num=np.array([800]), den=1).all()
    assert not bernoulli_exp(Constant(255), num=np.array([800]), den=1).any()
    assert bernoulli_exp(Constant(255), num=np.array([0]), den=1).all()  # e^0 = 1: every U < 1 is below it


@pytest.mark.parametrize("margin", [None, 0.01])  # 0.01: about 2t% of the draws take the exact path
@pytest.mark.parametrize("scale", [1, 3])
def test_geometric_matches_its_pmf(scale, margin):
    """P(X = x) = (1 − e^{−1/t})e^{−x/t}, by inversion of U's first 53 bits (and the exact path, often at 0.01)."""
    extra = {} if margin is None else {"margin": margin}
    samples = geometric(SeededBits(11 + scale), scale=scale, size=100_000, **extra)
    r = math.exp(-1 / scale)
    assert _chisquare(samples, {x: (1 - r) * r**x for x in range(60 * scale)}) > ALPHA


def test_a_wrong_geometric_is_detected():
    samples = geometric(SeededBits(12), scale=1, size=100_000)
    assert _chisquare(samples, {v: (1 - math.exp(-1.03)) * math.exp(-1.03 * v) for v in range(40)}) < ALPHA


def test_geometric_at_a_large_scale_has_its_mean_and_variance():
    """t = 9,798 (a share of σ² ≈ 9.6e7): mean r/(1 − r) and variance r/(1 − r)² of the geometric, r = e^{−1/t}."""
    t, n = 9_798, 200_000
    samples = geometric(SeededBits(13), scale=t, size=n).astype(float)
    r = math.exp(-1 / t)
    mean, var = r / (1 - r), r / (1 - r) ** 2
    assert abs(samples.mean() - mean) < 5 * math.sqrt(var / n)
    assert abs(samples.var() / var - 1) < 5 * math.sqrt(8 / n)  # the geometric's kurtosis is about 9


@pytest.mark.parametrize("sigma2", [14_586_004, MAX_SIGMA2])
def test_large_sigma_matches_its_pmf(sigma2):
    """The shares of a real plan (σ² in the millions): chi-square over 60 cells of the exact PMF between ±6σ."""
    sigma = math.sqrt(sigma2)
    samples = discrete_gaussian(SeededBits(sigma2 % 1000), sigma2=sigma2, size=200_000)
    width = int(12 * sigma)
    x = np.arange(-width, width + 1)
    w = np.exp(-(x.astype(float) ** 2) / (2 * sigma2))
    edges = np.linspace(-6 * sigma, 6 * sigma, 61)
    cells = np.searchsorted(edges, x, side="right")  # 0: below −6σ, 61: above 6σ
    expected = np.bincount(cells, weights=w, minlength=62) / w.sum() * samples.size
    counts = np.bincount(np.searchsorted(edges, samples, side="right"), minlength=62)
    keep = expected >= 5
    pooled_e = np.append(expected[keep], expected[~keep].sum())
    pooled_c = np.append(counts[keep], counts[~keep].sum())
    assert stats.chisquare(pooled_c, pooled_e).pvalue > ALPHA


@pytest.mark.parametrize("bound", [1, 5, 2**8, 2**16, 2**32, 2**40 + 3, 2**62 + 1])
def test_below_is_uniform(bound):  # a bound of 2^8, 2^16 or 2^32 once looped forever (it wrapped to 0)
    x = below(SeededBits(bound), bound, 50_000)
    assert x.min() >= 0 and x.max() < bound
    if bound == 1:
        assert not x.any()
        return
    width = -(-bound // min(bound, 8))  # eight cells [i·width, (i + 1)·width), the last one shorter
    cells = x // width
    sizes = np.array([min(width, bound - i * width) for i in range(int(cells.max()) + 1)], dtype=float)
    counts = np.bincount(cells, minlength=sizes.size)
    assert stats.chisquare(counts, sizes / sizes.sum() * x.size).pvalue > ALPHA


def test_below_with_a_bound_per_draw_is_uniform_below_each_and_exact():
    """One bound per draw (the rejection loop redraws only the refused ones): int64, each below its own bound, and
    uniform: bounds 3 and 5 (acceptance 3/4 and 5/8) give each value its share."""
    bounds = np.tile([3, 5, 1, 2**40 + 3], 20_000)
    x = below(SeededBits(7), bounds)
    assert x.dtype == np.int64 and x.shape == bounds.shape
    assert np.all((x >= 0) & (x < bounds)) and not x[bounds == 1].any()
    for b in (3, 5):
        counts = np.bincount(x[bounds == b], minlength=b)
        assert stats.chisquare(counts).pvalue > ALPHA
    big = x[bounds == 2**40 + 3]
    assert big.max() > 2**39 and big.min() < 2**39  # both halves of the range are reached
    with pytest.raises(ValueError, match="3 bounds for 2 draws"):
        below(SeededBits(0), np.array([2, 3, 4]), 2)


def test_secure_source_draws_differ_and_refuses_bad_parameters():
    a, b = (discrete_gaussian(SecureBits(), sigma2=100, size=1000) for _ in range(2))
    assert not np.array_equal(a, b)
    for bad in (0, 2.5, MAX_SIGMA2 + 1):
        with pytest.raises(ValueError, match="sigma2"):
            discrete_gaussian(SecureBits(), sigma2=bad, size=10)
