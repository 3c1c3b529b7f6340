"""A plan file's trust object under secure aggregation: what it records of each row, and every edit ``verify``
refuses, each with the message that names it (a small plan: two groups of 100, one colluder, K = 4 of T = 6)."""

from __future__ import annotations

import copy

import pytest
from conftest import verify_doc

from hdp_planner import plan, plan_to_dict
from hdp_planner.distributed.accounting import epsilon_third_parties
from hdp_planner.distributed.rounds import group_tau_d
from hdp_planner.methods.baselines import BaselineOptions, add_baselines
from hdp_planner.planfile.reading import plan_from_dict
from hdp_planner.planfile.trust import PARAMETERS
from hdp_planner.planning.trust import SecaggParameters, TrustedServer, matches
from hdp_planner.solving import secured
from hdp_planner.trust.names import SEES_UPDATES, sees_updates
from hdp_planner.trust.registry import requested_trust, trust_class, trust_names

DIM = 64


@pytest.fixture(scope="module")
def secagg():
    p = add_baselines(plan((1.0, 4.0), 200, rounds=6, q=0.3, clip=1.0), ("IDP-FedAvg-Sample",),
                      BaselineOptions(model_dim=DIM))  # fmt: skip
    parameters = SecaggParameters(model_dim=DIM, participations=4, colluders=1)
    planned = secured(p, requested_trust("secagg", parameters))
    return planned, planned.trust, planned.trust.rows, plan_to_dict(planned)


def test_the_names_a_node_reads_without_the_registry_are_the_registrys():
    assert tuple(SEES_UPDATES) == trust_names()
    assert all(trust_class(name).sees_updates is sees_updates(name) for name in trust_names())
    assert not sees_updates("cloud")


def edited(doc, edit):
    out = copy.deepcopy(doc)
    edit(out["trust"])
    return out


def test_the_trust_object_records_the_parameters_and_each_row(secagg):
    p, trust, rows, doc = secagg
    obj = doc["trust"]
    assert {k: obj[k] for k in ("kind", *PARAMETERS)} == {"kind": "secagg", "bits": 20, "survivors": 0.9,
                                                         "colluders": 1, "participations": 4, "model_dim": DIM,
                                                         "wrap": 1e-12}  # fmt: skip
    assert plan_from_dict(doc).trust == trust and verify_doc(doc) == []
    assert obj["rows"]["IDP-FedAvg-Sample"] is None
    for r in rows:
        if r.groups is None:
            continue
        entry = obj["rows"][r.name]
        laws = trust.laws(p.method(r.name), p.config)
        assert entry == {
            "gamma": [law.encoding.gamma for law in laws],
            "share_sigma2": [law.share_sigma2 for law in laws],
            "threshold": [law.threshold for law in laws],
            "shares": [law.shares for law in laws],
            "release_probability": [law.release for law in laws],
            "noise_multiplier": [g.noise_multiplier for g in r.groups],
            "epsilon_third_parties": [g.epsilon_third_parties for g in r.groups],
            "server_noise_multiplier": [g.server_noise_multiplier for g in r.groups],
            "epsilon_server": [g.epsilon_server for g in r.groups],
            "effective_noise_multiplier": [g.effective_noise_multiplier for g in r.groups],
            "lambda_secagg": r.lambda_secagg,
            "lambda_server": r.lambda_server,
            "price_of_distrust": r.price,
        }
    planned = [r for r in rows if r.lambda_secagg is not None]
    assert obj["recommendation"] == min(planned, key=lambda r: r.lambda_secagg).name == "GDPFed+"
    every_round = secured(p, requested_trust("secagg", SecaggParameters(model_dim=DIM)))
    assert plan_to_dict(every_round)["trust"]["participations"] == 6


def test_a_trusted_server_has_nothing_to_verify(secagg):
    p = secagg[0]
    server = {k: v for k, v in plan_to_dict(p).items() if k != "trust"}
    assert plan_from_dict(server).trust == TrustedServer() and verify_doc(server) == []
    assert "trust" not in plan_to_dict(plan_from_dict(server))


@pytest.mark.parametrize(
    ("edit", "problems"),
    [
        (lambda t: t.clear() or t.update(kind="secagg"),
         ["trust: missing 'bits', 'survivors', 'colluders', 'participations', 'model_dim', 'wrap'"]),
        (lambda t: t.update(bits=40), ["trust: bits must be an integer in [8, 32] (Flower's SecAgg+ sums modulo 2^32), "
                                       "got 40"]),
        (lambda t: t.update(kind="tee"), ["trust: trust must be one of server, secagg, got 'tee'"]),
        (lambda t: t.update(participations=None), ["trust: participations differ from the plan's",
                                                   "trust, DP-FedAvg: epsilon_server ["]),
        (lambda t: t.update(participations=5), ["trust, DP-FedAvg: epsilon_server ["]),
        (lambda t: t.update(participations=7), ["trust: participations K = 7 exceed the plan's T = 6 rounds"]),
        (lambda t: t.update(rows=[]), ["trust: 'rows' must be an object"]),
        (lambda t: t.pop("rows"), ["trust, DP-FedAvg: missing", "trust, GDPFed: missing"]),
        (lambda t: t["rows"].update({"GDPFed": None}), ["trust, GDPFed: missing"]),
        (lambda t: t["rows"].pop("GDPFed"), ["trust, GDPFed: missing"]),
        (lambda t: t["rows"].update({"IDP-FedAvg-Sample": {}}), ["trust, IDP-FedAvg-Sample: gamma must be a list of "
                                                                 "2 numbers"]),
        (lambda t: t.update(recommendation="DP-FedAvg"),
         ["trust: the file recommends 'DP-FedAvg', its rows give 'GDPFed+'"]),
        (lambda t: t.pop("recommendation"), ["trust: the file recommends None, its rows give 'GDPFed+'"]),
    ],
)  # fmt: skip
def test_an_edited_trust_object_is_refused_with_its_reason(secagg, edit, problems):
    doc = secagg[3]
    found = verify_doc(edited(doc, edit))
    assert len(found) >= len(problems) and all(f.startswith(x) for f, x in zip(found, problems))
    if not problems[-1].endswith("[") and len(problems) == 1:
        assert found == problems


def test_an_object_that_is_not_one(secagg):
    doc = secagg[3]
    assert verify_doc({**doc, "trust": [1]}) == ["plan: 'trust' must be an object"]


@pytest.mark.parametrize("key", ["gamma", "share_sigma2", "threshold", "shares", "release_probability",
                                 "epsilon_server", "effective_noise_multiplier"])  # fmt: skip
def test_every_recorded_number_is_recomputed(secagg, key):
    doc = secagg[3]
    value = doc["trust"]["rows"]["GDPFed"][key]
    changed = [value[0] * 2, *value[1:]]
    assert verify_doc(edited(doc, lambda t: t["rows"]["GDPFed"].__setitem__(key, changed))) == [
        f"trust, GDPFed: {key} {changed!r} differs from the recomputed {value!r}"
    ]


def test_a_price_that_its_numbers_do_not_give_is_refused(secagg):
    doc = secagg[3]
    value = doc["trust"]["rows"]["GDPFed"]["price_of_distrust"]
    assert verify_doc(edited(doc, lambda t: t["rows"]["GDPFed"].__setitem__("price_of_distrust", value * 2))) == [
        f"trust, GDPFed: price_of_distrust {value * 2!r} is not what its numbers give ({value!r})"
    ]


def test_less_noise_is_refused_as_over_budget_against_third_parties(secagg):
    p, trust, _, doc = secagg
    entry = doc["trust"]["rows"]["GDPFed"]
    z = entry["noise_multiplier"][1] * 0.9
    law = trust.laws(p.method("GDPFed"), p.config)[1]
    left = law.delta_accounted(p.config.delta, rounds=6)
    spent = epsilon_third_parties(noise_multiplier=z, q=p.method("GDPFed").q[1], rounds=6, delta=left,
                                  tau_d=group_tau_d(100, model_dim=DIM))  # fmt: skip
    found = verify_doc(edited(doc, lambda t: t["rows"]["GDPFed"]["noise_multiplier"].__setitem__(1, z)))
    assert found[0] == f"trust, GDPFed, group 2: z={z:.6g} spends ε={spent:.6g} > budget 4"
    assert found[1].startswith("trust, GDPFed: noise_multiplier [") and len(found) == 2
    for broken in ("z", [1.0], [1.0, "z"]):  # not a list of two numbers: refused as it is read
        found = verify_doc(edited(doc, lambda t, b=broken: t["rows"]["GDPFed"].__setitem__("noise_multiplier", b)))
        assert found == ["trust, GDPFed: noise_multiplier must be a list of 2 numbers"]


def test_recorded_numbers_match_to_their_tolerance_and_booleans_are_not_numbers():
    assert matches(1.0 + 1e-10, 1.0) and not matches(1.0 + 1e-8, 1.0)
    assert matches([1, 2.0], [1.0, 2.0]) and not matches([1.0], [1.0, 2.0])
    assert not matches(True, 1.0) and not matches("1", 1.0) and not matches(None, 1.0)
    assert not matches((1.0,), [1.0]) and not matches([True], [1.0])
    assert matches(None, None) and not matches(0, None)
