"""Issue 13: privacy that holds outside the simulator (noise source, executed mechanism, diagnostics)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from hdp_planner.noise import secure_normal, secure_uniform

torch = pytest.importorskip("torch")

from hdp_planner_train.aggregate import (  # noqa: E402
    GroupSpec,
    SecureNoise,
    SeededNoise,
    aggregate,
    noise_source,
    round_seed,
)

# ------------------------------------------------------------------ noise sources


def test_secure_normal_is_standard_normal():
    x = secure_normal(200_001)  # odd: Box-Muller pairs, one half dropped
    assert x.shape == (200_001,) and x.dtype == np.float64
    assert abs(x.mean()) < 5 / np.sqrt(x.size)
    assert x.var() == pytest.approx(1.0, abs=5 * np.sqrt(2 / x.size))
    assert stats.kstest(x, "norm").pvalue > 1e-4
    assert stats.kurtosis(x) == pytest.approx(0.0, abs=0.1)
    assert secure_normal(0).shape == (0,)


def test_secure_draws_never_repeat_and_uniforms_lie_in_unit_interval():
    u = secure_uniform(100_000)
    assert 0 < u.min() and u.max() <= 1.0 and stats.kstest(u, "uniform").pvalue > 1e-4
    assert not np.array_equal(secure_normal(8), secure_normal(8))


def test_seeded_noise_is_the_round_seeded_torch_stream():
    """SeededNoise(seed, rnd) draws exactly torch's generator seeded with round_seed(seed, rnd, 2) (resume and
    engine equivalence rely on it)."""
    gen = torch.Generator().manual_seed(round_seed(7, 3, 2))
    expected = torch.cat([torch.randn(5, generator=gen) * 2.0, torch.randn(4, generator=gen)])
    src = SeededNoise(7, 3)
    got = torch.cat([src.normal(5, 2.0, "cpu", torch.float32), src.normal(4, 1.0, "cpu", torch.float32)])
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    torch.testing.assert_close(SeededNoise(7, 3).normal(9, 1.0, "cpu", torch.float64),
                               SeededNoise(7, 3).normal(9, 1.0, "cpu", torch.float64), rtol=0, atol=0)


def test_secure_noise_in_aggregate_has_the_group_variance_and_is_not_reproducible():
    spec = GroupSpec("gdpfed", (10, 10), (0.5, 0.5), (1.0, 2.0), (1.0, 1.0), (1.0, 1.0), clip=0.5)
    d = 200_000
    deltas = torch.zeros((3, d), dtype=torch.float64)
    a, _ = aggregate(deltas, [0, 0, 1], spec, SecureNoise())
    b, _ = aggregate(deltas, [0, 0, 1], spec, noise_source("secure", 0, 0))
    assert float(a.var()) == pytest.approx(0.25 * (1.0 + 4.0), rel=0.03)
    assert not torch.equal(a, b)
    x = SecureNoise().normal((3, 4), 2.0, "cpu", torch.float32)
    assert x.shape == (3, 4) and x.dtype == torch.float32
    with pytest.raises(ValueError):
        noise_source("urandom", 0, 0)
