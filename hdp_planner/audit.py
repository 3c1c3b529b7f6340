"""Empirical privacy of a run, measured with canary clients (core: numpy, scipy, dp-accounting; no torch).

An accountant proves what the mechanism *as specified* spends; canaries measure the mechanism *as executed*
(after Andrew et al., "One-shot empirical privacy estimation for federated learning", ICLR 2024):

- Directions. Group m owns ``per_group`` canaries u_j = D·IDCT(e_{π(j)}): D random ±1 signs, π a random
  permutation of the d coordinates, groups on disjoint slots of π. The u_j are exactly orthonormal, so an
  inserted canary does not leak into another's projection and the noise projections are independent; all
  projections z_j = ⟨u_j, y⟩ of a noisy sum y come from one ``dct(D·y)`` (O(d log d), memory O(d)).
- Canaries. Each canary gets an in/out bit (Bernoulli(1/2), as Steinke et al. require); an "in" canary is a
  member of its group's population, drawn by the round's own sampler with the real clients, and its update
  S·C_m·u_j (S ≫ 1) goes, at a random row among theirs, through the real clipping, noise-share and aggregation code
  (clipped to C_m·u_j). "Out" canaries are never inserted: the null.
- Observation. Each group's noisy sum y_m is observed with what the round releases of it; the release must be the
  plan's post-processing of y_m (Top-k of it, or a projection), and the clients' and canaries' join rates must
  match q_m (exact binomial tests): a sampler or a release that departs from the plan is flagged even where the
  noise is right.
- Estimate. Over all rounds, μ̂ = (mean z when inserted − mean z_out)/sd(z_out) is the canary's shift in noise
  units, σ̂ = 1/μ̂ the noise multiplier it really faced, and ε̂ the PLD ε (dp-accounting,
  :mod:`hdp_planner.accounting.pld`)
  of PoissonSampled(q_m, Gaussian(σ̂)) composed T times at the plan's δ, with a bootstrap interval over canaries.
  The lag-1 correlation of z_out across rounds shows a reused noise stream (nowhere else does).
- Public cohorts, private coins. The draws are a canary's cohort memberships (which the server names), the joins
  its heads (its coin at p_m, told to the audit's referee only after the run), and ε̂ composes
  PoissonSampled(p_m, Gaussian(σ̂)) over min(T, K_m) memberships: the plan's ε against the server
  (:func:`audit_group`'s ``offered``, ``compositions``). The tails memberships must not shift the sum
  (:func:`silent_shift`): a coin that does not stop a tails member's contribution is caught there.
- Dropouts (secure aggregation). A canary that drops out is neither a contribution nor a member of the released sum:
  it is left out of the insertions and, with cohorts, of the memberships; under Poisson sampling the sampler's draws
  are still tested against q_m (:func:`audit_group`'s ``joins``).
- Proof. :func:`~hdp_planner.audit_one_run.steinke_lower_bound` gives the rigorous one-run lower bound of Steinke,
  Nasr and Jagielski ("Privacy auditing with one (1) training run", NeurIPS 2023) from the same canaries.

Everything here is computed from projections of the noisy sums (post-processing of what the accountant covers)
and the canaries' own random bits: nothing depends on which real clients took part beyond that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import fft, stats

from hdp_planner.audit_one_run import steinke_lower_bound

EPSILON_SIGMA_FLOOR = 0.25
"""Below this σ̂ the PLD ε is slow to compute (≈10 s at 0.1) and huge anyway: ε at the floor is reported (a
value below the estimate's), flagged by ``epsilon_empirical_capped``."""
CORRELATION_MATERIAL = 0.1
"""A lag-1 correlation of z_out is significant above this value plus 3 standard errors: real clients' updates
project onto the fixed canary directions too and correlate slightly across rounds (a few 0.01), a reused
noise stream gives ≈ 1."""
SAMPLING_ALPHA = 1e-6
"""A join rate differs from q_m when its two-sided binomial p-value is below this (a correct run of 50 rounds
and 3 groups is flagged with probability ≈ 6e-6)."""
SILENT_MATERIAL = 0.1
"""Memberships that must not contribute (a cohort member's tails) shift the sum when their mean shift exceeds this
many noise units by more than the z-score of :data:`SAMPLING_ALPHA` standard errors: real clients' updates project
onto the canary directions too (a few 0.01, as for :data:`CORRELATION_MATERIAL`), a tails member that still
contributes shifts it by the heads' 1/σ."""


@dataclass(frozen=True, kw_only=True)
class CanaryLayout:
    """Where each group's canaries live: signs D (d,), slots (M, K) of the permutation π, in/out bits (M, K)."""

    d: int
    signs: np.ndarray
    slots: np.ndarray
    inserted: np.ndarray

    @property
    def groups(self) -> int:
        return int(self.slots.shape[0])

    @property
    def per_group(self) -> int:
        return int(self.slots.shape[1])


def default_canaries(d: int, *, groups: int) -> int:
    """Canaries per group (in and out together): min(2000, ⌊d/M⌋), so every group's slots fit in d."""
    return min(2000, d // groups)


def canary_layout(d: int, *, groups: int, per_group: int, seed: int) -> CanaryLayout:
    """Signs, disjoint slots and in/out bits of ``per_group`` canaries in each of ``groups`` groups, from ``seed``."""
    if per_group < 2 or groups * per_group > d:
        raise ValueError(
            f"--audit-canaries must be between 2 and ⌊d/M⌋ = {d // groups} per group (d = {d}, M = {groups}), "
            f"got {per_group}"
        )
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=d)
    slots = rng.permutation(d)[: groups * per_group].reshape(groups, per_group)
    inserted = rng.random((groups, per_group)) < 0.5
    return CanaryLayout(d=d, signs=signs, slots=slots, inserted=inserted)


def canary_directions(layout: CanaryLayout, group: int, index: np.ndarray) -> np.ndarray:
    """Unit directions u_j = D·IDCT(e_{π(j)}) of the canaries ``index`` of ``group``, shape (len(index), d)."""
    onehot = np.zeros((len(index), layout.d))
    onehot[np.arange(len(index)), layout.slots[group, index]] = 1.0
    return fft.idct(onehot, axis=1, norm="ortho") * layout.signs


def project(layout: CanaryLayout, group: int, y: np.ndarray) -> np.ndarray:
    """z_j = ⟨u_j, y⟩ for every canary of ``group``: one orthonormal DCT of D·y."""
    return fft.dct(np.asarray(y, dtype=float) * layout.signs, norm="ortho")[layout.slots[group]]


def shift_estimate(z: np.ndarray, joined: np.ndarray, inserted: np.ndarray) -> tuple[float, int]:
    """μ̂ = (mean z over inserted (j, t) − mean z_out)/sd(z_out) from z (T, K), joined (T, K), inserted (K,);
    also the number of insertions. NaN when nothing was inserted."""
    mu, count = _shift(*_canary_sums(z, joined, inserted))
    return float(mu[0]), count


def _canary_sums(z: np.ndarray, joined: np.ndarray, inserted: np.ndarray):
    """Per-canary sufficient statistics: in canaries (Σ_t joined·z, Σ_t joined), out canaries (Σ z, Σ z², T)."""
    zin, jin = z[:, inserted], joined[:, inserted]
    zout = z[:, ~inserted]
    return (zin * jin).sum(0), jin.sum(0), zout.sum(0), (zout**2).sum(0), z.shape[0]


def _shift(s_in, n_in, s_out, ss_out, rounds, *, index_in=None, index_out=None) -> tuple[np.ndarray, int]:
    """μ̂ for the canaries as given (index None) or for bootstrap resamples (index (B, k))."""
    if index_in is None:
        index_in, index_out = np.arange(len(s_in))[None], np.arange(len(s_out))[None]
    count = int(n_in.sum())
    ins, inn = s_in[index_in].sum(1), n_in[index_in].sum(1)
    outs, outss = s_out[index_out].sum(1), ss_out[index_out].sum(1)
    n_out = index_out.shape[1] * rounds
    mean_out = outs / n_out
    sd_out = np.sqrt(np.maximum(outss / n_out - mean_out**2, 0.0) * n_out / max(n_out - 1, 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = np.where(inn > 0, (ins / np.maximum(inn, 1) - mean_out) / sd_out, np.nan)
    return mu, count


def shift_interval(
    z: np.ndarray, joined: np.ndarray, inserted: np.ndarray, *, seed: int, confidence: float = 0.95, boots: int = 1000
) -> tuple[float, float]:
    """Percentile bootstrap interval of μ̂, resampling in and out canaries (a canary's rounds stay together)."""
    sums = _canary_sums(z, joined, inserted)
    rng = np.random.default_rng(seed)
    k_in, k_out = len(sums[0]), len(sums[2])
    mu, _ = _shift(
        *sums, index_in=rng.integers(0, k_in, (boots, k_in)), index_out=rng.integers(0, k_out, (boots, k_out))
    )
    mu = mu[np.isfinite(mu)]
    if mu.size == 0:
        return math.nan, math.nan
    tail = (1 - confidence) / 2
    return float(np.quantile(mu, tail)), float(np.quantile(mu, 1 - tail))


def silent_shift(z: np.ndarray, silent: np.ndarray, inserted: np.ndarray) -> tuple[float | None, float, int]:
    """The mean shift, in noise units, of the in canaries' projections at the (round, canary) pairs ``silent`` (T, K)
    that must not contribute, against the out canaries; the one-sided p-value of a shift above
    :data:`SILENT_MATERIAL` (normal approximation, standard error √(1/n_silent + 1/n_out)); and n_silent. (None, 1, 0)
    when no pair is silent."""
    zs = z[:, inserted][silent[:, inserted]]
    zout = z[:, ~inserted].ravel()
    if zs.size == 0 or zout.size < 2:
        return None, 1.0, int(zs.size)
    sd = float(np.std(zout, ddof=1))
    if sd == 0:
        return None, 1.0, int(zs.size)
    mu = (float(zs.mean()) - float(zout.mean())) / sd
    se = math.sqrt(1 / zs.size + 1 / zout.size)
    return mu, float(stats.norm.sf((mu - SILENT_MATERIAL) / se)), int(zs.size)


def lag_correlation(z_out: np.ndarray) -> tuple[float | None, float | None]:
    """Mean lag-1 correlation of the null canaries' projections across rounds, z_out (T, k), and its standard
    error 1/√(k(T−1)) under independent rounds; (None, None) with fewer than 3 rounds."""
    rounds, k = z_out.shape
    if rounds < 3 or k == 0:
        return None, None
    c = z_out - z_out.mean()
    var = float(np.mean(c**2))
    if var == 0:
        return None, None
    return float(np.mean(c[1:] * c[:-1]) / var), 1.0 / math.sqrt(k * (rounds - 1))


def empirical_epsilon(sigma: float, *, q: float, rounds: int, delta: float) -> tuple[float, bool]:
    """PLD ε of PoissonSampled(q, Gaussian(σ)) over ``rounds`` at ``delta``; σ = ∞ (μ̂ ≤ 0) or no round released
    (secure aggregation with too few survivors) gives 0. Also whether σ was raised to :data:`EPSILON_SIGMA_FLOOR`."""
    from hdp_planner.accounting.pld import pld_epsilon

    if not sigma > 0 or math.isinf(sigma) or rounds == 0:
        return 0.0, False
    capped = sigma < EPSILON_SIGMA_FLOOR
    return pld_epsilon(noise_multiplier=max(sigma, EPSILON_SIGMA_FLOOR), q=q, rounds=rounds, delta=delta), capped


def audit_group(
    z: np.ndarray,
    joined: np.ndarray,
    inserted: np.ndarray,
    *,
    q: float,
    delta: float,
    epsilon_planned: float,
    sigma_planned: float,
    seed: int,
    clients: tuple[int, int] = (0, 0),
    unfaithful: int = 0,
    mismatched: tuple[int, int] = (0, 0),
    offered: int | None = None,
    compositions: int | None = None,
    rate: str = "q_m",
    joins: int | None = None,
    silent: np.ndarray | None = None,
) -> dict[str, Any]:
    """The audit entry of one group from its canaries' projections z (T, K), joins (T, K) and in/out bits (K,) in
    the T rounds it released, the real clients aggregated out of the (client, round) pairs offered ``clients``,
    the rounds whose release was not the plan's post-processing of the noisy sum ``unfaithful``, and the rounds that
    aggregated more and fewer clients than the sampler drew ``mismatched``.

    Public cohorts and private coins: ``joined`` marks the canaries' heads (the referee's, learnt after the run),
    ``offered`` their cohort memberships (the draws at rate ``q``, the coin p_m; by default every in canary in every
    round), ``compositions`` the memberships ε composes, min(T, K_m) (by default T), ``rate`` names the rate, and
    ``silent`` (T, K) marks the memberships that must not shift the sum (tails, :func:`silent_shift`).

    Dropouts: ``joined`` marks only the contributions that reached the sum; ``joins``, the draws' joins tested
    against the rate, defaults to their count (a Poisson audit passes the sampler's joins, dropped canaries
    included; a cohort audit leaves the dropped memberships out of ``offered``)."""
    rounds = z.shape[0]
    steps = rounds if compositions is None else compositions
    mu, count = shift_estimate(z, joined, inserted)
    lo, hi = shift_interval(z, joined, inserted, seed=seed)
    corr, se = lag_correlation(z[:, ~inserted])
    k_in = int(inserted.sum())
    draws = k_in * rounds if offered is None else offered
    drawn = count if joins is None else joins
    entry: dict[str, Any] = {
        "epsilon_planned": epsilon_planned,
        "noise_multiplier_planned": sigma_planned,
        "sampling_rate_planned": q,
        "sampling_rate_name": rate,
        "sampling_rate_observed": drawn / draws if draws else None,
        "sampling_p_value": join_p_value(drawn, offered=draws, q=q),
        "sampling_rate_clients": clients[0] / clients[1] if clients[1] else None,
        "sampling_p_value_clients": join_p_value(clients[0], offered=clients[1], q=q),
        "releases_not_post_processing": unfaithful,
        "rounds_aggregating_more_than_sampled": mismatched[0],
        "rounds_aggregating_fewer_than_sampled": mismatched[1],
        "canaries_in": k_in,
        "canaries_out": int((~inserted).sum()),
        "insertions": count,
        "rounds": rounds,
        "compositions": steps,
        "shift_noise_units": None if math.isnan(mu) else mu,
        "shift_interval": None if math.isnan(lo) else [lo, hi],
        "lag1_correlation": corr,
        "lag1_correlation_se": se,
        "epsilon_lower_bound": steinke_lower_bound(z.sum(0), inserted, delta=delta) if rounds else 0.0,  # no release
        # what ε̂ estimates when the run is correct: the same PLD accountant at the planned σ (below the planned ε,
        # which the plan's accountant, RDP by default, bounds less tightly)
        "epsilon_pld_of_planned_sigma": empirical_epsilon(sigma_planned, q=q, rounds=steps, delta=delta)[0],
    }
    if silent is not None:
        shift, p_value, pairs = silent_shift(z, silent, inserted)
        entry.update(silent_memberships=pairs, silent_shift_noise_units=shift, silent_p_value=p_value)
    if math.isnan(mu):
        entry.update(
            epsilon_empirical=None, epsilon_empirical_interval=None, epsilon_empirical_upper=None,
            noise_multiplier_empirical=None, noise_multiplier_interval=None, epsilon_empirical_capped=False,
        )  # fmt: skip
    else:
        sigma_hat = 1 / mu if mu > 0 else math.inf
        sigma_lo = 1 / hi if hi > 0 else math.inf  # the largest plausible shift: the least noise
        sigma_hi = 1 / lo if lo > 0 else math.inf
        eps, cap1 = empirical_epsilon(sigma_hat, q=q, rounds=steps, delta=delta)
        eps_hi, cap2 = empirical_epsilon(sigma_lo, q=q, rounds=steps, delta=delta)
        eps_lo, _ = empirical_epsilon(sigma_hi, q=q, rounds=steps, delta=delta)
        entry.update(
            epsilon_empirical=eps,
            epsilon_empirical_interval=[eps_lo, eps_hi],
            epsilon_empirical_upper=eps_hi,
            epsilon_empirical_capped=cap1 or cap2,
            noise_multiplier_empirical=_finite(sigma_hat),
            noise_multiplier_interval=[_finite(sigma_lo), _finite(sigma_hi)],
        )
    entry["verdict"] = verdict(entry)
    return entry


def join_p_value(joined: int, *, offered: int, q: float) -> float:
    """Two-sided exact binomial p-value of ``joined`` joins out of ``offered`` draws at rate q (1 with no draw)."""
    return float(stats.binomtest(joined, offered, min(q, 1.0)).pvalue) if offered else 1.0


def _finite(x: float) -> float | None:
    return None if math.isinf(x) else x


def verdict(entry: dict[str, Any]) -> str:
    """Verdict "UNDER-NOISED" when ε̂'s interval lies above the planned ε, the one-run lower bound exceeds it, the
    null canaries correlate across rounds, clients or canaries join more often than q_m (p < ``SAMPLING_ALPHA``),
    tails memberships shift the sum (:func:`silent_shift`, p < ``SAMPLING_ALPHA``), a release is not the plan's
    post-processing of the noisy sum or a round aggregated more clients than were sampled; "NOT AS PLANNED" when
    they join less often than q_m or a round aggregated fewer clients than were sampled; "not identifiable" when no
    canary was inserted; else "consistent"."""
    planned = entry["epsilon_planned"]
    reasons = []
    q, name = entry["sampling_rate_planned"], entry.get("sampling_rate_name", "q_m")
    rates = (("clients", "sampling_rate_clients", "sampling_p_value_clients"),
             ("canaries", "sampling_rate_observed", "sampling_p_value"))  # fmt: skip
    below = []
    for who, rate, p_value in rates:
        if entry[rate] is not None and entry[p_value] < SAMPLING_ALPHA:
            found = f"{who} join at {entry[rate]:.3g}, the plan's {name} {q:.3g}"
            (reasons if entry[rate] > q else below).append(found)
    if entry.get("silent_p_value", 1.0) < SAMPLING_ALPHA:
        reasons.append(f"tails memberships shift the sum by {entry['silent_shift_noise_units']:.3g} noise units")
    if entry["releases_not_post_processing"]:
        reasons.append(f"{entry['releases_not_post_processing']} releases not a function of the noisy sum")
    if entry["rounds_aggregating_more_than_sampled"]:
        reasons.append(
            f"{entry['rounds_aggregating_more_than_sampled']} rounds aggregated clients the sampler did not draw"
        )
    if entry["rounds_aggregating_fewer_than_sampled"]:
        below.append(f"{entry['rounds_aggregating_fewer_than_sampled']} rounds aggregated fewer clients than sampled")
    interval = entry.get("epsilon_empirical_interval")
    if interval is not None and interval[0] > planned:
        reasons.append("empirical ε above plan")
    if entry["epsilon_lower_bound"] > planned:
        reasons.append("lower bound above plan")
    corr, se = entry["lag1_correlation"], entry["lag1_correlation_se"]
    if corr is not None and corr > CORRELATION_MATERIAL + 3 * se:
        reasons.append("noise correlated across rounds")
    if reasons:
        return "UNDER-NOISED (" + "; ".join(reasons + below) + ")"
    if below:
        return "NOT AS PLANNED (" + "; ".join(below) + ")"
    return "not identifiable (no canary inserted)" if entry["epsilon_empirical"] is None else "consistent"


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def audit_lines(section: dict[str, Any]) -> list[str]:
    """The audit table as text lines: per group planned ε, ε̂ [interval], lower bound, σ, q, correlation, verdict."""
    lines = [
        f"privacy audit ({section['canaries_per_group']} canaries per group): group | ε planned | "
        "ε̂ [95% interval] | lower bound | σ planned / σ̂ | q planned / canaries / clients | lag-1 corr | verdict"
    ]
    for g in section["groups"]:
        interval = g["epsilon_empirical_interval"]
        emp = "—" if interval is None else f"{_fmt(g['epsilon_empirical'])} [{_fmt(interval[0])}, {_fmt(interval[1])}]"
        if g.get("epsilon_empirical_capped"):
            emp = "≥ " + emp
        lines.append(
            f"  {g['group']} | {_fmt(g['epsilon_planned'])} | {emp} | {_fmt(g['epsilon_lower_bound'])} | "
            f"{_fmt(g['noise_multiplier_planned'])} / {_fmt(g['noise_multiplier_empirical'])} | "
            f"{_fmt(g['sampling_rate_planned'])} / {_fmt(g['sampling_rate_observed'])} / "
            f"{_fmt(g.get('sampling_rate_clients'))} | "
            f"{_fmt(g['lag1_correlation'])} | {g['verdict']}"
        )
    return lines
