"""What a run of a plan's row charges the ledger: each round's cost to each group, and the clients it charges (those
of ``hdp-plan assign``'s file, or a simulation's)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from hdp_planner.accounting.accountants import get_accountant
from hdp_planner.distributed.rounds import group_tau_d
from hdp_planner.distributed.trust import secagg_row
from hdp_planner.io.folders import user_data_folder
from hdp_planner.ledger.composition import GroupRound
from hdp_planner.planfile.document import budgets_digest_of, plan_to_dict
from hdp_planner.planfile.mechanism import executed_mechanism
from hdp_planner.planfile.trust import recorded_row, trust_from_dict
from hdp_planner.planning.budgets import read_assignment
from hdp_planner.planning.plan import Plan

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
    """Rounds ``start``..``rounds``−1 of ``row`` as executed (:func:`executed_mechanism`: q_m, effective σ_m of the
    round's phase), each recorded with the plan's spending accountant, and charged through it: a plan whose
    accountant bounds the distributed discrete Gaussian (``ddg``, the binomial expansion's amplification of
    α/(2σ²) + τ·d') records its τ·d' (0 for the registered one), so that the ledger composes the rounds by that bound
    (:func:`~hdp_planner.ledger.composition.compose_distributed`), not as plain sampled Gaussians."""
    mech = executed_mechanism(plan.method(row), plan.config)
    accountant = plan.config.spending_accountant
    tau_d = getattr(get_accountant(accountant), "tau_d", None)  # only a distributed accountant has a τ·d'
    costs = []
    for r in range(start, rounds):
        left, sigma = r, mech.phases[-1][1]
        for length, phase_sigma in mech.phases:
            if left < length:
                sigma = phase_sigma
                break
            left -= length
        costs.append(
            [GroupRound(q=q, noise_multiplier=s, tau_d=tau_d, accountant=accountant) for q, s in zip(mech.q, sigma)]
        )
    return costs


def distributed_costs(
    *, q, noise_multipliers, sizes, delta_costs, model_dim: int, start: int, rounds: int
) -> list[list[GroupRound]]:
    """Rounds ``start``..``rounds``−1 of distributed discrete Gaussian noise under secure aggregation: each group's
    q_m, z_m, Proposition 14's τ·d' (:func:`~hdp_planner.distributed.rounds.group_tau_d`) and the δ its law's
    rare events cost a round (:attr:`~hdp_planner.distributed.law.GroupLaw.event_rate`)."""
    groups = [GroupRound(q=float(qm), noise_multiplier=float(z), tau_d=group_tau_d(int(size), model_dim=model_dim),
                         delta_cost=float(cost))
              for qm, z, size, cost in zip(q, noise_multipliers, sizes, delta_costs, strict=True)]  # fmt: skip
    return [list(groups) for _ in range(start, rounds)]


def executed_costs(plan: Plan, row: str, doc: Mapping[str, Any], *, start: int, rounds: int) -> list[list[GroupRound]]:
    """What rounds ``start``..``rounds``−1 of a run of ``row`` execute: under a plan that trusts secure aggregation,
    the trust object's distributed rounds (z_m of the row, q_m and sizes of the row, the planned model dimension);
    under a trusted server, the plan's sampled Gaussian rounds (:func:`round_costs`). ValueError (one line) for a
    row with no distributed form."""
    trust = trust_from_dict(doc)
    if trust.kind != "secagg":
        return round_costs(plan, row, start=start, rounds=rounds)
    entry = recorded_row(doc, row)
    if not entry or entry.get("noise_multiplier") is None:
        raise ValueError(f"{row} has no distributed form under the plan's secagg trust model")
    m = plan.method(row)
    laws = [g.law for g in secagg_row(m, plan, trust).groups or ()]
    if len(laws) != len(m.size):
        raise ValueError(f"{row} has no distributed form under the plan's secagg trust model")
    return distributed_costs(q=m.q, noise_multipliers=entry["noise_multiplier"], sizes=m.size,
                             delta_costs=[law.event_rate for law in laws], model_dim=int(trust.model_dim or 0),
                             start=start, rounds=rounds)  # fmt: skip


def simulated_clients(plan: Plan, row: str) -> tuple[dict[str, int], dict[str, float]]:
    """A simulation's clients 0..n−1: their group in ``row`` (its groups in order of their sizes, as the simulator
    assigns them) and their budget, the ε of their group in the plan's grouping (same order)."""
    sizes = plan.method(row).size
    membership = np.repeat(np.arange(len(sizes)), sizes)
    budget = np.repeat(np.asarray(plan.groups.epsilon), plan.groups.size)
    return ({str(i): int(g) for i, g in enumerate(membership)}, {str(i): float(e) for i, e in enumerate(budget)})


DEFAULT_MAPPING_REFUSED = (
    "the plan was made from per-client budgets: give --groups (hdp-plan assign --output) so that every client is "
    "charged in the group its budget allows; refusing the default id → group mapping"
)


def plan_clients(
    plan: Plan, row: str, doc: Mapping[str, Any], groups_file: str | os.PathLike[str] | None
) -> tuple[dict[str, int], dict[str, float]]:
    """The clients a run of ``row`` charges, by id: their group in ``row`` and their lifetime budget. With
    ``hdp-plan assign``'s ``groups_file`` (checked by :func:`read_assignment` against the plan and the digest of the
    budgets it was made from), each client in its file group (one group for a row that pools every client) with its
    own ε_i; without one, a simulation's clients 0..n−1 (:func:`simulated_clients`), refused for a plan made from
    per-client budgets. Raises ValueError (one line)."""
    digest = budgets_digest_of(doc)
    if groups_file is None:
        if digest is not None:
            raise ValueError(DEFAULT_MAPPING_REFUSED)
        return simulated_clients(plan, row)
    ids, groups, eps = read_assignment(groups_file, plan.groups.epsilon, digest)
    counts = tuple(np.bincount(groups, minlength=len(plan.groups.size)).tolist())
    if counts != tuple(plan.groups.size):
        raise ValueError(f"groups file {groups_file} puts {counts} clients in the groups; the plan has "
                         f"{tuple(plan.groups.size)}")  # fmt: skip
    sizes = plan.method(row).size
    if len(sizes) != 1 and tuple(sizes) != tuple(plan.groups.size):
        raise ValueError(f"{row} regroups the plan's clients; its ledger needs the simulation's clients")
    group = groups if len(sizes) > 1 else np.zeros_like(groups)
    return {i: int(g) for i, g in zip(ids, group)}, {i: float(e) for i, e in zip(ids, eps)}
