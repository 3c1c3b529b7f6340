"""What a run of a plan's row charges the ledger: each round's cost to each group, and the clients it charges (those
of ``hdp-plan assign``'s file, or a simulation's)."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from hdp_planner.io.folders import user_data_folder
from hdp_planner.planfile.document import plan_to_dict
from hdp_planner.planning.budgets import read_assignment
from hdp_planner.planning.method_noise import MethodNoise
from hdp_planner.planning.plan import Plan
from hdp_planner.rules.costs import GroupRound

DEFAULT_LEDGER_ENV = "HDP_PLANNER_LEDGER"


def default_ledger() -> str:
    """The default ledger: ``$HDP_PLANNER_LEDGER``, else an SQLite file in the user's data folder."""
    if os.environ.get(DEFAULT_LEDGER_ENV):
        return os.environ[DEFAULT_LEDGER_ENV]
    return str(user_data_folder() / "ledger.sqlite")


def plan_digest(plan: Plan) -> str:
    """SHA-256 of the plan's JSON (versions left out), naming the plan a run executed."""
    doc = plan_to_dict(plan)
    doc.pop("versions", None)
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def round_costs(plan: Plan, row: str, *, start: int, rounds: int) -> list[list[GroupRound]]:
    """What rounds ``start``..``rounds``−1 of a run of ``row`` cost each group, as the plan's trust model executes
    them (:meth:`~hdp_planner.planning.plan.Trust.costs`): the sampled Gaussian rounds of the row with a trusted
    server, the distributed rounds of its secure aggregation, or its cohort memberships. ValueError (one line) for a
    row with no form under the plan's trust model."""
    return plan.trust.costs(plan.method(row), plan.config, start=start, rounds=rounds)


def simulated_clients(plan: Plan, row: MethodNoise) -> tuple[dict[str, int], dict[str, float]]:
    """A simulation's clients 0..n−1: their group in the plan row ``row`` (its groups in order of their sizes, as the
    simulator assigns them) and their budget, the ε of their group in the plan's grouping (same order)."""
    membership = np.repeat(np.arange(len(row.size)), row.size)
    budget = np.repeat(np.asarray(plan.groups.epsilon), plan.groups.size)
    return ({str(i): int(g) for i, g in enumerate(membership)}, {str(i): float(e) for i, e in enumerate(budget)})


DEFAULT_MAPPING_REFUSED = (
    "the plan was made from per-client budgets: give --groups (hdp-plan assign --output) so that every client is "
    "charged in the group its budget allows; refusing the default id → group mapping"
)


def plan_clients(
    plan: Plan, row: MethodNoise, groups_file: str | os.PathLike[str] | None
) -> tuple[dict[str, int], dict[str, float]]:
    """The clients a run of the plan row ``row`` charges, by id: their group in ``row`` and their lifetime budget. With
    ``hdp-plan assign``'s ``groups_file`` (checked by :func:`read_assignment` against the plan and the digest of the
    budgets it was made from), each client in its file group (one group for a row that pools every client) with its
    own ε_i; without one, a simulation's clients 0..n−1 (:func:`simulated_clients`), refused for a plan made from
    per-client budgets. Raises ValueError (one line)."""
    digest = plan.budgets_sha256
    if groups_file is None:
        if digest is not None:
            raise ValueError(DEFAULT_MAPPING_REFUSED)
        return simulated_clients(plan, row)
    ids, groups, eps = read_assignment(groups_file, plan.groups.epsilon, digest)
    counts = tuple(np.bincount(groups, minlength=len(plan.groups.size)).tolist())
    if counts != tuple(plan.groups.size):
        raise ValueError(f"groups file {groups_file} puts {counts} clients in the groups; the plan has "
                         f"{tuple(plan.groups.size)}")  # fmt: skip
    sizes = row.size
    if len(sizes) != 1 and tuple(sizes) != tuple(plan.groups.size):
        raise ValueError(f"{row.name} regroups the plan's clients; its ledger needs the simulation's clients")
    group = groups if len(sizes) > 1 else np.zeros_like(groups)
    return {i: int(g) for i, g in zip(ids, group)}, {i: float(e) for i, e in zip(ids, eps)}
