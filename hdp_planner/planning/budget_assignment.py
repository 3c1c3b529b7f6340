"""Assigning clients to a plan's groups: each joins the group whose ε is the largest ≤ its budget."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hdp_planner.planning.budget_files import BudgetError


@dataclass(frozen=True, eq=False, kw_only=True)
class Assignment:
    """Clients assigned to a plan's groups: 0-based group per client, and unused budget per group."""

    group: np.ndarray
    group_epsilon: np.ndarray
    counts: tuple[int, ...]
    unused: tuple[float, ...]
    total_unused: float


def assign_to_groups(eps: np.ndarray, *, group_epsilons: Sequence[float], ids: Sequence[str]) -> Assignment:
    """Each client joins the group (in the plan's order) whose ε is the largest ≤ its budget, so no client's group
    spends more than its budget; ties in the plan's ε go to the first listed group.

    Args:
        eps: every client's budget ε_i.
        group_epsilons: the plan's ε_m, in its group order.
        ids: the client ids (for the error message).

    Returns:
        Each client's 0-based group and its group's ε, the clients per group and the budget each group leaves unused.

    Raises:
        BudgetError: a client whose budget is below every group's ε.
    """
    ge = np.asarray(group_epsilons, dtype=float)
    order = np.argsort(ge, kind="stable")
    sorted_eps = ge[order]
    pos = np.searchsorted(sorted_eps, eps, side="right") - 1
    if np.any(pos < 0):
        i = int(np.flatnonzero(pos < 0)[0])
        raise BudgetError(
            f"client {ids[i]!r} has budget ε = {eps[i]:g}, below the strictest group's ε = {sorted_eps[0]:g}"
        )
    # ties in the plan's ε: the first listed group with that ε
    first = {}
    for j in order[::-1]:
        first[ge[j]] = j
    group = np.asarray([first[v] for v in sorted_eps], dtype=np.int64)[pos]
    m = len(ge)
    counts = np.bincount(group, minlength=m)
    unused = np.bincount(group, weights=eps - ge[group], minlength=m)
    return Assignment(
        group=group,
        group_epsilon=ge[group],
        counts=tuple(int(c) for c in counts),
        unused=tuple(float(u) for u in unused),
        total_unused=float(math.fsum(unused)),
    )
