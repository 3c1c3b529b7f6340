"""The method registry: every consumer reads it, every planned row follows the round rules its method
declares, and a method declared in one module reaches solve, the plan file and verify."""

from __future__ import annotations

import dataclasses
import re
import types
import typing

import pytest
from typer.testing import CliRunner

from hdp_planner import load_plan, plan, plan_problems, save_plan
from hdp_planner.methods.baselines import (
    BASELINES,
    BaselineOptions,
    add_baselines,
    baseline_names,
    needing_model_dim,
    planned_with_all,
)
from hdp_planner.methods.method import Method, RoundRules, SelectionTraits
from hdp_planner.methods.registry import REGISTRY, collect, row_rules, rows
from hdp_planner.planfile.document import plan_to_dict
from hdp_planner.planning.plan import METHODS
from hdp_planner.planning.rows import derived_row
from hdp_planner_cli import flower as flower_cli
from hdp_planner_cli import train as train_cli
from hdp_planner_cli.app import app

runner = CliRunner()
ALL = ("PFA", "IDP-FedAvg-Sample", "IDP-FedAvg-Scale", "Time-adaptive", "HDP-Pooled")


@pytest.fixture(scope="module")
def full_plan():
    """A small plan with every client-level row (PFA at d = 1000)."""
    return add_baselines(plan([0.5, 1.5, 3.0], n=600, rounds=20), ALL, BaselineOptions(model_dim=1000))


def test_the_solver_rows_and_the_baselines_are_the_registry_rows():
    solver_rows = tuple(m.row for m in REGISTRY.values() if m.rules is not None and m.build is None)
    assert solver_rows == METHODS
    assert BASELINES == {key: m.row for key, m in REGISTRY.items() if m.build is not None}
    assert rows() == (*METHODS, *BASELINES.values())
    for key, m in REGISTRY.items():
        assert m.key == key and m.row in rows(), key  # every method trains from a row some method plans


def test_collect_refuses_a_key_twice_and_a_row_without_one_planner():
    one = Method(key="a", row="A", rules=RoundRules(sampling="plan-q"))
    with pytest.raises(ValueError, match="declared twice"):
        collect([types.SimpleNamespace(METHODS=(one, one))])
    with pytest.raises(ValueError, match="one method"):
        collect([types.SimpleNamespace(METHODS=(one, Method(key="b", row="A", rules=RoundRules(sampling="plan-q"))))])
    with pytest.raises(ValueError, match="none"):
        collect([types.SimpleNamespace(METHODS=(Method(key="c", row="C"),))])


def test_what_methods_all_plans_is_declared_by_each_method():
    assert baseline_names(["all"]) == tuple(m.row for m in REGISTRY.values() if m.build and not m.needs_model_dim)
    assert needing_model_dim(["PFA", "HDP-Pooled"]) == ("pfa",)
    assert planned_with_all(["PFA", "HDP-Pooled"], (1.0, 1.0)) == ("HDP-Pooled",)  # PFA needs two budgets
    assert planned_with_all(["PFA", "HDP-Pooled"], (1.0, 2.0)) == ("PFA", "HDP-Pooled")


def _method_help(command) -> set[str]:
    """The method names the ``--method`` help of a command lists."""
    option = typing.get_type_hints(command, include_extras=True)["method"].__metadata__[0]
    return set(re.findall(r"[a-z0-9+-]+", option.help))


def test_the_cli_lists_every_method():
    assert set(REGISTRY) <= _method_help(train_cli.train)
    assert {key for key, m in REGISTRY.items() if m.flower} <= _method_help(flower_cli.flower)
    assert baseline_names(["all"], 1000) == tuple(BASELINES.values())


def test_every_planned_row_follows_its_declared_rules(full_plan):
    c = full_plan.config
    doc = plan_to_dict(full_plan)
    for m in full_plan.methods:
        rules = row_rules(m.name)
        assert rules is not None, m.name
        assert m.pooled == rules.pooled, m.name
        assert (m.clip is not None) == (rules.clip == "per-group"), m.name
        assert (m.projection is not None) == rules.projection, m.name
        assert (m.schedule is not None) == rules.schedule, m.name
        if rules.sampling == "plan-q":
            assert all(q == pytest.approx(c.q) for q in m.q), m.name
        assert (m.size == (c.n,)) == (rules.groups == "one"), m.name
        if not (rules.top_k or rules.projection):
            assert set(m.k_ratio) == {1.0}, m.name
        entry_keys = set(doc["noise"][m.name]) & {"clip", "pooled", "projection", "schedule"}
        assert entry_keys == rules.row_keys, m.name
    assert plan_problems(full_plan) == []


def test_the_trainer_audit_and_flower_read_the_registry(full_plan):
    pytest.importorskip("torch")
    from hdp_planner_flower.simulation import FLOWER_METHODS
    from hdp_planner_train.audit.canaries import auditable
    from hdp_planner_train.rules.specs import METHOD_NAMES
    from hdp_planner_train.simulator.personal import PERSONAL_METHODS
    from hdp_planner_train.simulator.private_selection import SELECTION_METHODS

    assert sorted((*METHOD_NAMES, *SELECTION_METHODS)) == sorted(REGISTRY)  # every key reaches one trainer
    assert set(PERSONAL_METHODS) <= set(METHOD_NAMES)
    assert FLOWER_METHODS == tuple(key for key, m in REGISTRY.items() if m.flower)
    for key, m in REGISTRY.items():  # the declared flag is what the audit's own check concludes
        assert auditable(full_plan, key) == m.audit, key


def test_family_traits_are_declared_where_they_belong():
    with pytest.raises(ValueError, match="personal traits"):
        Method(key="x", row="DP-FedAvg", family="personal")
    with pytest.raises(ValueError, match="selection traits"):
        Method(key="x", row="GDPFed+", selection=SelectionTraits())


@pytest.mark.parametrize(
    ("key", "option", "value", "refused"),
    [
        ("dp-fedsam", "rho", 0.2, False),
        ("centaur", "rho", 0.2, True),  # a head, but plain SGD
        ("centaur", "head_steps", 2, False),
        ("dp-fedsam", "head_steps", 2, True),  # no head, no fine-tuning
        ("dp-fedavg-ft", "head_steps", 2, False),
        ("power-of-choice", "candidates", 8, False),
        ("unbiased", "candidates", 8, True),
        ("privacy-aware", "eta", 0.5, False),
        ("power-of-choice", "eta", 0.5, True),
    ],
)
def test_the_trainers_options_follow_the_declared_traits(key, option, value, refused):
    pytest.importorskip("torch")
    from hdp_planner_train.api import train_config
    from hdp_planner_train.run.errors import TrainError
    from hdp_planner_train.simulator.personal import check_options
    from hdp_planner_train.simulator.private_selection import check_selection_options

    cfg = train_config(method=key, **{option: value})
    if refused:
        with pytest.raises(TrainError, match=option.replace("_", "-")):
            check_options(cfg)
            check_selection_options(cfg)
    else:
        check_options(cfg)
        check_selection_options(cfg)


def _toy(plan_, options):
    """A toy method: GDPFed's row under another name (every group at the plan's q, its own σ_m)."""
    return derived_row("Toy", plan_.method("GDPFed"), plan_)


def test_a_method_declared_once_reaches_solve_the_plan_file_and_verify(monkeypatch, tmp_path):
    monkeypatch.setitem(REGISTRY, "toy", Method(key="toy", row="Toy", rules=RoundRules(sampling="plan-q"), build=_toy))
    assert baseline_names(["toy"]) == ("Toy",)
    path = tmp_path / "plan.json"
    args = ["solve", "--eps", "1,2", "--n", "200", "--rounds", "10", "--methods", "toy", "-o", str(path)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "Toy" in res.output
    loaded = load_plan(path)
    assert loaded.method("Toy").noise_multiplier == loaded.method("GDPFed").noise_multiplier
    res = runner.invoke(app, ["verify", str(path)])
    assert res.exit_code == 0 and "OK Toy" in res.output, res.output

    def bad(plan_, options):  # the declared rules are enforced: this row samples at twice the plan's q
        row = _toy(plan_, options)
        return dataclasses.replace(row, q=tuple(2 * q for q in row.q))

    monkeypatch.setitem(REGISTRY, "toy", Method(key="toy", row="Toy", rules=RoundRules(sampling="plan-q"), build=bad))
    problems = plan_problems(add_baselines(plan([1.0, 2.0], n=200, rounds=10), ["Toy"]))
    assert any("Toy: every group must be sampled at the plan's q" in p for p in problems)
    toy = Method(
        key="toy", row="Toy", rules=RoundRules(sampling="plan-q"), build=_toy, check=lambda p, m: f"{len(m.q)} groups"
    )
    monkeypatch.setitem(REGISTRY, "toy", toy)  # the method's own check runs in verify
    assert plan_problems(add_baselines(plan([1.0, 2.0], n=200, rounds=10), ["Toy"])) == ["Toy: 2 groups"]
    save_plan(add_baselines(plan([1.0, 2.0], n=200, rounds=10), ["Toy"]), tmp_path / "bad.json")
    monkeypatch.delitem(REGISTRY, "toy")  # a row no registered method plans is refused when read
    with pytest.raises(ValueError, match="unknown method 'Toy'"):
        load_plan(tmp_path / "bad.json")
