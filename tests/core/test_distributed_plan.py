"""Planning under a trust model: ``solve --trust secagg`` writes a trust object that ``verify`` re-derives, and
refuses edited bits, survivors, colluders, participations or noise."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
from typer.testing import CliRunner

from hdp_planner import plan
from hdp_planner.planfile.document import plan_from_dict, plan_problems, plan_to_dict
from hdp_planner.planfile.schema import PlanFileError
from hdp_planner.planning.trust import SecaggParameters
from hdp_planner.trust.registry import requested_trust
from hdp_planner.trust.secagg_rows import secagg_row
from hdp_planner_cli.app import app

runner = CliRunner()
SOLVE = ["solve", "--eps", "0.5,1.5,3.0", "--n", "600", "--rounds", "20", "--q", "0.2", "--clip", "1.5"]


@pytest.fixture(scope="module")
def small():
    p = plan((0.5, 1.5, 3.0), 600, rounds=20, q=0.2, clip=1.5)
    params = SecaggParameters(bits=16, survivors=0.9, colluders=1, participations=4, model_dim=1000)
    p = dataclasses.replace(p, trust=requested_trust("secagg", params).planned(p))
    return p, plan_to_dict(p)


def refused(doc) -> bool:
    """Whether a plan document is refused: unreadable (PlanFileError) or failing verification."""
    try:
        return bool(plan_problems(plan_from_dict(doc)))
    except PlanFileError:
        return True


def test_secagg_rows_meet_their_budgets_and_cost_more_noise(small):
    p, _ = small
    assert p.trust.problems(p) == []
    for r in p.trust.rows:
        m = p.method(r.name)
        assert r.price > 1
        laws = p.trust.laws(m, p.config)
        least = min(law.share_sigma2 for law in laws)
        for g, law, sigma, eps in zip(r.groups, laws, m.noise_multiplier, m.epsilon):
            assert g.epsilon_third_parties == eps
            assert g.noise_multiplier >= sigma * (1 - 1e-6)  # the generic bound is never tighter than the exact one
            assert g.effective_noise_multiplier > g.noise_multiplier  # colluders' shares, rounding, inflation
            assert law.server_multiplier(least, groups=len(r.groups)) <= law.third_party_multiplier  # t ≤ N shares


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t.update(bits=20),
        lambda t: t.update(survivors=0.95),
        lambda t: t.update(survivors=0.5),
        lambda t: t["rows"]["GDPFed+"]["threshold"].__setitem__(0, 1),
        lambda t: t["rows"]["GDPFed+"]["share_sigma2"].__setitem__(1, 16),
        lambda t: t["rows"]["GDPFed+"]["gamma"].__setitem__(2, 1.0),
        lambda t: t.update(colluders=0),
        lambda t: t.update(participations=3),
        lambda t: t["rows"]["GDPFed+"]["noise_multiplier"].__setitem__(0, 0.5),
        lambda t: t["rows"]["GDPFed+"].__setitem__("price_of_distrust", 1.0),
        lambda t: t.update(recommendation="DP-FedAvg"),
    ],
)
def test_verify_refuses_an_edited_trust_object(small, edit):
    _, doc = small
    assert not refused(doc)
    edited = copy.deepcopy(doc)
    edit(edited["trust"])
    assert refused(edited)


def test_a_server_plan_has_nothing_to_verify(small):
    p = plan((0.5, 1.5, 3.0), 600, rounds=20, q=0.2, clip=1.5)
    assert p.trust.problems(p) == [] and "trust" not in plan_to_dict(p)
    assert secagg_row(p.groups, p.config, SecaggParameters(model_dim=10)).lambda_secagg > p.groups.lambda_exact


def test_the_trust_object_records_each_calibrated_row_and_reads_back_typed(small):
    p, doc = small
    for r in p.trust.rows:
        entry = doc["trust"]["rows"][r.name]
        assert (entry is None) == (r.groups is None)
        if entry is not None:
            assert entry["noise_multiplier"] == [g.noise_multiplier for g in r.groups]
    assert plan_from_dict(json.loads(json.dumps(doc))).trust == p.trust  # the file holds the whole section


def test_solve_secagg_writes_a_plan_verify_accepts_and_refuses_when_edited(tmp_path):
    path = tmp_path / "plan.json"
    result = runner.invoke(app, [*SOLVE, "--trust", "secagg", "--model-dim", "1000", "--bits", "16",
                                 "--participations", "4", "-o", str(path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "under secure aggregation" in result.output and "recommended under secagg" in result.output
    doc = json.loads(path.read_text())
    assert doc["trust"]["kind"] == "secagg" and doc["trust"]["bits"] == 16
    assert runner.invoke(app, ["verify", str(path)]).exit_code == 0
    doc["trust"]["survivors"] = 0.8
    path.write_text(json.dumps(doc))
    result = runner.invoke(app, ["verify", str(path)])
    assert result.exit_code == 1 and "differs from the recomputed" in result.output


@pytest.mark.parametrize(
    "args,message",
    [
        (["--trust", "secagg"], "needs --model-dim"),
        (["--trust", "secagg", "--model-dim", "10", "--bits", "40"], "bits must be an integer in [8, 32]"),
        (["--trust", "secagg", "--model-dim", "10", "--survivors", "0"], "survivors F must lie in (1/2, 1]"),
        (["--trust", "secagg", "--model-dim", "10", "--survivors", "0.5"], "survivors F must lie in (1/2, 1]"),
        (["--trust", "secagg", "--model-dim", "10", "--survivors", "0.3"], "no consistency round"),
        (["--trust", "secagg", "--model-dim", "10", "--participations", "21"], "exceed the plan's T = 20"),
        (["--trust", "secagg", "--model-dim", "10", "--participations", "0"], "participations K"),
        (["--trust", "nobody"], "trust must be one of server, secagg"),
    ],
)
def test_bad_trust_options_get_one_line(args, message):
    result = runner.invoke(app, [*SOLVE, *args])
    assert result.exit_code != 0
    assert message in result.output and "Traceback" not in result.output
