"""One group's noise law under secure aggregation, fixed for the whole run by public plan quantities: derived here
(:func:`group_law`, :func:`grid_law`), kept as a :class:`~hdp_planner.distributed.group_law.GroupLaw`.

The law of group m (size |G|, Poisson rate q, budget ε, T rounds, δ, clip C, bits b, dimension d, survivor fraction F,
colluders k) has four numbers: the grid γ, each client's share variance σ²_s (integer units), the reconstruction
threshold t and the released shares N. Nothing depends on the round's realised count c, so every client sizes its
share from the plan alone and a released sum lies on the same lattice whatever c was:

- SecAgg+ runs a group with threshold max(t, ⌊c/2⌋ + 1): below t survivors the cryptography releases nothing.
- The honest server adds max(0, N − s) shares of its own to the sum of the s survivors, so the release carries N
  shares of N_Z(0, σ²_s) whatever s is (its distribution does not depend on c, Proof in the trust-model page).
- Against third parties (who may learn the k colluders' shares) N − k shares remain: z = √((N − k)·σ²_s)/Δ₂.
- Against the server, at least t − k honest shares remain; a malicious server can mix clients of the M groups in one
  run, so the bound keeps ⌈(t − k)/M⌉ of them, of the smallest σ²_s of any group.

Two events break the c-free law, both folded into δ (the trust-model page proves it): the target's own inclusion
moving the survivors across t (probability at most q·P(t − 1 ≤ a ≤ (t − 1)/F) per round, a ~ Bin(|G| − 1, q)),
costing e^ε per round of it, and more than N sampled clients (P(Bin(|G|, q) > N)), costing 1 + e^ε. Each may use
:data:`EVENT_SHARE` of δ over the T rounds (flips up to :data:`MAX_FLIP_SHARE` at the smallest threshold); the rest
is what the accountant spends.
"""

from __future__ import annotations

import functools
import math

from scipy import stats

from hdp_planner.distributed.accounting import calibrate_noise_multiplier
from hdp_planner.distributed.encoding import Encoding
from hdp_planner.distributed.group_law import GroupLaw
from hdp_planner.distributed.rounds import WRAP_PROBABILITY, group_tau_d, share_sigma2, wrap_bound
from hdp_planner.distributed.sampler import MAX_SIGMA2

EVENT_SHARE = 0.05
"""The share of δ that each of the two law-breaking events (a gate flip, more than N clients) may use over T rounds;
a group whose smallest threshold max(2, k + 1) already costs more may spend up to :data:`MAX_FLIP_SHARE` on flips."""
MAX_FLIP_SHARE = 0.5
MIN_RELEASE = 0.99
"""The least probability, with F of the sampled clients surviving, that a group's round releases (its sum has t)."""


class LawError(ValueError):
    """The group cannot be run under secure aggregation with these parameters (the message says why)."""


def flip_probability(size: int, *, q: float, t: int, survivors: float) -> float:
    """The probability that one client's inclusion moves a round's survivors from t − 1 to t (the threshold).

    q·P(t − 1 ≤ a ≤ ⌊(t − 1)/F⌋), a ~ Bin(|G| − 1, q) the other clients who join.

    Args:
        size: |G|, the group's size.
        q: The rate at which each client joins.
        t: The threshold.
        survivors: F, the fraction of a round's sampled clients that reply.

    Returns:
        The probability.
    """
    top = math.floor((t - 1) / survivors + 1e-9)
    dist = stats.binom(size - 1, q)
    return q * max(0.0, float(dist.cdf(top) - dist.cdf(t - 2)))


@functools.lru_cache(maxsize=4096)
def group_law(
    *,
    size: int,
    q: float,
    epsilon: float,
    delta: float,
    rounds: int,
    dim: int,
    clip: float,
    bits: int,
    survivors: float,
    colluders: int,
    wrap: float = WRAP_PROBABILITY,
) -> GroupLaw:
    """The law of one group (module docstring): N the least count with (1 + e^ε)·T·P(c > N) ≤ δ·share, t the largest
    threshold from max(2, k + 1) up whose gate flips cost e^ε·T·flip(t) ≤ δ·share (max(2, k + 1) itself may cost up
    to δ·:data:`MAX_FLIP_SHARE`), z calibrated at the δ left, on the grid of :func:`grid_law`.
    Raises :class:`LawError` when no threshold is affordable or the group releases in under 99% of rounds."""
    allowance = delta * EVENT_SHARE
    over = stats.binom(size, q)
    shares = max(2, colluders + 1)
    while shares < size and (1 + math.exp(epsilon)) * rounds * float(over.sf(shares)) > allowance:
        shares += 1
    t0 = max(2, colluders + 1)
    if (
        t0 > shares
        or math.exp(epsilon) * rounds * flip_probability(size, q=q, t=t0, survivors=survivors) > delta * MAX_FLIP_SHARE
    ):
        raise LawError(
            f"a group of {size} clients sampled at q={q:.4g} has too few clients a round for a reconstruction "
            f"threshold of {t0} (k={colluders} colluders): sample more clients or plan with a trusted server"
        )
    t = t0
    while (
        t < shares
        and math.exp(epsilon) * rounds * flip_probability(size, q=q, t=t + 1, survivors=survivors) <= allowance
    ):
        t += 1
    release = float(sum(p for c, p in _counts(size, q) if math.ceil(survivors * c - 1e-9) >= t))
    if release < MIN_RELEASE:
        raise LawError(f"a group of {size} clients at q={q:.4g} reaches its threshold t={t} in {release:.1%} of rounds "
                       f"(under {MIN_RELEASE:.0%}): fewer colluders, or plan with a trusted server")  # fmt: skip
    flip_rate = flip_probability(size, q=q, t=t, survivors=survivors)
    event_rate = math.exp(epsilon) * flip_rate + (1 + math.exp(epsilon)) * float(over.sf(shares))
    z = calibrate_noise_multiplier(epsilon=epsilon, delta=delta - rounds * event_rate, q=q, rounds=rounds,
                                   tau_d=group_tau_d(size, model_dim=dim))  # fmt: skip
    return grid_law(
        noise_multiplier=z,
        threshold=t,
        shares=shares,
        colluders=colluders,
        dim=dim,
        clip=clip,
        bits=bits,
        wrap=wrap,
        event_rate=event_rate,
        release=release,
    )


def grid_law(
    *, noise_multiplier: float, threshold: int, shares: int, colluders: int, dim: int, clip: float, bits: int,
    wrap: float = WRAP_PROBABILITY, event_rate: float = 0.0, release: float = 1.0, sized_for: int | None = None,
) -> GroupLaw:  # fmt: skip
    """The law with these t, N and z on the finest grid γ (to 0.1%) whose share σ²_s = max(16, ⌈z²Δ₂²/h⌉) fits the
    exact sampler and meets the wrap-around bound with N shares; h = ``sized_for`` honest shares, N − k by default."""
    honest = shares - colluders if sized_for is None else sized_for

    def fits(gamma: float) -> tuple[bool, GroupLaw]:
        enc = Encoding(dim=dim, clip=clip, bits=bits, gamma=gamma)
        s2 = share_sigma2(enc, noise_multiplier=noise_multiplier, honest=honest)
        bound = wrap_bound(enc, sampled=shares, share_sigma2=s2) if s2 <= MAX_SIGMA2 else 1.0
        law = GroupLaw(
            encoding=enc,
            share_sigma2=s2,
            threshold=threshold,
            shares=shares,
            colluders=colluders,
            noise_multiplier=noise_multiplier,
            event_rate=event_rate,
            release=release,
            wrap_bound=bound,
        )
        return s2 <= MAX_SIGMA2 and bound <= wrap, law

    hi = clip
    while not fits(hi)[0]:
        hi *= 4
        if hi > 1e12 * clip:
            raise LawError(f"{bits} bits cannot hold the sum of {shares} shares without wrap-around: use more bits")
    lo = hi
    while fits(lo)[0] and lo > 1e-12 * clip:
        lo /= 4
    while hi / lo > 1.001:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if fits(mid)[0] else (mid, hi)
    return fits(hi)[1]


def _counts(size: int, q: float) -> list[tuple[int, float]]:
    """(c, P(c)) of Bin(|G|, q) over its support beyond 1e-15 in either tail."""
    dist = stats.binom(size, q)
    lo, hi = int(dist.ppf(1e-15)), min(size, int(dist.isf(1e-15)) + 1)
    return [(c, float(dist.pmf(c))) for c in range(lo, hi + 1)]


def expected_variance(law: GroupLaw, *, size: int, q: float) -> float:
    """E over c ~ Bin(|G|, q) of the released sum's per-coordinate error variance in update units: max(N, c) shares
    and c roundings (each at most 1/4 unit²) times γ², plus the wrap-around bound times (2^b·γ)². A round that
    releases nothing is counted with the noise of one that does (never as zero noise)."""
    g2 = law.encoding.gamma**2
    mean = sum(p * (max(law.shares, c) * law.share_sigma2 + c / 4) for c, p in _counts(size, q))
    return g2 * mean + law.wrap_bound * (law.encoding.modulus * law.encoding.gamma) ** 2
