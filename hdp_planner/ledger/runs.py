"""What a run of a plan's row charges the ledger: each round's cost to each group, and the clients of a simulation."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from hdp_planner.ledger.store import GroupRound
from hdp_planner.planfile.document import plan_to_dict
from hdp_planner.planfile.mechanism import executed_mechanism
from hdp_planner.planning.plan import Plan

DEFAULT_LEDGER_ENV = "HDP_PLANNER_LEDGER"


def default_ledger() -> str:
    """The default ledger: ``$HDP_PLANNER_LEDGER``, else an SQLite file in the user's data folder."""
    if os.environ.get(DEFAULT_LEDGER_ENV):
        return os.environ[DEFAULT_LEDGER_ENV]
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return str(base / "hdp-planner" / "ledger.sqlite")


def plan_digest(plan: Plan) -> str:
    """SHA-256 of the plan's JSON (versions left out), naming the plan a run executed."""
    doc = plan_to_dict(plan)
    doc.pop("versions", None)
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def round_costs(plan: Plan, row: str, *, start: int, rounds: int) -> list[list[GroupRound]]:
    """Rounds ``start``..``rounds``−1 of ``row`` as executed (:func:`executed_mechanism`: q_m, effective σ_m of the
    round's phase)."""
    mech = executed_mechanism(plan.method(row), plan.config)
    costs = []
    for r in range(start, rounds):
        left, sigma = r, mech.phases[-1][1]
        for length, phase_sigma in mech.phases:
            if left < length:
                sigma = phase_sigma
                break
            left -= length
        costs.append([GroupRound(q, s) for q, s in zip(mech.q, sigma)])
    return costs


def simulated_clients(plan: Plan, row: str) -> tuple[dict[str, int], dict[str, float]]:
    """A simulation's clients 0..n−1: their group in ``row`` (its groups in order of their sizes, as the simulator
    assigns them) and their budget, the ε of their group in the plan's grouping (same order)."""
    sizes = plan.method(row).size
    membership = np.repeat(np.arange(len(sizes)), sizes)
    budget = np.repeat(np.asarray(plan.groups.epsilon), plan.groups.size)
    return ({str(i): int(g) for i, g in enumerate(membership)}, {str(i): float(e) for i, e in enumerate(budget)})
