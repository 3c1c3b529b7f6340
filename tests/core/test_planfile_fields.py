"""Every field of a plan file read back with its own refusal: a missing key, a wrong type, an impossible or
inconsistent value each raise PlanFileError with the message that names it (the whole message, as the user reads
it), and what is valid at the edge of a range is accepted."""

from __future__ import annotations

import copy
import math

import pytest

from hdp_planner import PlanFileError, plan, plan_to_dict
from hdp_planner.methods.baselines import BASELINES, BaselineOptions, add_baselines
from hdp_planner.planfile.document import plan_from_dict

TOP = (("config", "an object"), ("noise", "an object"), ("groups", "a non-empty list"), ("objective", "a number"),
       ("uniform_objective", "a number"), ("notes", "a list"), ("recommendation", "an object"))  # fmt: skip
CONFIG = (("n", "an integer", 120.0), ("rounds", "an integer", 10.0), ("q", "a number", True),
          ("delta", "a number", "0.005"), ("clip", "a number", math.inf), ("lr", "a number", None),
          ("local_steps", "an integer", True), ("accountant", "a string", 1), ("sigma_model", "a string", None),
          ("lambda_convention", "a string", ["exact"]), ("sparsity", "null or a list of numbers", []),
          ("fixed_q", "null or a list of numbers", [0.1, "x", 0.1]), ("min_share", "a number", math.nan))  # fmt: skip
GROUP_KEYS = ("epsilon", "size", "q", "noise_multiplier", "k_ratio", "weight", "epsilon_spent")
LISTS = "a non-empty list of numbers"


@pytest.fixture(scope="module")
def full():
    """A plan with every baseline row: three groups, n = 120, T = 10, sparsity on GDPFed+."""
    base = plan([0.5, 1.5, 3.0], n=120, rounds=10, q=0.1, clip=1.5, sparsity=(0.7, 0.8, 0.9))
    return add_baselines(base, tuple(BASELINES.values()), BaselineOptions(model_dim=10_000, pfa_dim=2, pfa_window=4))


@pytest.fixture(scope="module")
def doc(full):
    return plan_to_dict(full)


def refusal(doc, edit) -> str:
    """The message of the PlanFileError that reading ``doc`` edited by ``edit`` raises."""
    edited = copy.deepcopy(doc)
    edit(edited)
    with pytest.raises(PlanFileError) as caught:
        plan_from_dict(edited)
    return str(caught.value)


def at(doc, *path):
    for key in path:
        doc = doc[key]
    return doc


def drop(*path):
    return lambda d: at(d, *path[:-1]).pop(path[-1])


def put(*path, value):
    return lambda d: at(d, *path[:-1]).__setitem__(path[-1], value)


def test_the_document_reads_back(doc, full):
    """The fixture's document is valid: every refusal below is caused by its one edit."""
    assert plan_from_dict(doc) == full


@pytest.mark.parametrize(("key", "what"), TOP)
def test_every_top_level_field(doc, key, what):
    assert refusal(doc, drop(key)) == f"plan: missing {key!r}"
    assert refusal(doc, put(key, value="x")) == f"plan: {key!r} must be {what}, got 'x'"


def test_groups_must_be_a_non_empty_list_of_objects(doc):
    assert refusal(doc, put("groups", value=[])) == "plan: 'groups' must be a non-empty list, got []"
    assert refusal(doc, put("groups", value=[1])) == "plan: 'groups' must be a non-empty list, got [1]"


@pytest.mark.parametrize(("key", "what", "wrong"), CONFIG)
def test_every_config_field(doc, key, what, wrong):
    assert refusal(doc, drop("config", key)) == f"config: missing {key!r}"
    assert refusal(doc, put("config", key, value=wrong)) == f"config: {key!r} must be {what}, got {wrong!r}"


def test_config_values_are_checked_by_the_plans_own_rules(doc):
    message = refusal(doc, put("config", "q", value=1.5))
    assert message.startswith("config: ") and "1.5" in message
    assert plan_from_dict(_edited(doc, put("config", "allow_large_delta", value=1))).config.large_delta is False
    large = _edited(doc, put("config", "allow_large_delta", value=True))
    assert plan_from_dict(large).config.large_delta is True


@pytest.mark.parametrize("key", GROUP_KEYS)
def test_every_list_of_a_row(doc, key):
    where = "noise.GDPFed"
    assert refusal(doc, drop("noise", "GDPFed", key)) == f"{where}: missing {key!r}"
    assert refusal(doc, put("noise", "GDPFed", key, value="x")) == f"{where}: {key!r} must be {LISTS}, got 'x'"
    assert refusal(doc, put("noise", "GDPFed", key, value=[])) == f"{where}: {key!r} must be {LISTS}, got []"
    short = at(doc, "noise", "GDPFed", key)[:2]
    if key != "size":
        assert refusal(doc, put("noise", "GDPFed", key, value=short)) == f"{where}: {key} has 2 values for 3 groups"
    else:
        assert refusal(doc, put("noise", "GDPFed", key, value=short)) == f"{where}: epsilon has 3 values for 2 groups"
    wrong = [at(doc, "noise", "GDPFed", key)[0], True, at(doc, "noise", "GDPFed", key)[2]]
    assert refusal(doc, put("noise", "GDPFed", key, value=wrong)).startswith(f"{where}: {key!r} must be {LISTS}, got")


@pytest.mark.parametrize(
    ("key", "value"),
    [("epsilon", 0.0), ("epsilon", -1.0), ("size", 39.5), ("size", 0.0), ("q", 0.0), ("q", 1.0000001),
     ("noise_multiplier", 0.0), ("k_ratio", 0.0), ("k_ratio", 1.01), ("weight", 0.0), ("epsilon_spent", -1e-9)],
)  # fmt: skip
def test_impossible_values_name_their_group(doc, key, value):
    assert refusal(doc, put("noise", "GDPFed", key, 1, value=value)) == (
        f"noise.GDPFed, group 2: impossible {key} = {value}"
    )


def test_values_at_the_edge_of_their_range_are_read(doc):
    """ε spent 0, q = 1 and k/d = 1 are possible (reading checks ranges; ``verify`` checks privacy)."""
    spent = plan_from_dict(_edited(doc, put("noise", "GDPFed", "epsilon_spent", 1, value=0.0)))
    assert spent.method("GDPFed").epsilon_spent[1] == 0.0
    everyone = plan([1.0, 2.0], n=40, rounds=3, q=1.0, clip=1.0)
    read = plan_from_dict(plan_to_dict(everyone))
    assert read == everyone and read.method("GDPFed").q == (1.0, 1.0) and read.method("GDPFed").k_ratio == (1.0, 1.0)


def test_group_sizes_must_sum_to_n(doc):
    assert refusal(doc, put("noise", "GDPFed", "size", value=[40, 40, 41])) == (
        "noise.GDPFed: group sizes sum to 121, not n = 120"
    )


@pytest.mark.parametrize("key", ["expected_clients", "sigma2", "weight"])
def test_derived_lists_must_match_their_parameters(doc, key):
    where = "noise.GDPFed"
    off = [x * 1.001 for x in at(doc, "noise", "GDPFed", key)]
    assert refusal(doc, put("noise", "GDPFed", key, value=off)) == (
        f"{where}: {key} is inconsistent with q, size and noise_multiplier"
    )
    short = at(doc, "noise", "GDPFed", key)[:2]
    if key != "weight":
        assert refusal(doc, put("noise", "GDPFed", key, value=short)) == (
            f"{where}: {key} is inconsistent with q, size and noise_multiplier"
        )
        assert refusal(doc, drop("noise", "GDPFed", key)) == f"{where}: missing {key!r}"
        assert refusal(doc, put("noise", "GDPFed", key, value=[])) == f"{where}: {key!r} must be {LISTS}, got []"


@pytest.mark.parametrize("key", ["lambda", "lambda_exact"])
def test_lambda_must_be_what_the_rows_parameters_give(doc, key):
    where, value = "noise.GDPFed", at(doc, "noise", "GDPFed", key)
    assert refusal(doc, put("noise", "GDPFed", key, value=value * 1.001)) == (
        f"{where}: {key} = {value * 1.001} but the file's parameters give {value:.6g}"
    )
    assert refusal(doc, drop("noise", "GDPFed", key)) == f"{where}: missing {key!r}"
    assert refusal(doc, put("noise", "GDPFed", key, value="x")) == f"{where}: {key!r} must be a number, got 'x'"


def test_rows(doc):
    assert refusal(doc, drop("noise", "GDPFed")) == "noise: missing 'GDPFed'"
    assert refusal(doc, put("noise", "GDPFed", value=1)) == "noise: 'GDPFed' must be an object, got 1"
    assert refusal(doc, put("noise", "Zeta", value={})) == "noise: unknown method 'Zeta'"
    assert refusal(doc, lambda d: d["noise"].update(Zeta={}, Alpha={})) == "noise: unknown method 'Alpha'"
    assert refusal(doc, put("noise", "GDPFed", "epsilon", 2, value=9.0)) == (
        "noise.GDPFed.epsilon[2] was edited (9; the other rows were solved for 3): re-run hdp-plan solve"
    )
    assert [m.name for m in plan_from_dict(_edited(doc, drop("noise", "PFA"))).methods][4:] == [
        name for name in BASELINES.values() if name != "PFA"
    ]


def test_the_groups_section(doc):
    planned = at(doc, "noise", "GDPFed+", "q")[0]
    assert refusal(doc, lambda d: d["groups"].pop()) == "groups lists 2 groups but noise.GDPFed+ has 3"
    assert refusal(doc, drop("groups", 0, "q")) == "group 1: missing 'q'"
    assert refusal(doc, put("groups", 1, "q", value="x")) == "group 2: 'q' must be a number, got 'x'"
    assert refusal(doc, put("groups", 0, "q", value=0.5)) == (
        f"groups[0].q was edited (0.5; the plan was solved for {planned:.6g} in noise.GDPFed+): re-run hdp-plan solve"
    )
    assert plan_from_dict(_edited(doc, put("groups", 0, "q", value=planned * (1 + 1e-7)))).groups.q[0] == planned


def test_groups_are_listed_by_increasing_epsilon():
    doc = plan_to_dict(plan([0.5, 1.5, 3.0], n=120, rounds=10, q=0.1))
    for entry in (*doc["noise"].values(), doc):
        for value in entry.values():
            if isinstance(value, list) and len(value) == 3:
                value.reverse()
    assert refusal(doc, lambda d: None) == (
        "groups must be listed by increasing ε (the order clients are assigned in), got ε = [3.0, 1.5, 0.5]"
    )


def test_the_recommendation(doc):
    assert refusal(doc, drop("recommendation", "method")) == "recommendation: missing 'method'"
    assert refusal(doc, put("recommendation", "method", value=1)) == "recommendation: 'method' must be a string, got 1"
    for key in ("lambda", "ratio_to_planned"):
        assert refusal(doc, drop("recommendation", key)) == f"recommendation: missing {key!r}"
        assert refusal(doc, put("recommendation", key, value="x")) == (
            f"recommendation: {key!r} must be a number, got 'x'"
        )
    recorded = plan_from_dict(doc).recorded
    rec = doc["recommendation"]
    assert (recorded.method, recorded.lam, recorded.ratio_to_planned) == (
        rec["method"],
        rec["lambda"],
        rec["ratio_to_planned"],
    )


def test_each_row_has_the_keys_of_its_rules_and_no_other(doc):
    assert refusal(doc, put("noise", "GDPFed", "clip", value=[1.5] * 3)) == "noise.GDPFed: unexpected 'clip'"
    assert refusal(doc, drop("noise", "PFA", "projection")) == "noise.PFA: missing 'projection'"
    assert refusal(doc, put("noise", "IDP-FedAvg-Sample", "pooled", value=False)) == (
        "noise.IDP-FedAvg-Sample: 'pooled' must be true, got False"
    )
    assert refusal(doc, put("noise", "IDP-FedAvg-Scale", "clip", value=[1.5, 1.5])) == (
        "noise.IDP-FedAvg-Scale: clip has 2 values for 3 groups"
    )
    assert refusal(doc, put("noise", "IDP-FedAvg-Scale", "clip", value=[1.5, 0.0, 1.5])) == (
        "noise.IDP-FedAvg-Scale: 'clip' must be a list of positive numbers, got [1.5, 0.0, 1.5]"
    )
    clip = at(doc, "noise", "HDP-Pooled", "clip")
    assert refusal(doc, put("noise", "HDP-Pooled", "clip", value=[clip[0] * 2, *clip[1:]])) == (
        "noise.HDP-Pooled: a pooled noise draw needs the same C_m·σ_m in every group"
    )


@pytest.mark.parametrize("key", ["public", "projected", "dim", "window", "model_dim"])
def test_pfa_projection_integers(doc, key):
    where = "noise.PFA.projection"
    assert refusal(doc, drop("noise", "PFA", "projection", key)) == f"{where}: missing {key!r}"
    assert refusal(doc, put("noise", "PFA", "projection", key, value=2.0)) == (
        f"{where}: {key!r} must be an integer, got 2.0"
    )


def test_pfa_projection(doc):
    where = "noise.PFA.projection"
    assert (
        refusal(doc, put("noise", "PFA", "projection", value=1)) == "noise.PFA: 'projection' must be an object, got 1"
    )
    assert refusal(doc, put("noise", "PFA", "projection", "subspace", value="svd")) == (
        f"{where}: 'subspace' must be lanczos or randomized, got 'svd'"
    )
    two = f"{where}: public and projected must be two of the 3 groups"
    for public, projected in ((0, 0), (3, 0), (-1, 0), (2, 3), (2, -1)):
        edit = {"public": public, "projected": projected}
        assert refusal(doc, lambda d, e=edit: d["noise"]["PFA"]["projection"].update(e)) == two
    dims = f"{where}: need 1 ≤ dim ≤ window and dim ≤ model_dim"
    for dim, window, model_dim in ((0, 4, 10_000), (5, 4, 10_000), (3, 4, 2)):
        edit = {"dim": dim, "window": window, "model_dim": model_dim}
        assert refusal(doc, lambda d, e=edit: d["noise"]["PFA"]["projection"].update(e)) == dims
    k_ratio = "noise.PFA: the projected group's k_ratio must be dim/model_dim"
    for dim, window, model_dim in ((4, 4, 10_000), (2, 4, 2), (1, 4, 10_000)):  # within range, k/d not dim/model_dim
        edit = {"dim": dim, "window": window, "model_dim": model_dim}
        assert refusal(doc, lambda d, e=edit: d["noise"]["PFA"]["projection"].update(e)) == k_ratio
    assert (
        plan_from_dict(_edited(doc, put("noise", "PFA", "projection", "window", value=2)))
        .method("PFA")
        .projection.window
        == 2
    )
    for subspace in ("lanczos", "randomized"):
        read = plan_from_dict(_edited(doc, put("noise", "PFA", "projection", "subspace", value=subspace)))
        assert read.method("PFA").projection.subspace == subspace


def test_a_schedule(doc):
    where = "noise.Time-adaptive"
    phases = at(doc, "noise", "Time-adaptive", "schedule")
    assert refusal(doc, put("noise", "Time-adaptive", "schedule", value=[])) == (
        f"{where}: 'schedule' must be a list of phases, got []"
    )
    assert refusal(doc, put("noise", "Time-adaptive", "schedule", 0, "rounds", value=0)) == (
        f"{where}.schedule: 'rounds' must be a positive integer, got 0"
    )
    assert refusal(doc, put("noise", "Time-adaptive", "schedule", 0, "rounds", value=5.0)) == (
        f"{where}.schedule: 'rounds' must be a positive integer, got 5.0"
    )
    assert refusal(doc, drop("noise", "Time-adaptive", "schedule", 1, "noise_multiplier")) == (
        f"{where}.schedule: missing 'noise_multiplier'"
    )
    zero = [0.0, *phases[0]["noise_multiplier"][1:]]
    assert refusal(doc, put("noise", "Time-adaptive", "schedule", 0, "noise_multiplier", value=zero)) == (
        f"{where}.schedule: 'noise_multiplier' must be σ > 0, got {zero!r}"
    )
    assert refusal(doc, put("noise", "Time-adaptive", "schedule", 0, "rounds", value=4)) == (
        f"{where}: schedule phases do not add up to T = 10 rounds"
    )
    short = phases[0]["noise_multiplier"][:2]
    assert refusal(doc, put("noise", "Time-adaptive", "schedule", 0, "noise_multiplier", value=short)) == (
        f"{where}: every schedule phase needs one σ per group"
    )
    last = [x * 2 for x in phases[1]["noise_multiplier"]]
    assert refusal(doc, put("noise", "Time-adaptive", "schedule", 1, "noise_multiplier", value=last)) == (
        f"{where}: noise_multiplier must be the last schedule phase's σ"
    )


def _edited(doc, edit):
    edited = copy.deepcopy(doc)
    edit(edited)
    return edited
