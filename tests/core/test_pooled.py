"""HDP-Pooled: never worse than the rows it contains, every budget met, representation, recommendation."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hdp_planner import PlanFileError, load_plan, plan, plan_problems, save_plan
from hdp_planner.accounting.calibration import GaussianRounds, reference_epsilon
from hdp_planner.methods.baselines import BaselineOptions, add_baselines, baseline_names
from hdp_planner.methods.pooled import best_shares, objective, recalibrated_lambda
from hdp_planner.planning.rows import calibrated_sigma
from hdp_planner_cli.app import app
from hdp_planner_train.learning.datasets import DataError
from hdp_planner_train.learning.partitions import group_class_partition, parse_group_classes

ROWS = ("IDP-FedAvg-Sample", "IDP-FedAvg-Scale", "HDP-Pooled")
runner = CliRunner()


def pooled_plan(eps, sizes, model_dim=None, **options):
    """The plan with the pooled baselines; without a share rule unless ``min_share`` is given (HDP-Pooled is never
    worse than the rows it contains only where they share its constraints)."""
    options = {"min_share": 0.0, **options}
    p = plan(eps, n=sum(sizes), sizes=sizes, rounds=options.pop("rounds", 10), **options)
    return add_baselines(p, ROWS, BaselineOptions(model_dim=model_dim))


@settings(max_examples=5, deadline=None)
@given(
    eps=st.lists(st.floats(0.3, 6.0), min_size=2, max_size=3, unique=True).map(sorted),
    sizes=st.lists(st.integers(30, 600), min_size=3, max_size=3),
    q=st.sampled_from([0.02, 0.05, 0.2]),
    model_dim=st.sampled_from([None, 50, 26010]),
)
def test_pooled_is_never_worse_than_the_rows_it_contains(eps, sizes, q, model_dim):
    """J = Λ + sampling variance of HDP-Pooled ≤ J of IDP-FedAvg-Sample, -Scale and GDPFed-op (their points are
    in the pooled family), and without d, Λ ≤ theirs."""
    sizes = sizes[: len(eps)]
    p = pooled_plan(eps, sizes, model_dim, q=q)
    pooled = objective(p, p.method("HDP-Pooled"), model_dim)
    for name in ("IDP-FedAvg-Sample", "IDP-FedAvg-Scale", "GDPFed-op", "GDPFed"):
        assert pooled <= objective(p, p.method(name), model_dim) * (1 + 1e-6), name
    assert plan_problems(p) == []


def test_cauchy_schwarz_shares_put_every_group_at_its_budget():
    """Without d or min share: α_m ∝ r_m/σ*_m and Λ/C² = 1/(Σ r_m/σ*_m)² (the issue's remark)."""
    room = np.array([0.5, 30.0, 90.0]) / np.array([0.9, 0.8, 0.7])
    t, share = best_shares(room, np.ones(3), np.zeros(3), 0.0)
    assert t == pytest.approx(1 / room.sum(), rel=1e-9)
    assert share == pytest.approx(room / room.sum(), rel=1e-9)
    lower = np.array([1 / 3, 0, 0])  # a floor on group 1 raises t to its share over its room
    t, share = best_shares(room, np.ones(3), lower, 0.0)
    assert share[0] >= 1 / 3 - 1e-12 and t == pytest.approx(max(1 / room.sum(), (1 / 3) / room[0]), rel=1e-9)


@pytest.fixture(scope="module")
def table2():
    """The Table 2 setting (ε = 0.5/1.5/3, n = 6000, T = 50, q = 0.02, C = 1.5) with every client-level row, as the
    paper's Problem 1 solves it (no share rule)."""
    p = plan([0.5, 1.5, 3.0], n=6000, rounds=50, q=0.02, clip=1.5, sparsity=(0.7, 0.8, 0.9), min_share=0)
    return add_baselines(p, baseline_names(["all"]), BaselineOptions(model_dim=26010))


def test_pooled_meets_every_budget_by_dp_accounting(table2):
    m, c = table2.method("HDP-Pooled"), table2.config
    for eps, sigma, q in zip(m.epsilon, m.noise_multiplier, m.q):
        assert reference_epsilon(
            GaussianRounds(noise_multiplier=sigma, q=q, rounds=c.rounds), delta=c.delta, accountant="rdp"
        ) <= eps * (1 + 1e-6)
    std = [cm * s for cm, s in zip(m.clip, m.noise_multiplier)]  # one pooled draw of std s = C_m·σ_m
    assert std == pytest.approx([std[0]] * 3, rel=1e-12)
    r = m.expected_clients
    assert sum(rm * cm for rm, cm in zip(r, m.clip)) == pytest.approx(c.clip * sum(r))  # step of the mean update
    assert sum(r) == pytest.approx(c.q * c.n)
    assert m.lambda_exact == pytest.approx((std[0] / sum(r)) ** 2)
    # less noise than both IDP corners, and the strict group far better represented than by IDP-FedAvg-Sample
    assert m.lambda_exact < table2.method("IDP-FedAvg-Sample").lambda_exact
    assert r[0] > 5 * table2.method("IDP-FedAvg-Sample").expected_clients[0]


def test_recommendation_and_plan_file_round_trip(table2, tmp_path):
    rec = table2.recommendation
    assert rec.method == "HDP-Pooled"
    assert rec.lam == min(m.lambda_exact for m in table2.methods)
    assert rec.ratio_to_planned == pytest.approx(table2.method("GDPFed+").lambda_exact / rec.lam)
    path = tmp_path / "plan.json"
    save_plan(table2, path)
    back = load_plan(path)
    assert back.method("HDP-Pooled") == table2.method("HDP-Pooled") and plan_problems(back) == []
    doc = json.loads(path.read_text())
    assert doc["schema"] == "hdp-plan/4" and doc["recommendation"]["method"] == "HDP-Pooled"
    doc["recommendation"]["method"] = "GDPFed+"
    path.write_text(json.dumps(doc))
    assert "recommendation: the file recommends GDPFed+" in plan_problems(load_plan(path))[-1]
    del doc["recommendation"]["lambda"]
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanFileError, match="recommendation"):
        load_plan(path)
    doc["recommendation"]["method"] = "HDP-Pooled"
    doc["noise"]["HDP-Pooled"]["clip"][0] *= 1.01  # the pooled std C_m·σ_m no longer agrees across groups
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanFileError, match="HDP-Pooled"):
        load_plan(path)


def test_min_share_one_gives_every_group_its_population_share():
    """F = 1 for HDP-Pooled and Problem 1 (GDPFed-op/+), on unequal groups where the strict group starves."""
    sizes = [300, 900, 1800]
    loose = pooled_plan([0.5, 2.0, 6.0], sizes, q=0.02, sigma_model="accountant")
    strict = pooled_plan([0.5, 2.0, 6.0], sizes, q=0.02, sigma_model="accountant", min_share=1.0)
    pop = np.array(sizes) / sum(sizes)
    assert loose.representation(loose.method("IDP-FedAvg-Sample"))[1][0] < 0.5 * pop[0]
    for name in ("HDP-Pooled", "GDPFed-op", "GDPFed+"):
        share = np.array(strict.representation(strict.method(name))[1])
        assert np.all(share >= pop * (1 - 1e-6)), name
        assert strict.meets_min_share(strict.method(name))
    assert not strict.meets_min_share(strict.method("IDP-FedAvg-Sample"))
    assert strict.recommendation.method != "IDP-FedAvg-Sample"
    # the bound costs noise: the constrained optimum is no better than the free one
    assert strict.method("HDP-Pooled").lambda_exact >= loose.method("HDP-Pooled").lambda_exact * (1 - 1e-9)
    assert plan_problems(strict) == []


def test_pld_calibrates_every_row_idp_sample_included():
    rdp = pooled_plan([1.0, 3.0], [40, 40], rounds=3, q=0.2)
    pld = pooled_plan([1.0, 3.0], [40, 40], rounds=3, q=0.2, accountant="pld")
    m, c = pld.method("IDP-FedAvg-Sample"), pld.config
    assert m.q == rdp.method("IDP-FedAvg-Sample").q  # q_m from the RDP allocation, σ from PLD
    assert m.noise_multiplier[0] == pytest.approx(
        max(calibrated_sigma(epsilon=list(m.epsilon), delta=c.delta, q=list(m.q), rounds=3, accountant="pld"))
    )
    assert m.noise_multiplier[0] < rdp.method("IDP-FedAvg-Sample").noise_multiplier[0]
    assert plan_problems(pld) == []
    for name in ROWS:
        assert pld.method(name).lambda_exact < rdp.method(name).lambda_exact, name
    saved = recalibrated_lambda(rdp, rdp.method("HDP-Pooled"), "pld")
    assert saved < rdp.method("HDP-Pooled").lambda_exact


def test_solve_methods_all_ends_with_the_recommendation(tmp_path):
    out = tmp_path / "plan.json"
    args = ["solve", "--eps", "0.5,1.5,3.0", "--n", "300", "--rounds", "10", "--methods", "all", "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[-1].startswith("recommended: HDP-Pooled") and "meeting --min-share 0.5" in lines[-1]
    assert "PLD accountant: HDP-Pooled would carry" in result.stdout and "α_m (%)" in result.stdout
    doc = json.loads(out.read_text())
    assert set(doc["noise"]) >= {"HDP-Pooled", "IDP-FedAvg-Sample", "Time-adaptive"} and "PFA" not in doc["noise"]
    assert doc["recommendation"]["method"] == "HDP-Pooled" and doc["config"]["min_share"] == 0.5  # the default
    plain = runner.invoke(app, ["solve", "--eps", "0.5,1.5", "--n", "100"])
    assert plain.stdout.strip().splitlines()[-1].startswith("recommended: ")


@pytest.mark.parametrize(("share", "message"), [("1.5", "min share"), ("-0.1", "min share"), ("nan", "min share")])
def test_bad_min_share_is_one_line(tmp_path, share, message):
    out = tmp_path / "plan.json"
    result = runner.invoke(app, ["solve", "--eps", "0.5,1.5", "--n", "100", "--min-share", share, "-o", str(out)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.stderr
    assert not out.exists()


def test_older_schema_is_refused(table2, tmp_path):
    path = tmp_path / "plan.json"
    save_plan(dataclasses.replace(table2), path)
    doc = json.loads(path.read_text())
    doc["schema"] = "hdp-plan/3"
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanFileError, match="re-create it with hdp-plan solve"):
        load_plan(path)


def test_group_class_partition_gives_each_group_only_its_classes():
    labels = np.repeat(np.arange(10), 30)
    classes = parse_group_classes("0,1,2,3/4,5,6/7,8,9", 3, 10)
    parts = group_class_partition(labels, (20, 10, 30), classes, np.random.default_rng(0))
    assert len(parts) == 60
    for i, part in enumerate(parts):
        group = 0 if i < 20 else 1 if i < 30 else 2
        assert set(labels[part]) <= set(classes[group]) and len(part) > 0
    assert sorted(np.concatenate(parts)) == list(range(300))  # every sample dealt once
    for text in ("0,1/2", "0,1/1,2/3", "0,a/1/2", "0/1/10"):
        with pytest.raises(DataError, match="--group-classes"):
            parse_group_classes(text, 3, 10)


def test_training_reports_accuracy_on_each_groups_classes(tmp_path):
    """train --group-classes: per-group accuracy whose class-count-weighted mean is the overall accuracy."""
    pytest.importorskip("torch")
    from hdp_planner_train.learning.federated import load_federated
    from hdp_planner_train.run.options import configure
    from hdp_planner_train.simulator.trainer import TrainConfig, run

    p = pooled_plan([0.5, 1.5, 3.0], [40, 40, 40], q=0.1, clip=1.5)
    save_plan(p, tmp_path / "plan.json")
    cfg = configure(TrainConfig, method="hdp-pooled", dataset="digits", rounds=2, group_classes="0,1,2,3/4,5,6/7,8,9",
                      progress=False)  # fmt: skip
    metrics = run(cfg, tmp_path / "plan.json")
    y = load_federated("digits").y_test
    counts = [np.isin(y, c).sum() for c in metrics["group_classes"]]
    mean = sum(a * k for a, k in zip(metrics["group_accuracy"], counts)) / sum(counts)
    assert len(metrics["group_accuracy"]) == 3 and mean == pytest.approx(metrics["final_accuracy"])
    one = run(
        dataclasses.replace(cfg, method="dp-fedavg", rounds=1), tmp_path / "plan.json"
    )  # one noise group, still the plan's 3 groups
    assert len(one["group_accuracy"]) == 3
    with pytest.raises(ValueError, match="--group-classes"):
        run(
            dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, group_classes="0,1/2,3")),
            tmp_path / "plan.json",
        )
