"""Rounds with public cohorts and private coins (:mod:`hdp_planner.distributed.cohorts`) as the simulator runs them.

The plan file's verified ``hidden_participation`` row gives each group its cohort m, coin p, memberships K and z;
the noise law of each group is the cohort's (:func:`~hdp_planner.distributed.cohorts.cohort_law`). Each round the
server names the cohorts (:func:`~hdp_planner.distributed.coins.choose_cohort`), every member that admits it
(:func:`~hdp_planner.distributed.coins.admits`) trains, and its message goes through the group's secure sum with its
coin applied (:func:`~hdp_planner_train.rules.secagg.group_sum`). The weights ω_m and sparsity k_m/d are the cohort
row's, whose expected contributors r_m = m·p (public) may differ from the trusted plan's; the weights' denominators
are those r_m, never the number of heads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from hdp_planner.distributed.accounting import epsilon_third_parties
from hdp_planner.distributed.cohorts import CohortGroup, cohort_law
from hdp_planner.distributed.coins import admits, choose_cohort, flip
from hdp_planner.distributed.randomness import SecureBits, SeededBits
from hdp_planner.distributed.rounds import group_tau_d
from hdp_planner.ledger.composition import GroupRound
from hdp_planner.planfile.cohorts import GROUP_FIELDS, KEY, verify_hidden
from hdp_planner.planfile.trust import trust_from_dict
from hdp_planner.rules.noise import SecureRandom
from hdp_planner_train.rules.secagg import SecaggSpec, planned_groups

COIN_STREAM = 0xC0
"""The seeded simulation's coins: SeedSequence([seed, round, group, COIN_STREAM]) (secure runs: the OS's CSPRNG)."""


def is_cohort_plan(doc: dict) -> bool:
    """Whether the plan file was solved with hidden participation (``solve --hide-sample``)."""
    return doc.get(KEY) is not None


def planned_cohorts(doc: dict, plan, spec, method: str, dropout: float = 0.0):
    """``spec`` (a :class:`~hdp_planner_train.rules.specs.GroupSpec`) under the plan's verified
    ``hidden_participation`` row of ``method``: each group's cohort, coin, memberships and z, the cohort's noise law,
    the row's expected contributors (as the rate q_m = r_m/|G_m|), weights ω_m and sparsity k_m/d, and its Λ with
    cohorts. Raises ValueError (one line) when the row has no cohort."""
    trust = trust_from_dict(doc)
    problems = verify_hidden(plan, doc)
    if problems:
        raise ValueError(f"the plan fails verification: {problems[0]}")
    entry = doc[KEY]["rows"].get(method)
    if entry is None or not spec.private:
        raise ValueError(f"{spec.method} has no cohort in the plan's hidden participation (solve --hide-sample)")
    groups = tuple(CohortGroup(**{key: entry[key][i] for key in GROUP_FIELDS}) for i in range(len(entry["cohort"])))
    laws = tuple(
        cohort_law(cohort=g.cohort, noise_multiplier=g.noise_multiplier, clip=clip, trust=trust)
        for g, clip in zip(groups, spec.clips)
    )
    secagg = SecaggSpec(bits=trust.bits, survivors=trust.survivors, colluders=trust.colluders,
                        model_dim=int(trust.model_dim or 0), laws=laws, dropout=dropout,
                        planned_lambda=entry["lambda_cohort"], cohorts=groups)  # fmt: skip
    return dataclasses.replace(
        spec, q=tuple(g.expected_contributors / size for g, size in zip(groups, spec.sizes)),
        noise_multiplier=tuple(g.noise_multiplier for g in groups), k_ratio=tuple(entry["k_ratio"]),
        weight=tuple(entry["weight"]), secagg=secagg,
    )  # fmt: skip


def planned_secure(doc: dict, plan, spec, method: str, dropout: float = 0.0):
    """``spec`` under secure aggregation as the plan file says to run it: with public cohorts where it was solved
    with ``--hide-sample`` (:func:`planned_cohorts`), else with the server's Poisson sample
    (:func:`~hdp_planner_train.rules.secagg.planned_groups`)."""
    return (planned_cohorts if is_cohort_plan(doc) else planned_groups)(doc, plan, spec, method, dropout)


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


def cohort_costs(secagg: SecaggSpec, *, start: int, rounds: int) -> list[list[GroupRound]]:
    """What rounds ``start``..``rounds``−1 charge each group's members in the ledger: one membership, the
    distributed discrete Gaussian at z_m subsampled by the coin p_m, in each of the run's first K_m rounds, and
    nothing after (a q = 0 round). A client is in at most min(r, K_m) cohorts after r rounds, so every prefix of
    the run is charged at least what it spends; the whole run charges the plan's ε against the server."""
    return [
        [GroupRound(q=g.coin if r < g.memberships else 0.0, noise_multiplier=g.noise_multiplier,
                    tau_d=group_tau_d(g.cohort, model_dim=secagg.model_dim))
         for g in secagg.cohorts]
        for r in range(start, rounds)
    ]  # fmt: skip


def epsilon_spent(secagg: SecaggSpec, group: int, *, rounds: int, delta: float) -> float:
    """ε against the server (and so against third parties) after ``rounds`` rounds: min(rounds, K_m) memberships
    at p_m (the planner's bound, :func:`~hdp_planner.distributed.cohorts.cohort_group`)."""
    g = secagg.cohorts[group]
    return epsilon_third_parties(noise_multiplier=g.noise_multiplier, q=g.coin, rounds=min(rounds, g.memberships),
                                 delta=delta, tau_d=group_tau_d(g.cohort, model_dim=secagg.model_dim))  # fmt: skip
