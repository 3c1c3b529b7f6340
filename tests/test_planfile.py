"""plan.json: round trip, verify accepts what solve writes, rejects tampered or broken files."""

from __future__ import annotations

import json

import pytest

from hdp_planner import PlanFileError, load_plan, plan_to_dict, save_plan, verify
from hdp_planner.planfile import SCHEMA


@pytest.fixture
def plan_path(tmp_path, fmnist_plan):
    path = tmp_path / "plan.json"
    save_plan(fmnist_plan, path)
    return path


def test_schema_and_keys(plan_path):
    doc = json.loads(plan_path.read_text())
    assert doc["schema"] == SCHEMA
    assert {"n", "rounds", "q", "delta", "clip", "lr", "local_steps", "accountant", "sigma_model"} <= set(doc["config"])
    assert set(doc["noise"]) == {"DP-FedAvg", "GDPFed", "GDPFed-op", "GDPFed+"}
    for row in doc["groups"]:
        assert set(row) == {
            "epsilon",
            "size",
            "q",
            "expected_clients",
            "noise_multiplier",
            "sigma2",
            "k_ratio",
            "weight",
            "epsilon_spent",
        }
    assert {"sigma2", "lambda"} <= set(doc["noise"]["GDPFed"])
    assert "dp-accounting" in doc["versions"] and "objective" in doc


def test_round_trip(plan_path, fmnist_plan):
    loaded = load_plan(plan_path)
    assert loaded == fmnist_plan
    assert plan_to_dict(loaded)["groups"] == plan_to_dict(fmnist_plan)["groups"]
    assert verify(loaded) == []


def tamper(path, edit):
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    return path


def test_verify_rejects_under_noised_group_even_if_file_is_consistent(plan_path):
    def lower_sigma(doc):
        m = doc["noise"]["GDPFed+"]
        m["noise_multiplier"][1] *= 0.9
        m["sigma2"][1] = m["noise_multiplier"][1] ** 2
        op = doc["noise"]["GDPFed-op"]
        op["noise_multiplier"][1], op["sigma2"][1] = m["noise_multiplier"][1], m["sigma2"][1]
        for entry in (m, op):
            w, s, k = entry["weight"], entry["noise_multiplier"], entry["k_ratio"]
            lam = 1.0 * sum(wi**2 * si**2 * ki for wi, si, ki in zip(w, s, k))
            entry["lambda"] = entry["lambda_exact"] = lam
        doc["groups"][1]["noise_multiplier"] = m["noise_multiplier"][1]
        doc["groups"][1]["sigma2"] = m["sigma2"][1]

    problems = verify(load_plan(tamper(plan_path, lower_sigma)))
    assert problems and "group 2" in problems[0] and "ε=1.5" in problems[0]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["groups"][0].update(q=0.5), "differs"),
        (lambda d: d["noise"]["GDPFed"]["sigma2"].__setitem__(0, 0.1), "inconsistent"),
        (lambda d: d["noise"]["GDPFed"].update({"lambda": 1.0}), "lambda"),
        (lambda d: d["config"].update(q=1.5), "q"),
        (lambda d: d["config"].update(n=10), "sum to"),
        (lambda d: d["noise"]["GDPFed"]["q"].__setitem__(0, -0.1), "impossible"),
        (lambda d: d["noise"]["GDPFed"]["epsilon"].__setitem__(0, 0.0), "impossible"),
        (lambda d: d["noise"].pop("GDPFed+"), "missing"),
        (lambda d: d["config"].update(rounds="fifty"), "rounds"),
        (lambda d: d["noise"]["GDPFed"]["epsilon"].__setitem__(2, 9.0), "differ"),
    ],
)
def test_inconsistent_files_are_rejected(plan_path, edit, message):
    with pytest.raises(PlanFileError, match=message):
        load_plan(tamper(plan_path, edit))


def test_verify_flags_wrong_recorded_epsilon(plan_path):
    def edit(doc):
        doc["noise"]["GDPFed"]["epsilon_spent"][2] = 1.0

    problems = verify(load_plan(tamper(plan_path, edit)))
    assert problems and "records" in problems[0]


def test_broken_files(tmp_path, plan_path):
    with pytest.raises(PlanFileError, match="not found"):
        load_plan(tmp_path / "missing.json")
    truncated = tmp_path / "truncated.json"
    truncated.write_text(plan_path.read_text()[:200])
    with pytest.raises(PlanFileError, match="not valid JSON"):
        load_plan(truncated)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something/2"}))
    with pytest.raises(PlanFileError, match="schema"):
        load_plan(other)
    nan = tmp_path / "nan.json"
    nan.write_text(plan_path.read_text().replace('"q": 0.02', '"q": NaN', 1))
    with pytest.raises(PlanFileError, match="NaN"):
        load_plan(nan)
    listing = tmp_path / "list.json"
    listing.write_text("[1, 2]")
    with pytest.raises(PlanFileError, match="not a plan"):
        load_plan(listing)
