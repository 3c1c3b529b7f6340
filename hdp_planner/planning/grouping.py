"""Client groups by privacy budget (GDPFed Section 3): group m holds |G_m| clients and its ε_m is the
minimum of its members' budgets, so no client's budget is exceeded (:class:`Groups`); and how per-client budgets were
grouped into them (:class:`Grouping`, found by :mod:`.budget_grouping`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass


def even_sizes(n: int, *, groups: int) -> tuple[int, ...]:
    """Split n clients into group sizes that differ by at most one (earlier groups take the rest).

    Args:
        n: the number of clients.
        groups: the number of groups.

    Returns:
        |G_m| per group, summing to n.

    Raises:
        ValueError: fewer than one group, or fewer clients than groups.
    """
    if groups < 1:
        raise ValueError("at least one group is needed")
    if n < groups:
        raise ValueError(f"n = {n} clients cannot fill {groups} groups")
    base, extra = divmod(n, groups)
    return tuple(base + (1 if m < extra else 0) for m in range(groups))


@dataclass(frozen=True, kw_only=True)
class Groups:
    """The groups of a plan: ε_m and |G_m| per group, in the caller's order.

    A plan file holds them in canonical order, by non-decreasing ε (:attr:`canonical`): the order clients are
    assigned in, which ``verify`` enforces.

    Args:
        epsilons: ε_m of every group (positive, finite).
        sizes: |G_m| of every group (positive integers), as many as ``epsilons``.

    Raises:
        ValueError: No group, a non-positive ε or size, or not as many sizes as groups.
    """

    epsilons: tuple[float, ...]
    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.epsilons:
            raise ValueError("at least one group is needed")
        for e in self.epsilons:
            if not (isinstance(e, (int, float)) and math.isfinite(e) and e > 0):
                raise ValueError(f"every epsilon must be a positive number, got {e}")
        if len(self.sizes) != len(self.epsilons):
            raise ValueError(f"{len(self.sizes)} sizes given for {len(self.epsilons)} groups")
        for s in self.sizes:
            if isinstance(s, bool) or not isinstance(s, int) or s < 1:
                raise ValueError(f"every group size must be a positive integer, got {s}")

    @classmethod
    def from_budgets(cls, epsilons: Sequence[float], n: int, sizes: Sequence[int] | None = None) -> Groups:
        """Groups with the given ε_m.

        Args:
            epsilons: ε_m of every group (positive, finite).
            n: the number of clients.
            sizes: |G_m| of every group, summing to n; None splits n evenly (:func:`even_sizes`).

        Returns:
            The groups, in the order given.

        Raises:
            ValueError: a bad ε, n or size, or sizes that do not sum to n.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive integer, got {n}")
        sizes = even_sizes(n, groups=len(epsilons)) if sizes is None else tuple(sizes)
        groups = cls(epsilons=tuple(float(e) for e in epsilons), sizes=tuple(sizes))
        if groups.n != n:
            raise ValueError(f"group sizes sum to {groups.n}, not n = {n}")
        return groups

    @property
    def canonical(self) -> bool:
        """Listed by non-decreasing ε (group 1 the strictest)."""
        return all(a <= b for a, b in itertools.pairwise(self.epsilons))

    @property
    def n(self) -> int:
        return sum(self.sizes)

    @property
    def count(self) -> int:
        return len(self.sizes)


@dataclass(frozen=True, eq=False, kw_only=True)
class Grouping:
    """A grouping of clients by budget.

    ``boundaries`` are the M − 1 thresholds ε_2 < … < ε_M: a client with budget b joins group
    ``#(thresholds ≤ b)`` (0-based), the group whose ε is the largest ≤ b
    (:func:`~hdp_planner.planning.budget_assignment.assign_to_groups` applies it per client). ``unused[m]`` is
    Σ_{i ∈ G_m} (ε_i − ε_m), the budget the group leaves on the table. ``objective`` is the closed-form
    Problem 1 optimum used to compare groupings (:mod:`~hdp_planner.planning.budget_scoring`) and ``noise_term``
    its grouping-dependent part μ5/(R²H). Nothing in it grows with the number of clients.
    """

    method: str
    groups: Groups
    boundaries: tuple[float, ...]
    max_budget: tuple[float, ...]
    unused: tuple[float, ...]
    total_unused: float
    objective: float
    noise_term: float

    @property
    def count(self) -> int:
        return self.groups.count
