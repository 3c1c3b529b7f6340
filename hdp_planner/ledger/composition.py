"""What a client's rounds cost together: the smallest of the (ε, δ) upper bounds valid for their composition.

Each round is a :class:`GroupRound`: a Poisson-subsampled Gaussian, or with ``tau_d`` a distributed discrete Gaussian
sum under secure aggregation, recorded with the accountant that planned it. :func:`compose` reports the smallest of
the bounds that hold for the whole composition (each is an upper bound, so their minimum is one):

- RDP, always: dp-accounting's RDP accountant for the sampled Gaussian (Mironov 2017; Mironov, Talwar and Zhang
  2019); with any distributed round, every round at the integer orders 2..256 with the binomial expansion for Poisson
  subsampling (valid for every symmetric mechanism, the Gaussian's included, so mixing both kinds never
  under-reports), a distributed round's RDP being α/(2z²) + τ·d' (:mod:`hdp_planner.distributed.accounting`,
  Proposition 14);
- PLD, where every round is a sampled Gaussian and one was planned by PLD: a plan calibrated with PLD runs within
  the budget RDP would refuse.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import numpy as np
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from hdp_planner.accounting.accountants import get_accountant
from hdp_planner.accounting.calibration import dp_event, epsilons_spent, quiet_dp_accounting
from hdp_planner.accounting.rdp import kl_certifies_zero
from hdp_planner.distributed.accounting import ORDERS, epsilon_from_rdp, poisson_subsampled_rdp, release_rdp
from hdp_planner.rules.costs import GroupRound


def compose(rounds: Mapping[GroupRound, int], delta: float) -> float:
    """ε at ``delta`` of the composition of ``rounds[g]`` rounds of each g: the smallest of the upper bounds that hold
    for the whole composition (each is one, so their minimum is one): RDP always (:func:`compose_rdp`), and, where
    every round is a sampled Gaussian and one was planned by PLD, dp-accounting's PLD (:func:`compose_pld`). The
    rounds' ``delta_cost`` is paid first: the accountants measure ε at δ − Σ count·delta_cost (infinite where that
    leaves nothing), since the composition's failure probability adds the events' (basic composition of δ)."""
    if not rounds:
        return 0.0
    delta -= sum(count * g.delta_cost for g, count in rounds.items())
    if delta <= 0:
        return math.inf
    bounds = [compose_rdp(rounds, delta)]
    if all(g.tau_d is None for g in rounds) and any(get_accountant(g.accountant).refines for g in rounds):
        bounds.append(compose_pld(rounds, delta))
    return min(bounds)


def compose_rdp(rounds: Mapping[GroupRound, int], delta: float) -> float:
    """The RDP bound: dp-accounting's RDP accountant for sampled Gaussian rounds, or 0 where the closed-form bound of
    orders 1.1 … 2 certifies it (the planner's RDP accountant); :func:`compose_distributed` with any distributed
    discrete Gaussian round."""
    if any(g.tau_d is not None for g in rounds):
        return compose_distributed(rounds, delta)
    if kl_certifies_zero([(g.noise_multiplier, g.q, count) for g, count in rounds.items()], delta):
        return 0.0  # as the planner's accountant: dp-accounting's sums are float noise or loose there
    acc = RdpAccountant()
    with quiet_dp_accounting():  # its "failed to converge" lines exclude orders, never under-report
        for g, count in rounds.items():
            acc.compose(dp_event(g.noise_multiplier, q=g.q, rounds=count))
        return float(acc.get_epsilon(delta))


def compose_pld(rounds: Mapping[GroupRound, int], delta: float) -> float:
    """The PLD bound of sampled Gaussian rounds (Koskela, Jälkö and Honkela 2020; dp-accounting's PLDAccountant,
    pessimistic estimate). One kind of round is measured by the planner's own PLD accountant
    (:func:`epsilons_spent`, the ε its plan was calibrated with); several kinds, σ and q mixed, by dp-accounting's
    ``PLDAccountant`` at its default discretization, composing every kind's PLD."""
    if len(rounds) == 1:
        ((g, count),) = rounds.items()
        return float(epsilons_spent(noise_multipliers=[g.noise_multiplier], q=[g.q], rounds=count, delta=delta,
                                    accountant="pld")[0])  # fmt: skip
    acc = PLDAccountant()
    for g, count in rounds.items():
        acc.compose(dp_event(g.noise_multiplier, q=g.q, rounds=count))
    return float(acc.get_epsilon(delta))


def compose_distributed(rounds: Mapping[GroupRound, int], delta: float) -> float:
    """ε at ``delta`` of ``rounds`` at the integer orders 2..256: each round's RDP α/(2z²) + τ·d' (0 for a Gaussian
    round) amplified by the binomial expansion's Poisson-subsampling bound, summed, converted by Canonne, Kamath and
    Steinke's Proposition 12."""
    total = np.zeros(ORDERS.size)
    for g, count in rounds.items():
        total += count * _round_rdp(g)
    return epsilon_from_rdp(ORDERS, total, delta)


@functools.lru_cache(maxsize=1024)
def _round_rdp(g: GroupRound) -> np.ndarray:
    """One round's amplified RDP at :data:`ORDERS` (read-only; cached: a node composes the same rounds at every
    admission)."""
    rdp = release_rdp(ORDERS, noise_multiplier=g.noise_multiplier, tau_d=g.tau_d or 0.0)
    out = np.array(poisson_subsampled_rdp(ORDERS, rdp, g.q))
    out.setflags(write=False)
    return out
