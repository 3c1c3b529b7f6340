"""What a run charges the ledger: each round's cost to each group (the σ of the round's phase, the plan's spending
accountant), the δ a distributed round's rare events cost, the clients charged, and a dry run that writes
nothing."""

from __future__ import annotations

import dataclasses
import math

import pytest

from hdp_planner import plan
from hdp_planner.ledger.composition import GroupRound, compose
from hdp_planner.ledger.runs import round_costs, simulated_clients
from hdp_planner.ledger.store import Ledger
from hdp_planner.methods.baselines import BASELINES, BaselineOptions, add_baselines


@pytest.fixture(scope="module")
def scheduled():
    """Three groups with every baseline: Time-adaptive's σ schedule has two phases of 5 rounds."""
    base = plan([0.5, 1.5, 3.0], n=120, rounds=10, q=0.1, clip=1.5)
    return add_baselines(base, tuple(BASELINES.values()), BaselineOptions(model_dim=10_000, pfa_dim=2, pfa_window=4))


def test_each_round_costs_the_sigma_of_its_phase(scheduled):
    row = scheduled.method("Time-adaptive")
    (first, saving), (second, late) = ((ph.rounds, ph.noise_multiplier) for ph in row.schedule)
    assert (first, second) == (5, 5)
    costs = round_costs(scheduled, "Time-adaptive", start=3, rounds=8)
    assert [[g.noise_multiplier for g in r] for r in costs] == [list(saving)] * 2 + [list(late)] * 3
    assert all([g.q for g in r] == list(row.q) for r in costs)
    assert all(g.tau_d is None and g.accountant == "rdp" and g.delta_cost == 0.0 for r in costs for g in r)
    plain = round_costs(scheduled, "GDPFed", start=0, rounds=2)
    gdpfed = scheduled.method("GDPFed")
    assert plain == [[GroupRound(q=q, noise_multiplier=s) for q, s in zip(gdpfed.q, gdpfed.noise_multiplier)]] * 2
    assert round_costs(scheduled, "GDPFed", start=4, rounds=4) == []


def test_a_pooled_row_costs_each_group_its_effective_sigma(scheduled):
    """One noise draw of std C_1·σ_1 for the pool: group m's multiplier is C_1·σ_1/C_m."""
    row = scheduled.method("HDP-Pooled")
    (costs,) = round_costs(scheduled, "HDP-Pooled", start=0, rounds=1)
    std = row.clip[0] * row.noise_multiplier[0]
    assert [g.noise_multiplier for g in costs] == pytest.approx([std / c for c in row.clip], rel=1e-15)


def test_the_plans_spending_accountant_is_recorded(scheduled):
    """Each round is charged through the accountant that planned it; a distributed one records its τ·d'."""
    for accountant, tau_d in (("pld", None), ("ddg", 0.0), ("closed-form", None)):
        p = dataclasses.replace(scheduled, config=dataclasses.replace(scheduled.config, accountant=accountant))
        spending = "rdp" if accountant == "closed-form" else accountant
        costs = round_costs(p, "GDPFed", start=0, rounds=2)
        assert {(g.accountant, g.tau_d) for r in costs for g in r} == {(spending, tau_d)}


def test_the_rare_events_delta_is_paid_before_the_accountant_measures():
    """A round's δ cost is subtracted from δ (basic composition): the ε is the accountant's at δ − Σ costs, and
    infinite when nothing is left."""
    free = GroupRound(q=0.1, noise_multiplier=1.5, tau_d=1e-6)
    costly = GroupRound(q=0.1, noise_multiplier=1.5, tau_d=1e-6, delta_cost=2e-6)
    assert compose({costly: 10}, 1e-5) == compose({free: 10}, 1e-5 - 10 * 2e-6) > compose({free: 10}, 1e-5)
    assert compose({costly: 6}, 1e-5) == math.inf


def test_a_simulations_clients_are_numbered_by_group():
    p = plan([1.0, 2.0, 4.0], n=60, sizes=[10, 20, 30], rounds=3, q=0.2)
    membership, budgets = simulated_clients(p, p.groups)
    assert membership == {str(i): 0 if i < 10 else 1 if i < 30 else 2 for i in range(60)}
    assert budgets == {str(i): 1.0 if i < 10 else 2.0 if i < 30 else 4.0 for i in range(60)}
    pooled, _ = simulated_clients(p, p.method("DP-FedAvg"))
    assert set(pooled.values()) == {0} and len(pooled) == 60


def test_a_dry_run_writes_nothing(tmp_path):
    """``would_exceed`` reports the clients a run would take past their budget, and leaves the ledger as it was."""
    p = plan([1.0, 2.0], n=40, rounds=10, q=0.2, clip=1.0)
    membership, budgets = simulated_clients(p, p.groups)
    book = Ledger(str(tmp_path / "l.sqlite"))
    args = dict(membership=membership, budgets_of=budgets, delta=p.config.delta)
    fits = round_costs(p, p.groups.name, start=0, rounds=10)
    assert book.would_exceed(planned=fits, **args) == []
    assert book.runs() == [] and book.check_chain().events == 0 and book.spending() == []
    too_much = round_costs(p, p.groups.name, start=0, rounds=11)
    over = book.would_exceed(planned=too_much, **args)
    assert sorted(s.client_id for s in over) == sorted(membership)
    assert all(s.epsilon_spent > s.epsilon_budget for s in over)
    assert book.check_chain().events == 0
