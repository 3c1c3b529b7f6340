"""The public cohort rule: a seed from the clients' commitments that opens only with every reveal, a keyed permutation
every client recomputes, each client in at most K cohorts, and cohorts whose members are uniform given the seed (so
colluders in a cohort are hypergeometric in the group's)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from hdp_planner.distributed.cohort_colluders import colluder_tail, tolerated_group_colluders
from hdp_planner.distributed.cohort_rule import (
    CohortRule,
    cohort_order,
    cohort_seed,
    commitment,
    fresh_reveal,
    rule_cohort,
)

CLIENTS = [str(i) for i in range(30)]


def enrolled(clients=CLIENTS):
    reveals = {c: fresh_reveal() for c in clients}
    return reveals, {c: commitment(r) for c, r in reveals.items()}


def test_the_seed_opens_only_with_every_clients_reveal():
    reveals, commitments = enrolled()
    seed = cohort_seed(reveals, commitments)
    assert len(seed) == 32 and cohort_seed(dict(reversed(reveals.items())), commitments) == seed
    forged = {**reveals, "7": os.urandom(32)}  # a reveal chosen after seeing the others'
    with pytest.raises(ValueError, match="client 7's reveal does not open its commitment"):
        cohort_seed(forged, commitments)
    withheld = {c: r for c, r in reveals.items() if c != "3"}
    with pytest.raises(ValueError, match="different clients"):
        cohort_seed(withheld, commitments)


@settings(max_examples=20, deadline=None)
@given(size=st.integers(2, 60), cohort=st.data(), rounds=st.integers(1, 40))
def test_each_client_is_in_at_most_k_cohorts_and_every_cohort_has_m_members(size, cohort, rounds):
    m = cohort.draw(st.integers(1, size))
    clients = [f"c{i}" for i in range(size)]
    order = cohort_order(os.urandom(32), group=0, clients=clients)
    counts = dict.fromkeys(clients, 0)
    for r in range(1, rounds + 1):
        members = rule_cohort(order, cohort=m, rnd=r)
        assert len(set(members)) == m and set(members) <= set(clients)
        for c in members:
            counts[c] += 1
    assert max(counts.values()) <= math.ceil(rounds * m / size)


def test_the_order_depends_on_the_seed_and_the_group_only():
    seed = os.urandom(32)
    a = cohort_order(seed, group=1, clients=CLIENTS)
    assert a == cohort_order(seed, group=1, clients=list(reversed(CLIENTS)))  # whatever order they are listed in
    assert a != cohort_order(seed, group=2, clients=CLIENTS) and a != cohort_order(os.urandom(32), group=1,
                                                                                    clients=CLIENTS)  # fmt: skip
    with pytest.raises(ValueError, match="enrolled twice"):
        cohort_order(seed, group=1, clients=[*CLIENTS, "0"])


def test_colluders_in_a_targets_cohort_follow_the_hypergeometric_law():
    """Over fresh seeds, the colluders in the cohort of round 1 that holds a fixed honest target (5 of 30 clients
    collude; cohorts of 8) are distributed as Hypergeometric(29, 5, 7): what the accounting charges to δ."""
    colluders, target, m = set(CLIENTS[:5]), "29", 8
    counts = []
    for _ in range(4000):
        order = cohort_order(os.urandom(32), group=0, clients=CLIENTS)
        where = order.index(target) // m  # the round whose block holds the target (blocks of 8, wrapping)
        members = rule_cohort(order, cohort=m, rnd=where + 1)
        assert target in members
        counts.append(len(colluders & set(members)))
    observed = np.bincount(counts, minlength=6)
    expected = stats.hypergeom(29, 5, 7).pmf(np.arange(6)) * len(counts)
    keep = expected > 5
    rest = observed[~keep].sum(), expected[~keep].sum()
    chi2 = stats.chisquare(np.append(observed[keep], rest[0]), np.append(expected[keep], rest[1]))
    assert chi2.pvalue > 1e-6


def test_the_tail_is_the_hypergeometric_survival_function():
    assert colluder_tail(size=30, colluders=5, cohort=8, tolerated=7) == 0.0
    tail = colluder_tail(size=30, colluders=5, cohort=8, tolerated=1)
    direct = sum(math.comb(5, x) * math.comb(24, 7 - x) for x in range(2, 6)) / math.comb(29, 7)
    assert tail == pytest.approx(direct, rel=1e-12)
    with pytest.raises(ValueError):
        colluder_tail(size=30, colluders=30, cohort=8, tolerated=1)


def test_a_group_bound_on_colluders_is_the_largest_whose_tail_over_k_cohorts_stays_below_delta():
    delta, size, m, k, memberships = 1e-4, 2000, 125, 5, 4
    allowed = tolerated_group_colluders(size=size, cohort=m, tolerated=k, memberships=memberships, delta=delta)
    assert memberships * colluder_tail(size=size, colluders=allowed, cohort=m, tolerated=k) <= delta
    assert memberships * colluder_tail(size=size, colluders=allowed + 1, cohort=m, tolerated=k) > delta
    assert tolerated_group_colluders(size=size, cohort=m, tolerated=0, memberships=memberships, delta=delta) == 0
    assert tolerated_group_colluders(size=size, cohort=m, tolerated=1, memberships=1, delta=delta) == 1  # X ≤ 1


def stacked_and_mixed():
    """Two groups of 30 (ids a0…, b0…), cohorts of 8; a target of group 1 in round 1's cohort."""
    reveals, commitments = enrolled([f"a{i}" for i in range(30)] + [f"b{i}" for i in range(30)])
    rule = CohortRule(seed=cohort_seed(reveals, commitments), cohorts=(8, 8),
                      groups=(tuple(f"a{i}" for i in range(30)), tuple(f"b{i}" for i in range(30))))  # fmt: skip
    return rule, rule.cohort(group=0, rnd=1)


def test_every_member_joins_exactly_the_rules_cohort():
    rule, cohort = stacked_and_mixed()
    assert len(cohort) == 8 and all(rule.refusal(client=c, group=0, rnd=1, members=cohort) is None for c in cohort)
    outsider = next(c for c in rule.groups[0] if c not in cohort)
    assert rule.refusal(client=outsider, group=0, rnd=1, members=[*cohort[1:], outsider]) == (
        f"the cohort rule does not draw client {outsider} in group 1's cohort of round 1"
    )


def test_a_stacked_cohort_is_refused_by_the_target():
    """The server keeps the target and fills the cohort with seven clients of its choosing (its Sybils): refused."""
    rule, cohort = stacked_and_mixed()
    target, sybils = cohort[0], [c for c in rule.groups[0] if c not in cohort][:7]
    assert "whom the rule did not draw" in rule.refusal(client=target, group=0, rnd=1, members=[target, *sybils])
    short = cohort[:-1]  # a drawn member left out: fewer honest shares
    assert f"no client {cohort[-1]}, whom it drew" in rule.refusal(client=target, group=0, rnd=1, members=short)


def test_a_run_mixing_in_another_groups_clients_is_refused_by_every_member():
    rule, cohort = stacked_and_mixed()
    mixed = [*cohort[:3], *rule.cohort(group=1, rnd=1)[:5]]
    for client in cohort[:3]:
        assert "whom the rule did not draw" in rule.refusal(client=client, group=0, rnd=1, members=mixed)
    b = rule.cohort(group=1, rnd=1)[0]
    assert rule.refusal(client=b, group=0, rnd=1, members=mixed) == f"client {b} is not registered in group 1"
