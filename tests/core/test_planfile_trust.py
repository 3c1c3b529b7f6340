"""A plan file's trust object under secure aggregation: what it records of each row, and every edit ``verify``
refuses, each with the message that names it (a small plan: two groups of 100, one colluder, K = 4 of T = 6)."""

from __future__ import annotations

import copy

import pytest

from hdp_planner import plan
from hdp_planner.distributed.accounting import epsilon_third_parties
from hdp_planner.distributed.rounds import group_tau_d
from hdp_planner.distributed.trust import TrustModel
from hdp_planner.methods.baselines import BaselineOptions, add_baselines
from hdp_planner.planfile.trust import (
    PARAMETERS,
    recorded_matches,
    recorded_row,
    secagg_rows,
    trust_from_dict,
    trust_to_dict,
    verify_trust,
)

DIM = 64


@pytest.fixture(scope="module")
def secagg():
    p = add_baselines(plan((1.0, 4.0), 200, rounds=6, q=0.3, clip=1.0), ("IDP-FedAvg-Sample",),
                      BaselineOptions(model_dim=DIM))  # fmt: skip
    trust = TrustModel(kind="secagg", model_dim=DIM, participations=4, colluders=1)
    rows = secagg_rows(p, trust)
    return p, trust, rows, {"trust": trust_to_dict(p, trust, rows)}


def edited(doc, edit):
    out = copy.deepcopy(doc)
    edit(out["trust"])
    return out


def test_the_trust_object_records_the_parameters_and_each_row(secagg):
    p, trust, rows, doc = secagg
    obj = doc["trust"]
    assert {k: obj[k] for k in PARAMETERS} == {"kind": "secagg", "bits": 20, "survivors": 0.9, "colluders": 1,
                                              "participations": 4, "model_dim": DIM, "wrap": 1e-12}  # fmt: skip
    assert trust_from_dict(doc) == trust and verify_trust(p, doc) == []
    assert obj["rows"]["IDP-FedAvg-Sample"] is None
    for r in rows:
        if r.groups is None:
            continue
        entry = recorded_row(doc, r.name)
        laws = [g.law for g in r.groups]
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
    every_round = trust_to_dict(p, TrustModel(kind="secagg", model_dim=DIM), rows)
    assert every_round["participations"] == 6


def test_a_trusted_server_has_nothing_to_verify(secagg):
    p = secagg[0]
    assert trust_from_dict({}) == TrustModel() and verify_trust(p, {}) == []
    server = {"trust": trust_to_dict(p, TrustModel(), ())}
    assert server["trust"] == {"kind": "server", "bits": 20, "survivors": 0.9, "colluders": 0, "participations": 6,
                               "model_dim": None, "wrap": 1e-12}  # fmt: skip
    assert verify_trust(p, server) == [] and recorded_row(server, "GDPFed+") is None


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
        (lambda t: t.update(rows=[]), ["trust: 'rows' must be an object under secagg"]),
        (lambda t: t.pop("rows"), ["trust: 'rows' must be an object under secagg"]),
        (lambda t: t["rows"].update({"GDPFed": None}), ["trust, GDPFed: missing"]),
        (lambda t: t["rows"].pop("GDPFed"), ["trust, GDPFed: missing"]),
        (lambda t: t["rows"].update({"IDP-FedAvg-Sample": {}}),
         ["trust, IDP-FedAvg-Sample: not plannable under secagg, but the file gives it numbers"]),
        (lambda t: t.update(recommendation="DP-FedAvg"),
         ["trust: the file recommends 'DP-FedAvg', its rows give 'GDPFed+'"]),
        (lambda t: t.pop("recommendation"), ["trust: the file recommends None, its rows give 'GDPFed+'"]),
    ],
)  # fmt: skip
def test_an_edited_trust_object_is_refused_with_its_reason(secagg, edit, problems):
    p, _, _, doc = secagg
    found = verify_trust(p, edited(doc, edit))
    assert len(found) >= len(problems) and all(f.startswith(x) for f, x in zip(found, problems))
    if not problems[-1].endswith("["):
        assert found == problems


def test_an_object_that_is_not_one(secagg):
    p = secagg[0]
    assert verify_trust(p, {"trust": [1]}) == ["plan: 'trust' must be an object"]


@pytest.mark.parametrize("key", ["gamma", "share_sigma2", "threshold", "shares", "release_probability",
                                 "epsilon_server", "effective_noise_multiplier", "price_of_distrust"])  # fmt: skip
def test_every_recorded_number_is_recomputed(secagg, key):
    p, _, _, doc = secagg
    value = recorded_row(doc, "GDPFed")[key]
    changed = [value[0] * 2, *value[1:]] if isinstance(value, list) else value * 2
    assert verify_trust(p, edited(doc, lambda t: t["rows"]["GDPFed"].__setitem__(key, changed))) == [
        f"trust, GDPFed: {key} {changed!r} differs from the recomputed {value!r}"
    ]


def test_less_noise_is_refused_as_over_budget_against_third_parties(secagg):
    p, _, rows, doc = secagg
    entry = recorded_row(doc, "GDPFed")
    z = entry["noise_multiplier"][1] * 0.9
    law = next(r for r in rows if r.name == "GDPFed").groups[1].law
    left = law.delta_accounted(p.config.delta, rounds=6)
    spent = epsilon_third_parties(noise_multiplier=z, q=p.method("GDPFed").q[1], rounds=6, delta=left,
                                  tau_d=group_tau_d(100, model_dim=DIM))  # fmt: skip
    found = verify_trust(p, edited(doc, lambda t: t["rows"]["GDPFed"]["noise_multiplier"].__setitem__(1, z)))
    assert found[0] == f"trust, GDPFed, group 2: z={z:.6g} spends ε={spent:.6g} > budget 4"
    assert found[1].startswith("trust, GDPFed: noise_multiplier [") and len(found) == 2
    for broken in ("z", [1.0], [1.0, "z"]):  # not a list of two numbers: only compared with the recomputed one
        found = verify_trust(p, edited(doc, lambda t, b=broken: t["rows"]["GDPFed"].__setitem__("noise_multiplier", b)))
        assert len(found) == 1 and found[0].startswith(f"trust, GDPFed: noise_multiplier {broken!r} differs")


def test_recorded_numbers_match_to_their_tolerance_and_booleans_are_not_numbers():
    assert recorded_matches(1.0 + 1e-10, 1.0) and not recorded_matches(1.0 + 1e-8, 1.0)
    assert recorded_matches([1, 2.0], [1.0, 2.0]) and not recorded_matches([1.0], [1.0, 2.0])
    assert not recorded_matches(True, 1.0) and not recorded_matches("1", 1.0) and not recorded_matches(None, 1.0)
    assert recorded_matches({"a": [1.0], "b": None}, {"a": [1.0], "b": None})
    assert not recorded_matches({"a": [1.0]}, {"a": [1.0], "b": None}) and not recorded_matches([1.0], {"a": 1.0})
    assert not recorded_matches({"a": 2.0}, {"a": 1.0}) and not recorded_matches((1.0,), [1.0])
    assert recorded_matches(None, None) and not recorded_matches(0, None)
