"""Which group each node's client trains in: the plan's group order over client ids, or ``hdp-plan assign``'s file."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hdp_planner.planning.budgets import BudgetError, read_assignment
from hdp_planner_train.rules.aggregate import GroupSpec


class FlowerRunError(ValueError):
    """A federation or reply the plan cannot run with: reported as one line, exit status 2."""


def default_groups(spec: GroupSpec) -> np.ndarray:
    """Group of client ids 0..n-1 as the simulator has it: the method's groups in order of their sizes."""
    return np.repeat(np.arange(len(spec.sizes)), spec.sizes)


def groups_from_file(
    path: str | Path, spec: GroupSpec, group_epsilons: tuple[float, ...], digest: str | None
) -> np.ndarray:
    """Group (0-based, of ``spec``) of client ids 0..n-1 from ``hdp-plan assign --output``'s CSV, checked against the
    plan (:func:`hdp_planner.planning.budgets.read_assignment`: each client's budget at least its group's ε, the
    budgets those the plan was made from when it recorded their ``digest``)."""
    try:
        ids, groups, _ = read_assignment(path, group_epsilons, digest)
    except BudgetError as exc:
        raise FlowerRunError(str(exc)) from None
    if sorted(ids) != sorted(str(i) for i in range(spec.n)) or any(not i.isdigit() for i in ids):
        raise FlowerRunError(f"groups file {path}: client ids must be 0..{spec.n - 1} (node config client-id)")
    by_id = np.empty(spec.n, dtype=np.int64)
    by_id[[int(i) for i in ids]] = groups
    if len(spec.sizes) == 1:
        return np.zeros(spec.n, dtype=np.int64)  # one group (DP-FedAvg, IDP pools): everyone
    counts = tuple(np.bincount(by_id, minlength=len(spec.sizes)).tolist())
    if counts != tuple(spec.sizes):
        raise FlowerRunError(f"groups file {path} puts {counts} clients in the groups; the plan has {spec.sizes}")
    return by_id
