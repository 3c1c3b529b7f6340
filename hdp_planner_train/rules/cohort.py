"""Rounds with public cohorts and private coins (:mod:`hdp_planner.trust.cohorts`) as the simulator runs them.

The plan's verified cohort row gives each group its cohort m, coin p, memberships K and z; the noise law of each
group is the cohort's (:func:`~hdp_planner.trust.cohort_rows.cohort_law`). Each round the server names the cohorts
(:func:`~hdp_planner.distributed.coins.choose_cohort`), every member that admits it
(:func:`~hdp_planner.distributed.coins.admits`) trains, and its message goes through the group's secure sum with its
coin applied (:func:`~hdp_planner_train.rules.secagg.group_sum`). The weights ω_m and sparsity k_m/d are the cohort
row's, whose expected contributors r_m = m·p (public) may differ from the trusted plan's; the weights' denominators
are those r_m, never the number of heads.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hdp_planner.distributed.coins import admits, choose_cohort, flip
from hdp_planner.distributed.randomness import SecureBits, SeededBits
from hdp_planner.rules.noise import SecureRandom
from hdp_planner_train.rules.secagg import SecaggSpec

COIN_STREAM = 0xC0
"""The seeded simulation's coins: SeedSequence([seed, round, group, COIN_STREAM]) (secure runs: the OS's CSPRNG)."""


def cohort_round(
    secagg: SecaggSpec, offsets: Sequence[int], used: list[np.ndarray], rng: np.random.Generator | SecureRandom
) -> list[np.ndarray]:
    """Global ids of each group's cohort members who join this round: the server's cohort
    (:func:`~hdp_planner.distributed.coins.choose_cohort` over ``used``, each client's memberships so far), less the
    members whose own cap refuses it; ``used`` counts the memberships taken (the clients' own state)."""
    out = []
    for m, (g, off) in enumerate(zip(secagg.cohorts, offsets)):
        named = choose_cohort(used[m], g.cohort, rng)
        joined = named[[admits(used=int(used[m][i]), memberships=g.memberships, announced=named.size,
                               cohort=g.cohort) for i in named]]  # fmt: skip
        used[m][joined] += 1
        out.append(off + joined)
    return out


def member_coins(secagg: SecaggSpec, kind: str, *, seed: int | None, rnd: int, group: int, members: int) -> np.ndarray:
    """The private coins (1 heads, 0 tails) of a group's ``members``, each heads with the plan's p_m
    (:func:`~hdp_planner.distributed.coins.flip`): from the OS's CSPRNG, or in a seeded simulation from
    (seed, round, group, :data:`COIN_STREAM`), where the noise is seeded as well."""
    bits = SeededBits(np.random.SeedSequence([int(seed or 0), rnd, group, COIN_STREAM])) if kind == "seeded" else (
        SecureBits())  # fmt: skip
    coin = secagg.cohorts[group].coin
    return np.array([flip(coin, bits) for _ in range(members)], dtype=np.int64)
