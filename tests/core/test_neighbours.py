"""The sparse neighbour graph of a SecAgg+ run: the connectivity lemma behind its bound, the bound against exact
probabilities, and the degree rule."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from hdp_planner.distributed.neighbours import SECURITY_BITS, sparse_graph, split_bound


def harary_neighbours(clients: int, degree: int, order: list[int]) -> dict[int, set[int]]:
    """Flower's construction (``SecAggPlusWorkflow.setup_stage``): the ring in ``order``, h = ⌊d/2⌋ on each side."""
    h = degree // 2
    return {v: {order[(i + o) % clients] for o in range(-h, h + 1)} - {v} for i, v in enumerate(order)}


def connected(neighbours: dict[int, set[int]], kept: set[int]) -> bool:
    if not kept:
        return True
    seen, todo = set(), [next(iter(kept))]
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            todo.extend(neighbours[v] & kept - seen)
    return seen == kept


def long_runs(removed_positions: set[int], clients: int, h: int) -> int:
    """Maximal cyclic runs of at least h removed positions."""
    if len(removed_positions) == clients:
        return 1
    runs, length = 0, 0
    start = next(p for p in range(clients) if p not in removed_positions)  # begin after a kept position
    for step in range(1, clients + 1):
        if (start + step) % clients in removed_positions:
            length += 1
        else:
            runs, length = runs + (length >= h), 0
    return runs


def test_the_kept_clients_are_disconnected_exactly_when_two_runs_of_h_are_removed():
    """The lemma of the bound, on random rings built as Flower builds them: the kept clients' subgraph is
    disconnected iff at least two maximal runs of ≥ h ring positions are removed."""
    rng = np.random.default_rng(3)
    for _ in range(3000):
        clients = int(rng.integers(4, 30))
        degree = int(rng.choice([d for d in range(3, clients + 1, 2)]))
        order = [int(v) for v in rng.permutation(clients)]
        removed = int(rng.integers(0, clients))
        kept = set(order) - {int(v) for v in rng.choice(clients, removed, replace=False)}
        positions = {i for i, v in enumerate(order) if v not in kept}
        split = not connected(harary_neighbours(clients, degree, order), kept)
        assert split == (long_runs(positions, clients, degree // 2) >= 2), (clients, degree, positions)


@pytest.mark.parametrize("clients,degree", [(12, 3), (12, 5), (14, 5), (13, 7), (16, 5)])
def test_the_bound_is_never_below_the_exact_probability(clients, degree):
    """Every u-subset of ring positions is equally likely (a uniform order, a removed set independent of it): the
    exact probability of a split, by enumeration, never exceeds :func:`split_bound`."""
    order = list(range(clients))
    neighbours = harary_neighbours(clients, degree, order)
    for outside in range(clients + 1):
        subsets = list(itertools.combinations(range(clients), outside))
        split = sum(not connected(neighbours, set(order) - set(s)) for s in subsets) / len(subsets)
        bound = split_bound(clients=clients, degree=degree, outside=outside)
        assert split <= bound + 1e-12, (outside, split, bound)
        if outside < degree - 1:
            assert split == bound == 0.0


def test_the_degree_is_the_least_odd_one_meeting_the_security_parameter():
    for clients, survivors, colluders in [(100, 75, 0), (200, 101, 0), (200, 150, 3), (400, 300, 0), (400, 360, 5)]:
        graph = sparse_graph(clients=clients, survivors=survivors, colluders=colluders)
        d, outside = graph.degree, clients - survivors + colluders
        assert d % 2 == 1 and graph.threshold == max(2, colluders + 1) < d < clients
        assert graph.failure == split_bound(clients=clients, degree=d, outside=outside) <= 2.0**-SECURITY_BITS
        if d - 2 > graph.threshold:
            assert split_bound(clients=clients, degree=d - 2, outside=outside) > 2.0**-SECURITY_BITS
    assert sparse_graph(clients=100, survivors=75, colluders=0, security=60).degree > 21


def test_the_degree_grows_logarithmically_and_runs_with_few_survivors_keep_the_full_graph():
    degrees = [sparse_graph(clients=c, survivors=math.ceil(0.75 * c), colluders=0).degree for c in (100, 1000, 10000)]
    assert degrees == sorted(degrees) and degrees[-1] < 2 * degrees[0]  # 21, 31, 35: O(log c), not O(c)
    small = sparse_graph(clients=8, survivors=6, colluders=0)  # 2 removed never make two runs of h = 2
    assert (small.degree, small.threshold, small.failure) == (5, 2, 0.0)
    assert sparse_graph(clients=20, survivors=2, colluders=0) is None  # only the full graph keeps 2 survivors joined
    assert sparse_graph(clients=20, survivors=12, colluders=4).degree == 15  # u = 12: h = 7 leaves no two runs


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="Harary"):
        split_bound(clients=10, degree=4, outside=3)
    with pytest.raises(ValueError, match="Harary"):
        split_bound(clients=10, degree=11, outside=3)
    with pytest.raises(ValueError, match="colluders"):
        sparse_graph(clients=10, survivors=3, colluders=3)
