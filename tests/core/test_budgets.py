"""Per-client budgets: reading, grouping (unique / quantile / optimal DP), assigning, and their CLI."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hdp_planner.methods.gdpfed import solve_plan
from hdp_planner.planfile.document import load_plan, plan_problems
from hdp_planner.planning import budget_counts, budget_grouping
from hdp_planner.planning import budgets as B
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.grouping import Groups
from hdp_planner_cli.app import app

runner = CliRunner()


def config(n: int, **kw) -> PlanConfig:
    """A plan config of Problem 1 as the grouping scores it, without a share rule (``min_share`` 0); tiny test
    populations get δ = 1e-5 (the default 1/n^1.1 needs n ≥ 2)."""
    return PlanConfig(n=n, **({"delta": 1e-5} if n < 100 else {}), **{"min_share": 0.0, **kw})


def write_csv(path, rows, header="client_id,epsilon"):
    path.write_text(header + "\n" + "".join(f"{a},{b}\n" for a, b in rows))
    return path


# --------------------------------------------------------------------------------------------- reading


def test_load_csv_and_both_json_forms(tmp_path):
    ids, eps = B.load_budgets(write_csv(tmp_path / "c.csv", [("a", 0.5), ("b", 1.5), ("c", 3)]))
    assert ids == ["a", "b", "c"] and eps.tolist() == [0.5, 1.5, 3.0]
    (tmp_path / "l.json").write_text(json.dumps([{"client_id": 1, "epsilon": 0.5}, {"client_id": 2, "epsilon": 2}]))
    assert B.load_budgets(tmp_path / "l.json")[0] == ["1", "2"]
    (tmp_path / "m.json").write_text(json.dumps({"x": 1.0, "y": 2.0}))
    ids, eps = B.load_budgets(tmp_path / "m.json")
    assert ids == ["x", "y"] and eps.tolist() == [1.0, 2.0]


BAD_CSV = [
    ("client_id,eps\na,1\n", "missing column 'epsilon'"),
    ("id,epsilon\na,1\n", "missing column 'client_id'"),
    ("client_id,epsilon\na,1\na,2\n", "duplicate client_id 'a'"),
    ("client_id,epsilon\na,0\n", "positive"),
    ("client_id,epsilon\na,-1\n", "positive"),
    ("client_id,epsilon\na,nan\n", "budget ε = nan; every ε must be positive and finite"),
    ("client_id,epsilon\na,inf\n", "positive and finite"),
    ("client_id,epsilon\na,abc\n", "not a number"),
    ("", "empty file"),
    ("client_id,epsilon\n", "no clients"),
]


@pytest.mark.parametrize(("text", "message"), BAD_CSV)
def test_bad_csv_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "c.csv"
    path.write_text(text)
    with pytest.raises(B.BudgetError, match=message):
        B.load_budgets(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1, "a": 2}', "duplicate client_id 'a'"),
        ('[{"client_id": "a"}]', "missing 'epsilon'"),
        ('[{"client_id": "a", "epsilon": NaN}]', "positive and finite"),
        ('[{"client_id": "a", "epsilon": true}]', "not a number"),
        ("[]", "no clients"),
        ("", "empty file"),
        ("{", "not valid JSON"),
        ("3", "expected a list"),
    ],
)
def test_bad_json_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(B.BudgetError, match=message):
        B.load_budgets(path)


# --------------------------------------------------------------------------------------------- closed form


@pytest.mark.parametrize(("eps", "n", "rounds", "q"), [((0.5, 1.5, 3.0), 6000, 50, 0.02), ((2, 6, 12), 600, 100, 0.1)])
def test_closed_form_matches_problem_1(eps, n, rounds, q):
    """Problem 1 with Theorem 1's σ: the optimum is r_m ∝ |G_m|/√a_m and J* = μ4/R + μ5/(R²H)."""
    groups = Groups.from_budgets(eps, n, (n // 6, n // 3, n - n // 6 - n // 3))
    cfg = config(n, rounds=rounds, q=q)
    closed, solved = B.closed_form_check(groups, cfg)
    assert closed == pytest.approx(solved, rel=1e-9)
    plan = solve_plan(groups, cfg)
    np.testing.assert_allclose(
        plan.groups.q, B.closed_form_q(sizes=groups.sizes, epsilons=groups.epsilons, config=cfg), rtol=1e-3
    )


# --------------------------------------------------------------------------------------------- grouping laws


def brute_force_best(values, counts, m, delta):
    """max H over every contiguous partition of the distinct values into m groups (exhaustive)."""
    k = len(values)
    f = B.budget_score(np.asarray(values), delta=delta)
    best = -np.inf
    for cuts in itertools.combinations(range(1, k), m - 1):
        starts = (0, *cuts)
        ends = (*cuts, k)
        h = sum(f[a] * sum(counts[a:b]) ** 2 for a, b in zip(starts, ends))
        best = max(best, h)
    return best


budget_sets = st.lists(
    st.tuples(st.floats(0.05, 20, allow_nan=False), st.integers(1, 400)),
    min_size=1,
    max_size=7,
    unique_by=lambda t: t[0],
)


def expand(pairs):
    values = np.array([v for v, _ in pairs])
    counts = np.array([c for _, c in pairs])
    return np.repeat(values, counts)


@settings(max_examples=60, deadline=None)
@given(budget_sets, st.integers(1, 7))
def test_dp_is_exact_against_enumeration(pairs, m):
    eps = expand(pairs)
    values, counts = np.unique(eps, return_counts=True)
    m = min(m, len(values))
    cfg = config(len(eps))
    g = B.groups_from_budgets(eps, groups=m, method="optimal", config=cfg)
    h = float(np.sum(np.square(g.groups.sizes) * B.budget_score(np.asarray(g.groups.epsilons), delta=cfg.delta)))
    assert h == pytest.approx(brute_force_best(values.tolist(), counts.tolist(), m, cfg.delta), rel=1e-12)


@settings(max_examples=80, deadline=None)
@given(budget_sets, st.integers(1, 7), st.sampled_from(["quantile", "optimal", "unique"]))
def test_no_client_budget_is_exceeded(pairs, m, method):
    eps = expand(pairs)
    k = len(np.unique(eps))
    m = k if method == "unique" else min(m, k)
    g = B.groups_from_budgets(eps, groups=m, method=method, config=config(len(eps)))
    # each client joins the group `assign` gives it: the largest group ε ≤ the client's budget
    assigned = B.assign_to_groups(eps, group_epsilons=g.groups.epsilons, ids=[str(i) for i in range(len(eps))])
    group_eps = assigned.group_epsilon
    assert np.all(group_eps <= eps)
    assert g.groups.n == len(eps) and g.count == m
    assert assigned.counts == g.groups.sizes
    assert g.total_unused == pytest.approx(float(np.sum(eps - group_eps)), rel=1e-9, abs=1e-9)
    assert g.unused == pytest.approx(assigned.unused, rel=1e-9, abs=1e-9)
    assert all(u >= 0 for u in g.unused)


@settings(max_examples=60, deadline=None)
@given(budget_sets, st.integers(1, 7))
def test_optimal_never_worse_than_quantile(pairs, m):
    eps = expand(pairs)
    m = min(m, len(np.unique(eps)))
    cfg = config(len(eps))
    opt = B.groups_from_budgets(eps, groups=m, method="optimal", config=cfg)
    qua = B.groups_from_budgets(eps, groups=m, method="quantile", config=cfg)
    assert opt.noise_term <= qua.noise_term * (1 + 1e-12)
    assert opt.objective <= qua.objective * (1 + 1e-12)


def test_optimal_beats_quantile_in_problem_1(monkeypatch):
    """Solved with the full Problem 1 (φ*, q_m ≤ 1), the optimal groups are not worse than quantile's."""
    rng = np.random.default_rng(3)
    eps = rng.choice([0.5, 1.0, 1.5, 2.0, 3.0, 5.0], size=6000)
    cfg = config(6000)
    for m in (2, 3, 4):
        opt = solve_plan(B.groups_from_budgets(eps, groups=m, method="optimal", config=cfg).groups, cfg)
        qua = solve_plan(B.groups_from_budgets(eps, groups=m, method="quantile", config=cfg).groups, cfg)
        assert opt.objective <= qua.objective * (1 + 1e-9)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 6))
def test_candidate_path_is_never_worse_than_quantile(seed, m):
    """Above EXACT_LIMIT distinct values: candidates + refinement, still never worse than quantile."""
    rng = np.random.default_rng(seed)
    eps = np.round(rng.lognormal(0.3, 0.9, 3000), 3)
    cfg = config(len(eps))
    old = budget_grouping.EXACT_LIMIT
    budget_grouping.EXACT_LIMIT = 64
    try:
        approx = B.groups_from_budgets(eps, groups=m, method="optimal", config=cfg)
    finally:
        budget_grouping.EXACT_LIMIT = old
    exact = B.groups_from_budgets(eps, groups=m, method="optimal", config=cfg)
    quant = B.groups_from_budgets(eps, groups=m, method="quantile", config=cfg)
    assert approx.noise_term <= quant.noise_term * (1 + 1e-12)
    assert exact.noise_term <= approx.noise_term * (1 + 1e-12)


def test_auto_and_unique():
    eps = np.repeat([0.5, 1.5, 3.0], 2000)
    cfg = config(6000)
    g = B.groups_from_budgets(eps, groups=None, method="optimal", config=cfg)
    assert g.groups.epsilons == (0.5, 1.5, 3.0) and g.total_unused == 0
    u = B.groups_from_budgets(eps, groups=None, method="unique", config=cfg)
    assert u.groups.sizes == (2000, 2000, 2000)
    one = B.groups_from_budgets(eps, groups=1, method="optimal", config=cfg)
    assert one.groups.epsilons == (0.5,) and one.total_unused == pytest.approx(2000 * 1.0 + 2000 * 2.5)


@pytest.mark.parametrize(
    ("m", "method", "message"),
    [(4, "optimal", "only 3 distinct"), (2, "unique", "one group per distinct"), (3, "best", "grouping must be")],
)
def test_grouping_errors(m, method, message):
    with pytest.raises(B.BudgetError, match=message):
        B.groups_from_budgets(np.repeat([0.5, 1.5, 3.0], 10), groups=m, method=method, config=config(30))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from([0.3, 0.5, 1.0, 1.5, 2.5, 7.0]) | st.floats(1e-3, 1e3, allow_subnormal=False),
        min_size=1,
        max_size=60,
    ),
    st.integers(1, 7),
    st.integers(0, 8),
)
def test_histogram_streams_chunks(budgets, chunk, hash_limit):
    """Chunk by chunk, hashed or sorted (past ``HASH_LIMIT`` distinct budgets), the distinct budgets and their
    counts are np.unique's over all clients."""
    eps = np.array(budgets)
    old = budget_counts.HISTOGRAM_CHUNK, budget_counts.HASH_LIMIT
    budget_counts.HISTOGRAM_CHUNK, budget_counts.HASH_LIMIT = chunk, hash_limit
    try:
        values, counts = B.budget_histogram(eps)
    finally:
        budget_counts.HISTOGRAM_CHUNK, budget_counts.HASH_LIMIT = old
    expected = np.unique(eps, return_counts=True)
    assert values.tolist() == expected[0].tolist() and counts.tolist() == expected[1].tolist()


@pytest.mark.parametrize("distinct", [1, 3000, 5000])  # below and above HASH_LIMIT = 4096
def test_histogram_of_many_clients_and_budgets(distinct, monkeypatch):
    monkeypatch.setattr(budget_counts, "HISTOGRAM_CHUNK", 1 << 14)
    rng = np.random.default_rng(distinct)
    eps = rng.choice(rng.uniform(0.1, 10.0, distinct), size=200_000)
    values, counts = B.budget_histogram(eps)
    expected = np.unique(eps, return_counts=True)
    assert np.array_equal(values, expected[0]) and np.array_equal(counts, expected[1])


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_histogram_rejects_a_bad_budget_in_any_chunk(bad, monkeypatch):
    monkeypatch.setattr(budget_counts, "HISTOGRAM_CHUNK", 3)
    with pytest.raises(B.BudgetError, match="positive finite"):
        B.budget_histogram([1.0, 2.0, 3.0, 1.0, bad, 2.0])


def test_grouping_memory_does_not_grow_with_clients():
    """Only the budget histogram is kept: beyond the input, memory is that of one chunk, whatever n is."""
    import tracemalloc

    rng = np.random.default_rng(1)
    levels = rng.uniform(0.3, 8.0, 200)
    peaks = []
    for n in (1_000_000, 4_000_000):
        eps = rng.choice(levels, size=n)
        tracemalloc.start()
        g = B.groups_from_budgets(eps, groups=10, method="optimal", config=config(n))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert (
            g.groups
            == B.groups_from_histogram(
                *np.unique(eps, return_counts=True), groups=10, method="optimal", config=config(n)
            ).groups
        )
    assert peaks[1] < 1.2 * peaks[0] < 16 * 2**20


def test_a_million_clients_are_grouped():
    """Correctness at scale; the time it takes is measured in benchmarks/bench_scale.py, not asserted here."""
    rng = np.random.default_rng(0)
    n = 1_000_000
    cfg = config(n)
    for eps in (rng.choice(np.linspace(0.2, 10, 50), size=n), rng.lognormal(0.5, 0.8, n)):
        g = B.groups_from_budgets(eps, groups=None, method="optimal", config=cfg)
        assert g.groups.n == n and g.groups.epsilons[0] == eps.min()
        a = B.assign_to_groups(
            eps, group_epsilons=g.groups.epsilons, ids=[]
        )  # no client gets a group ε above its own budget
        assert (a.group_epsilon <= eps).all() and a.counts == g.groups.sizes


# --------------------------------------------------------------------------------------------- CLI


@pytest.fixture
def clients(tmp_path):
    rng = np.random.default_rng(7)
    rows = [(f"c{i}", float(e)) for i, e in enumerate(rng.choice([0.5, 0.8, 1.5, 2.0, 3.0], size=600))]
    return write_csv(tmp_path / "clients.csv", rows), rows


def test_solve_budgets_writes_plan_with_grouping_and_assign_agrees(tmp_path, clients):
    path, _ = clients
    plan_path = tmp_path / "plan.json"
    result = runner.invoke(app, ["solve", "--budgets", str(path), "--groups", "3", "-o", str(plan_path)])
    assert result.exit_code == 0, result.output
    assert "unused budget overall" in result.output
    doc = json.loads(plan_path.read_text())
    grouping = doc["grouping"]
    assert grouping["method"] == "optimal" and sum(grouping["sizes"]) == 600 and len(grouping["boundaries"]) == 2
    plan = load_plan(plan_path)
    assert plan_problems(plan) == []
    out = tmp_path / "groups.csv"
    result = runner.invoke(app, ["assign", str(plan_path), str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "unused budget overall" in result.output and "warning" not in result.output
    lines = out.read_text().splitlines()
    assert lines[0] == "client_id,epsilon,group,group_epsilon" and len(lines) == 601
    counts = np.bincount([int(line.split(",")[2]) for line in lines[1:]], minlength=4)[1:]
    assert counts.tolist() == grouping["sizes"]
    for line in lines[1:]:
        _, e, _, ge = line.split(",")
        assert float(ge) <= float(e)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--groups", "9"], "only 5 distinct"),
        (["--groups", "0"], "--groups must be"),
        (["--groups", "x"], "--groups must be"),
        (["--grouping", "best"], "--grouping must be"),
        (["--eps", "1,2"], "replaces --eps"),
    ],
)
def test_solve_budgets_errors_write_nothing(tmp_path, clients, args, message):
    path, _ = clients
    plan_path = tmp_path / "plan.json"
    result = runner.invoke(app, ["solve", "--budgets", str(path), "-o", str(plan_path), *args])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert not plan_path.exists()


def test_assign_errors_write_nothing(tmp_path):
    plan_path = tmp_path / "plan.json"
    assert runner.invoke(app, ["solve", "--eps", "0.5,1.5,3.0", "--n", "600", "-o", str(plan_path)]).exit_code == 0
    out = tmp_path / "groups.csv"
    low = write_csv(tmp_path / "low.csv", [("a", 0.4), ("b", 2.0)])
    result = runner.invoke(app, ["assign", str(plan_path), str(low), "-o", str(out)])
    assert result.exit_code == 2 and "below the strictest group" in result.output and not out.exists()
    dup = write_csv(tmp_path / "dup.csv", [("a", 1.0), ("a", 2.0)])
    result = runner.invoke(app, ["assign", str(plan_path), str(dup), "-o", str(out)])
    assert result.exit_code == 2 and "duplicate client_id" in result.output and not out.exists()
    result = runner.invoke(app, ["assign", str(plan_path), str(tmp_path / "none.csv"), "-o", str(out)])
    assert result.exit_code == 2 and "not found" in result.output and not out.exists()


def test_solve_command_with_budgets(tmp_path, clients):
    path, _ = clients
    plan_path = tmp_path / "plan.json"
    result = runner.invoke(app, ["solve", "--budgets", str(path), "--grouping", "quantile", "-o", str(plan_path)])
    assert result.exit_code == 0, result.output
    assert json.loads(plan_path.read_text())["grouping"]["method"] == "quantile"
    bad = write_csv(tmp_path / "bad.csv", [("a", 1.0), ("b", float("nan"))])
    result = runner.invoke(app, ["solve", "--budgets", str(bad), "-o", str(tmp_path / "x.json")])
    assert result.exit_code == 2 and "positive and finite" in result.output and not (tmp_path / "x.json").exists()
