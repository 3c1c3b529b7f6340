"""The canary audit of a hidden-participation run: canaries are cohort members who flip their own coins, the
statistic uses what the server sees, and ε̂ is compared with the plan's ε against the server."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from hdp_planner_cli.app import app  # noqa: E402
from hdp_planner_train.rules import aggregate as agg  # noqa: E402
from hdp_planner_train.rules import secagg  # noqa: E402
from hdp_planner_train.rules.sampling import round_rows  # noqa: E402
from hdp_planner_train.run.options import configure  # noqa: E402
from hdp_planner_train.simulator.trainer import TrainConfig, run  # noqa: E402

runner = CliRunner()
ROUNDS = 2


@pytest.fixture(scope="module")
def cohort_plan(tmp_path_factory):
    """Budgets 1, 2, 4 for 120 digits clients, T = 4, every group at least half its population's share of the update:
    cohorts of 40, coins p_m ≈ 0.22, 0.24, 0.44 over K_m = 4 memberships."""
    path = tmp_path_factory.mktemp("cohort-audit") / "plan.json"
    args = (
        "solve --eps 1,2,4 --n 120 --rounds 4 --q 0.3 --clip 1 --trust secagg --model-dim 2410 --hide-sample "
        "--min-share 0.5"
    )
    result = runner.invoke(app, [*args.split(), "-o", str(path)])
    assert result.exit_code == 0, result.output
    return path


def _audit(path, **kw):
    cfg = configure(TrainConfig, method="gdpfed+", dataset="digits", trust="secagg", ledger="none", progress=False,
                    noise="seeded", audit=True, device="cpu", **{"rounds": ROUNDS, **kw})  # fmt: skip
    return run(cfg, path)


@pytest.fixture(scope="module")
def faithful(cohort_plan):
    return _audit(cohort_plan)


def test_a_faithful_cohort_run_stays_within_the_epsilon_against_the_server(cohort_plan, faithful):
    row = json.loads(cohort_plan.read_text())["hidden_participation"]["rows"]["GDPFed+"]
    section = faithful["audit"]
    assert section["method"].startswith("public cohorts, private coins")
    for g, planned, p, k in zip(section["groups"], faithful["trust"]["epsilon_server"], row["coin"],
                                row["memberships"]):  # fmt: skip
        assert g["verdict"] == "consistent", g
        assert g["epsilon_planned"] == planned  # the plan's ε against the server for the rounds run
        assert g["sampling_rate_planned"] == p and g["compositions"] == min(ROUNDS, k)
        assert g["epsilon_empirical_interval"][0] <= planned and g["epsilon_lower_bound"] <= planned
        assert g["sampling_rate_clients"] is None  # the real members' heads are not observable: not counted
        assert g["insertions"] > 0 and g["rounds_aggregating_fewer_than_sampled"] == 0
    coin3 = section["groups"][2]
    assert coin3["shift_interval"][0] > 0  # p ≈ 0.44: the canaries that contributed are seen in the noisy sums
    assert all(g["silent_memberships"] > 0 for g in section["groups"][:2])  # tails memberships, tested for a shift


def test_a_cohort_run_with_dropouts_stays_within_the_epsilon_against_the_server(faithful, cohort_plan):
    """10% of the members drop out whatever their coin: a dropped canary is neither a membership nor a
    contribution, so the heads rate is still p_m and ε̂ stays within the plan's ε against the server. The cohorts
    and coins are the faithful run's (the same seed), so no more is counted than there."""
    dropping = _audit(cohort_plan, dropout=0.1)
    assert dropping["trust"]["dropout_simulated"] == 0.1
    for g, f, planned in zip(dropping["audit"]["groups"], faithful["audit"]["groups"],
                             dropping["trust"]["epsilon_server"]):  # fmt: skip
        assert g["verdict"] in ("consistent", "not identifiable (no canary inserted)"), g
        assert g["sampling_p_value"] > 1e-6
        if g["epsilon_empirical_interval"] is not None:
            assert g["epsilon_empirical_interval"][0] <= planned
        assert g["epsilon_lower_bound"] <= planned
        assert g["insertions"] <= f["insertions"] and g["silent_memberships"] <= f["silent_memberships"]
    assert dropping["audit"]["groups"][2]["verdict"] == "consistent"


def test_tails_that_still_contribute_are_flagged(cohort_plan, monkeypatch):
    """The coins are honest (the referee sees them) but a tails member's update is not zeroed: the tails
    memberships shift the noisy sums by the heads' 1/σ, in groups 1 and 2 (p ≈ 0.22, 0.24) over their K_m = 4."""
    real = secagg.client_message
    monkeypatch.setattr(secagg, "client_message", lambda update, plan, bits, coin=1: real(update, plan, bits, 1))
    groups = _audit(cohort_plan, rounds=4)["audit"]["groups"]
    for g in groups[:2]:
        assert g["verdict"].startswith("UNDER-NOISED") and "tails memberships shift" in g["verdict"], g


def test_canaries_are_named_in_the_cohorts_and_their_heads_come_at_the_coins_rate(faithful):
    """The memberships are the server's, the heads the referee's: heads ⊂ memberships, at about p_m."""
    for g in faithful["audit"]["groups"]:
        memberships = g["insertions"] / g["sampling_rate_observed"]
        assert g["insertions"] <= memberships <= g["canaries_in"] * g["rounds"]
        assert g["sampling_p_value"] > 1e-6


def test_a_coin_that_is_always_heads_is_flagged(cohort_plan, monkeypatch):
    """p_m < 1 planned, every member contributes: the canaries' heads rate gives it away in groups 1 and 2."""
    monkeypatch.setattr(agg, "member_coins", lambda spec, kind, *, seed, rnd, group, members: np.ones(members, int))
    groups = _audit(cohort_plan)["audit"]["groups"]
    for g in groups[:2]:
        assert g["verdict"].startswith("UNDER-NOISED") and "canaries join at 1" in g["verdict"], g["verdict"]


def test_noise_shares_a_third_too_small_are_flagged(cohort_plan, monkeypatch):
    real = secagg.round_plan

    def thin(spec, **kw):
        plan = real(spec, **kw)
        return dataclasses.replace(plan, law=dataclasses.replace(plan.law, share_sigma2=plan.law.share_sigma2 // 9))

    monkeypatch.setattr(secagg, "round_plan", thin)
    groups = _audit(cohort_plan)["audit"]["groups"]
    assert groups[2]["verdict"].startswith("UNDER-NOISED"), groups[2]  # p ≈ 0.44: enough contributions to see it


def test_cli_train_audit_on_a_cohort_plan(cohort_plan, tmp_path):
    out = tmp_path / "run"
    args = ["train", str(cohort_plan), "--dataset", "digits", "--trust", "secagg", "--rounds", "1", "--audit",
            "--audit-canaries", "100", "--seeded-noise", "--ledger", "none", "--device", "cpu",
            "--out", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "privacy audit (100 canaries per group)" in result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["audit"]["groups"]) == 3
    dropping = runner.invoke(app, [*args[:-2], "--dropout", "0.1", "--out", str(tmp_path / "dropout")])
    assert dropping.exit_code == 0, dropping.output
    metrics = json.loads((tmp_path / "dropout" / "metrics.json").read_text())
    assert metrics["trust"]["dropout_simulated"] == 0.1 and len(metrics["audit"]["groups"]) == 3


def test_a_member_named_but_not_aggregated_is_flagged(cohort_plan, monkeypatch):
    """What the server sees of the real members: the members aggregated against the cohort named."""
    from hdp_planner_train.simulator import trainer

    def drop_first(sampled):
        ids, groups = round_rows(sampled)
        return ids[1:], groups[1:]

    monkeypatch.setattr(trainer, "round_rows", drop_first)
    groups = _audit(cohort_plan)["audit"]["groups"]  # the first real member of each round: of the first group with one
    assert sum(g["rounds_aggregating_fewer_than_sampled"] for g in groups) == ROUNDS
    flagged = [g["verdict"] for g in groups if g["rounds_aggregating_fewer_than_sampled"]]
    assert flagged and all(v.startswith("NOT AS PLANNED") for v in flagged), flagged


def test_a_cohort_audit_without_the_referees_coins_stops(cohort_plan, monkeypatch):
    """No coins, no ground truth: the audit does not fall back to counting memberships as contributions."""
    real = agg.GroupAggregator.round

    def without_referee(self, *a, observers, **kw):
        return real(self, *a, observers=dataclasses.replace(observers, referee=None), **kw)

    monkeypatch.setattr(agg.GroupAggregator, "round", without_referee)
    with pytest.raises(ValueError, match="referee"):
        _audit(cohort_plan)


@pytest.mark.slow
def test_a_resumed_cohort_audit_reproduces_the_audit(cohort_plan, tmp_path):
    """The checkpoint keeps the canaries' memberships and the referee's coins: one round then a resumed second
    audits as two rounds in one go."""
    whole = _audit(cohort_plan, out=str(tmp_path / "whole"))
    cfg = dict(method="gdpfed+", dataset="digits", trust="secagg", ledger="none", progress=False, noise="seeded",
               audit=True, device="cpu", out=str(tmp_path / "split"))  # fmt: skip
    run(configure(TrainConfig, **cfg, rounds=1), cohort_plan)
    resumed = run(configure(TrainConfig, **cfg, rounds=ROUNDS, resume=True), cohort_plan)
    keys = ("epsilon_empirical", "insertions", "sampling_rate_observed", "epsilon_lower_bound")
    for a, b in zip(whole["audit"]["groups"], resumed["audit"]["groups"]):
        assert [a[k] for k in keys] == [b[k] for k in keys]
