"""The neighbour graph of one SecAgg+ run: the full graph, or a random Harary graph of degree d(c) ≪ c.

SecAgg+ (Bell, Bonawitz, Gascón, Lepoint and Raykova, "Secure Single-Server Aggregation with (Poly)Logarithmic
Overhead", CCS 2020) lets each of the c clients of a run share its keys with the d − 1 clients next to it on a ring
whose order the server draws at random: the Harary graph H(d, c) under a random permutation. Flower's
``SecAggPlusWorkflow`` builds exactly this graph from ``num_shares`` = d (a neighbourhood counts the client itself),
and each client's secrets are split into d Shamir shares with threshold τ. A round then costs O(c·d) key agreements
and shares instead of O(c²).

The rule (proof on the trust-model page, "A sparse neighbour graph"): with at least s survivors in every release
(the run's threshold) and at most k colluders, the honest survivors number at least s − k, so at most
u = c − s + k clients are colluders or gone. The honest survivors' masks hide everything but their sum as long as
their subgraph is connected; for d = 2h + 1 it is not only if two disjoint runs of h ring positions are all among
those u, and :func:`split_bound` bounds that probability over the random order. The degree is the least odd d > τ
whose bound is at most 2^−σ, with τ = max(2, k + 1): colluders alone never hold τ shares of anyone, and a server
that follows the protocol asks for only one of each client's two secrets. None below c: the full graph.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

SECURITY_BITS = 40
"""σ: a sparse graph splits a release's honest survivors with probability at most 2^−σ per run, a statistical
security parameter stated beside the cryptography's, not charged to the plan's δ."""


@dataclass(frozen=True, kw_only=True)
class NeighbourGraph:
    """The neighbour graph of a run of ``clients``: ``degree`` clients in each neighbourhood (the client itself
    included), SecAgg+'s reconstruction ``threshold`` τ within it, and ``failure``, the bound on the probability that
    a release's honest survivors are not connected."""

    clients: int
    degree: int
    threshold: int
    failure: float


def split_bound(*, clients: int, degree: int, outside: int) -> float:
    """P(the others of a random Harary graph H(d, c) are disconnected) when ``outside`` = u of its c positions, a
    set independent of the order, are removed: at most C(c, 2)·∏_{j<d−1} (u − j)/(c − j), two disjoint windows of
    h = (d − 1)/2 positions all removed (trust-model page, Claim 4)."""
    if degree % 2 == 0 or not 3 <= degree <= clients or not 0 <= outside <= clients:
        raise ValueError(f"no Harary graph H({degree}, {clients}) with {outside} removed")
    if outside < degree - 1:
        return 0.0
    log2 = math.log2(clients * (clients - 1) / 2)
    log2 += sum(math.log2((outside - j) / (clients - j)) for j in range(degree - 1))
    return min(1.0, 2.0**log2)


@functools.lru_cache(maxsize=4096)
def sparse_graph(
    *, clients: int, survivors: int, colluders: int, security: int = SECURITY_BITS
) -> NeighbourGraph | None:
    """The least odd degree τ < d < c with :func:`split_bound` at most 2^−σ when at least ``survivors`` of the c
    ``clients`` stay, τ = max(2, k + 1) for k ``colluders``; or None: no such d, the run keeps the full graph."""
    if not 0 <= colluders < survivors <= clients:
        raise ValueError(f"{survivors} survivors with {colluders} colluders among {clients} clients")
    outside, threshold = clients - survivors + colluders, max(2, colluders + 1)
    degree = (threshold + 1) | 1  # the least odd d > τ
    while degree < clients:
        failure = split_bound(clients=clients, degree=degree, outside=outside)
        if failure <= 2.0**-security:
            return NeighbourGraph(clients=clients, degree=degree, threshold=threshold, failure=failure)
        degree += 2
    return None
