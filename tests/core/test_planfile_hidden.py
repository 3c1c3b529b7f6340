"""A plan file's hidden-participation object: what it records of each row and of the frontier, and every edit
``verify`` refuses, each with the message that names it (a small plan: two groups of 40, cohorts of at most 12)."""

from __future__ import annotations

import copy

import pytest

from hdp_planner import plan, plan_to_dict
from hdp_planner.distributed.accounting import epsilon_third_parties
from hdp_planner.distributed.cohorts import cohort_frontier
from hdp_planner.distributed.rounds import group_tau_d
from hdp_planner.distributed.trust import TrustModel
from hdp_planner.planfile.cohorts import GROUP_FIELDS, KEY, cohort_rows, hidden_to_dict, verify_hidden
from hdp_planner.planfile.trust import secagg_rows, trust_to_dict

DIM = 64


@pytest.fixture(scope="module")
def hidden():
    p = plan((1.0, 4.0), 80, rounds=6, q=0.25, clip=1.0)
    trust = TrustModel(kind="secagg", model_dim=DIM)
    rows = cohort_rows(p, trust, max_cohort=12, max_multiple=None)
    doc = plan_to_dict(p) | {"trust": trust_to_dict(p, trust, secagg_rows(p, trust))}
    doc[KEY] = hidden_to_dict(p, trust, rows, max_cohort=12, max_multiple=None)
    return p, trust, dict(rows), doc


def edited(doc, edit):
    out = copy.deepcopy(doc)
    edit(out)
    return out


def test_the_file_records_each_rows_groups_and_the_frontier_of_the_recommended_row(hidden):
    p, trust, rows, doc = hidden
    obj = doc[KEY]
    assert (obj["max_cohort"], obj["max_multiple"]) == (12, None)
    assert verify_hidden(p, doc) == []
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
        (lambda d: d.pop("trust"), [f"{KEY}: needs a plan that trusts secure aggregation (trust kind secagg)"]),
        (lambda d: d[KEY].update(max_cohort=1), [f"{KEY}: max_cohort must be an integer ≥ 2 or null"]),
        (lambda d: d[KEY].update(max_cohort=True), [f"{KEY}: max_cohort must be an integer ≥ 2 or null"]),
        (lambda d: d[KEY].update(max_cohort=12.0), [f"{KEY}: max_cohort must be an integer ≥ 2 or null"]),
        (lambda d: d[KEY].update(max_multiple=0.5), [f"{KEY}: max_multiple must be a number ≥ 1 or null"]),
        (lambda d: d[KEY].update(max_multiple="5"), [f"{KEY}: max_multiple must be a number ≥ 1 or null"]),
        (lambda d: d[KEY].update(rows=[]), [f"{KEY}: 'rows' must be an object"]),
        (lambda d: d[KEY].update(recommendation="GDPFed+"),
         [f"{KEY}: the file recommends 'GDPFed+', its rows give 'GDPFed'"]),
        (lambda d: d[KEY]["frontier"][1].update(vectors_per_round=1),
         [f"{KEY}: the frontier differs from the recomputed one"]),
        (lambda d: d[KEY]["frontier"].pop(), [f"{KEY}: the frontier differs from the recomputed one"]),
        (lambda d: d[KEY]["rows"]["GDPFed"].pop("coin"),
         [f"{KEY}, GDPFed: noise_multiplier, coin, memberships and cohort must be lists of numbers"]),
    ],
)  # fmt: skip
def test_an_edited_object_is_refused_with_its_reason(hidden, edit, problems):
    p, _, _, doc = hidden
    found = verify_hidden(p, edited(doc, edit))
    assert found[: len(problems)] == problems


def test_the_caps_at_their_smallest_are_read(hidden):
    """max_cohort 2 and max_multiple 1 are valid caps: the rows are re-derived under them (and differ)."""
    p, _, _, doc = hidden
    for caps in ({"max_cohort": 2}, {"max_multiple": 1}, {"max_multiple": 1.0}):
        found = verify_hidden(p, edited(doc, lambda d, c=caps: d[KEY].update(c)))
        assert found and not any("must be" in x for x in found)


def test_less_noise_is_refused_as_over_budget_against_the_server(hidden):
    p, _, rows, doc = hidden
    entry = doc[KEY]["rows"]["GDPFed"]
    z, coin, cohort, k = (entry[key][0] * (0.9 if key == "noise_multiplier" else 1)
                          for key in ("noise_multiplier", "coin", "cohort", "memberships"))  # fmt: skip
    spent = epsilon_third_parties(noise_multiplier=z, q=coin, rounds=k, delta=p.config.delta,
                                  tau_d=group_tau_d(cohort, model_dim=DIM))  # fmt: skip
    found = verify_hidden(p, edited(doc, lambda d: d[KEY]["rows"]["GDPFed"]["noise_multiplier"].__setitem__(0, z)))
    assert found[0] == f"{KEY}, GDPFed, group 1: z={z:.6g} spends ε={spent:.6g} against the server > budget 1"
    want = [g.noise_multiplier for g in rows["GDPFed"].groups]
    got = [z, *entry["noise_multiplier"][1:]]
    assert found[1:] == [f"{KEY}, GDPFed: noise_multiplier {got!r} differs from the recomputed {want!r}"]


def test_a_row_missing_or_given_where_none_is_planned(hidden):
    p, _, rows, doc = hidden
    gone = verify_hidden(p, edited(doc, lambda d: d[KEY]["rows"].pop("GDPFed")))
    best = rows["GDPFed"]
    assert gone[0] == f"{KEY}, GDPFed: cohort 'missing' differs from the recomputed {[g.cohort for g in best.groups]!r}"
    assert len(gone) == len(GROUP_FIELDS) + 6  # every number of the row
    extra = verify_hidden(p, edited(doc, lambda d: d[KEY]["rows"].update({"GDPFed-op": None, "GDPFed+": 1})))
    assert extra == [f"{KEY}, GDPFed+: no cohort under these caps, but the file gives it numbers"]
    assert verify_hidden(p, edited(doc, lambda d: d[KEY]["rows"].pop("GDPFed+"))) == extra  # every row is listed


def test_a_plan_with_no_cohort_recommends_none_and_has_no_frontier(hidden):
    p, trust, _, _ = hidden
    none = tuple((m.name, None) for m in p.methods)
    obj = hidden_to_dict(p, trust, none, max_cohort=2, max_multiple=1.5)
    assert obj == {"max_cohort": 2, "max_multiple": 1.5, "rows": {m.name: None for m in p.methods},
                   "recommendation": None, "frontier": []}  # fmt: skip
