"""One DP aggregation round (GDPFed Algorithm 1, lines 10-16), written once and used by both engines.

The rules (sampling, clip factor, noise shares, Λ) come from :mod:`hdp_planner.rules.noise`; this module only
applies them to torch tensors:

1. every group m Poisson-samples its clients with rate q_m (:func:`~.sampling.sample_round`, numpy Generator seeded
   from (seed, round), so both engines and a resumed run sample identically);
2. each joined client's update Δ_i = θ_i − θ is clipped to ‖Δ_i‖ ≤ C and the client adds its share
   N(0, std²), std = ``noise_share_std(C, σ_m, c)``, so the group's sum carries exactly N(0, C²σ_m²)
   whatever the number c joined; if c = 0 the server adds N(0, C²σ_m²) itself;
3. the server keeps the top-k_m coordinates (by |·|) of the group's noisy sum y_m (GDPFed+) and
   applies θ ← θ + Σ_m ω_m·Top_k(y_m).

The baselines change these steps as their plan entries say (:mod:`hdp_planner.methods.baselines`): per-group
clipping thresholds C_m (IDP-FedAvg-Scale); one pooled draw N(0, s²), s = C_mσ_m, on the sum of every group,
shared by all c joined clients (IDP-FedAvg), with ω = 1/Σr; σ_m of the round from a schedule (time-adaptive);
PFA's projection of one group's noisy sum onto the principal subspace of the public group's latest noisy sums
(:func:`~.release.principal_subspace`) instead of Top-k.

Every Gaussian draw comes from a :class:`~.noise_sources.NoiseSource`; the server's side of the round (Top-k or PFA's
projection, the weights, the measured noise) is :func:`~.release.noisy_update`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from hdp_planner_train.rules.clipping import clip_rows
from hdp_planner_train.rules.cohort import member_coins
from hdp_planner_train.rules.noise_sources import NoiseSource, group_noise
from hdp_planner_train.rules.release import Observer, noisy_update, skipping
from hdp_planner_train.rules.secagg import Withheld, group_sum, round_sources
from hdp_planner_train.rules.specs import GroupSpec


@dataclass(frozen=True, kw_only=True)
class RoundStats:
    joined: list[int]
    clipped: int  # clients whose update was scaled down
    lambda_measured: float
    lambda_applied: float
    withheld: tuple[Withheld, ...] = ()  # secure aggregation: the groups whose sum was not released, and why


Referee = Callable[[int, np.ndarray], None]
"""``referee(m, coins)``: the private coins of group m's rows in a cohort round, handed to the audit's referee (never
to the server), who reads the canaries' among them only after the run (:mod:`hdp_planner_train.audit.canaries`)."""
Survivors = Callable[[int, np.ndarray], None]
"""``survivors(m, alive)``: which of group m's rows survived to its secure sum this round (the server sees who sent a
masked vector), told to the audit before the group is observed."""


@dataclass(frozen=True, kw_only=True)
class Observers:
    """What the privacy audit (:mod:`hdp_planner_train.audit.canaries`) is told of a round; None: nothing.

    Args:
        observe: Sees what :func:`noisy_update` releases of each group (:data:`~.release.Observer`).
        referee: Learns each cohort round's coins (:data:`Referee`).
        survivors: Learns which rows survived to each secure sum (:data:`Survivors`).
    """

    observe: Observer | None = None
    referee: Referee | None = None
    survivors: Survivors | None = None


@dataclass(frozen=True, kw_only=True)
class Tally:
    """What a round's noisy sums hold: the clients ``joined`` per group, how many updates were ``clipped``, and the
    groups ``withheld`` (secure aggregation: not released, and why)."""

    joined: list[int]
    clipped: int
    withheld: tuple[Withheld, ...] = ()


def aggregate(
    deltas: torch.Tensor,
    group_of_row: Sequence[int],
    spec: GroupSpec,
    source: NoiseSource | None,
    *,
    rnd: int = 0,
    public_history: list[torch.Tensor] | None = None,
    observers: Observers = Observers(),
) -> tuple[torch.Tensor, RoundStats]:
    """The server update Σ_m ω_m·Top_k(Σ_{i∈m} clip(Δ_i) + noise_m) from flat client updates ``deltas`` (K, d).

    ``rnd`` picks σ_m from a schedule; PFA appends the public group's noisy sum to ``public_history`` (the
    caller keeps it between rounds) and projects onto the principal subspace of its latest ``window`` entries.
    ``observers``: the privacy audit's (:class:`Observers`); its ``observe`` sees what :func:`noisy_update` releases,
    and under secure aggregation a group that releases nothing is observed as ``observe(m, None, None)``; its
    ``referee`` learns each cohort round's coins, its ``survivors`` which rows survived to each secure sum.
    """
    observe, referee, survivors = observers.observe, observers.referee, observers.survivors
    d = deltas.shape[1]
    groups = torch.as_tensor(np.asarray(group_of_row, dtype=np.int64), device=deltas.device)
    count = len(spec.sizes)
    rows = [deltas[groups == m] for m in range(count)]
    joined = [int(r.shape[0]) for r in rows]
    if not spec.private:
        update = sum((w * r.sum(0) for w, r in zip(spec.weight, rows)), torch.zeros_like(deltas[0:1].sum(0)))
        return update, RoundStats(joined=joined, clipped=0, lambda_measured=0.0, lambda_applied=0.0)
    assert source is not None, "a private method needs a noise source"
    sigma = spec.noise_at(rnd)
    if spec.secagg is not None and not spec.pooled:  # the exact integer pipeline; a silent group contributes nothing
        clipped_rows = [clip_rows(r, c) for r, c in zip(rows, spec.clips)]
        clipped = sum(c for _, c in clipped_rows)
        ys, noises, silent = [], [], {}  # silent: the groups that released nothing, each with why
        for m, (r, _) in enumerate(clipped_rows):
            seed = getattr(source, "seed", None)
            bits, dropouts = round_sources(source.kind, seed=seed, rnd=rnd, group=m)
            coins = None if spec.secagg.cohorts is None else member_coins(
                spec.secagg, source.kind, seed=seed, rnd=rnd, group=m, members=r.shape[0])  # fmt: skip
            if coins is not None and referee is not None:
                referee(m, coins)
            survived = None if survivors is None else functools.partial(survivors, m)
            out = group_sum(r, spec=spec.secagg, rnd=rnd, group=m, bits=bits, dropouts=dropouts, coins=coins,
                            survived=survived)  # fmt: skip
            if isinstance(out, Withheld):
                silent[m] = out
                if observe is not None:
                    observe(m, None, None)
            y, n = (deltas.new_zeros(d), deltas.new_zeros(d)) if isinstance(out, Withheld) else out
            ys.append(y)
            noises.append(n)
        withheld = tuple(silent.values())
        if observe is not None and silent:
            observe = skipping(observe, set(silent))
    else:
        ys, noises, clipped = noisy_sums(rows, spec, sigma, source)
        withheld = ()
    return released_update(ys, noises, spec=spec, source=source, public_history=public_history,
                           tally=Tally(joined=joined, clipped=clipped, withheld=withheld), observe=observe)  # fmt: skip


def released_update(
    ys: list[torch.Tensor],
    noises: list[torch.Tensor] | None,
    *,
    spec: GroupSpec,
    source: NoiseSource,
    public_history: list[torch.Tensor] | None,
    tally: Tally,
    observe: Observer | None,
) -> tuple[torch.Tensor, RoundStats]:
    """:func:`noisy_update` of the groups' noisy sums ``ys``, with the round's statistics: the server update, and the
    round's ``tally`` (clients joined, clipped, groups withheld) with Λ measured and applied."""
    update, measured, applied = noisy_update(ys, noises=noises, spec=spec, source=source, public_history=public_history,
                                             observe=observe)  # fmt: skip
    return update, RoundStats(joined=tally.joined, clipped=tally.clipped, lambda_measured=measured,
                              lambda_applied=applied, withheld=tally.withheld)  # fmt: skip


class GroupAggregator:
    """One method's server aggregation, written once for the simulator and Flower: clipping, noise, the audit's
    observer, Top-k_m or PFA's projection, and the weights ω_m (:func:`aggregate`, :func:`noisy_sums`,
    :func:`released_update`).

    Args:
        spec: The method's per-group rules, from the plan (:func:`method_spec`).
        public_history: PFA's state between rounds, the public group's latest noisy sums (checkpointed as is).
    """

    def __init__(self, spec: GroupSpec, public_history: Sequence[torch.Tensor] = ()):
        self.spec = spec
        self.public_history = list(public_history)

    def round(
        self,
        deltas: torch.Tensor,
        group_of_row: Sequence[int],
        *,
        source: NoiseSource | None,
        rnd: int,
        observers: Observers = Observers(),
    ) -> tuple[torch.Tensor, RoundStats]:
        """:func:`aggregate` of one round's client updates.

        Args:
            deltas: The flat client updates, one row per client (K, d).
            group_of_row: Each row's group.
            source: Where the noise is drawn (None: a method that adds none).
            rnd: The round (0-based), which picks σ_m from a schedule.
            observers: What the privacy audit is told of the round (:class:`Observers`).

        Returns:
            The server update, and the round's statistics.
        """
        return aggregate(deltas, group_of_row, self.spec, source, rnd=rnd, public_history=self.public_history,
                         observers=observers)  # fmt: skip

    def release(
        self,
        ys: list[torch.Tensor],
        noises: list[torch.Tensor] | None,
        source: NoiseSource,
        *,
        joined: list[int],
        clipped: int,
        withheld: tuple[Withheld, ...] = (),
        observe: Observer | None = None,
    ) -> tuple[torch.Tensor, RoundStats]:
        """:func:`noisy_update` of groups' noisy sums formed elsewhere (Flower's replies, secure aggregation).

        Args:
            ys: Each group's noisy sum (one pooled sum when the spec pools).
            noises: The noise in each sum, where the server drew it (None: clients added it).
            source: Where PFA's start vectors are drawn.
            joined: The clients each group's sum holds.
            clipped: How many of their updates were scaled down.
            withheld: The groups whose sum was not released, and why.
            observe: The privacy audit's observer of what the round releases.

        Returns:
            The server update, and the round's statistics (Λ measured and applied NaN where the server does not
            know the noise).
        """
        return released_update(ys, noises, spec=self.spec, source=source, public_history=self.public_history,
                               tally=Tally(joined=joined, clipped=clipped, withheld=withheld),
                               observe=observe)  # fmt: skip


def noisy_sums(
    rows: Sequence[torch.Tensor], spec: GroupSpec, sigma: Sequence[float], source: NoiseSource
) -> tuple[list[torch.Tensor], list[torch.Tensor], int]:
    """Each group's y_m = Σ_{i∈m} clip(Δ_i) + N(0, C_m²σ_m²) (GDPFed Algorithm 1), or one pooled y of one draw of
    std C_mσ_m (equal for all m) shared by every joined client; their noises; how many rows were clipped. ``rows``:
    the (c_m, d) updates of each group, on one device and dtype. The simulator and Flower both aggregate here."""
    clipped_rows = [clip_rows(r, c) for r, c in zip(rows, spec.clips)]
    clipped = sum(c for _, c in clipped_rows)
    joined = [int(r.shape[0]) for r in rows]
    d, device, dtype = rows[0].shape[1], rows[0].device, rows[0].dtype
    if spec.pooled:
        total = torch.cat([r for r, _ in clipped_rows]).sum(0) if sum(joined) else rows[0].new_zeros(d)
        noise = group_noise(d, joined=sum(joined), clip=spec.clips[0], noise_multiplier=sigma[0], source=source,
                            device=device, dtype=dtype)  # fmt: skip
        return [total + noise], [noise], clipped
    noises = [group_noise(d, joined=joined[m], clip=spec.clips[m], noise_multiplier=sigma[m], source=source,
                          device=device, dtype=dtype) for m in range(len(rows))]  # fmt: skip
    return [r.sum(0) + n for (r, _), n in zip(clipped_rows, noises)], noises, clipped
