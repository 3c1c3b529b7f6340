"""Ledgers written before the hash chain (tables ``budgets``, ``runs``, ``members``, ``charges``, rows edited in
place) are copied into the chain the first time they are opened, in the transaction that writes the chain's first
events, and the copy is recorded (a ``migrated`` event with its counts). Nothing charged is lost: every run becomes a
``run`` event with the rounds its rows still hold, ``release`` events for its released rounds and a ``finish`` event
if it had finished (its unreleased rows were deleted then). A client's budget is the smallest it had under any
federation name, at the smallest δ of its rows (a smaller δ only raises its ε). The old tables are left as they were
and no longer read; what they held before the copy was not chained, so edits made to them then cannot be detected.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import MetaData, Table, inspect, select
from sqlalchemy.engine import Connection

from hdp_planner.ledger.composition import GroupRound
from hdp_planner.ledger.state import run_event

TABLES = ("budgets", "runs", "members", "charges")


def has_legacy_tables(conn: Connection) -> bool:
    return set(TABLES) <= set(inspect(conn).get_table_names())


def legacy_events(conn: Connection) -> list[tuple[str, dict[str, Any]]]:
    """The events that reproduce an unchained ledger's runs and charges, ending with the ``migrated`` record."""
    old = MetaData()
    budgets, runs, members, charges = (Table(name, old, autoload_with=conn) for name in TABLES)
    budget: dict[str, tuple[float, float]] = {}
    for r in conn.execute(select(budgets)):
        known = budget.get(r.client_id)
        budget[r.client_id] = (
            (r.epsilon, r.delta) if known is None else (min(known[0], r.epsilon), min(known[1], r.delta))
        )
    group_of: dict[str, dict[str, int]] = defaultdict(dict)
    for r in conn.execute(select(members)):
        group_of[r.run_id][r.client_id] = r.group_index
    rows: dict[str, dict[int, dict[int, Any]]] = defaultdict(lambda: defaultdict(dict))
    for r in conn.execute(select(charges)):
        rows[r.run_id][r.round][r.group_index] = r._mapping
    events: list[tuple[str, dict[str, Any]]] = []
    count = {"runs": 0, "charges": 0, "released": 0}
    for run in conn.execute(select(runs).order_by(runs.c.started)):
        by_round = rows.get(run.run_id, {})
        order = sorted(by_round)
        planned = [[_round(by_round[r][m]) for m in sorted(by_round[r])] for r in order]
        clients = group_of.get(run.run_id, {})
        delta = min((budget[c][1] for c in clients if c in budget), default=1.0)
        events.append(("run", run_event(
            run_id=run.run_id, federation=run.federation, label=run.label, plan_sha256=run.plan_sha256, start=0,
            started=run.started, delta=delta, membership=clients,
            budgets_of={c: budget[c][0] if c in budget else 0.0 for c in clients}, planned=planned)))  # fmt: skip
        released = [i for i, r in enumerate(order) if all(v["status"] == "released" for v in by_round[r].values())]
        events += [("release", {"run_id": run.run_id, "round": i}) for i in released]
        if run.status == "finished":
            events.append(("finish", {"run_id": run.run_id, "given_back": 0}))
        count["runs"] += 1
        count["charges"] += sum(len(v) for v in by_round.values())
        count["released"] += len(released)
    events.append(("migrated", {"from": "unchained tables " + ", ".join(TABLES), **count}))
    return events


def _round(row: Any) -> GroupRound:
    accountant = row.get("accountant") or "rdp"
    return GroupRound(
        q=float(row["q"]),
        noise_multiplier=float(row["noise_multiplier"]),
        tau_d=row.get("tau_d"),
        accountant=accountant,
    )
