"""plan.json: round trip, verify accepts what solve writes, rejects tampered or broken files."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hdp_planner import (
    PlanFileError,
    PlanVerificationError,
    load_plan,
    plan,
    plan_problems,
    plan_to_dict,
    save_plan,
    verify,
)
from hdp_planner.accounting.pld import never_sampled_bound
from hdp_planner.planfile.document import SCHEMA, same_plan


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
    assert plan_problems(loaded) == []


def tamper(path, edit):
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    return path


def test_verify_rejects_under_noised_group_even_if_file_is_consistent(plan_path):
    problems = plan_problems(load_plan(tamper(plan_path, lambda doc: _lower_sigma(doc, "GDPFed+", 1, 0.9))))
    assert problems and "group 2" in problems[0] and "ε=1.5" in problems[0]


def test_verify_raises_like_load_plan_and_carries_every_problem(plan_path, fmnist_plan):
    """``verify`` follows ``load_plan``'s convention: None for a plan that verifies, else a PlanFileError whose
    ``problems`` are exactly what ``plan_problems`` lists (two groups under-noised: both named, not only the first)."""
    assert verify(fmnist_plan) is None

    def edit(doc):
        _lower_sigma(doc, "GDPFed+", 1, 0.9)
        _lower_sigma(doc, "GDPFed+", 2, 0.9)

    tampered = load_plan(tamper(plan_path, edit))
    with pytest.raises(PlanFileError) as caught:
        verify(tampered)
    assert isinstance(caught.value, PlanVerificationError)
    assert caught.value.problems == tuple(plan_problems(tampered))
    assert [i for i in (2, 3) if any(f"group {i}" in p for p in caught.value.problems)] == [2, 3]
    assert str(caught.value) == "; ".join(caught.value.problems)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["groups"][0].update(q=0.5), "was edited"),
        (lambda d: d["noise"]["GDPFed"]["sigma2"].__setitem__(0, 0.1), "inconsistent"),
        (lambda d: d["noise"]["GDPFed"].update({"lambda": 1.0}), "lambda"),
        (lambda d: d["config"].update(q=1.5), "q"),
        (lambda d: d["config"].update(n=10), "sum to"),
        (lambda d: d["noise"]["GDPFed"]["q"].__setitem__(0, -0.1), "impossible"),
        (lambda d: d["noise"]["GDPFed"]["epsilon"].__setitem__(0, 0.0), "impossible"),
        (lambda d: d["noise"].pop("GDPFed+"), "missing"),
        (lambda d: d["config"].update(rounds="fifty"), "rounds"),
        (lambda d: d["noise"]["GDPFed"]["epsilon"].__setitem__(2, 9.0), "was edited"),
    ],
)
def test_inconsistent_files_are_rejected(plan_path, edit, message):
    with pytest.raises(PlanFileError, match=message):
        load_plan(tamper(plan_path, edit))


def test_verify_flags_wrong_recorded_epsilon(plan_path):
    def edit(doc):
        doc["noise"]["GDPFed"]["epsilon_spent"][2] = 1.0

    problems = plan_problems(load_plan(tamper(plan_path, edit)))
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


def _lower_sigma(doc, method, group, factor):
    """Lower one group's σ in ``method`` and repair every derived field, so only the accountant can object."""
    from hdp_planner.rules.noise import lambda_exact

    names = ("GDPFed-op", "GDPFed+") if method in ("GDPFed-op", "GDPFed+") else (method,)
    for name in names:
        entry = doc["noise"][name]
        entry["noise_multiplier"][group] *= factor
        entry["sigma2"][group] = entry["noise_multiplier"][group] ** 2
        lam = lambda_exact(entry["weight"], entry["noise_multiplier"], entry["k_ratio"], doc["config"]["clip"])
        entry["lambda"] = entry["lambda_exact"] = lam
    if method in ("GDPFed-op", "GDPFed+"):
        doc["groups"][group]["noise_multiplier"] = doc["noise"]["GDPFed+"]["noise_multiplier"][group]
        doc["groups"][group]["sigma2"] = doc["noise"]["GDPFed+"]["sigma2"][group]


@settings(max_examples=15, deadline=None)
@given(
    eps=st.lists(st.floats(0.2, 10), min_size=1, max_size=4, unique=True).map(sorted),
    per_group=st.integers(50, 3000),
    q=st.floats(0.005, 0.2),
    rounds=st.integers(1, 300),
    sparse=st.booleans(),
    data=st.data(),
)
def test_verify_accepts_every_solved_plan_and_rejects_any_lowered_sigma(
    tmp_path_factory, eps, per_group, q, rounds, sparse, data
):
    n = per_group * len(eps)
    sparsity = tuple(0.5 + 0.1 * i for i in range(len(eps))) if sparse else None
    p = plan(eps, n, q=q, rounds=rounds, sparsity=sparsity)
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    save_plan(p, path)
    assert plan_problems(load_plan(path)) == []
    method = data.draw(st.sampled_from(["DP-FedAvg", "GDPFed", "GDPFed-op"]))
    group = data.draw(st.integers(0, len(p.method(method).size) - 1))
    # where 1 − (1 − q)^T ≤ δ the group is (0, δ)-DP whatever σ: lowering σ spends nothing
    assume(never_sampled_bound(p.method(method).q[group], rounds=rounds) > p.config.delta)
    doc = json.loads(path.read_text())
    _lower_sigma(doc, method, group, 0.99)
    path.write_text(json.dumps(doc))
    problems = plan_problems(load_plan(path))
    assert problems and f"group {group + 1}" in problems[0]


@pytest.mark.parametrize(
    ("old", "new", "same"),
    [
        (b'{"a": 1, "versions": {"numpy": "1"}}', b'{"a": 1, "versions": {"numpy": "2"}}', True),
        (b'{"a": 1}', b'{"a": 2}', False),
        (b"not json", b'{"a": 1}', False),
        (b"[1]", b"[1]", False),
    ],
)
def test_same_plan_ignores_only_the_library_versions(old, new, same):
    """An earlier file is the same plan only if both are plan documents equal but for the versions that wrote them."""
    assert same_plan(old, new) is same
