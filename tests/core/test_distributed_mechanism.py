"""The distributed discrete Gaussian mechanism: encoding round trip, decoded noise, wrap-around, and its accounting
never below a reference (dp-accounting, exact divergences on small instances)."""

from __future__ import annotations

import logging
import math

import dp_accounting as dpa
import mpmath as mp
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.rdp import RdpAccountant
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import linalg, stats

from hdp_planner.distributed.accounting import (
    ORDERS,
    calibrate_noise_multiplier,
    epsilon_from_rdp,
    epsilon_server,
    epsilon_third_parties,
    poisson_subsampled_rdp,
    release_rdp,
    tau,
)
from hdp_planner.distributed.encoding import (
    Encoding,
    clip,
    conditional_round,
    decode,
    encode,
    hadamard,
    integer_message,
    modular_sum,
    rotate,
    rotation_signs,
    top_up,
    unrotate,
)
from hdp_planner.distributed.law import group_law
from hdp_planner.distributed.randomness import SeededBits
from hdp_planner.distributed.rounds import wrap_bound

logging.getLogger("absl").setLevel(logging.ERROR)


def test_rotation_is_orthogonal():
    x = np.random.default_rng(0).normal(size=1000)
    signs = rotation_signs(3, padded=1024)
    y = rotate(x, signs)
    assert np.isclose(np.linalg.norm(y), np.linalg.norm(x))
    assert np.allclose(unrotate(y, signs, 1000), x)
    h = np.array([hadamard(e) for e in np.eye(8)])
    assert np.allclose(h @ h, 8 * np.eye(8))


@given(st.lists(st.floats(-50, 50), min_size=1, max_size=64), st.integers(0, 2**32 - 1))
@settings(max_examples=50, deadline=None)
def test_conditional_rounding_stays_within_its_bound(values, seed):
    y = np.array(values)
    enc_bound = math.sqrt(
        float(np.dot(y, y)) + y.size / 4 + math.sqrt(2 * 0.5) * (np.linalg.norm(y) + math.sqrt(y.size) / 2)
    )
    r = conditional_round(y, enc_bound, SeededBits(seed))
    assert np.all((r == np.floor(y)) | (r == np.ceil(y)))
    assert float(np.dot(r, r)) <= enc_bound**2


def test_round_trip_equals_the_clipped_sum_up_to_rounding_and_noise():
    """At γ = 1e-6 a unit is small: rounding moves each client's vector by less than √d' units and the noise's norm
    is about √(n·σ²·d') units, together 2e-4 of the clipped sum's norm (a decoder off by 1e-3 fails)."""
    enc = Encoding(dim=1000, clip=1.5, bits=40, gamma=1e-6)
    signs = rotation_signs(11, padded=enc.padded)
    ups = np.random.default_rng(1).normal(size=(6, 1000))
    bits = SeededBits(2)
    sigma2 = 16
    total = modular_sum(np.stack([encode(u, encoding=enc, signs=signs, share_sigma2=sigma2, bits=bits) for u in ups]),
                        enc.modulus)  # fmt: skip
    clipped = sum(clip(u, 1.5) for u in ups)
    error = decode(total, encoding=enc, signs=signs) - clipped
    bound = enc.gamma * (6 * math.sqrt(enc.padded) + 2 * math.sqrt(6 * sigma2 * enc.padded))
    assert np.linalg.norm(error) <= bound < 3e-4 * np.linalg.norm(clipped)


@given(st.lists(st.integers(-128, 127), min_size=16, max_size=16), st.integers(0, 2**32 - 1))
@settings(max_examples=30, deadline=None)
def test_decode_is_gamma_times_the_inverse_rotation_of_the_centred_sum(ints, seed):
    """Exactly, against the rotation written as a matrix U = H·D/√d': a sum t modulo 2^8 stands for t − 2^8 when
    t ≥ 2^7, and decodes to γ·Uᵀ of that, cut to d coordinates."""
    enc = Encoding(dim=12, clip=1.0, bits=8, gamma=0.01)
    signs = rotation_signs(seed, padded=enc.padded)
    total = np.mod(np.array(ints), enc.modulus)
    centred = np.where(total >= 128, total - 256, total)
    u = linalg.hadamard(16) * signs / 4
    assert np.allclose(decode(total, encoding=enc, signs=signs), enc.gamma * (u.T @ centred)[:12], rtol=0, atol=1e-12)
    assert np.allclose(rotate(u.T @ centred, signs), centred, rtol=0, atol=1e-12)


def test_decoded_noise_has_the_planned_variance():
    """Zero updates from 5 clients, topped up to the law's N shares: the decoded sum is N shares of noise, variance
    γ²·N·σ²_share per coordinate (5 sd), and they meet the calibrated z."""
    law = group_law(size=12, q=1.0, epsilon=2.0, delta=1e-3, rounds=3, dim=8192, clip=1.0, bits=24, survivors=1.0,
                    colluders=0)  # fmt: skip
    signs = rotation_signs(5, padded=law.encoding.padded)
    bits = SeededBits(9)
    msgs = [encode(np.zeros(8192), encoding=law.encoding, signs=signs, share_sigma2=law.share_sigma2, bits=bits)
            for _ in range(5)]  # fmt: skip
    total = top_up(modular_sum(np.stack(msgs), law.encoding.modulus), missing=law.shares - 5,
                   share_sigma2=law.share_sigma2, modulus=law.encoding.modulus, bits=bits)  # fmt: skip
    noise = decode(total, encoding=law.encoding, signs=signs)
    ratio = noise.var() / (law.encoding.gamma**2 * law.shares * law.share_sigma2)
    assert abs(ratio - 1) < 5 * math.sqrt(2 / noise.size)
    assert law.third_party_multiplier >= law.noise_multiplier


def test_wrap_around_rate_is_within_its_bound():
    """Few bits for the noise: wrap-around is likely, and its observed rate over rounds stays below the bound;
    without wrap-around the centred modular sum is the integer sum exactly."""
    enc = Encoding(dim=64, clip=1.0, bits=9, gamma=0.02)
    sampled, sigma2 = 4, 1300
    bound = wrap_bound(enc, sampled=sampled, share_sigma2=sigma2)
    assert 0.1 < bound < 0.9
    signs = rotation_signs(0, padded=enc.padded)
    bits = SeededBits(4)
    rng = np.random.default_rng(4)
    half = enc.modulus // 2
    wraps, rounds = 0, 300
    for _ in range(rounds):
        ints = np.stack([integer_message(u, encoding=enc, signs=signs, share_sigma2=sigma2, bits=bits)
                         for u in rng.normal(size=(sampled, 64))])  # fmt: skip
        raw = ints.sum(axis=0)
        centred = np.mod(modular_sum(np.mod(ints, enc.modulus), enc.modulus) + half, enc.modulus) - half
        wrapped = bool(np.any((raw < -half) | (raw >= half)))
        assert wrapped or np.array_equal(centred, raw)
        wraps += wrapped
    assert stats.binomtest(wraps, rounds, bound, alternative="greater").pvalue > 1e-4


def test_the_law_meets_its_multiplier_and_wrap_bound_and_refuses_too_few_bits():
    for size, q, k in ((2000, 0.0354, 0), (2000, 0.01833, 3), (6000, 0.02, 1)):
        law = group_law(size=size, q=q, epsilon=1.5, delta=6000**-1.1, rounds=50, dim=26010, clip=1.5, bits=20,
                        survivors=0.9, colluders=k)  # fmt: skip
        assert law.third_party_multiplier >= law.noise_multiplier and law.wrap_bound <= 1e-12
        assert law.colluders + 1 <= law.threshold < size * q < law.shares
    with pytest.raises(ValueError, match="bits"):
        group_law(size=400, q=0.5, epsilon=1, delta=1e-5, rounds=5, dim=10, clip=1, bits=8, survivors=1, colluders=0)


@given(q=st.floats(1e-4, 0.9), z=st.floats(0.5, 5.0))
@settings(max_examples=10, deadline=None)
def test_subsampled_bound_is_the_sampled_gaussians_exact_rdp(q, z):
    """The binomial expansion of the release RDP α/(2z²) against dp-accounting's RDP of the sampled Gaussian (exact
    for that mechanism, Mironov, Talwar and Zhang's expansion at integer orders): never below it, and equal to it up
    to float rounding. Integer orders to 256 (dp-accounting excludes fractional orders whose series does not
    converge)."""
    orders = ORDERS[(ORDERS % 1 == 0) & (ORDERS <= 256)]
    ours = poisson_subsampled_rdp(orders, release_rdp(orders, noise_multiplier=z), q)
    acc = RdpAccountant(orders=list(orders))
    acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)))
    assert np.all(ours >= np.asarray(acc.rdp) * (1 - 1e-9)) and ours == pytest.approx(np.asarray(acc.rdp), rel=1e-9)


@given(q=st.floats(1e-4, 1.0), z=st.floats(0.3, 5.0), tau_d=st.floats(0.0, 1e-3))
@settings(max_examples=25, deadline=None)
def test_subsampling_never_costs_more_than_the_release_itself(q, z, tau_d):
    """Quasi-convexity caps the subsampled RDP at the release's own at every order (q = 1: equal)."""
    rdp = release_rdp(ORDERS, noise_multiplier=z, tau_d=tau_d)
    ours = poisson_subsampled_rdp(ORDERS, rdp, q)
    assert np.all(ours <= rdp) and np.all(ours >= 0)
    assert np.array_equal(poisson_subsampled_rdp(ORDERS, rdp, 1.0), rdp)


def test_the_cap_binds_at_large_q_only():
    rdp = release_rdp(ORDERS, noise_multiplier=1.0)
    assert np.any(poisson_subsampled_rdp(ORDERS, rdp, 0.9) == rdp)  # the generic bound alone would exceed it
    assert np.all(poisson_subsampled_rdp(ORDERS, rdp, 0.02) < rdp)


@given(z=st.floats(0.3, 10.0), k=st.integers(1, 100), delta=st.floats(1e-10, 1e-3))
@settings(max_examples=25, deadline=None)
def test_server_epsilon_is_dp_accountings_zcdp_composition(z, k, delta):
    """No amplification: K releases of ρ = 1/(2z²)-zCDP, as dp-accounting's ZCDpEvent, at our integer orders."""
    acc = RdpAccountant(orders=list(ORDERS))
    acc.compose(dpa.ZCDpEvent(1 / (2 * z * z)), k)
    assert epsilon_server(noise_multiplier=z, participations=k, delta=delta) == pytest.approx(
        acc.get_epsilon(delta), rel=1e-9, abs=1e-12
    )


@pytest.mark.parametrize("sigma2,sensitivity", [(4, 1), (25, 3), (100, 7)])
def test_one_share_is_never_below_dp_accountings_discrete_gaussian_pld(sigma2, sensitivity):
    """d = 1, one share (τ = 0): our ε at δ = 1e-6 is at least the tight PLD ε of the discrete Gaussian."""
    z = math.sqrt(sigma2) / sensitivity
    ours = epsilon_from_rdp(ORDERS, release_rdp(ORDERS, noise_multiplier=z), 1e-6)
    tight = pld.from_discrete_gaussian_mechanism(math.sqrt(sigma2), sensitivity=sensitivity).get_epsilon_for_delta(1e-6)
    assert ours >= tight


@pytest.mark.parametrize("n,sigma2,alpha", [(2, 0.5, 2), (2, 1.0, 3), (3, 0.6, 2), (4, 1.0, 5)])
def test_sum_of_shares_bound_is_never_below_the_exact_divergence(n, sigma2, alpha):
    """Small instances computed exactly: the PMF of the sum of n discrete Gaussians N_Z(0, σ²), shifted by 1, and its
    Rényi divergence of order α against the unshifted sum, below α/(2nσ²) + τ (Proposition 14, d = 1)."""
    mp.mp.dps = 60
    one = [mp.exp(-mp.mpf(x * x) / (2 * mp.mpf(sigma2))) for x in range(-40, 41)]
    norm = mp.fsum(one)
    one = [p / norm for p in one]
    pmf = one
    for _ in range(n - 1):  # exact convolution in 60-digit arithmetic
        pmf = [mp.fsum(pmf[j] * one[i - j] for j in range(max(0, i - len(one) + 1), min(i, len(pmf) - 1) + 1))
               for i in range(len(pmf) + len(one) - 1)]  # fmt: skip
    shifted = [mp.mpf(0), *pmf[:-1]]
    exact = float(mp.log(mp.fsum(s**alpha * p ** (1 - alpha) for s, p in zip(shifted, pmf))) / (alpha - 1))
    bound = alpha / (2 * n * sigma2) + tau(sigma2, honest=n)
    assert exact <= bound


def test_calibration_meets_its_budget_and_is_tight():
    z = calibrate_noise_multiplier(epsilon=0.5, delta=1e-5, q=0.01, rounds=100)
    assert epsilon_third_parties(noise_multiplier=z, q=0.01, rounds=100, delta=1e-5) <= 0.5
    assert epsilon_third_parties(noise_multiplier=z * 0.999, q=0.01, rounds=100, delta=1e-5) > 0.5
