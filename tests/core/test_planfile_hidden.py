"""A plan file's hidden-participation object: what it records of each row and of the frontier, and every edit
``verify`` refuses, each with the message that names it (a small plan: two groups of 40, cohorts of at most 12)."""

from __future__ import annotations

import copy
from dataclasses import fields

import pytest
from conftest import verify_doc

from hdp_planner import plan, plan_to_dict
from hdp_planner.distributed.accounting import epsilon_third_parties
from hdp_planner.distributed.cohort_group import CohortGroup
from hdp_planner.distributed.rounds import group_tau_d
from hdp_planner.planfile.trust import HIDDEN_KEY as KEY
from hdp_planner.planfile.trust import trust_sections
from hdp_planner.planning.trust import CohortCaps, SecaggParameters
from hdp_planner.solving import secured
from hdp_planner.trust.cohort_rows import cohort_frontier, hidden_section
from hdp_planner.trust.registry import requested_trust

DIM = 64
GROUP_FIELDS = tuple(f.name for f in fields(CohortGroup))


@pytest.fixture(scope="module")
def hidden():
    p = plan((1.0, 4.0), 80, rounds=6, q=0.25, clip=1.0)
    parameters = SecaggParameters(model_dim=DIM)
    planned = secured(p, requested_trust("secagg", parameters, CohortCaps(max_cohort=12)))
    return planned, planned.trust.parameters, dict(planned.hidden.rows), plan_to_dict(planned)


def edited(doc, edit):
    out = copy.deepcopy(doc)
    edit(out)
    return out


def test_the_file_records_each_rows_groups_and_the_frontier_of_the_recommended_row(hidden):
    p, trust, rows, doc = hidden
    obj = doc[KEY]
    assert (obj["max_cohort"], obj["max_multiple"]) == (12, None)
    assert verify_doc(doc) == []
    planned = {name: r for name, r in rows.items() if r is not None}
    assert set(planned) == {"GDPFed"} and obj["rows"] == {name: obj["rows"][name] for name in rows}
    assert all(obj["rows"][name] is None for name in rows if name not in planned)
    best = planned["GDPFed"]
    entry = obj["rows"]["GDPFed"]
    for key in GROUP_FIELDS:
        assert entry[key] == [getattr(g, key) for g in best.groups]
    assert (entry["weight"], entry["k_ratio"]) == (list(best.weight), list(best.k_ratio))
    assert (entry["lambda_cohort"], entry["lambda_server"], entry["price"], entry["vectors_per_round"]) == (
        best.lambda_cohort, best.lambda_server, best.price, best.vectors_per_round)  # fmt: skip
    assert obj["recommendation"] == "GDPFed"
    frontier = cohort_frontier(p.method("GDPFed"), p, trust, multiples=(2.0, 5.0, 10.0, 20.0, 50.0))
    assert obj["frontier"] == [
        {"multiple": m, "vectors_per_round": r.vectors_per_round, "lambda": r.lambda_cohort, "price": r.price}
        for m, r in frontier
    ]
    assert [f["multiple"] for f in obj["frontier"]] == [2.0, 5.0, 10.0, 20.0, 50.0, None]


@pytest.mark.parametrize(
    ("edit", "problems"),
    [
        (lambda d: d.update({KEY: 1}), [f"{KEY}: must be an object"]),
        (lambda d: d.pop("trust"), [f"{KEY}: needs a trust object"]),
        (lambda d: d["trust"].update(kind="server"),
         [f"{KEY}: --hide-sample needs --trust secagg (cohorts send masked vectors through secure aggregation)"]),
        (lambda d: d[KEY].update(max_cohort=1),
         [f"{KEY}: the cohort cap must be at least 2 clients (secure aggregation needs two), got 1"]),
        (lambda d: d[KEY].update(max_cohort=True),
         [f"{KEY}: the cohort cap must be at least 2 clients (secure aggregation needs two), got True"]),
        (lambda d: d[KEY].update(max_cohort=12.0),
         [f"{KEY}: the cohort cap must be at least 2 clients (secure aggregation needs two), got 12.0"]),
        (lambda d: d[KEY].update(max_multiple=0.5),
         [f"{KEY}: the cohort multiple must be at least 1 (a cohort holds its contributors), got 0.5"]),
        (lambda d: d[KEY].update(max_multiple="5"),
         [f"{KEY}: the cohort multiple must be at least 1 (a cohort holds its contributors), got 5"]),
        (lambda d: d[KEY].update(rows=[]), [f"{KEY}: 'rows' must be an object"]),
        (lambda d: d[KEY].update(recommendation="GDPFed+"),
         [f"{KEY}: the file recommends 'GDPFed+', its rows give 'GDPFed'"]),
        (lambda d: d[KEY]["frontier"][1].update(vectors_per_round=1),
         [f"{KEY}: the frontier differs from the recomputed one"]),
        (lambda d: d[KEY]["frontier"].pop(), [f"{KEY}: the frontier differs from the recomputed one"]),
        (lambda d: d[KEY]["rows"]["GDPFed"].pop("coin"), [f"{KEY}, GDPFed: coin must be a list of 2 numbers"]),
    ],
)  # fmt: skip
def test_an_edited_object_is_refused_with_its_reason(hidden, edit, problems):
    doc = hidden[3]
    found = verify_doc(edited(doc, edit))
    assert found[: len(problems)] == problems


def test_the_caps_at_their_smallest_are_read(hidden):
    """max_cohort 2 and max_multiple 1 are valid caps: the rows are re-derived under them (and differ)."""
    doc = hidden[3]
    for caps in ({"max_cohort": 2}, {"max_multiple": 1}, {"max_multiple": 1.0}):
        found = verify_doc(edited(doc, lambda d, c=caps: d[KEY].update(c)))
        assert found and not any("must be" in x for x in found)


def test_less_noise_is_refused_as_over_budget_against_the_server(hidden):
    p, _, rows, doc = hidden
    entry = doc[KEY]["rows"]["GDPFed"]
    z, coin, cohort, k = (entry[key][0] * (0.9 if key == "noise_multiplier" else 1)
                          for key in ("noise_multiplier", "coin", "cohort", "memberships"))  # fmt: skip
    spent = epsilon_third_parties(noise_multiplier=z, q=coin, rounds=k, delta=p.config.delta,
                                  tau_d=group_tau_d(cohort, model_dim=DIM))  # fmt: skip
    found = verify_doc(edited(doc, lambda d: d[KEY]["rows"]["GDPFed"]["noise_multiplier"].__setitem__(0, z)))
    assert found[0] == f"{KEY}, GDPFed, group 1: z={z:.6g} spends ε={spent:.6g} against the server > budget 1"
    want = [g.noise_multiplier for g in rows["GDPFed"].groups]
    got = [z, *entry["noise_multiplier"][1:]]
    assert found[1:] == [f"{KEY}, GDPFed: noise_multiplier {got!r} differs from the recomputed {want!r}"]


def test_a_row_missing_or_given_where_none_is_planned(hidden):
    _, _, rows, doc = hidden
    gone = verify_doc(edited(doc, lambda d: d[KEY]["rows"].pop("GDPFed")))
    best = rows["GDPFed"]
    assert gone[0] == f"{KEY}, GDPFed: cohort None differs from the recomputed {[g.cohort for g in best.groups]!r}"
    assert len(gone) == len(GROUP_FIELDS) + 5  # every number of the row: weight, clips, k_ratio and the two Λ
    given = {"cohort": [2, 2], "coin": [0.5, 0.5], "memberships": [1, 1], "noise_multiplier": [1.0, 1.0],
             "expected_contributors": [1.0, 1.0], "threshold": [2, 2], "epsilon_server": [1.0, 1.0],
             "effective_noise_multiplier": [1.0, 1.0], "weight": [0.5, 0.5], "k_ratio": [1.0, 1.0],
             "lambda_cohort": 1.0, "lambda_server": 1.0}  # fmt: skip
    given |= {"price": 1.0, "vectors_per_round": 4}  # what its numbers give
    extra = verify_doc(edited(doc, lambda d: d[KEY]["rows"].update({"GDPFed+": given})))
    assert extra[-1] == f"{KEY}, GDPFed+: no cohort under these caps, but the file gives it numbers"


def test_a_plan_with_no_cohort_recommends_none_and_has_no_frontier(hidden):
    p, trust, _, _ = hidden
    section = hidden_section(p, trust, CohortCaps(max_cohort=2, max_multiple=1.5))
    assert section.rows == tuple((m.name, None) for m in p.methods)
    assert (section.recommendation, section.frontier) == (None, ())
    plain = secured(p, requested_trust("secagg", trust, CohortCaps(max_cohort=2, max_multiple=1.5)))
    obj = trust_sections(plain)[KEY]
    assert obj == {"max_cohort": 2, "max_multiple": 1.5, "rows": {m.name: None for m in p.methods},
                   "recommendation": None, "frontier": []}  # fmt: skip
