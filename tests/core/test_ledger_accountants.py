"""The ledger composes through the plan's own accountant: a plan calibrated with PLD spends its budget within the
ledger, which reports the smallest valid bound (never below the planning accountant, never above RDP)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hdp_planner import plan
from hdp_planner.accounting.calibration import epsilons_spent
from hdp_planner.ledger.composition import GroupRound, compose, compose_pld, compose_rdp
from hdp_planner.ledger.runs import round_costs, simulated_clients
from hdp_planner.ledger.store import Ledger, LedgerError
from hdp_planner.planfile.document import save_plan
from hdp_planner_cli.app import app

runner = CliRunner()


@pytest.fixture(scope="module")
def pld_plan():
    return plan((1.0, 2.0, 4.0), 120, rounds=4, q=0.2, clip=1.0, accountant="pld")


def _rdp(p, rounds):
    g = p.groups
    return epsilons_spent(noise_multipliers=g.noise_multiplier, q=g.q, rounds=rounds, delta=p.config.delta)


def test_a_pld_plan_spends_its_budget_through_the_ledger_api(tmp_path, pld_plan):
    p = pld_plan
    assert max(_rdp(p, 4) / p.groups.epsilon) > 1.3  # RDP alone would refuse this plan before round 1
    membership, budgets = simulated_clients(p, p.groups)
    book = Ledger(str(tmp_path / "l.sqlite"))
    run_id = book.start_run(federation="f", label="pld", plan_sha256="0" * 64, membership=membership,
                            budgets_of=budgets, delta=p.config.delta,
                            planned=round_costs(p, p.groups.name, start=0, rounds=4))  # fmt: skip
    for r in range(4):
        book.release(run_id, r)
    book.finish(run_id)
    spent = {s.client_id: s for s in book.spending("f")}
    rdp = _rdp(p, 4)
    for m in range(3):
        s = spent[str(sum(p.groups.size[:m]))]
        assert p.groups.epsilon_spent[m] * (1 - 1e-12) <= s.epsilon_spent <= rdp[m]
        assert s.epsilon_spent <= p.groups.epsilon[m] * (1 + 1e-9)
    with pytest.raises(LedgerError, match="refused before round 1"):
        book.start_run(federation="f", label="again", plan_sha256="0" * 64, membership=membership,
                       budgets_of=budgets, delta=p.config.delta,
                       planned=round_costs(p, p.groups.name, start=0, rounds=1))  # fmt: skip


def test_a_ddg_plan_is_charged_through_its_accountant(tmp_path):
    """A trusted-server plan calibrated with the distributed discrete Gaussian's accountant is charged by that bound
    (what its run reports), not as plain sampled Gaussian rounds (RDP's, smaller): the ledger and the run agree."""
    p = plan((1.0, 2.0, 4.0), 120, rounds=4, q=0.2, clip=1.0, accountant="ddg")
    costs = round_costs(p, p.groups.name, start=0, rounds=4)
    assert all(g.tau_d == 0.0 and g.accountant == "ddg" for r in costs for g in r)
    membership, budgets = simulated_clients(p, p.groups)
    book = Ledger(str(tmp_path / "l.sqlite"))
    run_id = book.start_run(federation="f", label="ddg", plan_sha256="0" * 64, membership=membership,
                            budgets_of=budgets, delta=p.config.delta, planned=costs)  # fmt: skip
    for r in range(4):
        book.release(run_id, r)
    book.finish(run_id)
    spent = {s.client_id: s.epsilon_spent for s in book.spending("f")}
    rdp = _rdp(p, 4)
    for m in range(3):
        charged = spent[str(sum(p.groups.size[:m]))]
        assert charged == pytest.approx(p.groups.epsilon_spent[m], rel=1e-9)
        assert rdp[m] < charged <= p.groups.epsilon[m] * (1 + 1e-9)


def test_mixed_rounds_take_the_smallest_valid_bound():
    """σ and q mixed: PLD (dp-accounting's PLDAccountant) is used where a round was planned by PLD, and the result
    is at most RDP's and at least either part alone (composition never reports less than a part of itself)."""
    a, b = (
        GroupRound(q=0.1, noise_multiplier=1.1, accountant="pld"),
        GroupRound(q=0.3, noise_multiplier=2.0, accountant="pld"),
    )
    mixed = {a: 5, b: 7}
    eps = compose(mixed, 1e-5)
    assert eps == compose_pld(mixed, 1e-5) < compose_rdp(mixed, 1e-5)
    assert eps >= max(compose({a: 5}, 1e-5), compose({b: 7}, 1e-5))
    rdp_only = {GroupRound(q=0.1, noise_multiplier=1.1): 5, GroupRound(q=0.3, noise_multiplier=2.0): 7}
    assert compose(rdp_only, 1e-5) == compose_rdp(mixed, 1e-5)  # no PLD plan: RDP, as it planned
    ddg = {
        GroupRound(q=0.1, noise_multiplier=1.1, tau_d=1e-6, accountant="pld"): 5,
        b: 7,
    }  # a distributed round: only the distributed RDP bound holds
    assert compose(ddg, 1e-5) == compose_rdp(ddg, 1e-5) >= eps


def test_a_pld_plan_trains_with_the_ledger(tmp_path, pld_plan):
    """``hdp-plan train`` with secure noise on digits: the whole PLD plan runs; the ledger's ε lies between the
    planning accountant's and RDP's; a further round is refused."""
    pytest.importorskip("torch")
    path, ledger = tmp_path / "plan.json", tmp_path / "l.sqlite"
    save_plan(pld_plan, path)
    args = ["train", str(path), "--dataset", "digits", "--ledger", str(ledger), "--eval-every", "4"]
    done = runner.invoke(app, [*args, "--out", str(tmp_path / "run")])
    assert done.exit_code == 0, done.output
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["noise_source"] == "secure"
    shown = runner.invoke(app, ["ledger", "show", str(path), "--ledger", str(ledger), "--json"]).output
    doc = {c["client_id"]: c for c in json.loads(shown)}
    rdp = _rdp(pld_plan, 4)
    sizes = pld_plan.groups.size
    for m in range(3):
        row = doc[str(sum(sizes[:m]))]
        assert row["released_rounds"] == 4 and row["reserved_rounds"] == 0
        assert pld_plan.groups.epsilon_spent[m] * (1 - 1e-12) <= row["epsilon_spent"] <= rdp[m]
    again = runner.invoke(app, [*args, "--rounds", "1", "--out", str(tmp_path / "again")])
    assert again.exit_code == 2 and "refused before round 1" in again.output
