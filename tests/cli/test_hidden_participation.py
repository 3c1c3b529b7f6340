"""`solve --hide-sample`: public cohorts and private coins planned, recorded in the plan file and re-derived by
`verify`, which refuses an edited coin, cohort or expected contributors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hdp_planner.distributed.cohort_colluders import tolerated_group_colluders
from hdp_planner_cli.app import app

runner = CliRunner()
# two groups of 60 (a strict one and a loose one) keep the cohort search small: every solve of a hidden plan also
# computes the frontier, each point a search over cohorts and contributors
SOLVE = ["solve", "--eps", "1,4", "--n", "120", "--rounds", "10", "--q", "0.2", "--model-dim", "100",
         "--trust", "secagg"]  # fmt: skip


def solved(tmp_path, *extra: str) -> tuple[str, dict]:
    path = str(tmp_path / "plan.json")
    result = runner.invoke(app, [*SOLVE, "--hide-sample", *extra, "-o", path])
    assert result.exit_code == 0, result.output
    return path, json.loads((tmp_path / "plan.json").read_text())


def test_every_group_is_within_budget_against_the_server_and_verify_agrees(tmp_path):
    """With --colluders k, solve also states per group of the recommended row the most colluders the group may hold
    for a client's K cohorts to hold more than k with probability at most δ (the hypergeometric tail)."""
    path = str(tmp_path / "plan.json")
    result = runner.invoke(app, [*SOLVE, "--colluders", "2", "--hide-sample", "--cohort-multiple", "5", "-o", path])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "plan.json").read_text())
    hidden = doc["hidden_participation"]
    best = hidden["rows"][hidden["recommendation"]]
    budgets = doc["noise"][hidden["recommendation"]]["epsilon"]
    assert all(e <= b * (1 + 1e-9) for e, b in zip(best["epsilon_server"], budgets))
    expected = best["expected_contributors"]
    assert sum(expected) == pytest.approx(0.2 * 120)  # Problem 1's total: q·n expected contributors a round
    assert all(m <= 5 * r + 1e-9 for m, r in zip(best["cohort"], expected))
    assert best["coin"] == pytest.approx([r / m for r, m in zip(expected, best["cohort"])])
    assert [f["multiple"] for f in hidden["frontier"]] == [2, 5, 10, 20, 50, None]
    allowed = [tolerated_group_colluders(size=60, cohort=m, tolerated=2, memberships=k, delta=doc["config"]["delta"])
               for m, k in zip(best["cohort"], best["memberships"])]  # fmt: skip
    line = next(x for x in result.output.splitlines() if x.startswith("colluders:"))
    assert "k = 2" in line and f"at most {' / '.join(map(str, allowed))} (the hypergeometric tail)" in line
    assert all(a >= 2 for a in allowed)  # k colluders in the whole group never put more than k in a cohort
    result = runner.invoke(app, ["verify", path])
    assert result.exit_code == 0, result.output


def test_an_edited_coin_is_refused_by_verify(tmp_path):
    path, doc = solved(tmp_path, "--max-cohort", "20")
    row = doc["hidden_participation"]["rows"]["GDPFed+"]
    row["coin"][0] *= 2  # the server would see twice the contributions the noise was sized for
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    result = runner.invoke(app, ["verify", path])
    assert result.exit_code == 1
    assert "hidden_participation, GDPFed+, group 1" in result.output


def test_hide_sample_needs_secure_aggregation_and_sane_caps(tmp_path):
    trusted = ["solve", "--eps", "1,2", "--n", "100", "--hide-sample"]
    assert "needs --trust secagg" in runner.invoke(app, trusted).output
    assert "at least 2" in runner.invoke(app, [*SOLVE, "--hide-sample", "--max-cohort", "1"]).output
    assert "need --hide-sample" in runner.invoke(app, [*SOLVE, "--max-cohort", "10"]).output


@pytest.mark.parametrize(("key", "change"), [("expected_contributors", 1.5), ("weight", 1.1), ("k_ratio", 0.5)])
def test_edited_contributors_weights_or_sparsity_are_refused_by_verify(tmp_path, key, change):
    """r_m, ω_m and k_m/d are re-derived: moving contributors, or the weights the server applies, is refused."""
    path, doc = solved(tmp_path, "--cohort-multiple", "5")
    doc["hidden_participation"]["rows"]["GDPFed+"][key][0] *= change
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    result = runner.invoke(app, ["verify", path])
    assert result.exit_code == 1
    assert f"hidden_participation, GDPFed+: {key}" in result.output


def test_solve_names_the_groups_the_least_noise_leaves_out_of_the_model(tmp_path):
    """Without the share rule (--min-share 0), a row whose search gives a group under 1% of the update is named,
    with its shares; a row that does not is not."""
    path = str(tmp_path / "plan.json")
    strict = ["solve", "--eps", "0.25,4", "--n", "200", "--rounds", "10", "--q", "0.2", "--model-dim", "100",
              "--trust", "secagg", "--hide-sample", "--cohort-multiple", "10", "--min-share", "0"]  # fmt: skip
    result = runner.invoke(app, [*strict, "-o", path])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    rows = json.loads((tmp_path / "plan.json").read_text())["hidden_participation"]["rows"]
    assert "GDPFed+: the groups' shares of the update are" in text  # the strict group's clients barely count here
    for name, row in rows.items():
        squares = [r**2 for r in row["expected_contributors"]]
        starved = min(squares) / sum(squares) < 0.01
        assert (f"{name}: the groups' shares of the update are" in text) == starved, (name, squares)
