"""The noise law of a group under secure aggregation: fixed by the plan, so the released sum does not betray how many
clients took part (the lattice and noise-variance attacks learn nothing), its breaking events paid out of δ, and no
plan that would not release."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from hdp_planner import plan
from hdp_planner.distributed.accounting import calibrate_noise_multiplier, epsilon_third_parties
from hdp_planner.distributed.encoding import Encoding, decode, encode, modular_sum, rotate, rotation_signs, top_up
from hdp_planner.distributed.law import (
    EVENT_SHARE,
    MAX_FLIP_SHARE,
    LawError,
    expected_variance,
    flip_probability,
    group_law,
)
from hdp_planner.distributed.randomness import SeededBits
from hdp_planner.distributed.rounds import group_tau_d, wrap_bound
from hdp_planner.distributed.sampler import MAX_SIGMA2
from hdp_planner.planning.trust import SecaggParameters
from hdp_planner.trust.secagg import SecureAggregation

DIM = 4096  # a power of 2: the decoded release keeps every coordinate of the grid
LAW = group_law(size=120, q=0.25, epsilon=1.5, delta=1e-4, rounds=20, dim=DIM, clip=1.0, bits=20, survivors=0.9,
                colluders=0)  # fmt: skip


def released(count: int, seed: int, *, updates: np.ndarray | None = None, top: bool = True) -> np.ndarray:
    """A group's release when ``count`` clients survive: their messages summed modulo 2^b, topped up to N shares by
    the server (``top`` False: the old behaviour, c shares), decoded."""
    bits = SeededBits(seed)
    signs = rotation_signs(11, padded=LAW.encoding.padded)
    ups = np.zeros((count, DIM)) if updates is None else updates
    total = modular_sum(np.stack([encode(u, encoding=LAW.encoding, signs=signs, share_sigma2=LAW.share_sigma2,
                                         bits=bits) for u in ups]), LAW.encoding.modulus)  # fmt: skip
    if top:
        total = top_up(total, missing=LAW.shares - count, share_sigma2=LAW.share_sigma2, modulus=LAW.encoding.modulus,
                       bits=bits)  # fmt: skip
    return decode(total, encoding=LAW.encoding, signs=signs)


def lattice_residual(y: np.ndarray, gamma: float) -> float:
    """The lattice attack: how far the rotated release, in units of a candidate grid γ', lies from integers (about 0
    on the release's own grid, about 1/4 on any other)."""
    v = rotate(y, rotation_signs(11, padded=LAW.encoding.padded)) / gamma
    return float(np.mean(np.abs(v - np.rint(v))))


def test_the_law_depends_on_no_count_and_every_release_lies_on_one_grid():
    """Finding 1's lattice attack: it picked the realised count c because the grid was γ(c). Now every count has the
    plan's γ: releases of t and of 40 clients are both integral on it and equally far off every other candidate, so
    the attack's statistic cannot tell the counts apart."""
    rng = np.random.default_rng(3)
    candidates = [LAW.encoding.gamma * f for f in (1.0, 0.9, 1.1, 1.37)]
    residuals = {}
    for c in (LAW.threshold, 40):
        ups = rng.normal(size=(c, DIM)) * 0.01
        residuals[c] = [lattice_residual(released(c, c, updates=ups), g) for g in candidates]
    for c, res in residuals.items():
        assert res[0] < 1e-6, (c, res)  # on the plan's grid, whatever the count
        assert all(0.2 < r < 0.3 for r in res[1:]), (c, res)  # the statistic has power: it rejects other grids
    assert max(abs(a - b) for a, b in zip(residuals[LAW.threshold], residuals[40])) < 0.01


def test_the_noise_variance_attack_learns_nothing_from_a_topped_up_release():
    """Zero updates: a release of c survivors topped up to N shares has the same per-coordinate distribution for
    c = t and c = 40 (variance within 5 sd, a two-sample KS test), while without the top-up (c shares) the same
    variance estimate tells the counts apart at once."""
    few, many = released(LAW.threshold, 1), released(40, 2)
    planned = LAW.encoding.gamma**2 * LAW.shares * LAW.share_sigma2
    sd = math.sqrt(2 / few.size)
    for y in (few, many):
        assert abs(float(y.var()) / planned - 1) < 5 * sd
    assert stats.ks_2samp(few, many).pvalue > 1e-3
    bare_few, bare_many = released(LAW.threshold, 1, top=False), released(40, 2, top=False)
    ratio = float(bare_many.var()) / float(bare_few.var())
    assert ratio == pytest.approx(40 / LAW.threshold, rel=10 * sd)  # the attack works on the old releases


def test_the_threshold_reaches_99_percent_of_rounds_and_a_flip_has_the_planned_probability():
    """Release: a round reaches t with F of its clients surviving in at least 99% of 20,000 simulated rounds. The flip
    probability (the target moves the survivors from t − 1 to t) matches a simulation where it is not tiny."""
    rng = np.random.default_rng(0)
    counts = rng.binomial(120, 0.25, size=20_000)
    assert LAW.release >= 0.99
    assert np.mean(np.ceil(0.9 * counts - 1e-9) >= LAW.threshold) >= 0.99
    size, q, t = 20, 0.3, 4
    others = rng.binomial(size - 1, q, size=400_000)
    target = rng.random(400_000) < q
    simulated = np.mean(target & (others == t - 1))  # F = 1: everyone survives, the flip needs exactly t − 1 others
    assert simulated == pytest.approx(flip_probability(size, q=q, t=t, survivors=1.0), rel=0.05)


@pytest.mark.parametrize("size,q,eps,k", [(120, 0.25, 1.5, 0), (2000, 0.00626, 0.5, 0), (600, 0.1, 3.0, 2)])
def test_the_law_pays_its_events_out_of_delta_and_meets_its_budget(size, q, eps, k):
    delta, rounds = 600**-1.1, 30
    law = group_law(size=size, q=q, epsilon=eps, delta=delta, rounds=rounds, dim=DIM, clip=1.0, bits=20,
                    survivors=0.9, colluders=k)  # fmt: skip
    assert 0 < rounds * law.event_rate <= delta * (EVENT_SHARE + MAX_FLIP_SHARE)
    left = law.delta_accounted(delta, rounds=rounds)
    spent = epsilon_third_parties(noise_multiplier=law.third_party_multiplier, q=q, rounds=rounds, delta=left,
                                  tau_d=group_tau_d(size, model_dim=DIM))  # fmt: skip
    assert spent <= eps * (1 + 1e-9)
    assert k + 1 <= law.threshold <= law.shares and law.run_threshold(law.shares) > law.shares / 2


def test_colluders_beyond_the_expected_clients_leave_no_plan():
    """Finding 7: with as many colluders as a round's expected clients a group would almost never release; its law
    is refused, the row is not planned under secagg and never recommended."""
    with pytest.raises(LawError, match="too few clients a round"):
        group_law(size=200, q=0.2, epsilon=1.0, delta=1e-4, rounds=20, dim=DIM, clip=1.0, bits=20, survivors=0.9,
                  colluders=40)  # fmt: skip
    p = plan((0.5, 1.5, 3.0), 600, rounds=20, q=0.2, clip=1.5)
    planned = SecureAggregation(parameters=SecaggParameters(model_dim=1000, colluders=130)).planned(p)
    assert all(r.groups is None and "not planned under secagg" in r.note for r in planned.rows)
    assert planned.recommendation is None


def test_participations_beyond_the_rounds_and_a_minority_of_survivors_are_refused():
    p = plan((0.5, 1.5, 3.0), 600, rounds=20, q=0.2, clip=1.5)
    with pytest.raises(ValueError, match="exceed the plan's T = 20"):
        SecureAggregation(parameters=SecaggParameters(model_dim=1000, participations=21)).planned(p)
    for f in (0.3, 0.5):
        with pytest.raises(ValueError, match="no consistency round"):
            SecaggParameters(model_dim=1000, survivors=f)


@pytest.mark.parametrize(
    ("size", "q", "eps", "k", "survivors"),
    [(120, 0.25, 1.5, 0, 0.9), (600, 0.1, 3.0, 2, 0.75), (400, 0.05, 0.5, 0, 1.0)],
)
def test_the_law_takes_the_least_shares_and_the_largest_affordable_threshold(size, q, eps, k, survivors):
    """Each number of the law recomputed from its definition: N the least count with (1 + e^ε)·T·P(c > N) within δ's
    share, t the largest threshold whose flips cost e^ε·T·flip(t) within it, the release probability over the whole
    binomial, the event rate, and z calibrated at the δ they leave."""
    delta, rounds = 1e-4, 20
    law = group_law(size=size, q=q, epsilon=eps, delta=delta, rounds=rounds, dim=DIM, clip=1.0, bits=20,
                    survivors=survivors, colluders=k)  # fmt: skip
    allowance, least = delta * EVENT_SHARE, max(2, k + 1)
    over = stats.binom(size, q)

    def beyond(n):
        return (1 + math.exp(eps)) * rounds * over.sf(n)

    def flips(t):
        return math.exp(eps) * rounds * flip_probability(size, q=q, t=t, survivors=survivors)

    assert beyond(law.shares) <= allowance and (law.shares == least or beyond(law.shares - 1) > allowance)
    assert law.threshold == least or flips(law.threshold) <= allowance
    assert law.threshold == law.shares or flips(law.threshold + 1) > allowance
    counts = np.arange(size + 1)
    release = over.pmf(counts)[np.ceil(survivors * counts - 1e-9) >= law.threshold].sum()
    assert law.release == pytest.approx(release, rel=1e-12)
    rate = math.exp(eps) * flip_probability(size, q=q, t=law.threshold, survivors=survivors) + (
        1 + math.exp(eps)
    ) * over.sf(law.shares)
    assert law.event_rate == pytest.approx(rate, rel=1e-12) and law.colluders == k
    z = calibrate_noise_multiplier(epsilon=eps, delta=delta - rounds * rate, q=q, rounds=rounds,
                                   tau_d=group_tau_d(size, model_dim=DIM))  # fmt: skip
    assert law.noise_multiplier == z and law.delta_accounted(delta, rounds=rounds) == delta - rounds * law.event_rate


@pytest.mark.parametrize(("size", "q", "t", "survivors"), [(20, 0.3, 4, 1.0), (50, 0.2, 5, 0.8), (30, 0.5, 2, 0.6)])
def test_a_flip_is_the_target_joining_with_t_minus_1_to_the_most_survivors_short_of_t_others(size, q, t, survivors):
    """q·P(t − 1 ≤ a ≤ ⌊(t − 1)/F⌋), a ~ Bin(|G| − 1, q): summed term by term."""
    top = math.floor((t - 1) / survivors + 1e-9)
    exact = q * sum(stats.binom.pmf(a, size - 1, q) for a in range(t - 1, top + 1))
    assert flip_probability(size, q=q, t=t, survivors=survivors) == pytest.approx(exact, rel=1e-12)


def test_the_grid_is_the_finest_that_fits_the_sampler_and_the_wrap_bound():
    """σ²_s = max(16, ⌈z²Δ₂²/(N − k)⌉) at the law's γ, its wrap-around bound within 1e-12, and a grid 0.2% finer
    fails one of the two (the search stops within 0.1%)."""
    law = group_law(size=600, q=0.1, epsilon=3.0, delta=1e-4, rounds=20, dim=DIM, clip=1.0, bits=20, survivors=0.9,
                    colluders=2)  # fmt: skip
    honest = law.shares - law.colluders
    assert law.share_sigma2 == max(16, math.ceil(law.noise_multiplier**2 * law.encoding.norm_bound**2 / honest))
    assert law.wrap_bound == wrap_bound(law.encoding, sampled=law.shares, share_sigma2=law.share_sigma2) <= 1e-12
    finer = Encoding(dim=DIM, clip=1.0, bits=20, gamma=law.encoding.gamma / 1.002)
    s2 = max(16, math.ceil(law.noise_multiplier**2 * finer.norm_bound**2 / honest))
    assert s2 > MAX_SIGMA2 or wrap_bound(finer, sampled=law.shares, share_sigma2=s2) > 1e-12
    assert law.third_party_multiplier == math.sqrt(honest * law.share_sigma2) / law.encoding.norm_bound
    assert law.third_party_multiplier >= law.noise_multiplier


@pytest.mark.parametrize(("bits", "gamma", "sampled", "s2"), [(20, 1e-3, 30, 400), (16, 0.05, 8, 16), (12, 1.0, 3, 50)])
def test_the_wrap_bound_is_hoeffdings_tail_of_the_rotated_sum(bits, gamma, sampled, s2):
    """2d'·exp(−(2^(b−1) − c)²/(2v²)), v² = (c·C/γ)²/d' + c·σ²_s, capped at 1."""
    enc = Encoding(dim=1000, clip=1.5, bits=bits, gamma=gamma)
    v2 = (sampled * 1.5 / gamma) ** 2 / 1024 + sampled * s2
    expected = min(1.0, 2 * 1024 * math.exp(-((2 ** (bits - 1) - sampled) ** 2) / (2 * v2)))
    assert wrap_bound(enc, sampled=sampled, share_sigma2=s2) == pytest.approx(expected, rel=1e-12)
    assert wrap_bound(Encoding(dim=10, clip=1.0, bits=3, gamma=1.0), sampled=4, share_sigma2=16) == 1.0


def test_the_server_keeps_its_share_of_the_honest_shares_and_a_run_a_strict_majority():
    law = group_law(size=600, q=0.1, epsilon=3.0, delta=1e-4, rounds=20, dim=DIM, clip=1.0, bits=20, survivors=0.9,
                    colluders=2)  # fmt: skip
    honest = law.threshold - law.colluders
    for groups in (1, 2, 3):
        assert law.server_multiplier(20, groups=groups) == math.sqrt(math.ceil(honest / groups) * 20) / (
            law.encoding.norm_bound
        )
    assert [law.run_threshold(c) for c in (0, 2 * law.threshold - 2, 2 * law.threshold, 101)] == [
        law.threshold, law.threshold, law.threshold + 1, max(law.threshold, 51)]  # fmt: skip


@pytest.mark.parametrize("wrap", [0.0, 1e-3])
def test_the_expected_variance_is_the_binomial_mean_of_shares_and_roundings_plus_the_wrap_term(wrap):
    """E_c[max(N, c)·σ²_s + c/4]·γ² + wrap·(2^b·γ)², c ~ Bin(|G|, q), summed here over the whole support."""
    law = dataclasses.replace(LAW, wrap_bound=wrap)
    size, q = 120, 0.25
    counts = np.arange(size + 1)
    per_count = np.maximum(law.shares, counts) * law.share_sigma2 + counts / 4
    mean = float(np.sum(stats.binom.pmf(counts, size, q) * per_count))
    enc = law.encoding
    want = enc.gamma**2 * mean + wrap * (enc.modulus * enc.gamma) ** 2
    assert expected_variance(law, size=size, q=q) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("bad", [dict(gamma=0.0), dict(gamma=-1e-3), dict(clip=0.0), dict(beta=1.0), dict(beta=0.0)])
def test_an_encoding_refuses_a_grid_clip_or_beta_out_of_range(bad):
    """γ = 0 would divide every update by zero; C = 0 clips everything away; β outside (0, 1) is no probability."""
    with pytest.raises(ValueError, match="clip and gamma must be > 0 and beta in"):
        Encoding(**({"dim": 100, "clip": 1.0, "bits": 16, "gamma": 1e-3} | bad))
