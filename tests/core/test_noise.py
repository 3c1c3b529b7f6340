"""The aggregation rules: Poisson sampling, clipping, noise shares, and the two Λ conventions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdp_planner.rules.noise import (
    clip_factor,
    lambda_exact,
    lambda_paper,
    noise_share_std,
    poisson_sample,
    secure_normal,
)


@pytest.mark.parametrize("joined", [0, 1, 7])
def test_group_sum_of_secure_shares_carries_the_planned_noise(joined):
    """``joined`` clients each add a share from the secure source at ``noise_share_std``: the group's sum has
    variance C²σ² whatever the count (an empty group: one draw at the full level)."""
    clip, sigma, trials = 1.5, 1.2, 100_000
    draws = max(joined, 1)
    shares = secure_normal(trials * draws).reshape(trials, draws) * noise_share_std(
        clip, noise_multiplier=sigma, joined=joined
    )
    assert shares.sum(axis=1).var() == pytest.approx(clip**2 * sigma**2, rel=0.03)


def test_poisson_sample_rate():
    rng = np.random.default_rng(1)
    counts = [len(poisson_sample(rng, size=2000, q=0.02)) for _ in range(500)]
    assert np.mean(counts) == pytest.approx(40, rel=0.03)
    assert np.var(counts) == pytest.approx(2000 * 0.02 * 0.98, rel=0.2)  # binomial, not a fixed size


@given(norm=st.floats(0, 100), clip=st.floats(0.01, 10))
def test_clip_factor_bounds_the_norm(norm, clip):
    f = float(clip_factor(norm, clip))
    assert 0 < f <= 1
    assert norm * f <= clip * (1 + 1e-12)
    if norm <= clip:
        assert f == 1.0


def test_lambda_exact_matches_simulated_update():
    rng = np.random.default_rng(2)
    w, s, k, clip, d = np.array([0.01, 0.02]), np.array([1.4, 0.8]), np.array([0.7, 1.0]), 1.5, 200_000
    update = np.zeros(d)
    for wm, sm, km in zip(w, s, k):
        noise = rng.normal(0, clip * sm, d)
        mask = rng.random(d) < km  # coordinates kept independently of the noise
        update += wm * noise * mask
    assert np.mean(update**2) == pytest.approx(lambda_exact(w, s, k, clip), rel=0.02)


@settings(max_examples=50)
@given(r=st.lists(st.floats(1, 500), min_size=1, max_size=6))
def test_paper_lambda_weights_sum_to_one_over_groups(r):
    ones = [1.0] * len(r)
    # with σ = 1 and k = 1, Λ/C² is Σ w_m: 1 for GDPFed's 1/M weights, 1/M for the r²-weights
    assert lambda_paper("uniform", r, ones, ones, 1.0) == pytest.approx(1.0)
    assert lambda_paper("participation", r, ones, ones, 1.0) == pytest.approx(1.0 / len(r))


def test_paper_lambda_reproduces_table5_from_table5_sigma():
    # FMNIST, C = 1.5, Table 5 σ² at Table 1's q (inputs are the paper's; this checks the convention only)
    r = [0.0069 * 2000, 0.0189 * 2000, 0.0342 * 2000]
    s = np.sqrt([1.42, 0.87, 0.70])
    assert lambda_paper("participation", r, s, [1, 1, 1], 1.5) == pytest.approx(0.57, abs=0.005)
    assert lambda_paper("participation", r, s, [0.7, 0.8, 0.9], 1.5) == pytest.approx(0.49, abs=0.005)
    assert lambda_paper("uniform", r, np.sqrt([2.26, 0.90, 0.53]), [1, 1, 1], 1.5) == pytest.approx(2.77, abs=0.005)
    assert lambda_paper("uniform", [120], [np.sqrt(2.26)], [1], 1.5) == pytest.approx(5.09, abs=0.01)  # 2.26 is rounded
