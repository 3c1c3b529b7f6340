"""Which group each node's client trains in: the plan's group order over client ids, or ``hdp-plan assign``'s file;
and which client each node is: its answer to the enrolment query, or, in a deployment, the registry of node ids the
SuperLink gave each client's key (:func:`read_node_clients`), so that no enrolment round is needed."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import numpy as np

from hdp_planner.planning.budgets import BudgetError, read_assignment
from hdp_planner_train.rules.specs import GroupSpec


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


def read_node_clients(path: str | Path) -> dict[int, int]:
    """Node id → client id from a deployment's registry (CSV ``node_id,client_id``, one row per registered key)."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise FlowerRunError(f"cannot read the node registry {path}: {exc.strerror or exc}") from None
    try:
        pairs = [(int(r["node_id"]), int(r["client_id"])) for r in rows]
    except (KeyError, TypeError, ValueError):
        raise FlowerRunError(f"node registry {path}: needs integer columns node_id,client_id") from None
    mapping = dict(pairs)
    if len(mapping) != len(pairs) or len(set(mapping.values())) != len(pairs):
        raise FlowerRunError(f"node registry {path} repeats a node id or a client id")
    return mapping


CONNECT_WAIT = 60.0
"""Seconds the server waits, before round 1, for the registered nodes to connect: one still offline after that is
a dropout in the rounds it is sampled for (Flower answers for it with a node-unavailable error)."""


def registered_members(grid, node_clients: dict[int, int], *, n: int, wait: float = CONNECT_WAIT) -> dict[int, int]:
    """The registry ``node_clients`` checked against the plan's n clients (ids 0..n−1, each once), once every
    registered node is connected or ``wait`` seconds have passed: no message is sent to learn who is who."""
    if sorted(node_clients.values()) != list(range(n)):
        raise FlowerRunError(f"the node registry has client ids {sorted(node_clients.values())[:5]}…; the plan "
                             f"has clients 0..{n - 1}")  # fmt: skip
    deadline = time.monotonic() + wait
    while not set(node_clients) <= set(grid.get_node_ids()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return dict(node_clients)
