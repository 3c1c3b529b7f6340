"""The simulator under ``--trust secagg``: each group's sum through the exact integer pipeline, dropouts, and the
distributed accounting in the run's metrics."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")


from hdp_planner import plan  # noqa: E402
from hdp_planner.distributed.law import group_law  # noqa: E402
from hdp_planner.distributed.randomness import SeededBits  # noqa: E402
from hdp_planner.planfile.document import plan_to_dict  # noqa: E402
from hdp_planner.planning.trust import SecaggParameters  # noqa: E402
from hdp_planner.trust.secagg import SecureAggregation  # noqa: E402
from hdp_planner_train.rules.secagg import SecaggSpec, Withheld, group_sum  # noqa: E402
from hdp_planner_train.run.options import configure  # noqa: E402
from hdp_planner_train.simulator.checkpoint import load as load_checkpoint  # noqa: E402
from hdp_planner_train.simulator.trainer import TrainConfig, TrainError, run  # noqa: E402

LAW = group_law(size=10, q=1.0, epsilon=2.0, delta=1e-3, rounds=3, dim=4000, clip=1.0, bits=20, survivors=0.9,
                colluders=0)  # fmt: skip
SPEC = SecaggSpec(bits=20, survivors=0.9, colluders=0, model_dim=4000, laws=(LAW,))


def test_group_sum_is_the_clipped_sum_plus_the_planned_noise():
    """Zero-norm rows: the released error is the law's N shares alone, variance γ²·N·σ²_s per coordinate (5 sd)."""
    rows = torch.zeros(10, 4000, dtype=torch.float64)
    y, error = group_sum(rows, spec=SPEC, rnd=0, group=0, bits=SeededBits(1), dropouts=np.random.default_rng(0))
    planned = LAW.encoding.gamma**2 * LAW.shares * LAW.share_sigma2
    assert abs(float(error.var()) / planned - 1) < 5 * math.sqrt(2 / 4000)
    rows = torch.randn(10, 4000, dtype=torch.float64)
    rows = rows / rows.norm(dim=1, keepdim=True)  # clipped to C = 1
    y, error = group_sum(rows, spec=SPEC, rnd=0, group=0, bits=SeededBits(2), dropouts=np.random.default_rng(0))
    assert torch.allclose(y - error, rows.sum(0))
    assert float(error.norm()) < 3 * math.sqrt(planned * 4000)


def test_fewer_than_the_threshold_release_nothing():
    rows = torch.randn(10, 4000, dtype=torch.float64)
    spec = SecaggSpec(bits=20, survivors=0.9, colluders=0, model_dim=4000, laws=(LAW,), dropout=0.99)
    dropped = group_sum(rows, spec=spec, rnd=0, group=0, bits=SeededBits(3), dropouts=np.random.default_rng(0))
    assert isinstance(dropped, Withheld) and dropped.group == 0
    assert dropped.reason.endswith(f"of 10 survived, below the run's threshold {LAW.run_threshold(10)}")
    few = rows[: LAW.threshold - 1]  # sampled below t: not even run
    unrun = group_sum(few, spec=SPEC, rnd=0, group=0, bits=SeededBits(3), dropouts=np.random.default_rng(0))
    assert unrun == Withheld(group=0, reason=f"{LAW.threshold - 1} sampled, below the threshold t = {LAW.threshold}")


@pytest.fixture(scope="module")
def plan_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plans")
    p = plan((1.0, 2.0, 4.0), 120, rounds=3, q=0.5, clip=1.0)
    paths = {}
    for name, dim in (("secagg", 2410), ("wrong-dim", 1000)):
        trust = SecureAggregation(parameters=SecaggParameters(model_dim=dim))
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(plan_to_dict(dataclasses.replace(p, trust=trust.planned(p)))))
    paths["server"] = folder / "server.json"
    paths["server"].write_text(json.dumps(plan_to_dict(p)))
    return paths


def _cfg(out, **kw):
    return configure(TrainConfig, **{"method": "gdpfed+", "dataset": "digits", "out": str(out),
                          "progress": False, "trust": "secagg", **kw})  # fmt: skip


def test_train_secagg_reports_the_distributed_accounting(plan_files, tmp_path):
    metrics = run(_cfg(tmp_path / "run"), plan_files["secagg"])
    trust = metrics["trust"]
    assert trust["kind"] == "secagg" and len(trust["noise_multiplier"]) == 3
    assert all(e <= b * (1 + 1e-9) for e, b in zip(trust["epsilon_third_parties"], (1.0, 2.0, 4.0)))
    assert "group_rounds_withheld" not in trust  # secure run: nothing that depends on who took part
    state = load_checkpoint(tmp_path / "run")
    assert not {k for k in state if "share" in k or "bits" in k}  # no share and no noise seed is written
    seeded = run(_cfg(tmp_path / "seeded", noise="seeded", dropout=0.5), plan_files["secagg"])
    assert seeded["trust"]["group_rounds_withheld"] == len(seeded["trust"]["withheld"]) > 0  # each with why
    assert all("below" in w["reason"] and 1 <= w["group"] <= 3 for w in seeded["trust"]["withheld"])


@pytest.mark.parametrize(
    "plan_name,kw,message",
    [
        ("server", {}, "needs a plan solved with --trust secagg"),
        ("secagg", {"method": "idp-fedavg-sample"}, "no"),
        ("wrong-dim", {}, "planned for d = 1000"),
        ("secagg", {"dropout": 1.0}, "--dropout"),
    ],
)
def test_train_secagg_refusals(plan_files, tmp_path, plan_name, kw, message):
    with pytest.raises((TrainError, ValueError), match=message):
        run(_cfg(tmp_path / "r", **kw), plan_files[plan_name])


def test_train_secagg_charges_the_ledger_with_the_distributed_accounting(plan_files, tmp_path):
    """A secure run's rounds are charged as distributed discrete Gaussian rounds, each with the δ its law's rare
    events cost: every client's spending in the ledger is what the run reports for its group (z composed at the δ
    left once those events are paid), never less, and more than the same rounds priced at the whole δ."""
    from hdp_planner.distributed.accounting import epsilon_third_parties
    from hdp_planner.distributed.rounds import group_tau_d
    from hdp_planner.ledger.runs import simulated_clients
    from hdp_planner.ledger.store import Ledger
    from hdp_planner.planfile.document import load_plan
    from hdp_planner_train.rules.specs import METHOD_NAMES, plan_spec

    ledger = tmp_path / "ledger.db"
    metrics = run(_cfg(tmp_path / "run", ledger=str(ledger), federation="digits"), plan_files["secagg"])
    plan = load_plan(plan_files["secagg"])
    membership, _ = simulated_clients(plan, plan.method(METHOD_NAMES["gdpfed+"]))
    spec = plan_spec(plan, "gdpfed+")
    spent = Ledger(str(ledger)).spending("digits")
    assert len(spent) == len(membership)
    for s in spent:
        assert s.released_rounds == metrics["rounds"] and s.reserved_rounds == 0
        m = membership[s.client_id]
        reported = metrics["trust"]["epsilon_third_parties"][m]
        law_free = epsilon_third_parties(noise_multiplier=metrics["trust"]["noise_multiplier"][m], q=spec.q[m],
                                         rounds=metrics["rounds"], delta=plan.config.delta,
                                         tau_d=group_tau_d(spec.sizes[m], model_dim=spec.secagg.model_dim))  # fmt: skip
        assert s.epsilon_spent >= reported * (1 - 1e-9)
        assert s.epsilon_spent == pytest.approx(reported, rel=1e-3)
        assert s.epsilon_spent > law_free


def test_compare_secagg_runs_the_noised_methods_through_the_integer_pipeline(tmp_path):
    """``compare --trust secagg``: the plan carries the trust object, the noised methods run under it (each run's
    metrics show the distributed accounting), p-fedavg stays the non-private reference."""
    from typer.testing import CliRunner

    from hdp_planner_cli.app import app

    out = tmp_path / "cmp"
    args = ["compare", "--dataset", "digits", "--methods", "p-fedavg,gdpfed+", "--seeds", "1", "--rounds", "2",
            "--q", "0.7", "--trust", "secagg", "--bits", "18", "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "under secure aggregation" in " ".join(result.output.split())
    doc = json.loads((out / "plan.json").read_text())
    assert doc["trust"]["kind"] == "secagg" and doc["trust"]["bits"] == 18
    runs = {r["method"]: r for r in json.loads((out / "results.json").read_text())["runs"]}
    assert runs["gdpfed+"]["trust"] == "secagg" and runs["p-fedavg"]["trust"] == "server"
    assert "trust" in json.loads((out / "gdpfed+" / "seed0" / "metrics.json").read_text())
    refused = CliRunner().invoke(app, [*args[:4], "dp2-fedsam", *args[5:], "--overwrite"])  # past the grid there
    assert refused.exit_code != 0 and "dp2-fedsam has no distributed form" in refused.output
    refused = CliRunner().invoke(app, [*args, "--dropout", "0.1", "--trust", "server"])
    assert refused.exit_code != 0 and "--dropout needs --trust secagg" in refused.output


def test_train_secagg_audit_observes_the_decoded_sums(plan_files, tmp_path):
    """``train --trust secagg --audit``: canaries enter as clients through the integer pipeline; every group is
    consistent, and the report names what the audit cannot see."""
    metrics = run(_cfg(tmp_path / "run", audit=True, noise="seeded", audit_canaries=200), plan_files["secagg"])
    audit = metrics["audit"]
    assert [g["verdict"] for g in audit["groups"]] == ["consistent"] * 3
    assert all(g["releases_not_post_processing"] == 0 for g in audit["groups"])
    assert "plan-level" in audit["blind_to"]
