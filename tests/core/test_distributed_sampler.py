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
    bernoulli_ratio,
    discrete_gaussian,
    discrete_laplace,
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
    samples = discrete_gaussian(SeededBits(sigma2), sigma2, 100_000)
    assert _chisquare(samples, _gaussian_pmf(sigma2)) > ALPHA


@pytest.mark.parametrize("scale", [1, 3])
def test_discrete_laplace_matches_its_pmf(scale):
    width = 40 * scale
    w = {x: math.exp(-abs(x) / scale) for x in range(-width, width + 1)}
    z = sum(w.values())
    samples = discrete_laplace(SeededBits(10 + scale), scale, 100_000)
    assert _chisquare(samples, {x: v / z for x, v in w.items()}) > ALPHA


def test_a_wrong_pmf_is_detected():
    """The test can fail: σ² = 25 draws against the PMF of σ² = 27."""
    samples = discrete_gaussian(SeededBits(5), 25, 100_000)
    assert _chisquare(samples, _gaussian_pmf(27)) < ALPHA


def test_large_sigma_moments():
    """σ² at the cap (the Python-integer branch of the rejection step runs): mean 0, variance σ² (to 5 sd)."""
    n = 60_000
    samples = discrete_gaussian(SeededBits(7), MAX_SIGMA2, n).astype(float)
    assert abs(samples.mean()) < 5 * math.sqrt(MAX_SIGMA2 / n)
    assert abs(samples.var() / MAX_SIGMA2 - 1) < 5 * math.sqrt(2 / n)


@pytest.mark.parametrize("gamma", [(0, 0, 1), (0, 1, 3), (0, 1, 1), (1, 1, 2), (3, 0, 1)])
def test_bernoulli_exp_frequency(gamma):
    whole, num, den = gamma
    n = 200_000
    p = math.exp(-(whole + num / den))
    hits = bernoulli_exp(SeededBits(3), np.full(n, whole), np.full(n, num), den).sum()
    assert stats.binomtest(int(hits), n, p).pvalue > ALPHA


def test_below_with_power_of_two_bounds_in_an_array():
    x = below(SeededBits(7), np.array([2**8, 3, 2**16, 2**8]))
    assert (x >= 0).all() and (x < [2**8, 3, 2**16, 2**8]).all()


@given(num=st.integers(0, 10**6), den=st.integers(1, 10**6), k=st.integers(1, 50))
@settings(max_examples=30, deadline=None)
def test_bernoulli_ratio_probability(num, den, k):
    num = min(num, den * k)
    n = 4_000
    hits = bernoulli_ratio(SeededBits(num), np.full(n, num), np.full(n, den), np.full(n, k)).sum()
    assert stats.binomtest(int(hits), n, num / (den * k)).pvalue > ALPHA


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


def test_secure_source_draws_differ_and_refuses_bad_parameters():
    a, b = (discrete_gaussian(SecureBits(), 100, 1000) for _ in range(2))
    assert not np.array_equal(a, b)
    for bad in (0, 2.5, MAX_SIGMA2 + 1):
        with pytest.raises(ValueError, match="sigma2"):
            discrete_gaussian(SecureBits(), bad, 10)
