"""Rounds with public cohorts and private coins (:mod:`hdp_planner.trust.cohorts`) as the simulator runs them.

The plan's verified cohort row gives each group its cohort m, coin p, memberships K and z; the noise law of each
group is the cohort's (:func:`~hdp_planner.trust.cohort_rows.cohort_law`). The cohorts are the public rule's
(:class:`~hdp_planner.distributed.cohort_rule.CohortRule`, its seed from the clients' commitments,
:func:`simulated_rule`): each round the server names them, every member checks that the run is exactly the cohort the
rule draws and that its cap admits it (:func:`~hdp_planner.distributed.coins.admits`) and trains, and its message
goes through the group's secure sum with its coin applied (:func:`~hdp_planner_train.rules.secagg.group_sum`).
The weights ω_m and sparsity k_m/d are the cohort row's, whose expected contributors r_m = m·p (public) may differ
from the trusted plan's; the weights' denominators are those r_m, never the number of heads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from hdp_planner.distributed.cohort_rule import REVEAL_BYTES, CohortRule, cohort_seed, commitment, fresh_reveal
from hdp_planner.distributed.coins import admits, flip
from hdp_planner.distributed.randomness import SecureBits, SeededBits
from hdp_planner_train.rules.secagg import SecaggSpec

COIN_STREAM = 0xC0
"""The seeded simulation's coins: SeedSequence([seed, round, group, COIN_STREAM]) (secure runs: the OS's CSPRNG)."""
RULE_STREAM = 0xC1
"""The seeded simulation's clients' reveals of the cohort seed: SeedSequence([seed, RULE_STREAM])."""


def simulated_rule(secagg: SecaggSpec, sizes: Sequence[int], kind: str, *, seed: int | None) -> CohortRule:
    """The cohort rule of a simulated run: every simulated client of each group (``sizes``; client i of group m is
    ``"m/i"``, :func:`client_ids`) commits to a reveal and opens it
    (:func:`~hdp_planner.distributed.cohort_rule.cohort_seed`); the reveals from the OS's CSPRNG, or in a seeded
    simulation from (seed, :data:`RULE_STREAM`)."""
    if kind == "seeded":
        draws = np.random.default_rng(np.random.SeedSequence([int(seed or 0), RULE_STREAM]))
        reveal = lambda: draws.bytes(REVEAL_BYTES)  # noqa: E731
    else:
        reveal = fresh_reveal
    groups = tuple(tuple(client_ids(m, range(size))) for m, size in enumerate(sizes))
    reveals = {client: reveal() for clients in groups for client in clients}
    commitments = {c: commitment(r) for c, r in reveals.items()}
    return CohortRule(seed=cohort_seed(reveals, commitments), groups=groups,
                      cohorts=tuple(g.cohort for g in secagg.cohorts))  # fmt: skip


def client_ids(group: int, local: Iterable[int]) -> list[str]:
    """The simulated clients' ids of group ``group``'s local indices ``local``: ``"group/i"``."""
    return [f"{group}/{i}" for i in local]


def named_cohorts(rule: CohortRule, rnd: int) -> list[np.ndarray]:
    """What an honest server names in round ``rnd`` (from 0): each group's cohort by the rule, as local indices."""
    return [np.array(sorted(int(c.split("/")[1]) for c in rule.cohort(group=m, rnd=rnd + 1)), dtype=np.int64)
            for m in range(len(rule.groups))]  # fmt: skip


def cohort_round(
    secagg: SecaggSpec, offsets: Sequence[int], used: list[np.ndarray], rule: CohortRule, rnd: int,
    named: Sequence[np.ndarray] | None = None,
) -> list[np.ndarray]:  # fmt: skip
    """Global ids of each group's members who join round ``rnd`` (from 0): of the cohort the server ``named``
    (None: an honest server's, :func:`named_cohorts`), nobody if it is not exactly the one the rule draws
    (:meth:`~hdp_planner.distributed.cohort_rule.CohortRule.run_refusal`: every member sees the same run), else
    every member whose own cap admits it; ``used`` counts the memberships taken (the clients' own state)."""
    named = named_cohorts(rule, rnd) if named is None else named
    out = []
    for m, (g, off, members) in enumerate(zip(secagg.cohorts, offsets, named)):
        members = np.asarray(members, dtype=np.int64)
        if rule.run_refusal(group=m, rnd=rnd + 1, members=client_ids(m, members.tolist())) is not None:
            out.append(off + members[:0])
            continue
        joined = members[[admits(used=int(used[m][i]), memberships=g.memberships, announced=members.size,
                                 cohort=g.cohort) for i in members]]  # fmt: skip
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
