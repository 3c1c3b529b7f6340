"""Every client bound to its own budget: groups in canonical order, δ below 1/n, and groups files checked against the
budgets the plan was made from."""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hdp_planner import PlanConfig, plan
from hdp_planner.planfile.document import PlanFileError, load_plan, plan_problems, plan_to_dict
from hdp_planner.planning.budgets import BudgetError, budgets_digest, read_assignment
from hdp_planner_cli.app import app

logging.getLogger("absl").setLevel(logging.ERROR)
runner = CliRunner()


@pytest.fixture(scope="module")
def doc():
    return plan_to_dict(plan((0.5, 1.5, 3.0), 600, rounds=20, q=0.05, clip=1.5))


def _reversed(doc: dict) -> dict:
    """The review's edit: every per-group list reversed, every derived field consistent."""
    out = json.loads(json.dumps(doc))
    out["groups"] = out["groups"][::-1]
    for entry in out["noise"].values():
        for key, value in entry.items():
            if isinstance(value, list) and len(value) == 3:
                entry[key] = value[::-1]
    return out


def test_a_plan_with_groups_in_reverse_order_is_refused(doc, tmp_path):
    path = tmp_path / "reversed.json"
    path.write_text(json.dumps(_reversed(doc)))
    with pytest.raises(PlanFileError, match="increasing ε"):
        load_plan(path)
    result = runner.invoke(app, ["verify", str(path)])
    assert result.exit_code == 2 and "increasing ε" in result.output


def test_delta_at_or_above_one_over_n_needs_the_explicit_option(tmp_path):
    with pytest.raises(ValueError, match="not below 1/n"):
        PlanConfig(n=100, delta=0.01)
    assert PlanConfig(n=100, delta=0.5, large_delta=True).delta == 0.5
    result = runner.invoke(app, ["solve", "--eps", "0.5,1.5,3.0", "--n", "100", "--delta", "0.5"])
    assert result.exit_code == 2 and "--allow-large-delta" in result.output
    path = tmp_path / "p.json"
    ok = runner.invoke(app, ["solve", "--eps", "0.5,1.5,3.0", "--n", "100", "--delta", "0.5", "--allow-large-delta",
                             "-o", str(path)])  # fmt: skip
    assert ok.exit_code == 0 and json.loads(path.read_text())["config"]["allow_large_delta"] is True
    edited = json.loads(path.read_text())
    del edited["config"]["allow_large_delta"]  # the plan no longer says so: refused
    path.write_text(json.dumps(edited))
    assert runner.invoke(app, ["verify", str(path)]).exit_code == 2


def test_solve_from_budgets_records_their_digest_and_assign_refuses_other_budgets(tmp_path):
    budgets = tmp_path / "budgets.csv"
    eps = [0.5] * 40 + [1.5] * 40 + [3.0] * 40
    budgets.write_text("client_id,epsilon\n" + "".join(f"{i},{e}\n" for i, e in enumerate(eps)))
    path = tmp_path / "plan.json"
    assert runner.invoke(app, ["solve", "--budgets", str(budgets), "--groups", "3", "-o", str(path)]).exit_code == 0
    recorded = json.loads(path.read_text())["grouping"]["budgets_sha256"]
    assert recorded == budgets_digest([str(i) for i in range(120)], eps)
    groups = tmp_path / "groups.csv"
    assert runner.invoke(app, ["assign", str(path), str(budgets), "-o", str(groups)]).exit_code == 0
    _, assigned, _ = read_assignment(groups, (0.5, 1.5, 3.0), recorded)
    assert list(assigned) == [0] * 40 + [1] * 40 + [2] * 40
    other = tmp_path / "other.csv"
    other.write_text("client_id,epsilon\n" + "".join(f"{i},{e + 1}\n" for i, e in enumerate(eps)))
    result = runner.invoke(app, ["assign", str(path), str(other)])
    assert result.exit_code == 2 and "digest mismatch" in result.output


@given(
    budgets=st.lists(st.sampled_from([0.3, 0.5, 1.0, 1.5, 3.0, 8.0]), min_size=6, max_size=30),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=30, deadline=None)
def test_any_reassignment_is_refused_or_keeps_every_client_within_budget(budgets, seed):
    """Random budgets, a plan for three groups, and a random assignment of clients to groups: either the groups file
    is refused, or every client's ε, recomputed with dp-accounting from its group's executed σ and q, is within its
    own budget."""
    p = plan((0.5, 1.5, 3.0), 600, rounds=20, q=0.05, clip=1.5)
    g = p.groups
    rng = np.random.default_rng(seed)
    groups = rng.integers(1, 4, len(budgets))
    if rng.random() < 0.5:  # half the files are repaired: each client in the largest group its budget allows, or 1
        groups = np.array([max([k for k in (1, 2, 3) if g.epsilon[k - 1] <= e] or [1]) for e in budgets])
    rows = "".join(f"{i},{e!r},{k},{g.epsilon[k - 1]!r}\n" for i, (e, k) in enumerate(zip(budgets, groups)))
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as fh:
        fh.write("client_id,epsilon,group,group_epsilon\n" + rows)
    try:
        _, assigned, _ = read_assignment(fh.name, g.epsilon, None)
    except BudgetError:
        return
    for e, m in zip(budgets, assigned):
        acc = RdpAccountant()
        acc.compose(dpa.PoissonSampledDpEvent(g.q[m], dpa.GaussianDpEvent(g.noise_multiplier[m])), p.config.rounds)
        assert acc.get_epsilon(p.config.delta) <= e * (1 + 1e-9)


@given(
    eps=st.lists(st.sampled_from([0.3, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0]), min_size=2, max_size=4, unique=True),
    per_group=st.integers(40, 200),
    q=st.sampled_from([0.02, 0.05, 0.1]),
    rounds=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=12, deadline=None)
def test_random_plans_reordered_or_regrouped_are_refused_or_within_every_budget(eps, per_group, q, rounds, seed):
    """Random plans made from budgets (their ``grouping`` recorded), edited the way the review did: the groups
    listed in another order with every derived field kept consistent, or a plan solved for other group sizes given
    the original's ``grouping``. ``load_plan``/``verify`` refuses, or every client, mapped to a group by the edited
    file, spends at most its own budget, recomputed with dp-accounting from the mechanism the trainer executes."""
    from hdp_planner.planning.mechanism import executed_mechanism

    eps = sorted(eps)
    count, n = len(eps), per_group * len(eps)
    p = plan(tuple(eps), n, rounds=rounds, q=q, clip=1.0)
    grouping = {"sizes": list(p.groups.size), "epsilons": eps, "budgets_sha256": "0" * 64}
    budget_of_client = np.repeat(eps, p.groups.size)  # the true population: ids in the original group order
    rng = np.random.default_rng(seed)
    if rng.random() < 0.5:  # reorder (the identity now and then): every per-group list permuted alike
        out = plan_to_dict(p)
        order = rng.permutation(count).tolist() if rng.random() < 0.7 else list(range(count))
        out["groups"] = [out["groups"][m] for m in order]
        for entry in out["noise"].values():
            for key, value in entry.items():
                if isinstance(value, list) and len(value) == count:
                    entry[key] = [value[m] for m in order]
    else:  # k clients of group a moved into group b: a consistent plan for those sizes
        a, b = rng.choice(count, 2, replace=False)
        sizes = list(p.groups.size)
        k = int(rng.integers(1, per_group))
        sizes[a], sizes[b] = sizes[a] - k, sizes[b] + k
        out = plan_to_dict(plan(tuple(eps), n, sizes=tuple(sizes), rounds=rounds, q=q, clip=1.0))
    out["grouping"] = grouping
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "edited.json"
        path.write_text(json.dumps(out))
        try:
            edited = load_plan(path)
        except (PlanFileError, ValueError):
            return
    if plan_problems(edited):
        return
    row = edited.method("GDPFed+")
    mech = executed_mechanism(row, edited.config)
    group_of_client = np.repeat(np.arange(len(row.size)), row.size)
    for m in range(len(row.size)):
        acc = RdpAccountant()
        acc.compose(dpa.PoissonSampledDpEvent(mech.q[m], dpa.GaussianDpEvent(mech.noise_multiplier[m])), rounds)
        assert acc.get_epsilon(edited.config.delta) <= budget_of_client[group_of_client == m].min() * (1 + 1e-6)


def test_budgets_files_may_carry_delta(tmp_path):
    budgets = tmp_path / "budgets.csv"
    budgets.write_text("client_id,epsilon,delta\n" + "".join(f"c{i},{0.5 + (i % 3)},{1e-5 if i else 1e-6}\n"
                                                             for i in range(300)))  # fmt: skip
    path = tmp_path / "plan.json"
    res = runner.invoke(app, ["solve", "--budgets", str(budgets), "--groups", "3", "-o", str(path)])
    assert res.exit_code == 0, res.output
    assert load_plan(path).config.delta == 1e-6  # the default 1/n^1.1 lowered to the strictest client's δ
    res = runner.invoke(app, ["solve", "--budgets", str(budgets), "--groups", "3", "--delta", "1e-5"])
    assert res.exit_code == 2 and "exceeds the smallest client delta" in res.output
    budgets.write_text("client_id,epsilon,delta\nc0,1.0,0.5\nc1,1.0,1.5\n")
    res = runner.invoke(app, ["solve", "--budgets", str(budgets), "--groups", "1"])
    assert res.exit_code == 2 and "every delta must lie in (0, 1)" in res.output
    listing = tmp_path / "budgets.json"
    for client_delta, planned in ((1e-4, 1e-4), (0.05, 50**-1.1)):  # 1/n^1.1 is 0.0135: kept when already below
        rows = [{"client_id": f"c{i}", "epsilon": 1.0, "delta": client_delta} for i in range(50)]
        listing.write_text(json.dumps(rows))
        res = runner.invoke(app, ["solve", "--budgets", str(listing), "--groups", "1", "-o", str(path), "--overwrite"])
        assert res.exit_code == 0, res.output
        assert load_plan(path).config.delta == pytest.approx(planned)


@pytest.fixture
def budgets_plan(tmp_path):
    """The review's population: ids 0-99 may spend ε 3, ids 200-299 only 0.5; a plan solved from those budgets and
    ``assign``'s groups file."""
    budgets = tmp_path / "budgets.csv"
    eps = [3.0] * 100 + [1.5] * 100 + [0.5] * 100
    budgets.write_text("client_id,epsilon\n" + "".join(f"{i},{e}\n" for i, e in enumerate(eps)))
    path, groups = tmp_path / "plan.json", tmp_path / "groups.csv"
    res = runner.invoke(app, ["solve", "--budgets", str(budgets), "--groups", "3", "--rounds", "2", "-o", str(path)])
    assert res.exit_code == 0, res.output
    assert runner.invoke(app, ["assign", str(path), str(budgets), "-o", str(groups)]).exit_code == 0
    return path, groups


def test_a_plan_made_from_budgets_trains_only_with_its_groups_file(tmp_path, budgets_plan):
    """``train`` used to map clients 0..n−1 to the groups in order and charge the ledger with the wrong budgets
    (client 299, budget 0.5, registered at 3). Now it refuses without ``--groups``, and with it the ledger charges
    every client in its group against its own budget, as ``ledger show|check --groups`` report."""
    pytest.importorskip("torch")
    path, groups = budgets_plan
    ledger = tmp_path / "ledger.sqlite"
    common = ["train", str(path), "--dataset", "digits", "--clients", "300", "--ledger", str(ledger)]
    res = runner.invoke(app, [*common, "--out", str(tmp_path / "r0")])
    assert res.exit_code == 2 and "give --groups" in res.output and not ledger.exists()
    res = runner.invoke(app, [*common, "--groups", str(groups), "--out", str(tmp_path / "r1")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["ledger", "show", str(path), "--ledger", str(ledger), "--groups", str(groups), "--json"])
    shown = {c["client_id"]: c for c in json.loads(res.output)}
    assert len(shown) == 300 and shown["299"]["epsilon_budget"] == 0.5 and shown["0"]["epsilon_budget"] == 3.0
    assert all(c["epsilon_spent"] <= c["epsilon_budget"] * (1 + 1e-9) for c in shown.values())
    res = runner.invoke(app, ["ledger", "show", str(path), "--ledger", str(ledger)])
    assert res.exit_code == 2 and "give --groups" in res.output
    res = runner.invoke(app, ["ledger", "check", str(path), "--ledger", str(ledger), "--groups", str(groups)])
    assert res.exit_code == 1 and "cannot take part" in res.output  # the run spent the plan's whole budget


def test_a_grouping_copied_from_another_plan_is_refused(tmp_path, budgets_plan):
    """The review copied a budgets plan's ``grouping`` (sizes 100/100/100 and its digest) into a plan solved for
    50/100/150: it passed ``verify`` and trained."""
    path, _ = budgets_plan
    other = plan_to_dict(plan((0.5, 1.5, 3.0), 300, sizes=(50, 100, 150), rounds=2, q=0.05, clip=1.5))
    other["grouping"] = json.loads(path.read_text())["grouping"]
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(other))
    with pytest.raises(PlanFileError, match="grouping: the budgets were grouped into sizes"):
        load_plan(moved)
    res = runner.invoke(app, ["verify", str(moved)])
    assert res.exit_code != 0 and "grouping" in res.output


def test_a_node_refuses_a_budgets_plan_without_its_groups_file(budgets_plan, tmp_path):
    pytest.importorskip("flwr")
    from hdp_planner_flower.pin import Pin, RoundRefused, file_sha256, load_pinned

    _, groups = budgets_plan
    secure = tmp_path / "secure.json"
    res = runner.invoke(app, ["solve", "--budgets", str(tmp_path / "budgets.csv"), "--groups", "3", "--rounds", "2",
                              "--q", "0.5", "--trust", "secagg", "--model-dim", "1000", "-o", str(secure)])  # fmt: skip
    assert res.exit_code == 0, res.output
    with pytest.raises(RoundRefused, match="give --groups"):
        load_pinned(Pin(plan=str(secure), sha256=file_sha256(secure), method="gdpfed+"))
    assert load_pinned(Pin(plan=str(secure), sha256=file_sha256(secure), method="gdpfed+", groups=str(groups)))
