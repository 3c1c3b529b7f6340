"""``ledger check`` prices what a run of the plan executes: under a plan that trusts secure aggregation, the trust
object's distributed discrete Gaussian rounds (as ``train --trust secagg`` charges them), not the plan's
trusted-server Gaussian rows."""

from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

from hdp_planner import plan, save_plan
from hdp_planner.ledger.composition import compose
from hdp_planner.ledger.runs import round_costs, simulated_clients
from hdp_planner.ledger.store import Ledger
from hdp_planner.planning.trust import SecaggParameters
from hdp_planner.trust.secagg import SecureAggregation
from hdp_planner_cli.app import app

runner = CliRunner()
DIM = 2410  # the digits model's d


@pytest.fixture(scope="module")
def secagg_plan(tmp_path_factory):
    server = plan((1.0, 2.0, 4.0), 120, rounds=3, q=0.7, clip=1.0)
    p = dataclasses.replace(server, trust=SecureAggregation(parameters=SecaggParameters(model_dim=DIM)).planned(server))
    path = tmp_path_factory.mktemp("plans") / "secagg.json"
    save_plan(p, path)
    return p, server, path


def test_a_secagg_plan_is_priced_by_its_distributed_rounds(secagg_plan):
    p, server, _ = secagg_plan
    row = p.groups.name
    costs = round_costs(p, row, start=0, rounds=3)
    z = [g.noise_multiplier for g in p.trust.row(row).groups]
    assert [[g.noise_multiplier for g in r] for r in costs] == [z] * 3
    assert all(g.tau_d is not None and g.tau_d > 0 for r in costs for g in r)
    assert costs != round_costs(server, row, start=0, rounds=3)
    assert all(g.tau_d is None for r in round_costs(server, row, start=0, rounds=3) for g in r)


def test_ledger_check_prices_the_rest_of_a_secagg_run_as_distributed_rounds(tmp_path, secagg_plan):
    """Two of the plan's three secagg rounds charged: a third distributed round fits the budget exactly (the plan's
    ε), so ``ledger check --rounds 1`` passes; priced as the Gaussian row (σ_m below z_m, composed with the
    distributed rounds by the same bound) the same round would exceed it (ε 1.0007 > 1)."""
    p, server, path = secagg_plan
    row = p.groups.name
    ddg = round_costs(p, row, start=0, rounds=2)
    membership, budgets = simulated_clients(p, p.method(row))
    mixed = compose({ddg[0][0]: 2, round_costs(server, row, start=0, rounds=1)[0][0]: 1}, p.config.delta)
    assert mixed > p.groups.epsilon[0] * (1 + 1e-4)
    book = Ledger(str(tmp_path / "l.sqlite"))
    run_id = book.start_run(federation="f", label="secagg", plan_sha256="0" * 64, membership=membership,
                            budgets_of=budgets, delta=p.config.delta, planned=ddg)  # fmt: skip
    for r in range(2):
        book.release(run_id, r)
    book.finish(run_id)
    args = ["ledger", "check", str(path), "--ledger", str(tmp_path / "l.sqlite")]
    done = runner.invoke(app, [*args, "--rounds", "1"])
    assert done.exit_code == 0 and "another run of" in done.output, done.output
    done = runner.invoke(app, [*args, "--rounds", "2"])
    assert done.exit_code == 1 and "cannot take part" in done.output, done.output
